"""SPO-chain: segment advantages from Monte Carlo values at low-probability cut points.

A row is one episode of L valid steps with the sampling probabilities p_t = exp(old log-prob)
of its actions. With V(s_t) the Monte Carlo value of the state step t starts from (``mc_values``
column t: the mean return of ``continuations`` rollouts from the restored state):

- cut points: the steps c = t - 1 for every t with p_t < ``threshold`` (the state just before
  a low-probability action; c = -1 is the episode's start), then every ``interval``-th of them
  (the first, the (interval + 1)-th, ...);
- each cut point c has the value V(s_{c+1}); the last step L - 1 has the episode's score (its
  rewards summed);
- in step order, each of these positions gets its value minus the previous one's (the start's
  value when c = -1 was cut, else the first position gets 0);
- every other step takes the advantage of the next such position (its segment's);
- ``probability_mask``: steps with p_t > ``threshold`` get 0 (the reference's only mode);
- a row with no cut point gets 0 everywhere.

Returns = advantages (a critic-free estimator). Only the cut points' states are estimated
(``value_request``), so the loop plays ``continuations`` rollouts from each.

Reference: Guo et al., "Segment Policy Optimization: Improved Credit Assignment in
Reinforcement Learning for LLMs" (2025), arXiv:2505.23564; implementation AIFrameResearch/SPO
``math_episode_generator_with_mc_advantages.py`` (``_create_value_estimation_requests``: cut
points at probability < 0.9, shifted by one, every ``cutpoint_interval``-th;
``_compute_token_advantages``: values, differences, backward fill, the > 0.9 mask). Here a step
is an action of the agent loop instead of a token. Reference-checked:
tests/test_spo_chain.py compares it with numbers from that code run on the same probabilities,
scores and values.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import masked
from workbench.families import AdvantageMethod, ValueRequest
from workbench.hyperparams import Bool, Float, Int
from workbench.registry import Reference, register


def cut_points(ok: torch.Tensor, probs: torch.Tensor, threshold: float, interval: int
               ) -> torch.Tensor:
    """(B, T + 1) bool: column c + 1 for each selected cut point c (column 0: the start)."""
    low = ok & (probs < threshold)
    rank = torch.cumsum(low.long(), dim=1) - 1  # 0 for a row's first low-probability step
    chosen = low & (rank % interval == 0)
    points = torch.zeros(ok.shape[0], ok.shape[1] + 1, dtype=torch.bool, device=ok.device)
    points[:, :-1] = chosen  # the step t's low probability cuts before it: the state s_t
    return points


@register
class SPOChain(AdvantageMethod):
    name = "spo_chain"
    hyperparameters = {
        "threshold": Float(0.9, minimum=0.0, maximum=1.0,
                           help="a step whose sampling probability is below it cuts a segment"),
        "interval": Int(5, low=1, high=10, minimum=1,
                        help="keep every interval-th cut point (the reference's default 5)"),
        "continuations": Int(4, minimum=1, maximum=1024,
                             help="rollouts from each cut point's state for its value"),
        "probability_mask": Bool(True, help="advantages only at steps with probability at "
                                            "most the threshold (the reference's mode)"),
    }
    requires = frozenset({"rewards", "mask", "old_log_probs", "mc_values"})
    reference = Reference(
        "Guo et al., Segment Policy Optimization (SPO-chain)", 2025,
        "github.com/AIFrameResearch/SPO math_episode_generator_with_mc_advantages.py "
        "_compute_token_advantages",
    )
    fidelity = "reference-checked"

    def value_request(self, *, mask, old_log_probs):
        ok = mask != 0
        points = cut_points(ok, old_log_probs.exp(), self.hp.threshold, self.hp.interval)
        return ValueRequest(points, int(self.hp.continuations))

    def compute(self, *, rewards, mask, old_log_probs, mc_values, **_):
        with torch.no_grad():
            ok = (mask != 0).to(rewards.device)
            probs = old_log_probs.exp()
            points = cut_points(ok, probs, self.hp.threshold, self.hp.interval)
            score = masked(rewards, mask).sum(dim=1)
            lengths = ok.sum(dim=1)
            advantages = torch.zeros_like(rewards, dtype=torch.float64)
            for row in range(rewards.shape[0]):
                advantages[row] = self._row(points[row], mc_values[row].double(),
                                            float(score[row]), int(lengths[row]),
                                            rewards.shape[1])
            if self.hp.probability_mask:
                advantages = torch.where(probs > self.hp.threshold,
                                         torch.zeros_like(advantages), advantages)
            advantages = (advantages * ok).to(rewards.dtype)
        return advantages, advantages.clone()

    @staticmethod
    def _row(points: torch.Tensor, values: torch.Tensor, score: float, length: int,
             steps: int) -> torch.Tensor:
        """One row's advantages over its ``steps`` columns (see the module docstring)."""
        out = torch.zeros(steps, dtype=torch.float64)
        columns = points.nonzero().flatten().tolist()
        if length == 0 or not columns:
            return out
        base = float(values[0]) if columns[0] == 0 else None
        # (step, value): cut point c = column - 1 >= 0 holds V(s_{c+1}); the last step the score
        marks = [(c - 1, float(values[c])) for c in columns if c > 0]
        marks.append((length - 1, score))
        start = 0
        for step, value in marks:
            gain = 0.0 if base is None else value - base
            out[start:step + 1] = gain
            base, start = value, step + 1
        return out
