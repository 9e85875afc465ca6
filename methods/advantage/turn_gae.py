"""Turn-level GAE: generalized advantage estimation over the turns of a multi-turn episode,
with a turn-level value V(observation before the turn).

On (B episodes, T turns) inputs it is ``gae`` itself (the same formula, the same code, the
same numbers: tests/test_agent_lm.py checks it):

    delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - dones_t) * A_{t+1}

with t counting turns, not tokens. What makes it the turn-level estimator is the loop that
calls it: the language-model turn loop (``keydoor-lm``, ``toolcalc-lm``) gives one value per
turn, read by a linear value head at the prompt's last token, and spreads each turn's
advantage over that turn's action tokens; on the network loop (``keydoor``, ``toolcalc``) a
step is a turn and it equals ``gae``. It is registered under its own name so a sweep and its
report show the turn-level configuration as its own row; it declares the same inputs.

Reference: Schulman et al. (2016) for GAE; one value per turn (utterance) rather than per token
as in the hierarchical multi-turn critic of Zhou et al., "ArCHer: Training language model
agents via hierarchical multi-turn RL" (2024), whose high-level critic is trained by TD
instead. Fidelity: reconstructed (the turn-level configuration is not compared with a
reference implementation; the arithmetic is ``gae``'s, which is reference-checked).
"""

from __future__ import annotations

from workbench.registry import Reference, register

from .gae import GAE


@register
class TurnGAE(GAE):
    name = "turn_gae"
    reference = Reference(
        "Schulman et al., GAE (2016), over turns with a turn-level value (as the utterance-"
        "level critic of Zhou et al., ArCHer, 2024)", 2016,
        "vwxyzjn/cleanrl cleanrl/ppo.py (GAE); the turn-level value: this repository's "
        "workbench/testbeds/agent_lm/turns.py",
    )
    fidelity = "reconstructed"
