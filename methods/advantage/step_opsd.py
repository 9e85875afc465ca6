"""StepOPSD-style step shaping: the GRPO advantage of each episode's outcome, scaled at each
step by a clipped, normalised log-probability gap (sign-preserving).

Rows are episodes of up to T steps with one action each; ``group_ids`` put an instance's G
episodes in one group. With A_i the GRPO advantage of row i's score (its rewards summed; verl's
conventions), K_i its valid steps and c_{i,k} a per-step credit (below):

    c^_{i,k} = K_i c_{i,k} / sum_k' |c_{i,k'}|                ``budget = l1`` (default), or
    c^_{i,k} = (c_{i,k} - mean_k c_{i,.}) / std_k c_{i,.}      ``budget = zscore`` (population std)
    A_{i,k}  = A_i * (1 + lambda_mix * clip(sign(A_i) c^_{i,k}, -alpha_clip, alpha_clip))

so A_{i,k} keeps the sign of A_i while lambda_mix * alpha_clip < 1 (the search range of
lambda_mix stops at 0.9 with alpha_clip 1): in a row above its group the steps with positive
credit get more of the advantage, in a row below it less of the blame. A row whose gaps are
all (numerically) zero, mean |c| below 1e-6 (the policy and the reference agree to float
precision, as at the first update), keeps A_i at every step. Returns = advantages.

The credit: StepOPSD rescores each step's tokens under a hindsight-enriched teacher context
(the same model shown what happened later) and takes c_k = mean_{t in k} log pi(y_t | hindsight
ctx) - log pi(y_t | ctx). The agent testbed's small policy has no context to enrich; the
closest signal its inputs give is the gap between the policy that sampled the batch and the
frozen reference policy (the policy as training began), one action per step:

    c_{i,k} = old_log_probs_{i,k} - ref_log_probs_{i,k}

the policy's log-ratio to its reference, which for KL-regularised RL is proportional to the
optimal advantage of the action (catalogue-001 card #29; PRIME's implicit process reward,
``implicit_prm``, uses the same ratio). So the "teacher" here is what training has learnt so
far, not hindsight: a step the policy has come to prefer counts as a good step. This is a
substitution, not StepOPSD's signal; like ``implicit_prm`` it can reinforce whatever the policy
already moved towards. ``teacher = reference`` reverses the gap, c = ref_log_probs -
old_log_probs (the frozen reference plays the teacher): a step the policy has moved away from
counts as good, a pull back towards the reference rather than a hindsight judgement.

Because the budget normalises each row's gaps to a total of K whatever their size, even a
small drift of the policy from its reference becomes a full-size modulation whose direction is
tied to the drift: with ``teacher = policy`` it reinforces the drift, with ``reference`` it
resists it. Measured on key-door (``workbench run keydoor advantage=step_opsd --steps 40``,
the task's defaults, seeds 0 and 1, CPU): train/success 0.04 and 0.04 with entropy 0.64 and
0.20 (collapse) for ``policy``, 0.24 and 0.20 with entropy 1.38 (the policy held near uniform,
ln 4 = 1.39) for ``reference``, against GRPO's 0.60 and 0.65 (entropy 1.20, 1.12); lambda_mix =
0 reproduces GRPO's run exactly. The substitution does not carry StepOPSD's hindsight signal.

Reference: StepOPSD, "step-level post-rollout preference self-distillation" (2026), as described
in the workbench literature catalogue (catalogue-001, card #7; formula reconstructed there,
[R]): the normalised per-step credit budget and the two knobs alpha_clip and lambda_mix.
Reconstructed: lambda_mix = 0.5 and alpha_clip = 1 are this workbench's defaults (the paper's
values are task-dependent and not in the card), the credit is the substitution above; no
reference code was run. tests/test_redistribution_methods.py checks numbers worked by hand.
"""

from __future__ import annotations

import torch

from methods.advantage.grpo import GRPO
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register

# a row whose mean |gap| is below this has no gap (the policy is still its reference)
NO_GAP = 1e-6


def normalised_credit(credit: torch.Tensor, ok: torch.Tensor, budget: str) -> torch.Tensor:
    """(B, T) c^: the credit scaled per row over its valid steps (0 at padding and in rows
    with no gap)."""
    zero = torch.zeros((), dtype=credit.dtype, device=credit.device)
    c = torch.where(ok, credit, zero)
    steps = ok.sum(dim=1, keepdim=True).to(credit.dtype)
    size = c.abs().sum(dim=1, keepdim=True)
    some = size > NO_GAP * steps
    if budget == "l1":
        scaled = steps * c / torch.where(some, size, torch.ones_like(size))
    else:
        mean = c.sum(dim=1, keepdim=True) / steps.clamp(min=1)
        spread = torch.where(ok, (c - mean) ** 2, zero).sum(dim=1, keepdim=True)
        std = torch.sqrt(spread / steps.clamp(min=1))
        some = some & (std > 0)
        scaled = (c - mean) / torch.where(std > 0, std, torch.ones_like(std))
    return torch.where(ok & some, scaled, zero)


@register
class StepOPSD(AdvantageMethod):
    name = "step_opsd"
    hyperparameters = {
        "lambda_mix": Float(0.5, low=0.1, high=0.9, minimum=0.0,
                            help="global mixing weight of the shaping"),
        "alpha_clip": Float(1.0, minimum=0.0,
                            help="clip of the signed, normalised step credit (a local trust "
                                 "region: the sign of A_i holds while lambda_mix * alpha_clip "
                                 "< 1)"),
        "teacher": Choice("policy", ("policy", "reference"),
                          help="whose log-probability plays the hindsight teacher's: the "
                               "sampling policy's against the reference's, or the reverse"),
        "budget": Choice("l1", ("l1", "zscore"),
                         help="normalise a row's credits to K / sum|c| or to a z-score"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the group std (verl 1e-6)"),
        "norm_by_std": Bool(True, help="divide by the group std (False: Dr. GRPO's centring)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "old_log_probs", "ref_log_probs"})
    reference = Reference(
        "StepOPSD: step-level post-rollout preference self-distillation (StepOPSD-style "
        "reconstruction, catalogue-001 card #7)", 2026,
        "workbench literature catalogue (no code used)")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, old_log_probs, ref_log_probs, **_):
        with torch.no_grad():
            ok = mask != 0
            dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
            zero = torch.zeros((), dtype=dtype, device=rewards.device)
            scores = torch.where(ok, rewards.to(dtype), zero).sum(dim=1)
            grpo = GRPO(epsilon=self.hp.epsilon, norm_by_std=self.hp.norm_by_std)
            episode = grpo.compute(rewards=scores[:, None],
                                   mask=torch.ones_like(scores[:, None]),
                                   group_ids=group_ids)[0][:, 0]
            gap = old_log_probs.to(dtype) - ref_log_probs.to(dtype)
            if self.hp.teacher == "reference":
                gap = -gap
            scaled = normalised_credit(gap, ok, self.hp.budget)
            alpha = self.hp.alpha_clip
            signed = (torch.sign(episode)[:, None] * scaled).clamp(-alpha, alpha)
            shaped = episode[:, None] * (1.0 + self.hp.lambda_mix * signed)
            advantages = torch.where(ok, shaped, zero)
        return advantages, advantages.clone()
