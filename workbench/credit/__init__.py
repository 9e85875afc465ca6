"""Step-level credit assignment against a Monte Carlo ground truth (``workbench credit``).

For a fixed policy checkpoint on an agent testbed (keydoor, toolcalc), it samples steps from
G rows of each held-out instance, estimates each step's advantage Q(s, a) - V(s) with N
continuations from the restored state, and compares every listed advantage estimator's
advantage on those same steps with it: rank correlation, bias, variance and sign agreement,
with bootstrap intervals over instances, as functions of G and N. Each estimator is measured
on the rows of the sampler it trains with: its reference's trees (Tree-GRPO's for
``tree_grpo``, SPO-tree's for ``spo_tree``), G independent rollouts for the others; one
that reads ``mc_values`` (SPO-chain) gets them as
the training loop gives them (``episodes.mc_values_of``). Modules: ``plan`` (the spec and its
check, each estimator's sampler), ``checkpoint`` (the trained policy), ``sampling`` (one G,
one sampler), ``measures`` (the statistics), ``outputs`` (figure, table, provenance),
``entry`` (``run``); ``gradient`` (with ``gradient_batches``: the bias of each estimator's
policy gradient against the exact one, by dynamic programming, and its turn-count bias).
"""
