"""Step-level credit assignment against a Monte Carlo ground truth (``workbench credit``).

For a fixed policy checkpoint on an agent testbed (keydoor, toolcalc), it samples steps from
G rollouts of held-out instances, estimates each step's advantage Q(s, a) - V(s) with N
continuations from the restored state, and compares every listed advantage estimator's
advantage on those same steps with it: rank correlation, bias, variance and sign agreement,
with bootstrap intervals over instances, as functions of G and N. Modules: ``plan`` (the spec
and its check), ``checkpoint`` (the trained policy), ``sampling`` (one G), ``measures`` (the
statistics), ``outputs`` (figure, table, provenance), ``entry`` (``run``).
"""
