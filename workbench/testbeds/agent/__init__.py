"""The agent testbed: procedurally generated multi-step tasks with a sparse terminal reward,
whose states recur across the rollouts of one task instance (so step-level advantage
estimators find anchor states), batched on torch tensors with exact save and restore.

``keydoor``: a gridworld where the agent fetches a key, passes the locked door in a wall and
reaches the goal; every generated instance is checked solvable by breadth-first search, which
also gives its optimal length.
"""
