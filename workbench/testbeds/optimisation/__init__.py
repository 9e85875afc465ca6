"""The optimisation testbed: supervised and convex problems trained by gradient descent.

One module per task (``logreg``, ``quadratic``, ``least_squares``, ``simplex``, ``mlp``), their
data (``datasets``) and the one training loop they share (``loop``).
"""
