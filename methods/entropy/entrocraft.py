"""Entrocraft: reject the samples whose predicted entropy change pulls the entropy off a
scheduled curve (no entropy bonus; the coefficient is 0).

Schedule, linear over the run's T updates, in multiples of H_init (the first update's measured
mean entropy), s = ``start_ratio``, e = ``end_ratio``:

    H*(t) = H_init * (s - (s - e) * min(t / T, 1)).

At update t with measured entropy H_t the wanted change is gap = H*(t + 1) - H_t. On each
minibatch, over its n valid tokens with log-probabilities l and advantages A (means over the
valid tokens: l_bar, A_bar), each unit u (a response with ``level="sequence"``, a token with
``level="token"``) has the covariance score

    c_u = sum_{tokens k of u} (l_k - l_bar) (A_k - A_bar) / n

and the kept set K has the predicted entropy change dH(K) = -eta * sum_{u in K} c_u (the
first-order entropy dynamics of a policy-gradient step, dH ~ -eta Cov(log pi, A)). With every
unit kept, dH is compared with the gap:

- gap > dH (entropy would fall too far): units with c_u > 0 (positive advantage on likely
  tokens, negative on unlikely ones) are rejected, largest c_u first;
- gap < dH (entropy would stay too high): units with c_u < 0 are rejected, most negative first;

each rejection moves dH by eta * c_u; rejection stops at the first unit that brings dH to or
past the gap, when the candidates run out, or at floor(max_reject * units). A rejected unit
gets ``loss_mask`` 0 (the policy-gradient term is aggregated over the kept tokens). Before any
``coefficient`` call (no measured entropy) H_t and H_init are the minibatch's mean entropy.

Metrics: ``entrocraft_reject_frac`` (rejected units / units), ``entrocraft_target`` (H*(t+1)),
``entrocraft_gap`` and ``entrocraft_predicted_change`` (dH of the kept set).

Reference: Li, Wang, Ding, Lochab, Grama & Zhang, "Addressing performance saturation for LLM
RL via precise entropy curve control" (Entrocraft), arXiv 2604.26326, 2026: rejection
sampling that biases the advantage distribution toward a user-set entropy schedule, no
regularisation term, any advantage estimator; linear annealing from a high start to a
slightly lower end is its best schedule. The rejection rule above is the reconstruction of
the workbench literature catalogue-001 section 2.3 (#9, "Implementable rule [R]"), on the
entropy dynamics of Cui et al. 2025 (dH ~ -eta Cov(log pi, A)); no reference code was
available. Departures: the paper rejects trajectories when sampling; here the entropy
family's hook rejects them per minibatch after the advantages are computed (they are not
recomputed on the kept set), and eta is a fixed calibration knob, not fitted to observed
entropy changes.

Fidelity: reconstructed (catalogue-001 section 2.3 #9); tests/test_entrocraft.py checks the
schedule and the rejected units against hand-derived numbers.
"""

from __future__ import annotations

import math

import torch

from workbench.families import EntropyMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class Entrocraft(EntropyMethod):
    name = "entrocraft"
    hyperparameters = {
        "start_ratio": Float(1.0, minimum=0.0, help="H*(0) as a multiple of the first entropy"),
        "end_ratio": Float(0.9, low=0.5, high=1.0, minimum=0.0,
                     help="H*(T) as a multiple of the first entropy"),
        "eta": Float(1.0, low=0.01, high=100.0, log=True, minimum=0.0,
                     help="dH = -eta * sum of the kept covariance scores"),
        "max_reject": Float(0.5, low=0.1, high=0.9, minimum=0.0, maximum=0.9,
                            help="largest fraction of units rejected per minibatch"),
        "level": Choice("sequence", ("sequence", "token"),
                        help="reject whole responses or single tokens"),
    }
    reference = Reference(
        "Li, Wang, Ding, Lochab, Grama & Zhang, Addressing performance saturation for LLM RL "
        "via precise entropy curve control (Entrocraft)", 2026)
    fidelity = "reconstructed"

    _total, _step = 1, 0
    _measured: float | None = None
    _initial: float | None = None

    def start(self, info):
        self._total = max(1, int(info["total_steps"]))
        self._step, self._measured, self._initial = 0, None, None

    def coefficient(self, step, entropy):
        self._step, self._measured = step, float(entropy)
        if self._initial is None:
            self._initial = float(entropy)
        return 0.0

    def coefficient_bounds(self):
        return (0.0, 0.0)

    def target(self, t: int, initial: float) -> float:
        """H*(t)."""
        return initial * (self.hp.start_ratio - (self.hp.start_ratio - self.hp.end_ratio)
                          * min(t / self._total, 1.0))

    def policy_loss_hook(self, *, log_probs, advantages, mask, entropy, **_):
        with torch.no_grad():
            valid = mask != 0
            n = int(valid.sum())
            own = float(entropy[valid].mean()) if n else 0.0
            measured = own if self._measured is None else self._measured
            goal = self.target(self._step + 1, own if self._initial is None else self._initial)
            gap = goal - measured
            scores = _scores(log_probs.detach(), advantages.detach(), valid, self.hp.level)
            units = valid.any(1) if self.hp.level == "sequence" else valid
            rejected, change = _reject(scores, units, gap, self.hp.eta,
                                       math.floor(self.hp.max_reject * int(units.sum())))
            keep = ~rejected[:, None] if self.hp.level == "sequence" else ~rejected
        return {
            "loss_mask": keep.expand_as(mask).to(mask.dtype),
            "metrics": {"entrocraft_reject_frac": float(rejected.sum()) / max(
                            int(units.sum()), 1),
                        "entrocraft_target": goal, "entrocraft_gap": gap,
                        "entrocraft_predicted_change": change},
        }


def _scores(log_probs, advantages, valid, level: str) -> torch.Tensor:
    """c_u: (B,) per response or (B, T) per token; 0 outside the valid tokens."""
    n = int(valid.sum())
    if n == 0:
        scores = torch.zeros_like(log_probs)
    else:
        zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
        dl = torch.where(valid, log_probs - log_probs[valid].mean(), zero)
        da = torch.where(valid, advantages - advantages[valid].mean(), zero)
        scores = dl * da / n
    return scores.sum(1) if level == "sequence" else scores


def _reject(scores, units, gap: float, eta: float, most: int) -> tuple[torch.Tensor, float]:
    """Which units to reject (a bool tensor shaped like ``scores``) and dH of the kept set."""
    flat, usable = scores.reshape(-1), units.reshape(-1)
    change = -eta * float(flat[usable].sum())
    rejected = torch.zeros_like(usable)
    lower = gap > change  # the entropy would fall too far: reject entropy-lowering units
    candidates = usable & ((flat > 0) if lower else (flat < 0))
    positions = candidates.nonzero().squeeze(1)
    if most <= 0 or len(positions) == 0 or gap == change:
        return rejected.view(scores.shape), change
    order = torch.sort(flat[positions], descending=lower, stable=True).indices
    positions = positions[order][:most]
    moved = change + eta * torch.cumsum(flat[positions], 0)
    reached = (moved >= gap) if lower else (moved <= gap)
    count = int(reached.nonzero()[0]) + 1 if bool(reached.any()) else len(positions)
    rejected[positions[:count]] = True
    return rejected.view(scores.shape), float(moved[count - 1])
