"""The RLVR loop's ``staleness`` (an asynchronous actor's stale sampler, ``rlvr.staleness``):
which parameters sample each rollout, the truncated importance weights it brings, the advantage
batch's ``target_log_probs`` (``vtrace``), and the setting's validation."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.conftest import run_cli
from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.rlvr import loop
from workbench.testbeds.rlvr.staleness import StalePolicy

TINY = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "warmup_steps": 30,
        "warmup_batch": 16, "n_train": 200, "n_eval": 16, "eval_k_prompts": 4, "eval_k": 2,
        "prompts": 2, "group_size": 4, "eval_every": 2, "digits_min": 1, "digits_max": 2,
        "format_reward": 0.5, "warmup_target": None}
CLI_TINY = [f"{k}={'null' if v is None else v}" for k, v in TINY.items()]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def params_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def run(steps: int = 4, advantage: str = "grpo", **params):
    """A tiny run whose policy moves at every update whatever the rewards (an entropy bonus
    and a large step), its log kept."""
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", advantage)()
    methods["entropy"] = registry.get("entropy", "constant")(coef=0.05)
    methods["step_size"] = registry.get("step_size", "adam_schedule")(lr=1e-2)
    logged = []
    result = task().run(task.Params(**{**TINY, **params}), methods, seed=0,
                        device=torch.device("cpu"), budget=Budget(steps=steps),
                        log=lambda step, m: logged.append((step, dict(m))))
    return result, logged


def test_the_stale_policy_by_hand():
    """k = 2, updates adding 1, 2, 3, 4 to a one-weight policy w0 = 0: the rollouts of updates
    0..4 are sampled with w = 0, 0, 0, 1 (after update 1), 3 (after update 2: 1 + 2)."""
    policy = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        policy.weight.zero_()
    sampler = torch.nn.Linear(1, 1, bias=False).requires_grad_(False)
    stale = StalePolicy(policy, sampler, 2)
    seen = [float(sampler.weight)]
    for update in range(4):
        with torch.no_grad():
            policy.weight.add_(update + 1)
        seen.append(float(stale.advance().weight))
    assert seen == [0.0, 0.0, 0.0, 1.0, 3.0]
    assert float(policy.weight.detach()) == 10.0  # the learner itself is untouched

    class Backend:
        synced: list[float] = []

        def sync_weights(self, model):
            self.synced.append(float(model.weight))

    backend = Backend()
    with stale.learner(backend):  # evaluation: the current policy, then back to the stale one
        assert float(sampler.weight) == 10.0
    assert float(sampler.weight) == 3.0 and backend.synced == [10.0, 3.0]
    with pytest.raises(ValueError, match="staleness"):
        StalePolicy(policy, sampler, 0)
    for wrong in (policy, None):
        with pytest.raises(ValueError, match="copy of the policy"):
            StalePolicy(policy, wrong, 1)


@pytest.mark.parametrize("k", [1, 2])
def test_the_rollout_of_update_u_is_sampled_by_the_policy_after_update_max_0_u_minus_k(
        monkeypatch, k):
    """In a run: the backend's model at each rollout against saved snapshots of the policy
    (before the first update, after each); evaluation sees the current policy."""
    snapshots = []  # snapshots[j]: the policy after j updates
    sampled = []  # the sampler's parameters at each rollout
    evaluated = []  # (the backend's model at each evaluation, updates done then)
    original_update, original_sample = loop._update, loop.sample_batch
    original_evaluate = loop.evaluate

    def update(policy, *args, **kwargs):
        if not snapshots:
            snapshots.append(params_of(policy))
        out = original_update(policy, *args, **kwargs)
        snapshots.append(params_of(policy))
        return out

    def sample(backend, *args, **kwargs):
        sampled.append(params_of(backend.model))
        return original_sample(backend, *args, **kwargs)

    def evaluate(backend, *args, **kwargs):
        evaluated.append((params_of(backend.model), max(len(snapshots) - 1, 0)))
        return original_evaluate(backend, *args, **kwargs)

    monkeypatch.setattr(loop, "_update", update)
    monkeypatch.setattr(loop, "sample_batch", sample)
    monkeypatch.setattr(loop, "evaluate", evaluate)
    result, _ = run(steps=4, staleness=k)
    assert result["steps"] == 4 and len(sampled) == 4 and len(snapshots) == 5
    for u in range(4):
        assert same(sampled[u], snapshots[max(0, u - k)]), u
        if u > 0:  # the learner has moved since: the sampler is stale
            assert not same(sampled[u], snapshots[u]), u
    assert len(evaluated) >= 3  # step 0, every eval_every = 2 steps and the last
    for params, done in evaluated:
        assert same(params, snapshots[done]), done


def capture_tis(monkeypatch):
    weights = []
    original = loop.tis_weights
    monkeypatch.setattr(loop, "tis_weights",
                        lambda *a, **kw: weights.append(original(*a, **kw)) or weights[-1])
    return weights


def test_tis_weights_are_one_on_policy_and_not_with_a_stale_sampler(monkeypatch):
    """fp32, hf backend: on policy the sampler's log-probs are the trainer's but for the KV
    cache's last bits; with staleness 2 every update from the second on is sampled by an older
    policy (the initial one for updates 1 and 2), and its weights move away from 1."""
    weights = capture_tis(monkeypatch)
    _, on_policy = run(steps=4, tis_cap=2.0)
    assert len(weights) == 4
    for w, (_, metrics) in zip(weights, on_policy[1:], strict=True):
        assert (w[w > 0] - 1).abs().max() < 1e-4
        assert metrics["train/rollout_kl"] < 1e-5
    weights.clear()
    _, stale = run(steps=4, tis_cap=2.0, staleness=2)
    assert len(weights) == 4
    assert (weights[0][weights[0] > 0] - 1).abs().max() < 1e-4  # update 0: the same policy
    for u in (1, 2, 3):  # sampled by the initial policy, the initial one, the one after update 1
        w = weights[u][weights[u] > 0]
        assert (w - 1).abs().max() > 1e-3, u
        assert w.max() <= 2.0
        assert stale[u + 1][1]["train/rollout_kl"] > 100 * on_policy[u + 1][1]["train/rollout_kl"]


def capture_batches(monkeypatch):
    batches = []
    original = loop.compute_advantages
    monkeypatch.setattr(loop, "compute_advantages",
                        lambda method, batch, names: batches.append(batch)
                        or original(method, batch, names))
    return batches


def test_the_advantage_batch_has_the_learners_log_probs_as_target(monkeypatch):
    """``old_log_probs`` the sampler's, ``target_log_probs`` the learner's: the same tensor on
    policy; with staleness 1, the stale sampler's recomputed by the trainer from update 1 on."""
    batches = capture_batches(monkeypatch)
    run(steps=2, advantage="vtrace")
    assert all(b.target_log_probs is b.old_log_probs for b in batches)
    batches.clear()
    result, _ = run(steps=3, advantage="vtrace", staleness=1)
    assert math.isfinite(result["train/value_loss"]) and not result["diverged"]
    assert torch.equal(batches[0].old_log_probs, batches[0].target_log_probs)  # same weights
    for b in batches[1:]:
        valid = b.mask.bool()
        assert not torch.allclose(b.old_log_probs[valid], b.target_log_probs[valid])


