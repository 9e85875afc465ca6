"""RL with verifiable rewards on a small language model (issue 8).

``problems`` generates seeded arithmetic and countdown problems with their exact answers and
worked solutions; ``checker`` verifies a model's completion and turns it into a reward.
"""
