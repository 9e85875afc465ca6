"""No entropy bonus: the coefficient is 0 at every update (the loss gets no entropy term).

Reference: Williams (1992) REINFORCE and Schulman et al. (2017) PPO as specified, without an
entropy term (CleanRL ppo.py with ``ent_coef = 0``). Fidelity: reference-checked, trivially:
tests/test_control_methods.py checks the coefficient is exactly 0 at every step.
"""

from __future__ import annotations

from workbench.families import EntropyMethod
from workbench.registry import Reference, register


@register
class NoEntropy(EntropyMethod):
    name = "none"
    reference = Reference("Schulman et al., Proximal policy optimization algorithms", 2017,
                          "vwxyzjn/cleanrl cleanrl/ppo.py with ent_coef = 0")
    fidelity = "reference-checked"

    def coefficient(self, step, entropy):
        return 0.0

    def coefficient_bounds(self):
        return (0.0, 0.0)
