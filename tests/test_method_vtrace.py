"""V-trace (methods/advantage/vtrace.py): a three-step case worked by hand, the reduction to
GAE when the learner is the behaviour policy, the truncation of the ratios by rho_bar and
c_bar against the paper's sum written out term by term, and the family contract."""

from __future__ import annotations

import math

import pytest
import torch

from workbench import registry
from workbench.families import advantage

GAMMA = 0.9


def vtrace(**params):
    return registry.get("advantage", "vtrace")(**params)


def gae(**params):
    return registry.get("advantage", "gae")(**params)


def one_row(rewards, values, ratios, dones=None, terminated=None):
    """Inputs of one row, next_values = values[1:], behaviour log-probs of 0.5 each."""
    rewards = torch.tensor([rewards], dtype=torch.float64)
    values = torch.tensor([values], dtype=torch.float64)
    behaviour = torch.full_like(rewards, math.log(0.5))
    zeros = torch.zeros_like(rewards, dtype=torch.bool)
    return {"rewards": rewards, "values": values, "next_values": values[:, 1:].clone(),
            "dones": zeros if dones is None else torch.tensor([dones]),
            "terminated": zeros if terminated is None else torch.tensor([terminated]),
            "old_log_probs": behaviour,
            "target_log_probs": behaviour + torch.log(torch.tensor([ratios], dtype=torch.float64))}


def test_three_steps_by_hand():
    # gamma 0.9; r = (1, 0, 2), V(x_0..x_3) = (0.5, 1, -1, 2), pi/mu = (2, 0.5, 1):
    # rho = c = (1, 0.5, 1); TD errors r + 0.9 V' - V = (1.4, -1.9, 4.8), times rho:
    # (1.4, -0.95, 4.8). v_2 - V_2 = 4.8; v_1 - V_1 = -0.95 + 0.9 * 0.5 * 4.8 = 1.21;
    # v_0 - V_0 = 1.4 + 0.9 * 1 * 1.21 = 2.489, so v = (2.989, 2.21, 3.8).
    # A_2 = 1 * (2 + 0.9 * 2 + 1) = 4.8 (bootstraps from V(x_3), the rollout's end);
    # A_1 = 0.5 * (0 + 0.9 * 3.8 - 1) = 1.21; A_0 = 1 * (1 + 0.9 * 2.21 - 0.5) = 2.489.
    inputs = one_row([1.0, 0.0, 2.0], [0.5, 1.0, -1.0, 2.0], [2.0, 0.5, 1.0])
    adv, ret = vtrace(gamma=GAMMA).compute(**inputs)
    assert torch.allclose(ret, torch.tensor([[2.989, 2.21, 3.8]], dtype=torch.float64))
    assert torch.allclose(adv, torch.tensor([[2.489, 1.21, 4.8]], dtype=torch.float64))


def test_a_termination_cuts_the_trace_and_bootstraps_nothing():
    # the same row, the episode terminated at step 1: v_1 - V_1 = 0.5 * (0 - 1) = -0.5,
    # v_0 - V_0 = 1.4 + 0.9 * (-0.5) = 0.95; step 2 (a new episode) as before: 4.8.
    # A_1 = 0.5 * (0 - 1) = -0.5; A_0 = 1 + 0.9 * (1 - 0.5) - 0.5 = 0.95.
    inputs = one_row([1.0, 0.0, 2.0], [0.5, 1.0, -1.0, 2.0], [2.0, 0.5, 1.0],
                     dones=[False, True, False], terminated=[False, True, False])
    adv, ret = vtrace(gamma=GAMMA).compute(**inputs)
    assert torch.allclose(ret, torch.tensor([[1.45, 0.5, 3.8]], dtype=torch.float64))
    assert torch.allclose(adv, torch.tensor([[0.95, -0.5, 4.8]], dtype=torch.float64))


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.5])
def test_on_policy_it_is_gae(lam):
    """pi = mu: the value targets are GAE(lambda)'s returns; at lambda = 1 the advantages
    are GAE's too (the contract's inputs: terminations, a truncation, padding)."""
    inputs = advantage._advantage_inputs()
    names = ("rewards", "values", "dones", "terminated", "next_values", "mask")
    given = {k: inputs[k] for k in names}
    on_policy = dict(given, old_log_probs=inputs["old_log_probs"],
                     target_log_probs=inputs["old_log_probs"].clone())
    adv, ret = vtrace(gamma=0.97, lam=lam).compute(**on_policy)
    gae_adv, gae_ret = gae(gamma=0.97, lam=lam).compute(**given)
    assert torch.allclose(ret, gae_ret, rtol=1e-12, atol=1e-12)
    if lam == 1.0:
        assert torch.allclose(adv, gae_adv, rtol=1e-12, atol=1e-12)
    else:  # r_s + gamma v_{s+1} - V(x_s): one step, then the lambda-return
        valid = inputs["mask"] != 0
        assert not torch.allclose(adv[valid], gae_adv[valid])


