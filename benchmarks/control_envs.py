"""Environment steps per second of the batched torch environments against Gymnasium's.

    .venv/bin/python benchmarks/control_envs.py            # N = 8 .. 65,536; CUDA: .. 1,048,576
    .venv/bin/python benchmarks/control_envs.py --quick    # fewer N and steps (< 1 min)
    .venv/bin/python benchmarks/control_envs.py --json out.json

The environments alone: random actions are drawn before the clock starts, and each measurement
is ``--steps`` steps after a warm-up, repeated ``--repeats`` times with the torch environment and
its baseline interleaved; the best repeat counts (the machine is shared, so slower repeats are
other processes' time).  Baselines, in the same run: CartPole-v1 has Gymnasium's own batched
numpy implementation (``gym.make_vec(..., vectorization_mode="vector_entry_point")``, next-step
autoreset, no final observations or episode statistics); Acrobot-v1, MountainCar-v0 and
Pendulum-v1 have none, so their baseline is ``SyncVectorEnv`` (one Python environment per copy),
measured only for N <= 1,024 and with fewer steps there.  On CUDA the ratio is against the same
CPU baseline.  Targets (issue 9): CartPole on the CPU within 2x of Gymnasium's batched version
at N = 4,096 (ratio >= 0.5) and at least as fast at N = 65,536 (ratio >= 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from workbench.testbeds.envs import ENV_IDS, make

CPU_SIZES = (8, 64, 1024, 4096, 8192, 65536)
CUDA_SIZES = CPU_SIZES + (1_048_576,)
QUICK_SIZES = (64, 4096, 65536)  # CartPole; the others stop at 4,096
SYNC_MAX_N = 1024  # SyncVectorEnv is measured up to this N
SYNC_ENV_STEPS = 50_000  # at most this many environment steps per SyncVectorEnv measurement
TARGETS = ((4096, 0.5), (65536, 1.0))  # CartPole on the CPU: (N, torch / Gymnasium batched)


def torch_runner(env_id: str, n: int, device: str, steps: int):
    env = make(env_id, n, device=device, seed=0)
    generator = torch.Generator(device=device).manual_seed(0)
    if env.discrete:
        actions = torch.randint(0, env.n_actions, (steps, n), generator=generator,
                                device=device)
    else:
        actions = torch.rand((steps, n, env.act_dim), generator=generator,
                             device=device) * 4 - 2

    def run(count: int) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for t in range(count):
            env.step(actions[t % steps])
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    return run


def gym_runner(env_id: str, n: int, steps: int):
    if env_id == "CartPole-v1":
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point")
    else:
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync")
    env.reset(seed=0)
    space = env.action_space
    space.seed(0)
    actions = [space.sample() for _ in range(steps)]

    def run(count: int) -> float:
        start = time.perf_counter()
        for t in range(count):
            env.step(actions[t % steps])
        return time.perf_counter() - start

    return run


def baseline_kind(env_id: str) -> str:
    return "gym batched" if env_id == "CartPole-v1" else "SyncVectorEnv"


def timed(run, steps: int, threads: int | None) -> float:
    """Seconds of one measurement, with torch using ``threads`` intra-op threads."""
    if threads is None:
        return run(steps)
    default = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return run(steps)
    finally:
        torch.set_num_threads(default)


def measure(env_id: str, n: int, device: str, steps: int, repeats: int,
            with_baseline: bool, thread_counts: list[int]) -> dict:
    """Best-of-``repeats`` steps/s of ours at each thread count (CPU) and of the baseline."""
    ours = torch_runner(env_id, n, device, steps)
    theirs, their_steps = None, steps
    if with_baseline:
        if env_id != "CartPole-v1":
            their_steps = max(10, min(steps, SYNC_ENV_STEPS // n))
        theirs = gym_runner(env_id, n, their_steps)
    configs = thread_counts if device == "cpu" else [None]
    warmup = max(5, steps // 10)
    for threads in configs:
        timed(ours, warmup, threads)
    if theirs:
        theirs(min(warmup, their_steps))
    best = dict.fromkeys(configs, float("inf"))
    best_theirs = float("inf")
    for _ in range(repeats):  # interleaved, so that load from other processes hits all alike
        for threads in configs:
            best[threads] = min(best[threads], timed(ours, steps, threads))
        if theirs:
            best_theirs = min(best_theirs, theirs(their_steps))
    row = {"env": env_id, "device": device, "num_envs": n, "steps": steps,
           "torch_steps_per_s": {str(t or "-"): steps * n / b for t, b in best.items()},
           "baseline": baseline_kind(env_id), "baseline_steps_per_s": None}
    if theirs:
        row["baseline_steps_per_s"] = their_steps * n / best_theirs
    return row


def ratios(row: dict) -> dict[str, float]:
    if not row["baseline_steps_per_s"]:
        return {}
    return {t: v / row["baseline_steps_per_s"] for t, v in row["torch_steps_per_s"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N in 64, 4096 (65536); 50 steps")
    parser.add_argument("--steps", type=int, default=None, help="steps per measurement (300)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats, best counts (3)")
    parser.add_argument("--envs", nargs="+", default=list(ENV_IDS), choices=ENV_IDS)
    parser.add_argument("--devices", nargs="+", default=None, choices=("cpu", "cuda"),
                        help="default: cpu, and cuda when available")
    parser.add_argument("--threads", nargs="+", type=int, default=None,
                        help="torch CPU thread counts to measure (default: torch's, and 1)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()
    steps = args.steps or (50 if args.quick else 300)
    repeats = args.repeats or 3
    devices = args.devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    thread_counts = args.threads or sorted({torch.get_num_threads(), 1}, reverse=True)
    torch.set_grad_enabled(False)

    print(f"torch {torch.__version__}, numpy {np.__version__}, gymnasium {gym.__version__}, "
          f"{platform.processor() or 'cpu'}, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs; {steps} steps x best of {repeats}; torch CPU threads: "
          f"{', '.join(map(str, thread_counts))}")
    labels = [f"torch {t}T" for t in thread_counts]
    header = (f"{'env':<15} {'device':<6} {'N':>9} "
              + " ".join(f"{label:>14}" for label in labels)
              + f" {'baseline':<16} {'steps/s':>12}  ratio torch/baseline")
    print(header)
    print("-" * len(header))
    rows, cpu_baseline = [], {}
    for device in devices:
        sizes = QUICK_SIZES if args.quick else (CUDA_SIZES if device == "cuda" else CPU_SIZES)
        for env_id in args.envs:
            for n in sizes:
                if args.quick and env_id != "CartPole-v1" and n > 4096:
                    continue
                wanted = env_id == "CartPole-v1" or n <= (64 if args.quick else SYNC_MAX_N)
                row = measure(env_id, n, device, steps, repeats, wanted and device == "cpu",
                              thread_counts)
                if device == "cpu" and row["baseline_steps_per_s"]:
                    cpu_baseline[env_id, n] = row["baseline_steps_per_s"]
                elif device == "cuda" and (env_id, n) in cpu_baseline:
                    row["baseline_steps_per_s"] = cpu_baseline[env_id, n]
                    row["baseline"] += " (CPU)"
                row["ratio"] = ratios(row)
                rows.append(row)
                speeds = list(row["torch_steps_per_s"].values())
                cells = " ".join(f"{v:>14,.0f}" for v in speeds)
                cells += " " * (15 * (len(labels) - len(speeds)))
                base = row["baseline_steps_per_s"]
                tail = (f"{base:>12,.0f}  " + " / ".join(f"{r:.2f}x" for r in row["ratio"].values())
                        if base else f"{'-':>12}  -")
                print(f"{env_id:<15} {device:<6} {n:>9,} {cells} {row['baseline']:<16} {tail}",
                      flush=True)
    print()
    targets = []
    for n, target in TARGETS:
        row = next((r for r in rows if r["env"] == "CartPole-v1" and r["device"] == "cpu"
                    and r["num_envs"] == n and r["ratio"]), None)
        if row:
            by_threads = row["ratio"]
            best_threads = max(by_threads, key=by_threads.get)
            best = by_threads[best_threads]
            others = ", ".join(f"{t} threads: {r:.2f}" for t, r in by_threads.items()
                               if t != best_threads)
            verdict = "met" if best >= target else "NOT met"
            targets.append({"num_envs": n, "ratio": best, "threads": best_threads,
                            "target": target, "met": best >= target})
            print(f"target CartPole-v1 CPU N={n:,}: torch/gym batched = {best:.2f} with "
                  f"{best_threads} thread(s) (target >= {target}) {verdict}"
                  + (f"  [{others}]" if others else ""))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "targets": targets, "steps": steps,
                                         "repeats": repeats}, indent=2))


if __name__ == "__main__":
    main()
