"""Exponentially decaying entropy coefficient, from ``initial`` to ``final`` over a fraction of
the run.

With T = ``total_steps`` (updates in the run, from ``start(info)``), D = ``fraction`` * T and
k = 0, 1, ... the update index:

    coef_k = initial * (final / initial) ** min(k / D, 1)

that is coef_k = initial * rate**k with rate = (final / initial)**(1 / D) per update (a
half-life of D * ln 2 / ln(initial / final) updates) until k = D, then ``final``. Set by its
final value and the fraction of the run it spans (rather than a rate per update), one setting
means the same across run lengths, as in ``linear_decay``.

Reference: the exponential-decay schedule (``tf.keras.optimizers.schedules.ExponentialDecay``
with decay_rate = final / initial and decay_steps = D, not staircase) applied to the entropy
coefficient; defaults initial = 0.01, final = 1e-4 as ``linear_decay`` (rl_games' entropy
schedule defaults).

Fidelity: reconstructed (a schedule family, no single reference run to match); the values at
given steps are checked in tests/test_control_methods.py.
"""

from __future__ import annotations

from workbench.families import EntropyMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


@register
class ExpDecay(EntropyMethod):
    name = "exp_decay"
    hyperparameters = {
        "initial": Float(0.01, low=1e-3, high=0.1, log=True, minimum=1e-12,
                       help="coefficient at the first update"),
        "final": Float(1e-4, minimum=1e-12, help="coefficient from update fraction * total on"),
        "fraction": Float(1.0, minimum=1e-6, maximum=1.0,
                          help="fraction of the run's updates over which it decays"),
    }
    reference = Reference(
        "Exponential-decay schedule (tf.keras ExponentialDecay form) of the entropy coefficient",
        2015, "tf.keras.optimizers.schedules.ExponentialDecay")
    fidelity = "reconstructed"

    def start(self, info):
        self._span = self.hp.fraction * max(int(info["total_steps"]), 1)

    def coefficient(self, step, entropy):
        first, last = self.hp.initial, self.hp.final
        value = first * (last / first) ** min(step / self._span, 1.0)
        low, high = self.coefficient_bounds()
        return min(max(value, low), high)

    def coefficient_bounds(self):
        first, last = self.hp.initial, self.hp.final
        return (min(first, last), max(first, last))
