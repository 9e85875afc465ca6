"""REINFORCE++: token-level discounted returns, whitened over the batch.

    G_t = r_t + gamma * G_{t+1}      (per row, over valid tokens; G restarts after a padded one)
    A_t = (G_t - mean(G)) / sqrt(var(G) + 1e-8)

with mean and var taken over every valid token of the batch (verl's ``masked_whiten``: each
token counts once, var with the n/(n - 1) correction). ``rewards`` are the token-level rewards
as the loop builds them, a KL penalty to the reference already folded in where used
(r_t = score_t - beta * kl_t). Returns are G; both are 0 at padded positions.

verl resets the running return at every padded token, so rewards after a padding gap never
reach tokens before it; for right-padded rows this is the plain discounted sum. Options, verl's
defaults first:

- ``gamma``: discount (1 in verl's and OpenRLHF's RLVR recipes);
- ``std``: ``unbiased`` variance (verl) or ``biased`` (OpenRLHF, which also floors the
  variance at 1e-8 instead of adding 1e-8: a difference below 1e-8 relative);
- ``norm_by_std``: False only centres (OpenRLHF's ``no_std_norm``).

Reference: Hu, "REINFORCE++: a simple and efficient approach for aligning large language
models" (2025); implementation verl ``verl/trainer/ppo/core_algos.py``
(``compute_reinforce_plus_plus_outcome_advantage``), OpenRLHF ``experience_maker.py``
(``get_cumulative_returns`` and the batch normalisation) for the options. Reference-checked:
tests/test_rlvr_advantages.py compares it with a re-derivation of verl's function (token
rewards, a padding gap, gamma < 1).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import STD_HELP, masked, masked_whiten, valid
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma G_{t+1} at valid tokens, restarting after a padded one; 0 at padding."""
    m = valid(mask, rewards)
    r = masked(rewards, mask)
    returns = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in reversed(range(r.shape[1])):
        running = (r[:, t] + gamma * running) * m[:, t]
        returns[:, t] = running
    return returns


@register
class ReinforcePP(AdvantageMethod):
    name = "reinforce_pp"
    hyperparameters = {
        "gamma": Float(1.0, minimum=0.0, maximum=1.0, help="discount over tokens"),
        "std": Choice("unbiased", ("unbiased", "biased"), help=STD_HELP),
        "norm_by_std": Bool(True, help="divide by the batch std (False: only centre)"),
    }
    requires = frozenset({"rewards", "mask"})
    reference = Reference(
        "Hu, REINFORCE++: a simple and efficient approach for aligning LLMs", 2025,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_reinforce_plus_plus_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, **_):
        with torch.no_grad():
            returns = discounted_returns(rewards, mask, self.hp.gamma)
            advantages = masked_whiten(returns, mask, unbiased=self.hp.std == "unbiased",
                                       scale=self.hp.norm_by_std)
        return advantages, returns
