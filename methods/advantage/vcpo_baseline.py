"""VCPO's minimum-variance off-policy baseline: sequence-level importance weights and the
closed-form baseline b = sum w^2 R / sum w^2, without a critic.

Sequences (``workbench.families.importance``): each row's steps cut after every ``dones``
step, so on an environment rollout a sequence i is an episode segment (the rollout's start and
end cut it too) and on a completion batch a row. With the behaviour (sampler) policy mu's
``old_log_probs`` and the learner pi's ``target_log_probs``:

    log w_i = clip(sum_{t in i} (target_log_probs_t - old_log_probs_t), -c, c)
    R_i     = sum_{t in i} r_t                           (the sequence's return)
    b_g     = sum_{i in g} w_i^2 R_i / sum_{i in g} w_i^2  (g: the batch, or a group)
    A_t     = w_i * (R_i - b_g)  at every step t of sequence i  (correction "weight")
    A_t     = R_i - b_g                                          (correction "none")

with c = ``log_weight_clip``,
and returns = advantages (as the outcome estimators, grpo). b_g is computed as a softmax of
2 log w_i over the group, so no w_i^2 is formed on its own. On-policy (w = 1) b_g is the
group's mean return and A_i = R_i - mean_g(R): the plain mean baseline (Dr. GRPO's / RLOO's
centring without the leave-one-out).

What is reconstructed, and how (the catalogue card says "[K?]", "check its repo"):

- the baseline. The variance-minimising constant baseline of the off-policy estimator
  sum_i w_i grad log pi(y_i) (R_i - b) is b* = sum_i w_i^2 ||grad log pi(y_i)||^2 R_i /
  sum_i w_i^2 ||grad log pi(y_i)||^2 (the classic optimal baseline, with the weights). The
  gradient-norm factor is dropped (the card's "cheap approximation"): an advantage method
  sees no per-sequence gradients, and computing them would take one backward pass per
  sequence; with it dropped b is exact when the norms are equal across the group. No option
  keeps it, for that reason.
- the sequences of an environment rollout: VCPO's sequences are LLM completions; here an
  episode segment plays that part (its return R_i undiscounted, a segment cut by the
  rollout's end counts the rewards it holds), so the baseline is shared across the episodes
  of the batch (``scope = "batch"``, the default here, since the control testbed gives no
  groups) or of a prompt's completions (``scope = "group"``, reading ``group_ids``; the
  sequences of a row share its group).
- the weights. w_i = pi(y_i) / mu(y_i) summed in log space and clipped to [-c, c] for
  numerics only (c = 20: the weight exp(20) = 4.9e8 is never reached in a sane run); the
  catalogue gives no truncation level, so the card's "clipped for numerics" is read that way.
- the correction. ``weight`` multiplies A by w_i (the off-policy REINFORCE estimator the
  baseline is derived for: the card's "w-corrected"). A loss that already applies the
  per-step ratio against the behaviour's log-probabilities (the control testbed's PPO, whose
  ``old_log_probs`` are the behaviour's under ``policy_lag``) then corrects twice;
  ``correction = "none"`` leaves the weighting to the loss and keeps only the baseline.

Reference: Huang, Zhang, Hu, Yang & Han, "VCPO" (2026; variance-controlled off-policy RL for
asynchronous LLM training), "a closed-form minimum-variance baseline for off-policy settings";
the optimal-baseline form follows Greensmith, Bartlett & Baxter, "Variance reduction
techniques for gradient estimates in reinforcement learning", JMLR 2004, with importance
weights. Its ESS-scaled learning rate is ``step_size/vcpo_lr``.

Fidelity: reconstructed. tests/test_method_vcpo.py checks hand-worked cases (two episodes in
one row, a group split, the clip), the on-policy reduction to the mean baseline and the
family contract.
"""

from __future__ import annotations

import torch

from workbench.families import AdvantageMethod
from workbench.families.importance import sequence_log_weights
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class VCPOBaseline(AdvantageMethod):
    name = "vcpo_baseline"
    hyperparameters = {
        "scope": Choice("batch", ("batch", "group"),
                        help="the sequences sharing a baseline: the whole batch, or each "
                             "group of group_ids (a prompt's completions)"),
        "correction": Choice("weight", ("weight", "none"),
                             help="'weight': A = w (R - b), the off-policy REINFORCE form; "
                                  "'none': A = R - b, for a loss that applies the ratio "
                                  "itself"),
        "log_weight_clip": Float(20.0, minimum=0.0,
                                 help="|log w| clipped to this, for numerics"),
    }
    requires = frozenset({"rewards", "dones", "old_log_probs", "target_log_probs"})
    reference = Reference(
        "Huang, Zhang, Hu, Yang & Han, VCPO: variance-controlled policy optimisation for "
        "asynchronous RL (minimum-variance off-policy baseline)", 2026,
        "paper's closed-form baseline; Greensmith, Bartlett & Baxter, JMLR 2004 (optimal "
        "baseline)",
    )
    fidelity = "reconstructed"

    @classmethod
    def requirements(cls, params):
        needs = set(cls.requires)
        if params["scope"] == "group":
            needs.add("group_ids")
        return frozenset(needs)

    def compute(self, *, rewards, dones, old_log_probs, target_log_probs, group_ids=None,
                **_):
        with torch.no_grad():
            log_w, ids = sequence_log_weights(old_log_probs.to(rewards.dtype),
                                              target_log_probs.to(rewards.dtype), dones)
            clip = self.hp.log_weight_clip
            log_w = log_w.clamp(-clip, clip)
            count = log_w.numel()
            returns = torch.zeros(count, dtype=rewards.dtype, device=rewards.device)
            returns.index_add_(0, ids.flatten(), rewards.flatten())
            if self.hp.scope == "group":
                rows = torch.arange(rewards.shape[0], device=rewards.device)
                row_of = torch.zeros(count, dtype=torch.long, device=rewards.device)
                row_of.scatter_(0, ids.flatten(), rows.repeat_interleave(rewards.shape[1]))
                _, group = torch.unique(group_ids.to(rewards.device).reshape(-1)[row_of],
                                        return_inverse=True)
            else:
                group = torch.zeros(count, dtype=torch.long, device=rewards.device)
            groups = int(group.max()) + 1
            doubled = 2.0 * log_w  # log w^2; a softmax over each group gives w^2 / sum w^2
            peak = torch.full((groups,), -torch.inf, dtype=log_w.dtype, device=log_w.device)
            peak = peak.scatter_reduce(0, group, doubled, "amax")
            share = torch.exp(doubled - peak[group])
            total = torch.zeros(groups, dtype=log_w.dtype, device=log_w.device)
            weighted = torch.zeros_like(total)
            total.index_add_(0, group, share)
            weighted.index_add_(0, group, share * returns)
            centred = returns - (weighted / total)[group]
            if self.hp.correction == "weight":
                centred = torch.exp(log_w) * centred
            advantages = centred[ids]
        return advantages, advantages.clone()