def test_ratios_above_the_thresholds_are_truncated():
    """Ratios of 5 with rho_bar = c_bar = 1 give the on-policy (ratio 1) result."""
    inputs = one_row([1.0, -2.0, 0.5, 3.0], [0.2, -0.4, 1.0, 0.3, -1.5], [5.0, 5.0, 5.0, 5.0])
    same = one_row([1.0, -2.0, 0.5, 3.0], [0.2, -0.4, 1.0, 0.3, -1.5], [1.0, 1.0, 1.0, 1.0])
    for got, want in zip(vtrace(gamma=GAMMA).compute(**inputs),
                         vtrace(gamma=GAMMA).compute(**same), strict=True):
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    untruncated = vtrace(gamma=GAMMA, rho_bar=10.0, c_bar=10.0).compute(**inputs)
    assert not torch.allclose(untruncated[1], vtrace(gamma=GAMMA).compute(**same)[1])


def paper_sum(rewards, values, ratios, gamma, lam, rho_bar, c_bar):
    """v_s and A_s of one row without episode ends, the paper's sum term by term."""
    n = len(rewards)
    rho = [min(rho_bar, r) for r in ratios]
    c = [lam * min(c_bar, r) for r in ratios]
    delta = [rho[t] * (rewards[t] + gamma * values[t + 1] - values[t]) for t in range(n)]
    v = []
    for s in range(n):
        total = values[s]
        for t in range(s, n):
            total += gamma ** (t - s) * math.prod(c[s:t]) * delta[t]
        v.append(total)
    v_next = v[1:] + [values[n]]
    adv = [rho[s] * (rewards[s] + gamma * v_next[s] - values[s]) for s in range(n)]
    return adv, v


@pytest.mark.parametrize("rho_bar, c_bar, lam", [(1.0, 1.0, 1.0), (2.0, 0.5, 1.0),
                                                 (0.5, 2.0, 0.9), (5.0, 5.0, 0.7)])
def test_the_recursion_is_the_papers_sum(rho_bar, c_bar, lam):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(6, generator=gen, dtype=torch.float64).tolist()
    values = torch.randn(7, generator=gen, dtype=torch.float64).tolist()
    ratios = torch.exp(2 * torch.randn(6, generator=gen, dtype=torch.float64)).tolist()
    assert min(ratios) < min(rho_bar, c_bar) and max(ratios) > max(rho_bar, c_bar)
    adv, ret = vtrace(gamma=GAMMA, lam=lam, rho_bar=rho_bar, c_bar=c_bar).compute(
        **one_row(rewards, values, ratios))
    want_adv, want_ret = paper_sum(rewards, values, ratios, GAMMA, lam, rho_bar, c_bar)
    assert torch.allclose(ret[0], torch.tensor(want_ret, dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(adv[0], torch.tensor(want_adv, dtype=torch.float64), rtol=1e-12)


def test_a_truncation_bootstraps_from_the_final_observation():
    # one step, truncated: v_0 = V_0 + rho (r + gamma V(final) - V_0), V(final) = next_values
    inputs = one_row([1.0], [0.5, 7.0], [0.5], dones=[True], terminated=[False])
    inputs["next_values"] = torch.tensor([[2.0]], dtype=torch.float64)
    adv, ret = vtrace(gamma=GAMMA).compute(**inputs)
    assert torch.allclose(adv, torch.tensor([[0.5 * (1 + 0.9 * 2 - 0.5)]], dtype=torch.float64))
    assert torch.allclose(ret, 0.5 + adv)


def test_meets_the_advantage_contract():
    from workbench.families import check

    assert check(registry.get("advantage", "vtrace")) == []


def test_workbench_run_cartpole_with_vtrace_and_a_policy_lag(tmp_path):
    import json

    from tests.conftest import run_cli

    out = run_cli("run", "cartpole", "advantage=vtrace", "advantage.lam=0.95", "policy_lag=2",
                  "num_envs=4", "rollout_len=32", "--steps", "3", "--json", "--device", "cpu",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["steps"] == 3 and result["env_steps"] == 3 * 4 * 32
    assert math.isfinite(result["train/value_loss"]) and not result["diverged"]


def test_a_sweep_with_a_policy_lag_runs_its_seeds_on_the_seed_axis():
    from workbench.spec import sweep as spec

    def document(seeds: str) -> dict:
        return {"name": "lag", "task": {"name": "cartpole", "params": {"policy_lag": 2}},
                "methods": {"advantage": ["vtrace"]}, "seeds": 2, "trials": 1,
                "execution": {"seeds": seeds}, "budget": {"steps": 2},
                "objective": {"metric": "train/return_recent"}}

    sweep = spec.check(document("auto"), "lag.yaml")
    assert all(plan.vectorised for plan in sweep.studies)
    assert not any("policy_lag" in note for note in sweep.notes)
    assert all(plan.vectorised
               for plan in spec.check(document("vectorised"), "lag.yaml").studies)
