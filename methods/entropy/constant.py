"""Constant entropy bonus: the coefficient is ``coef`` at every update, the loss gets
``- coef * entropy``.

Reference: Mnih et al., "Asynchronous methods for deep reinforcement learning" (2016, A3C's
entropy regularisation) and Schulman et al. (2017, PPO's c2 * S term); default coef = 0.01 as in
CleanRL ppo.py (``ent_coef``) and rl_games. Fidelity: reference-checked, trivially:
tests/test_control_methods.py checks the coefficient is exactly ``coef`` at every step.
"""

from __future__ import annotations

from workbench.families import EntropyMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


@register
class ConstantEntropy(EntropyMethod):
    name = "constant"
    hyperparameters = {
        "coef": Float(0.01, low=1e-4, high=0.1, log=True, minimum=0.0,
                      help="entropy coefficient"),
    }
    reference = Reference("Mnih et al., Asynchronous methods for deep reinforcement learning",
                          2016, "vwxyzjn/cleanrl cleanrl/ppo.py (ent_coef)")
    fidelity = "reference-checked"

    def coefficient(self, step, entropy):
        return self.hp.coef

    def coefficient_bounds(self):
        return (self.hp.coef, self.hp.coef)
