"""SAC-style automatic temperature: the entropy coefficient alpha = exp(log_alpha), with
log_alpha learned by Adam to drive the policy entropy towards a target.

At update k, with H_k the measured mean policy entropy (nats) of that update's batch, the
coefficient returned is the current alpha_k; then one Adam step on log_alpha follows the
gradient of the temperature loss, with E[log pi] = -H_k:

- ``loss = "alpha"`` (CleanRL sac_continuous_action.py, the default):
  L = -alpha * (log pi + target)  ->  dL/dlog_alpha = alpha_k * (H_k - target)
- ``loss = "log_alpha"`` (Stable-Baselines3 SAC, softlearning):
  L = -log_alpha * (log pi + target)  ->  dL/dlog_alpha = H_k - target

Adam (Kingma & Ba; torch.optim.Adam's arithmetic, on one scalar held here, no torch state):
m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, log_alpha -= (lr / (1 - b1^t)) * m /
(sqrt(v) / sqrt(1 - b2^t) + eps). Entropy below the target raises alpha, above lowers it. As in
both references, the coefficient of an update depends only on the entropies measured before
it. ``start(info)`` resets log_alpha = log(initial_alpha) and the moments.

Defaults: Adam betas (0.9, 0.999) and eps 1e-8 as both references. They start at alpha = 1
(log_alpha = 0) and step log_alpha with lr 1e-3 (CleanRL's q_lr) or 3e-4 (SB3) once per SAC
gradient step, about a million times a run, with alpha weighing log-probabilities against
Q-values in return units. Here alpha multiplies the entropy in a policy-gradient loss of
normalised advantages and moves once per update, a few hundred times a run, so the defaults
differ and say so: initial_alpha = 0.01 (CleanRL ppo.py's ent_coef, the usual scale of that
loss) and lr = 0.01 (log_alpha can move by about lr per update).

The target is in nats. CleanRL uses -dim(A) for continuous actions and 0.89 ln n for n
discrete actions (sac_atari.py's target_entropy_scale); the default 0.6169 is 0.89 ln 2 (a
two-action task such as CartPole; Acrobot's three actions give 0.9778, Pendulum's one
dimension -1).

Reference: Haarnoja et al., "Soft actor-critic algorithms and applications" (2018), section
"Automating entropy adjustment for maximum entropy RL".

Fidelity: reference-checked. tests/test_control_methods.py compares 30 updates, number for
number (1e-12), with CleanRL's and Stable-Baselines3's temperature losses minimised by
torch.optim.Adam through autograd, and two updates with a hand computation.
"""

from __future__ import annotations

import math

from workbench.families import EntropyMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class SACTemperature(EntropyMethod):
    name = "sac_temperature"
    hyperparameters = {
        "target": Float(0.6169, low=0.1, high=1.0, help="target mean policy entropy (nats)"),
        "lr": Float(0.01, low=1e-3, high=0.1, log=True, minimum=0.0,
                    help="Adam step size on log_alpha"),
        "initial_alpha": Float(0.01, minimum=1e-12,
                               help="alpha at the first update (the references: 1)"),
        "loss": Choice("alpha", ("alpha", "log_alpha"),
                       help="'alpha': CleanRL's -alpha (log pi + target); 'log_alpha': "
                            "Stable-Baselines3's -log_alpha (log pi + target)"),
        "beta1": Float(0.9, minimum=0.0, maximum=0.999999, help="Adam first-moment decay"),
        "beta2": Float(0.999, minimum=0.0, maximum=0.999999, help="Adam second-moment decay"),
        "eps": Float(1e-8, minimum=0.0, help="Adam epsilon"),
    }
    reference = Reference(
        "Haarnoja et al., Soft actor-critic algorithms and applications", 2018,
        "vwxyzjn/cleanrl cleanrl/sac_continuous_action.py (alpha_loss); DLR-RM/"
        "stable-baselines3 sac.py (ent_coef_loss)",
    )
    fidelity = "reference-checked"

    def start(self, info):
        self._log_alpha = math.log(self.hp.initial_alpha)
        self._moments = (0.0, 0.0)
        self._updates = 0

    def coefficient(self, step, entropy):
        alpha = math.exp(self._log_alpha)
        gap = entropy - self.hp.target
        grad = alpha * gap if self.hp.loss == "alpha" else gap
        first, second = self._moments
        first = self.hp.beta1 * first + (1.0 - self.hp.beta1) * grad
        second = self.hp.beta2 * second + (1.0 - self.hp.beta2) * grad * grad
        self._updates += 1
        correction1 = 1.0 - self.hp.beta1 ** self._updates
        correction2 = 1.0 - self.hp.beta2 ** self._updates
        denominator = math.sqrt(second) / math.sqrt(correction2) + self.hp.eps
        self._log_alpha -= (self.hp.lr / correction1) * first / denominator
        self._moments = (first, second)
        return alpha

    def coefficient_bounds(self):
        return (0.0, math.inf)
