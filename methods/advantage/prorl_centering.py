"""ProRL-style stepwise reward centering with a position-specific baseline.

Rows are episodes of up to T steps (right-padded; ``mask`` says which are played). A path's
reward is the sum of its step rewards; when step rewards have a positive mean, the reward to go
of an early step grows with the number of steps after it, so a plain reward-to-go gradient
favours longer paths whatever they do (the length bias). With r_{i,k} the reward of row i's
step k and the batch's rows valid at position k:

    r~_{i,k} = r_{i,k} - E[r_k]                   stepwise reward centering
    G_{i,k}  = sum_{k' >= k} r~_{i,k'}            the centred reward to go (row i's valid steps)
    A_{i,k}  = G_{i,k} - b_k                      b_k: mean of G_{., k} over the batch's rows
                                                  valid at position k (position-specific)

``centering``: ``position`` (default), E[r_k] = the batch mean of the rewards at position k
over the rows valid there (the agent testbed's steps have no type; the position stands for
it); ``global``, one batch mean over every valid step; ``none``, no centering (then
``baseline = none`` is plain reward to go, the biased estimator). ``baseline``: ``position``
(default) subtracts b_k; ``none`` does not. Undiscounted (the paths are short). Returns =
the uncentred reward to go, sum_{k' >= k} r_{i,k'} (a value head's target). Padded positions
are 0.

With centering, extending a path by steps of average reward adds 0 to every earlier step's
advantage in expectation, so two paths that do equally well per step get the same advantage
at their first step whatever their lengths (tests/test_redistribution_methods.py checks this
length-bias property against plain reward to go).

Reference: the "ProRL" proactive-recommendation policy gradient, workbench literature catalogue
(catalogue-001, card #31): "Stepwise Reward Centering" (subtract the expected step reward so an
extension has zero expected signal) and "Position-Specific Advantage Estimation" (step-dependent
baselines). Reconstructed from the card's formula ([R]): the reference uses a running mean per
step type for E[r_k]; here it is the current batch's mean at the step's position (or over all
steps), which is this workbench's choice, as is the undiscounted sum. No reference code run.
"""

from __future__ import annotations

import torch

from methods.advantage._steps import discounted_returns
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice
from workbench.registry import Reference, register


def position_means(values: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """(T,) the mean of ``values`` at each position over the rows valid there (0 if none)."""
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    total = torch.where(ok, values, zero).sum(dim=0)
    count = ok.sum(dim=0).to(values.dtype)
    return torch.where(count > 0, total / count.clamp(min=1), zero)


@register
class ProRLCentering(AdvantageMethod):
    name = "prorl_centering"
    hyperparameters = {
        "centering": Choice("position", ("position", "global", "none"),
                            help="subtract the batch mean reward at the step's position, over "
                                 "all steps, or nothing"),
        "baseline": Choice("position", ("position", "none"),
                           help="subtract the batch mean of the centred reward to go at the "
                                "step's position, or nothing"),
    }
    requires = frozenset({"rewards", "mask"})
    reference = Reference(
        "ProRL: stepwise reward centering and position-specific advantage estimation "
        "(catalogue-001 card #31)", 2026, "workbench literature catalogue (no code used)")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, **_):
        with torch.no_grad():
            ok = mask != 0
            dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
            zero = torch.zeros((), dtype=dtype, device=rewards.device)
            r = torch.where(ok, rewards.to(dtype), zero)
            if self.hp.centering == "position":
                centred = r - position_means(r, ok)[None, :]
            elif self.hp.centering == "global":
                steps = ok.sum()
                mean = r.sum() / steps.clamp(min=1).to(dtype)
                centred = r - mean
            else:
                centred = r
            centred = torch.where(ok, centred, zero)
            to_go = discounted_returns(centred, ok, 1.0)
            if self.hp.baseline == "position":
                to_go = to_go - position_means(to_go, ok)[None, :]
            advantages = torch.where(ok, to_go, zero)
            returns = torch.where(ok, discounted_returns(r, ok, 1.0), zero)
        return advantages, returns