def test_the_sampler_is_scored_only_for_a_method_that_reads_log_probs(monkeypatch):
    stale, scored = [], []

    class Recorded(StalePolicy):
        def __init__(self, *args):
            super().__init__(*args)
            stale.append(self)

    original = loop.response_log_probs
    monkeypatch.setattr(loop, "StalePolicy", Recorded)
    monkeypatch.setattr(loop, "response_log_probs", lambda model, *a, **kw: scored.append(
        model is stale[-1].sampler) or original(model, *a, **kw))
    run(steps=2, staleness=1)  # grpo reads neither old_log_probs nor target_log_probs
    assert len(stale) == 1 and scored and not any(scored)
    scored.clear()
    run(steps=2, staleness=1, advantage="vtrace")
    assert sum(scored) == 2  # once per update


def test_workbench_run_rlvr_with_vtrace_and_staleness(tmp_path):
    out = run_cli("run", "rlvr-arith", "advantage=vtrace", "staleness=2", "tis_cap=2",
                  *CLI_TINY, "--steps", "3", "--json", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["steps"] == 3 and not result["diverged"]
    for name in ("train/value_loss", "train/rollout_kl", "train/rollout_is_mean",
                 "train/rollout_is_capped_frac", "adv/std"):
        assert math.isfinite(result[name]), name


def test_a_negative_staleness_is_refused_by_workbench_run(tmp_path):
    out = run_cli("run", "rlvr-arith", "staleness=-1", "--steps", "1", "--device", "cpu",
                  cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "staleness" in out.stderr and "greater than or equal to 0" in out.stderr, out.stderr
    assert not list(tmp_path.iterdir())


def test_the_stale_sweep_runs_shrunk(tmp_path):
    """sweeps/rlvr-stale-add.yaml through the real CLI on the tiny model, two steps a run."""
    import yaml

    from tests.conftest import ROOT

    spec = yaml.safe_load((ROOT / "sweeps" / "rlvr-stale-add.yaml").read_text())
    params = spec["task"]["params"]
    assert params["staleness"] == 2 and params["tis_cap"] == 2.0
    assert "vtrace" in spec["methods"]["advantage"]
    params.update(TINY)
    spec.update(seeds=1, budget={"steps": 2})
    path = tmp_path / "stale.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = run_cli("sweep", path, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--quiet",
                  "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    status = run_cli("status", path, "--storage", f"sqlite:///{tmp_path / 's.db'}",
                     cwd=tmp_path)
    assert status.returncode == 0 and status.stdout.count("1/1") == 3, status.stdout
