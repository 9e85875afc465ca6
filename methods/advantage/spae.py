"""SPAE: step potential advantage estimation, GRPO's outcome advantage reweighted after the
step potential saturates, plus a shaping term on the potential's change at each step.

Rows are episodes of L valid steps; ``group_ids`` put the G rollouts of one task instance in
one group. The reference probes a reasoning trace at every step boundary for the chance that
the answer is right (correctness, Acc) and for how sure the model is (confidence, Conf), and
combines them into a step potential Phi. Boundary t is the state after step t (t = 0 .. L - 1;
the last one ends the episode). Here (the agent testbed's honest analogue of the probe):

    Acc_t  = V̂(s_{t+1}), the Monte Carlo chance of success from the state after step t
             (``mc_values`` column t + 1, ``continuations`` rollouts of the sampling policy,
             as ``pav``); after the last step the outcome itself, the row's score clipped to
             [0, 1] (1 on reaching the goal, 0 otherwise)
    Conf_t = exp(-H_{t+1}), H_{t+1} = ``policy_entropy`` at the state after step t, the
             sampling policy's entropy there before its next action is drawn (``confidence =
             entropy``, the reference's exp(-entropy) of its probe answers, here of the next
             action); 1 after the last step (the outcome is settled)

``confidence = action_prob`` uses exp(old_log_probs[t + 1]) instead, the probability of the
action actually taken next, a one-sample estimate of exp(-H_2) (E[pi(a|s)] = sum_a pi(a|s)^2,
the exponentiated Rényi-2 entropy). It makes step t + 1's own probability part of its
advantage (through Phi_t): with the probe potential and Acc < 2/3 the shaping then rewards
each step in proportion to its own probability, and on the tool-use puzzle (30 updates,
seeds 0-2, default settings otherwise) the policy collapsed (rollout entropy 0.01-0.02,
train/success 0.07-0.24), where ``entropy`` confidence gave 0.52-0.59 (rollout entropy about
0.93) and accuracy alone 0.48-0.64. The potential (``potential``):

    probe     Phi_t = 1.5 Acc_t Conf_t + 0.5 Acc_t - Conf_t       (in [-1, 1]; the released
                                                                  probe example's formula)
    product   Phi_t = Acc_t Conf_t                                (in [0, 1])
    accuracy  Phi_t = Acc_t                                       (no confidence)

With A_i the GRPO advantage of row i (group mean, divided by the std plus ``epsilon`` under
``norm_by_std``), the change Delta_t = Phi_t - Phi_{t-1} of step t and saturation S_t = 1 when
Phi_j >= ``kappa`` at some boundary j < t (the step starts after the potential first reached
kappa):

    A_{i,t} = A_i * rho_t - lambda * S_t + xi * g(Delta_t)
    rho_t   = ``rho`` where S_t, else 1                  (outcome credit down-weighted)
    g(d)    = ``gain_weight`` * max(d, 0) + ``drop_weight`` * min(d, 0)

Delta_0 (``first_delta``): 0 as the reference's probe, whose first boundary is after the first
step (``zero``), or Phi_0 - Phi(s_0) with the start state's potential (``start``: Acc =
``mc_values`` column 0, Conf from step 0's state; one more state continued per row).
Returns = advantages (as GRPO). 0 at padding.

Reference: Wu et al., "Step Potential Advantage Estimation: Harnessing Intermediate Confidence
and Correctness for Efficient Mathematical Reasoning" (SPAE, 2026); github.com/cii030/SPAE-RL:
its README gives the advantage's form, A_i^Group * f(Phi) + xi * g(Delta Phi), an outcome
credit "downweighted after potential saturation" and a potential-difference shaping;
``inference/probe_mechanism_example.py`` gives the potential 1.5 Acc Conf + 0.5 Acc - Conf,
Delta 0 at the first boundary and 0.9 as the potential marking a reached solution (here
``kappa``'s default). Reconstructed: f and g (their training recipe was not read): f a step
down-weight rho after saturation with an optional -lambda, g piecewise linear with separate
weights for gains and drops; the defaults xi = 1, gain = drop = 1 (plain potential-based
shaping), rho = 0.5, lambda = 0 are this workbench's. Substitutions: Monte Carlo continuations
for the probe's answer likelihood, the policy's entropy over its next action for the probe
answers' token entropies, a step = one move or tool call.

Fidelity: reconstructed (no reference code run). tests/test_step_potential_methods.py checks
hand-worked values.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import masked
from methods.advantage.grpo import GRPO
from workbench.families import AdvantageMethod, ValueRequest
from workbench.hyperparams import Bool, Choice, Float, Int
from workbench.registry import Reference, register


def potential(acc: torch.Tensor, conf: torch.Tensor, rule: str) -> torch.Tensor:
    """Phi from correctness ``acc`` and confidence ``conf`` (each in [0, 1])."""
    if rule == "probe":
        return 1.5 * acc * conf + 0.5 * acc - conf
    if rule == "product":
        return acc * conf
    return acc


@register
class SPAE(AdvantageMethod):
    name = "spae"
    hyperparameters = {
        "potential": Choice("probe", ("probe", "product", "accuracy"),
                            help="Phi: the reference probe's 1.5 Acc Conf + 0.5 Acc - Conf, "
                                 "Acc * Conf, or Acc alone"),
        "confidence": Choice("entropy", ("entropy", "action_prob"),
                             help="Conf: exp(-entropy) of the policy at the state, or the "
                                  "probability of the action taken there"),
        "xi": Float(1.0, low=0.1, high=4.0, log=True, minimum=0.0,
                    help="weight of the potential-difference shaping"),
        "gain_weight": Float(1.0, minimum=0.0, help="g's weight on potential gains"),
        "drop_weight": Float(1.0, minimum=0.0, help="g's weight on potential drops"),
        "kappa": Float(0.9, minimum=-1.0, maximum=1.0,
                       help="saturation threshold on Phi (the probe example's 0.9)"),
        "rho": Float(0.5, minimum=0.0, maximum=1.0,
                     help="outcome-advantage weight of steps after saturation"),
        "penalty": Float(0.0, minimum=0.0, help="lambda subtracted at steps after saturation"),
        "first_delta": Choice("zero", ("zero", "start"),
                              help="Delta of the first step: 0 (the reference) or against the "
                                   "start state's potential"),
        "continuations": Int(4, minimum=1, maximum=1024,
                             help="rollouts from each boundary's state for its Acc"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the group std (verl 1e-6)"),
        "norm_by_std": Bool(True, help="GRPO's division by the group std"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "mc_values", "old_log_probs",
                          "policy_entropy"})
    reference = Reference(
        "Wu et al., Step Potential Advantage Estimation: Harnessing Intermediate Confidence "
        "and Correctness for Efficient Mathematical Reasoning (SPAE)", 2026,
        "github.com/cii030/SPAE-RL (README, inference/probe_mechanism_example.py; no code "
        "run)")
    fidelity = "reconstructed"

    @classmethod
    def requirements(cls, params):
        needs = {"rewards", "mask", "group_ids", "mc_values"}
        if params.get("potential", "probe") != "accuracy":
            needs.add("policy_entropy" if params.get("confidence", "entropy") == "entropy"
                      else "old_log_probs")
        return frozenset(needs)

    def value_request(self, *, mask, old_log_probs):
        points = torch.zeros(mask.shape[0], mask.shape[1] + 1, dtype=torch.bool,
                             device=mask.device)
        points[:, 1:-1] = mask[:, 1:] != 0  # the state after each step but the last
        if self.hp.first_delta == "start":
            points[:, 0] = mask[:, 0] != 0
        return ValueRequest(points, int(self.hp.continuations))

    def compute(self, *, rewards, mask, group_ids, mc_values, old_log_probs=None,
                policy_entropy=None, **_):
        with torch.no_grad():
            grpo = GRPO(epsilon=self.hp.epsilon, norm_by_std=self.hp.norm_by_std)
            outcome, _ = grpo.compute(rewards=rewards, mask=mask, group_ids=group_ids)
            ok = (mask != 0).to(outcome.device)
            dtype = outcome.dtype
            values = mc_values.to(dtype).clamp(0.0, 1.0)
            score = masked(rewards, ok).sum(dim=1).to(dtype).clamp(0.0, 1.0)
            nxt = torch.zeros_like(ok)
            nxt[:, :-1] = ok[:, 1:]  # step t + 1 is played: boundary t is not the last
            acc = torch.where(nxt, values[:, 1:], score[:, None].expand_as(outcome))
            conf = torch.ones_like(acc)
            first_conf = torch.ones_like(acc[:, 0])
            if self.hp.potential != "accuracy":
                log_conf = (-policy_entropy if self.hp.confidence == "entropy"
                            else old_log_probs)
                log_conf = masked(log_conf.to(dtype), ok)
                conf[:, :-1] = torch.where(ok[:, 1:], log_conf[:, 1:].exp(), conf[:, :-1])
                first_conf = log_conf[:, 0].exp()
            phi = torch.where(ok, potential(acc, conf, self.hp.potential),
                              torch.zeros_like(acc))
            before = torch.empty_like(phi)
            before[:, 1:] = phi[:, :-1]
            if self.hp.first_delta == "start":
                before[:, 0] = potential(values[:, 0], first_conf, self.hp.potential)
            else:
                before[:, 0] = phi[:, 0]
            delta = phi - before
            shaping = (self.hp.gain_weight * delta.clamp(min=0.0)
                       + self.hp.drop_weight * delta.clamp(max=0.0))
            reached = (phi >= self.hp.kappa) & ok
            saturated = torch.zeros_like(ok)
            saturated[:, 1:] = reached[:, :-1].int().cummax(dim=1).values.bool()
            weight = torch.where(saturated, torch.full_like(phi, self.hp.rho),
                                 torch.ones_like(phi))
            advantages = (outcome * weight - self.hp.penalty * saturated.to(dtype)
                          + self.hp.xi * shaping)
            advantages = torch.where(ok, advantages, torch.zeros_like(advantages))
        return advantages, advantages.clone()
