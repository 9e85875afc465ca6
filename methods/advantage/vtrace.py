"""V-trace (Espeholt et al. 2018, IMPALA): off-policy corrected value targets and
policy-gradient advantages for rollouts sampled by a behaviour policy mu while the learner's
policy is pi.

For each row (an environment) and step t, with the importance ratio pi(a_t|x_t) / mu(a_t|x_t)
= exp(target_log_probs_t - old_log_probs_t):

    rho_t   = min(rho_bar, pi / mu),    c_t = lambda * min(c_bar, pi / mu)
    delta_t = rho_t * (r_t + gamma * (1 - terminated_t) * next_values_t - values_t)
    v_t - V(x_t) = delta_t + gamma * c_t * (1 - dones_t) * (v_{t+1} - V(x_{t+1})),   zero past
                   the last step

that is v_s = V(x_s) + sum_{t >= s} gamma^(t - s) (prod_{i=s}^{t-1} c_i) delta_t within an
episode, the paper's eq. (1). The policy-gradient advantage is

    A_s = rho_s * (r_s + gamma * (1 - terminated_s) * v'_{s+1} - V(x_s))

where v'_{s+1} = v_{s+1} when the recursion carries on past s and next_values_s (the value of
the state reached, the bootstrap) where it is cut; the returns (the value target) are v_s.

Episode structure follows ``gae`` exactly (``_episodes.structure``): a terminated step
bootstraps from nothing, a truncated one from ``next_values`` (the final observation's value),
both cut the recursion, as does the rollout's last step, which bootstraps from
``next_values[:, T - 1]``; with a ``mask`` padded steps get 0 and never reach a valid one.
Consequently, with pi = mu (ratios 1) and rho_bar, c_bar >= 1, the returns are GAE(gamma,
lambda)'s returns (the lambda-return) for every lambda, and the advantages are GAE's at lambda
= 1; for lambda < 1 the advantage r_s + gamma v_{s+1} - V(x_s) bootstraps from the
lambda-return of the next state, not GAE(lambda)'s.

Reference: Espeholt, Soyer, Munos, Simonyan, Mnih, Ward, Doron, Firoiu, Harley, Dunning, Legg
& Kavukcuoglu, "IMPALA: Scalable distributed deep-RL with importance weighted actor-learner
architectures", ICML 2018, section 4 (defaults rho_bar = c_bar = 1; lambda = 1 is the paper's
plain V-trace, its remark 4's lambda multiplies c_t as rlax's ``vtrace`` does). DeepMind's
scalable_agent ``vtrace.py`` clips the policy-gradient ratio with its own threshold (default 1,
as rho_bar's); here the same rho_bar clips both. gamma defaults to 0.99 as ``gae``'s.

Fidelity: reconstructed. tests/test_method_vtrace.py checks a three-step case worked by hand,
the reduction to GAE with pi = mu, and the truncation of the ratios by rho_bar and c_bar.
"""

from __future__ import annotations

import torch

from workbench.families import AdvantageMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register

from ._episodes import structure, zero_where_not


@register
class VTrace(AdvantageMethod):
    name = "vtrace"
    hyperparameters = {
        "gamma": Float(0.99, minimum=0.0, maximum=1.0, help="discount factor"),
        "lam": Float(1.0, low=0.8, high=1.0, minimum=0.0, maximum=1.0,
                     help="lambda multiplying the trace coefficients c_t (1: the paper's)"),
        "rho_bar": Float(1.0, minimum=0.0,
                         help="truncation of the importance ratio in the TD errors and the "
                              "policy-gradient advantage (rho_bar)"),
        "c_bar": Float(1.0, minimum=0.0,
                       help="truncation of the importance ratio in the trace (c_bar)"),
    }
    requires = frozenset({"rewards", "values", "dones", "terminated", "next_values",
                          "old_log_probs", "target_log_probs"})
    reference = Reference(
        "Espeholt et al., IMPALA: Scalable distributed deep-RL with importance weighted "
        "actor-learner architectures (V-trace)", 2018,
        "google-deepmind/scalable_agent vtrace.py; google-deepmind/rlax vtrace (lambda)",
    )
    fidelity = "reconstructed"
    invariants = frozenset({"row_independent"})

    def compute(self, *, rewards, values, dones, terminated, next_values, old_log_probs,
                target_log_probs, mask=None, **_):
        flags = structure(rewards, dones, terminated, mask)
        ratio = torch.exp(zero_where_not(flags.valid, target_log_probs - old_log_probs))
        rho = ratio.clamp(max=self.hp.rho_bar)
        trace = self.hp.lam * ratio.clamp(max=self.hp.c_bar)
        gamma = self.hp.gamma
        bootstrap = zero_where_not(~flags.terminal, next_values)
        state_values = values[:, :-1]
        deltas = zero_where_not(flags.valid, rho * (rewards + gamma * bootstrap - state_values))
        carry = torch.zeros_like(rewards[:, 0])  # v_{t+1} - V(x_{t+1}) where t carries on
        corrections, advantages = [], []
        for t in reversed(range(rewards.shape[1])):
            later = zero_where_not(flags.continues[:, t], carry)
            target = rewards[:, t] + gamma * (bootstrap[:, t] + later)
            advantages.append(zero_where_not(flags.valid[:, t],
                                             rho[:, t] * (target - state_values[:, t])))
            carry = deltas[:, t] + gamma * trace[:, t] * later
            corrections.append(carry)
        correction = torch.stack(corrections[::-1], dim=1)
        returns = zero_where_not(flags.valid, correction + state_values)
        return torch.stack(advantages[::-1], dim=1), returns
