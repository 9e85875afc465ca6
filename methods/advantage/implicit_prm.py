"""Implicit process rewards (PRIME-style): each step's log-ratio of the policy to a frozen
reference as its process reward, combined with the outcome by RLOO on each source.

For row i of a group of n rows, with L_i valid steps, sampling log-probabilities
``old_log_probs`` and reference log-probabilities ``ref_log_probs`` (the policy as training
began, frozen):

    s_{i,t} = log pi(a_t | s_t) - log pi_ref(a_t | s_t)          (the implicit reward)
    p_{i,t} = beta * s_{i,t}                                      (``norm = none``)
            = s_{i,t} / (max over the batch's valid (i, t) of |sum_{k >= t} s_{i,k}| + 1e-6)
                                                                  (``norm = batch_norm``)

each source then gets the leave-one-out baseline of its group (PRIME's RLOO: m_i is the mean
of row i's values over the positions that carry them):

    p~_{i,t} = p_{i,t} n / (n - 1) - (1 / (n - 1)) sum_j m^p_j,    m^p_i = mean_t p_{i,t}
    o~_i     = o_i n / (n - 1) - (1 / (n - 1)) sum_j o_j,           o_i = row i's score

(a group of one keeps its values), o~_i placed at the row's last valid step; the step reward
R_{i,t} = ``process_coef`` p~_{i,t} + ``outcome_coef`` o~_i [t = L_i - 1], the return
G_{i,t} = sum_{k >= t} R_{i,k} over valid steps, and the advantages are G whitened over every
valid step of the batch (``whiten``: minus the mean, over the standard deviation, as verl's
``masked_whiten``) or G itself. Returns = G. With pi = pi_ref (the first update) the process
term is 0 and this is RLOO on the outcome, whitened.

Reference: Cui et al., "Process Reinforcement through Implicit Rewards" (PRIME, 2025),
arXiv:2502.01456, after Yuan et al., "Free Process Rewards without Process Labels" (2024),
arXiv:2412.01981 (the implicit PRM: r_t = beta log pi_phi / pi_ref); implementation verl
``recipe/prime``: ``prime_core_algos.compute_rloo_advantage_return`` (RLOO per source, sum,
reverse cumulative sum, ``masked_whiten``), ``prime_dp_rm.prime_norm`` (the ``batch_norm``
normaliser), ``config/prime_trainer.yaml`` (beta_train 0.05, reward_dpo_coef 5, reward_gt_coef
5, prime_norm batch_norm). Differences: the implicit PRM pi_phi is here the sampling policy
itself (``old_log_probs``), not a separate reward model trained online with a cross-entropy
loss on the outcomes; a step is an agent action (a turn), not a token; groups are
``group_ids`` of any size, not consecutive blocks of n. Under ``batch_norm`` beta cancels out.

Fidelity: reconstructed (formulas read from the reference code; not run against it).
tests/test_step_advantages.py checks hand-worked values.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups, masked, masked_whiten, sequence_scores
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register


def leave_one_out(values: torch.Tensor, carries: torch.Tensor, groups: Groups) -> torch.Tensor:
    """PRIME's masked RLOO: values at the positions ``carries`` marks, times n / (n - 1), minus
    the sum over the group of each row's mean over its marked positions, over n - 1 (a group of
    one: unchanged); 0 elsewhere."""
    counts = carries.sum(dim=1).to(values.dtype)
    means = masked(values, carries).sum(dim=1) / counts.clamp(min=1)
    size = groups.row_size().to(values.dtype)
    baseline = groups.sum(means)[groups.index] / (size - 1).clamp(min=1)
    scaled = values * (size / (size - 1).clamp(min=1))[:, None] - baseline[:, None]
    scaled = torch.where(groups.singleton()[:, None], values, scaled)
    return torch.where(carries, scaled, torch.zeros_like(scaled))


@register
class ImplicitPRM(AdvantageMethod):
    name = "implicit_prm"
    hyperparameters = {
        "beta": Float(0.05, low=0.01, high=0.5, log=True, minimum=0.0,
                      help="the implicit reward's scale (norm = none; PRIME's beta_train)"),
        "norm": Choice("batch_norm", ("batch_norm", "none"),
                       help="divide the log-ratios by the batch's largest |reverse cumulative "
                            "sum| (PRIME's prime_norm) or scale them by beta"),
        "process_coef": Float(5.0, low=0.5, high=10.0, log=True, minimum=0.0,
                              help="weight of the process rewards (reward_dpo_coef)"),
        "outcome_coef": Float(5.0, low=0.5, high=10.0, log=True, minimum=0.0,
                              help="weight of the outcome (reward_gt_coef)"),
        "whiten": Bool(True, help="whiten the returns over the batch's valid steps"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "old_log_probs", "ref_log_probs"})
    reference = Reference(
        "Cui et al., Process Reinforcement through Implicit Rewards (PRIME)", 2025,
        "github.com/volcengine/verl recipe/prime/prime_core_algos.py "
        "compute_rloo_advantage_return")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, old_log_probs, ref_log_probs, **_):
        with torch.no_grad():
            ok = mask != 0
            dtype = rewards.dtype
            ratio = masked(old_log_probs.to(dtype) - ref_log_probs.to(dtype), ok)
            if self.hp.norm == "batch_norm":
                to_go = ratio.flip(1).cumsum(1).flip(1)
                largest = masked(to_go, ok).abs().max() if bool(ok.any()) else ratio.new_zeros(())
                process = ratio / (largest + 1e-6)
            else:
                process = self.hp.beta * ratio
            groups = Groups(group_ids, rewards.device)
            lengths = ok.sum(dim=1)
            last = torch.zeros_like(ok)
            rows = torch.arange(len(lengths), device=ok.device)
            last[rows, (lengths - 1).clamp(min=0)] = lengths > 0
            scores = sequence_scores(rewards, mask)
            outcome = leave_one_out(scores[:, None] * last, last, groups)
            step = (self.hp.process_coef * leave_one_out(process, ok, groups)
                    + self.hp.outcome_coef * outcome)
            returns = masked(step, ok).flip(1).cumsum(1).flip(1)
            returns = masked(returns, ok)
            advantages = masked_whiten(returns, mask) if self.hp.whiten else returns.clone()
        return advantages, returns
