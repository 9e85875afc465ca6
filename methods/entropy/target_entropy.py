"""Adaptive entropy control: a coefficient that tracks a target entropy (Skywork-OR1's AEC).

The controller holds a value c (``initial`` at the start of a run). The coefficient used at
update k is

    coef_k = c_k * [H_{k-1} < target]    (``gate``; the first update is not gated)

and after it, from the measured mean policy entropy H_k (nats) of that update's batch,

    c_{k+1} = clip(c_k + delta * sign, min_coef, max_coef),  sign = +1 if H_k < target else -1

so the coefficient grows while the entropy is below the target and shrinks (and the bonus is
switched off) while it is above. The coefficient of update k depends on the entropies of the
earlier updates only, as in the reference, where the controller is updated from each step's
entropy after that step's actor update. With ``gate = False`` the coefficient is c_k always.

Reference: He et al., "Skywork Open Reasoner 1 technical report" (2025), section "adaptive
entropy control"; implementation SkyworkAI/Skywork-OR1 ``verl/trainer/ppo/core_algos.py``
``EntController`` (``value``, ``entropy_loss_enabled``). Defaults are its training scripts':
target_entropy 0.2, delta_ent_coef 1e-4, entropy_coeff (initial) 0, min_ent_coef 0,
max_ent_coef 0.005. The target is in nats: for a control task with n actions the largest
entropy is ln n (0.69 for two, 1.10 for three).

Fidelity: reference-checked. tests/test_control_methods.py re-derives ``EntController``'s
update and the coefficient it realises (value * entropy_loss_enabled) and compares them
number for number over 40 updates of an entropy that crosses the target both ways.
"""

from __future__ import annotations

from workbench.families import EntropyMethod
from workbench.hyperparams import Bool, Float, HyperparameterError
from workbench.registry import Reference, register


@register
class TargetEntropy(EntropyMethod):
    name = "target_entropy"
    hyperparameters = {
        "target": Float(0.2, low=0.05, high=1.0, help="target mean policy entropy (nats)"),
        "delta": Float(1e-4, low=1e-5, high=1e-2, log=True, minimum=0.0,
                       help="change of the coefficient per update"),
        "initial": Float(0.0, minimum=0.0, help="coefficient at the first update"),
        "min_coef": Float(0.0, minimum=0.0, help="lower clip of the coefficient"),
        "max_coef": Float(0.005, minimum=0.0, help="upper clip of the coefficient"),
        "gate": Bool(True, help="apply the bonus only while the entropy is below the target "
                                "(the reference's entropy_loss_enabled)"),
    }
    reference = Reference(
        "He et al., Skywork Open Reasoner 1 technical report (adaptive entropy control)", 2025,
        "SkyworkAI/Skywork-OR1 verl/trainer/ppo/core_algos.py EntController",
    )
    fidelity = "reference-checked"

    @classmethod
    def resolve(cls, params):
        resolved = super().resolve(params)
        if resolved["min_coef"] > resolved["max_coef"]:
            raise HyperparameterError(
                f"{cls.key()}.min_coef: {resolved['min_coef']!r} is above max_coef "
                f"{resolved['max_coef']!r}; it must not be")
        return resolved

    def start(self, info):
        self._value = self.hp.initial
        self._enabled = True

    def coefficient(self, step, entropy):
        used = 0.0 if (self.hp.gate and not self._enabled) else self._value
        below = entropy < self.hp.target
        moved = self._value + (self.hp.delta if below else -self.hp.delta)
        self._value = min(max(moved, self.hp.min_coef), self.hp.max_coef)
        self._enabled = below
        return used

    def coefficient_bounds(self):
        low = 0.0 if self.hp.gate else min(self.hp.initial, self.hp.min_coef)
        return (low, max(self.hp.initial, self.hp.max_coef))
