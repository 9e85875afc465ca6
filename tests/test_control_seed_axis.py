"""The control testbed on a seed axis (``execution: {seeds: vectorised}``): S policies on S x N
environments, each seed with the metrics of its own sequential run, update by update (CPU,
float64, 1e-9 relative)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_seed_axis import (
    assert_same_metrics,
    configured_methods,
    resolved,
    run_alone,
    run_together,
)
from workbench import registry
from workbench.families import ContractViolation, StepSizeMethod, check
from workbench.families.optim import FlatOptimizer
from workbench.families.step_size import check_configuration as check_step_size
from workbench.registry import _REGISTRY, Reference, register
from workbench.testbeds import get_task
from workbench.testbeds.envs import TORCH_ENVS

# a float64 run small enough for a test: 3 environments per seed, 16 steps per update
SMALL = {"num_envs": 3, "rollout_len": 16, "hidden": 8, "dtype": "float64", "minibatches": 2,
         "epochs": 2}
TIMED = {"time/wall_seconds", "time/env_steps_per_second"}
CONTROL = get_task("cartpole")


def runnable(slot: str) -> list[str]:
    """The methods of ``slot`` a control task can run on a seed axis, by their default
    requirements (kl_cov declares it cannot: its docstring says why)."""
    return [name for name in registry.available(slot)
            if (cls := registry.get(slot, name)).requirements(cls().params) <= CONTROL.provides
            and cls.vectorised]


def assert_same_runs(alone, together, alone_finals, together_finals):
    import tests.test_seed_axis as seed_axis

    untimed = seed_axis.UNTIMED
    seed_axis.UNTIMED = untimed | TIMED
    try:
        assert_same_metrics(alone, together)
    finally:
        seed_axis.UNTIMED = untimed
    for seed, result in alone_finals.items():
        other = together_finals[seed]
        assert (result["steps"], result["diverged"]) == (other["steps"], other["diverged"])


def both(task_name, params, methods, seeds, updates):
    alone, alone_finals = run_alone(task_name, params, methods, seeds, updates)
    together, together_finals = run_together(task_name, params, methods, seeds, updates)
    assert_same_runs(alone, together, alone_finals, together_finals)
    return alone, together


@pytest.mark.parametrize("env_id", sorted(TORCH_ENVS))
def test_each_block_of_a_seed_axis_environment_steps_as_its_own_environment(env_id):
    """S streams of N rows reset, step, autoreset and resize bit for bit as S environments of
    N rows, each from its own seed."""
    cls, seeds, n = TORCH_ENVS[env_id], [11, 12, 13], 5
    big = cls(len(seeds) * n, seed=seeds, dtype=torch.float64, streams=len(seeds))
    alone = [cls(n, seed=s, dtype=torch.float64) for s in seeds]
    draws = torch.Generator().manual_seed(0)
    ended = 0
    for t in range(650):
        if t in (300, 400):  # grow, then shrink, every block
            n = 7 if t == 300 else 2
            grown = big.resize(len(seeds) * n)
            assert torch.equal(grown, torch.cat([e.resize(n) for e in alone]))
        if big.discrete:
            actions = torch.randint(0, big.n_actions, (len(seeds) * n,), generator=draws)
        else:
            actions = torch.rand((len(seeds) * n, big.act_dim), generator=draws,
                                 dtype=torch.float64) * 4 - 2
        step = big.step(actions)
        steps = [e.step(actions[i * n:(i + 1) * n]) for i, e in enumerate(alone)]
        for field in ("obs", "reward", "terminated", "truncated", "final_obs"):
            assert torch.equal(getattr(step, field),
                               torch.cat([getattr(s, field) for s in steps])), (t, field)
        returns = torch.cat([s.episode_return for s in steps])
        assert torch.equal(step.episode_return.nan_to_num(-1.0), returns.nan_to_num(-1.0))
        ended += int(step.terminated.sum() + step.truncated.sum())
    assert ended >= len(seeds)  # episodes ended and restarted, from each block's own stream


@settings(deadline=None, max_examples=40, derandomize=True, database=None)
@given(task_name=st.sampled_from(["cartpole", "pendulum", "acrobot", "mountain-car"]),
       algorithm=st.sampled_from(["ppo", "reinforce"]),
       advantage_norm=st.sampled_from(["batch", "minibatch", "none"]),
       step_size=configured_methods().filter(
           lambda m: m.requirements(m.params) <= CONTROL.provides),
       entropy=st.sampled_from(runnable("entropy")),
       advantage=st.sampled_from(runnable("advantage")),
       seeds=st.lists(st.integers(0, 10_000), min_size=2, max_size=3, unique=True))
def test_every_seed_on_the_axis_has_the_metrics_of_its_own_run(
        task_name, algorithm, advantage_norm, step_size, entropy, advantage, seeds):
    """Any vectorised step size, entropy and advantage method, PPO or REINFORCE, discrete or
    continuous actions: per-seed environments, action and minibatch streams, advantage
    normalisation, entropy coefficients and gradient clipping."""
    methods = {"step_size": step_size, "batch_size": registry.get("batch_size", "constant")(),
               "entropy": registry.get("entropy", entropy)(),
               "advantage": registry.get("advantage", advantage)()}
    params = {**SMALL, "algorithm": algorithm, "advantage_norm": advantage_norm}
    both(task_name, params, methods, seeds, 3)


def test_a_line_search_and_an_entropy_hook_act_on_each_seed_alone():
    """Armijo backtracks per seed on the PPO loss, and a learned entropy temperature (SAC's)
    is each seed's own, from its own entropies."""
    methods = {"step_size": registry.get("step_size", "armijo")(eta0=5.0),
               "batch_size": registry.get("batch_size", "constant")(),
               "entropy": registry.get("entropy", "sac_temperature")(),
               "advantage": registry.get("advantage", "gae")()}
    _, together = both("cartpole", {**SMALL, "max_grad_norm": None}, methods, [0, 1, 2], 4)
    sizes = {seed: rows[-1][1]["method/step_size"] for seed, rows in together.items()}
    assert len(set(sizes.values())) > 1, sizes
    coefs = {seed: rows[-1][1]["method/entropy_coef"] for seed, rows in together.items()}
    assert len(set(coefs.values())) > 1, coefs


def test_a_batch_schedule_grows_every_seeds_environments():
    """A linear ramp on the number of environments: each seed's block grows as its own
    environment does."""
    methods = {"step_size": registry.get("step_size", "adam")(),
               "batch_size": registry.get("batch_size", "linear_ramp")(
                   start_size=32, increment=32, trigger="steps", ramp_steps=4),
               "entropy": registry.get("entropy", "constant")(),
               "advantage": registry.get("advantage", "gae")()}
    params = {**SMALL, "num_envs": 8, "batch_axis": "num_envs"}
    _, together = both("cartpole", params, methods, [4, 5], 5)
    envs = [m["batch/num_envs"] for _, m in together[4]]
    assert envs[0] < envs[-1], envs


@pytest.fixture
def poison_on_positive_start():
    """A step-size method that overwrites a seed's parameters with NaN at its third step when
    the seed's first weight started positive: a divergence set by the seed alone."""

    @register
    class PoisonOnPositiveStart(StepSizeMethod):
        name = "poison_on_positive_start"
        reference = Reference("a deliberately diverging method", 2026)
        fidelity = "reconstructed"
        vectorised = True

        def build(self, params, info):
            return Poison(list(params), seeds=info.get("seeds"))

    class Poison(FlatOptimizer):
        def __init__(self, params, seeds):
            super().__init__(params, {"lr": 0.01})
            self.seeds, self.steps = seeds, 0
            first = params[0].detach()
            self.doomed = (first.flatten(1)[:, 0] > 0) if seeds else (first.flatten()[0] > 0)

        @torch.no_grad()
        def step(self, closure):
            loss = closure()
            self.steps += 1
            for p in self._params():
                p.add_(p.grad, alpha=-0.01)
                if self.steps == 3:
                    doomed = self.doomed.view(-1, *[1] * (p.dim() - 1)) if self.seeds else (
                        self.doomed)
                    p.copy_(torch.where(doomed, torch.full_like(p, float("nan")), p))
            self.last_step_size = 0.01
            return loss

    yield PoisonOnPositiveStart
    del _REGISTRY[("step_size", "poison_on_positive_start")]


def test_a_diverging_seed_stops_while_the_others_go_on(poison_on_positive_start):
    methods = {"step_size": poison_on_positive_start(),
               "batch_size": registry.get("batch_size", "constant")(),
               "entropy": registry.get("entropy", "constant")(),
               "advantage": registry.get("advantage", "gae")()}
    params = {**SMALL, "epochs": 1, "minibatches": 1}
    seeds = list(range(6))
    alone, together = both("cartpole", params, methods, seeds, 5)
    _, finals = run_alone("cartpole", params, methods, seeds, 5)
    diverged = {s for s in seeds if finals[s]["diverged"]}
    assert diverged and diverged != set(seeds), finals
    for seed in seeds:
        assert len(together[seed]) == (3 if seed in diverged else 5)


def test_auto_runs_control_vectorised_and_gymnasium_sequentially(tmp_path, write_spec):
    def study(**params):
        return resolved(tmp_path, write_spec, execution={"seeds": "auto"},
                        task={"name": "control", "params": params},
                        methods={"step_size": ["adam"]}, budget={"steps": 2})

    torch_backed = study(env="CartPole-v1")
    assert [p.vectorised for p in torch_backed.studies] == [True]
    gymnasium = study(env="CartPole-v1", backend="gymnasium")
    assert [p.vectorised for p in gymnasium.studies] == [False]
    assert any("seeds run sequentially" in n and "Gymnasium" in n for n in gymnasium.notes)
    rl_stats = resolved(tmp_path, write_spec, execution={"seeds": "auto"},
                        task={"name": "cartpole", "params": {}},
                        methods={"step_size": ["kl_adaptive", "pg_polyak"]},
                        budget={"steps": 2})
    assert [p.vectorised for p in rl_stats.studies] == [True, True]


def test_kl_adaptive_and_pg_polyak_observe_each_seeds_own_statistics():
    """The step sizes that adapt to RL statistics: each seed's lr follows its own KL, each
    seed's Polyak gap its own return."""
    for name in ("kl_adaptive", "pg_polyak"):
        params = ({"lr": 1e-3, "kl_target": 1e-4} if name == "kl_adaptive"
                  else {"c": 1e5})  # below the cap: the step is set by each seed's gap
        methods = {"step_size": registry.get("step_size", name)(**params),
                   "batch_size": registry.get("batch_size", "constant")(),
                   "entropy": registry.get("entropy", "constant")(),
                   "advantage": registry.get("advantage", "gae")()}
        _, together = both("cartpole", {**SMALL, "num_envs": 6}, methods, [0, 1, 2], 4)
        sizes = {seed: rows[-1][1]["method/step_size"] for seed, rows in together.items()}
        assert len(set(sizes.values())) > 1, (name, sizes)


def test_the_contract_refuses_an_lr_adapted_from_the_kl_of_all_seeds():
    kl_adaptive = registry.get("step_size", "kl_adaptive")

    class MeanKL(kl_adaptive):
        def build(self, params, info):
            optimizer = super().build(params, info)
            own = optimizer.observe

            def observe(stats):
                kl = stats["approx_kl"]
                own({**stats, "approx_kl": kl.mean().expand(kl.shape)
                     if isinstance(kl, torch.Tensor) else kl})

            optimizer.observe = observe
            return optimizer

    with pytest.raises(ContractViolation, match="on a seed axis, seed"):
        check_step_size(MeanKL, {}, MeanKL())
    assert check(kl_adaptive) == []


def test_the_advantage_contract_refuses_a_false_row_independence():
    """The control seed axis folds the rows of all seeds into one call only for methods that
    declare ``row_independent``; a batch-normalising estimator that claims it is refused."""
    from workbench.families.advantage import check_configuration as check_advantage

    reinforce_pp = registry.get("advantage", "reinforce_pp")

    class Claims(reinforce_pp):
        invariants = frozenset({"row_independent"})

    with pytest.raises(ContractViolation, match="row_independent"):
        check_advantage(Claims, {}, Claims())
    assert "row_independent" in registry.get("advantage", "gae").invariants


@pytest.mark.parametrize("task_name, algorithm, lag, step_size, advantage", [
    ("cartpole", "ppo", 2, "vcpo_lr", "vtrace"),
    ("cartpole", "reinforce", 3, "adam", "vcpo_baseline"),
    ("pendulum", "ppo", 1, "vcpo_lr", "vcpo_baseline"),
    ("acrobot", "ppo", 2, "kl_adaptive", "gae"),  # a lag no method reads: no learner pass
])
def test_a_policy_lag_gives_each_seed_the_numbers_of_its_own_run(
        task_name, algorithm, lag, step_size, advantage):
    """policy_lag = k on the seed axis: each seed acts with its own parameters of k updates
    before (``LaggedSeedPolicy``, as ``loop.LaggedPolicy``), its learner log-probabilities and
    ESS its own; every metric of every update as its one-at-a-time run's, float64, to the
    suite's 1e-9 relative (the two loops round differently by about 1e-13 in float64: the
    axis's batched matrix products; the importance weights exponentiate sums of at most 16
    log-ratios, which leaves that far inside 1e-9)."""
    methods = {"step_size": registry.get("step_size", step_size)(),
               "batch_size": registry.get("batch_size", "constant")(),
               "entropy": registry.get("entropy", "constant")(),
               "advantage": registry.get("advantage", advantage)()}
    params = {**SMALL, "algorithm": algorithm, "policy_lag": lag}
    alone, together = both(task_name, params, methods, [3, 8, 21], lag + 3)
    reads = advantage in ("vtrace", "vcpo_baseline") or step_size == "vcpo_lr"
    for seed, rows in together.items():
        if not reads:
            assert all("train/ess" not in m for _, m in rows)
            continue
        ess = [m["train/ess"] for _, m in rows]
        assert min(ess[1:]) < 1.0 - 1e-6, (seed, ess)  # off-policy from the second update
        if step_size == "vcpo_lr":
            assert all(m["method/step_size"] == pytest.approx(3e-4 * m["train/ess"], rel=1e-9)
                       for _, m in rows)
    # the seeds are not copies of one another
    assert len({rows[-1][1]["train/policy_loss"] for rows in together.values()}) == 3
