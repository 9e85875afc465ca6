"""Linearly decaying entropy coefficient.

With T = ``total_steps`` (updates in the run, from ``start(info)``), D = ``fraction`` * T and
k = 0, 1, ... the update index:

    coef_k = final + (initial - final) * max(0, 1 - k / D)

so coef_0 = ``initial``, and coef_k = ``final`` from k = D on.

Reference: the form of rl_games' ``LinearScheduler`` with ``apply_to_entropy`` (defaults
start_entropy_coef = 0.01, min_entropy_coef = 1e-4: the defaults of initial and final; its
``max_steps`` is D), and of CleanRL's learning-rate annealing (frac = 1 - k / T) applied to
the entropy coefficient.

Fidelity: reconstructed. The formula is checked at given steps in
tests/test_control_methods.py, but rl_games updates its coefficient after every minibatch
from an epoch counter that starts at 1, so a run of it would not match this per-update
schedule number for number.
"""

from __future__ import annotations

from workbench.families import EntropyMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


@register
class LinearDecay(EntropyMethod):
    name = "linear_decay"
    hyperparameters = {
        "initial": Float(0.01, low=1e-3, high=0.1, log=True, minimum=0.0,
                       help="coefficient at the first update"),
        "final": Float(1e-4, minimum=0.0, help="coefficient from update fraction * total on"),
        "fraction": Float(1.0, minimum=1e-6, maximum=1.0,
                          help="fraction of the run's updates over which it decays"),
    }
    reference = Reference(
        "Makoviichuk & Makoviychuk, rl-games: a high-performance framework for reinforcement "
        "learning (linear entropy schedule)", 2021,
        "Denys88/rl_games rl_games/common/schedulers.py LinearScheduler (apply_to_entropy)")
    fidelity = "reconstructed"

    def start(self, info):
        self._span = self.hp.fraction * max(int(info["total_steps"]), 1)

    def coefficient(self, step, entropy):
        first, last = self.hp.initial, self.hp.final
        return last + (first - last) * max(0.0, 1.0 - step / self._span)

    def coefficient_bounds(self):
        first, last = self.hp.initial, self.hp.final
        return (min(first, last), max(first, last))
