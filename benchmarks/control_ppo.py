"""The whole PPO loop on CartPole-v1: the workbench's batched loop against a CleanRL-style loop
over Gymnasium's ``SyncVectorEnv``, measured in one run; then the default PPO run to a mean
return of 475.

1. Baseline: a CleanRL-style PPO loop (``ppo.py``'s structure: numpy environments wrapped in
   ``RecordEpisodeStatistics`` and stepped one by one inside ``SyncVectorEnv``, tensor
   conversions per step, ``torch.distributions`` with the entropy computed while acting,
   finished episodes' returns collected from the step's infos, GAE in a Python loop) with
   N = 4 environments, 128 steps per update, 4 epochs of 4 minibatches, and the same
   actor-critic network (two tanh layers of 64). It logs nothing to disk (CleanRL writes
   TensorBoard scalars), so it is, if anything, faster than CleanRL's own script.
2. Ours: the ``cartpole`` task's loop (``workbench.testbeds.control.loop``) with N = 1,024
   environments, 32 steps per update, 4 epochs of 4 minibatches, the same network.
   Target: >= 20x the baseline's environment steps per second.
3. Learning: the ``cartpole`` task with its defaults (PPO, GAE, constant entropy bonus 0.01,
   Adam with linear annealing) for 500,000 environment steps, on ``--seeds`` seeds: the step
   and the wall time at which the mean return of the last 100 episodes first reaches 475.
   Target: most seeds within 500,000 steps and under 2 minutes.

Both loops run with one torch thread (the task's default on the CPU). Usage::

    python benchmarks/control_ppo.py [--quick] [--seeds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.control.policy import ActorCritic


def cleanrl_style_steps_per_second(total_steps: int, seed: int = 0) -> float:
    """Environment steps per second of a CleanRL-style PPO loop over SyncVectorEnv (N = 4)."""
    torch.manual_seed(seed)
    num_envs, horizon, epochs, minibatches = 4, 128, 4, 4
    gamma, lam, clip, ent_coef, vf_coef = 0.99, 0.95, 0.2, 0.01, 0.5
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
         for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = ActorCritic(4, n_actions=2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs_buf = torch.zeros((horizon, num_envs, 4))
    act_buf = torch.zeros((horizon, num_envs))
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((horizon, num_envs)) for _ in range(4))
    next_obs, _ = envs.reset(seed=seed)
    next_obs = torch.tensor(next_obs, dtype=torch.float32)
    next_done = torch.zeros(num_envs)
    episode_returns: list[float] = []
    steps, started = 0, time.perf_counter()
    while steps < total_steps:
        for t in range(horizon):
            obs_buf[t], done_buf[t] = next_obs, next_done
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=agent.actor(next_obs))
                action = dist.sample()
                logp_buf[t], val_buf[t] = dist.log_prob(action), agent.value(next_obs)
                dist.entropy()
            act_buf[t] = action
            obs, reward, terminated, truncated, infos = envs.step(action.numpy())
            if "final_info" in infos:
                ended = infos["final_info"].get("episode", {})
                episode_returns += [float(r) for r, done in zip(
                    ended.get("r", []), ended.get("_r", []), strict=False) if done]
            rew_buf[t] = torch.tensor(reward, dtype=torch.float32)
            next_obs = torch.tensor(obs, dtype=torch.float32)
            next_done = torch.tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            steps += num_envs
        with torch.no_grad():
            next_value = agent.value(next_obs)
            advantages, last = torch.zeros_like(rew_buf), torch.zeros(num_envs)
            for t in reversed(range(horizon)):
                not_done = 1.0 - (next_done if t == horizon - 1 else done_buf[t + 1])
                following = next_value if t == horizon - 1 else val_buf[t + 1]
                delta = rew_buf[t] + gamma * following * not_done - val_buf[t]
                last = delta + gamma * lam * not_done * last
                advantages[t] = last
            returns = advantages + val_buf
        b_obs, b_act = obs_buf.reshape(-1, 4), act_buf.reshape(-1)
        b_logp, b_adv, b_ret = logp_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        size = b_obs.shape[0]
        for _ in range(epochs):
            order = np.random.permutation(size)
            for start in range(0, size, size // minibatches):
                idx = order[start:start + size // minibatches]
                dist = torch.distributions.Categorical(logits=agent.actor(b_obs[idx]))
                ratio = (dist.log_prob(b_act[idx]) - b_logp[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                v_loss = 0.5 * ((agent.value(b_obs[idx]) - b_ret[idx]) ** 2).mean()
                loss = pg - ent_coef * dist.entropy().mean() + vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
    envs.close()
    if not episode_returns:
        raise RuntimeError("the baseline saw no finished episode; its statistics path is broken")
    return steps / (time.perf_counter() - started)


def default_methods(task) -> dict:
    return {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}


def workbench_steps_per_second(total_steps: int, num_envs: int = 1024, horizon: int = 32,
                               seed: int = 0) -> float:
    task = get_task("cartpole")
    params = task.Params(num_envs=num_envs, rollout_len=horizon)
    result = task().run(params, default_methods(task), seed=seed, device=torch.device("cpu"),
                        budget=Budget(steps=10**6, samples=total_steps),
                        log=lambda step, metrics: None)
    return result["time/env_steps_per_second"]


def steps_to_475(seed: int, samples: int) -> dict:
    task = get_task("cartpole")
    reached: dict = {}
    started = time.perf_counter()

    def log(step, metrics):
        if not reached and metrics.get("train/return_recent", 0.0) >= 475:
            reached.update(env_steps=metrics["cost/env_steps"],
                           seconds=time.perf_counter() - started)

    result = task().run(task.Params(), default_methods(task), seed=seed,
                        device=torch.device("cpu"), budget=Budget(steps=10**6, samples=samples),
                        log=log)
    return {"seed": seed, "reached": bool(reached), **reached,
            "final_return_recent": result.get("train/return_recent"),
            "total_seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter loops, 2 seeds")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base_steps = 6_000 if args.quick else 20_000
    ours_steps = 130_000 if args.quick else 330_000
    baseline = cleanrl_style_steps_per_second(base_steps)
    ours = workbench_steps_per_second(ours_steps)
    ratio = ours / baseline
    print(f"CleanRL-style PPO, SyncVectorEnv N=4:  {baseline:12,.0f} env steps/s")
    print(f"workbench PPO, torch envs N=1,024:     {ours:12,.0f} env steps/s")
    print(f"ratio: {ratio:.1f}x (target >= 20x) {'met' if ratio >= 20 else 'NOT met'}")
    seeds = 2 if args.quick else args.seeds
    runs = []
    for seed in range(seeds):
        run = steps_to_475(seed, 500_000)
        runs.append(run)
        where = (f"475 at {run['env_steps']:,.0f} steps, {run['seconds']:.1f} s"
                 if run["reached"] else "475 not reached")
        print(f"default PPO, seed {seed}: {where} (last-100 mean at the end "
              f"{run['final_return_recent']:.0f}, run {run['total_seconds']:.1f} s)")
    good = sum(r["reached"] and r["seconds"] < 120 for r in runs)
    print(f"seeds reaching 475 within 500,000 steps and 2 minutes: {good}/{seeds} "
          f"(target: most) {'met' if good > seeds / 2 else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"cleanrl_style_steps_per_second": baseline,
                       "workbench_steps_per_second": ours, "ratio": ratio, "learning": runs},
                      out, indent=2)


if __name__ == "__main__":
    main()
