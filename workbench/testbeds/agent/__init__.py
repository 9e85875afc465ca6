"""The agent testbed: procedurally generated multi-step tasks with a sparse terminal reward,
whose states recur across the rollouts of one task instance (so step-level advantage
estimators find anchor states), batched on torch tensors with exact save and restore.

``keydoor``: a gridworld where the agent fetches a key, passes the locked door in a wall and
reaches the goal; every generated instance is checked solvable by breadth-first search, which
also gives its optimal length.

``toolcalc``: a tool-use puzzle where the agent reaches a target number by calling the
instance's arithmetic tools, one per step; breadth-first search over the values checks every
instance solvable and gives its optimal length.

Both implement ``environment.AgentEnv``; the loop builds either through ``make_env``.
"""
