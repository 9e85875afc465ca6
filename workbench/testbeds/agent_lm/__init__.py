"""The agent tasks played by a small language model in turns (``keydoor-lm``, ``toolcalc-lm``).

It composes two testbeds and sits above them in the import layers (pyproject.toml): the agent
testbed's environments (``workbench.testbeds.agent``) and the RLVR testbed's model, tokenizer,
rollout backend, token-level log-probabilities and warm-up machinery
(``workbench.testbeds.rlvr``). Neither of those imports it.

``turns``: the turn loop (each turn: the observation text in, a generated action out, parsed
by the environment) and its clipped token-level update with turn-level advantages;
``warmup``: the cached supervised warm-up on noisy optimal demonstrations; ``task``: the tasks.
"""
