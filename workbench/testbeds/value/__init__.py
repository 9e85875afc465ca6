"""The value-based testbed: DQN with a replay buffer on the control testbed's batched
environments.

``task`` (the registered task ``dqn-cartpole`` and its parameters), ``loop`` (the training loop)
and ``dqn`` (its pieces: the Q-network, the replay buffer, the TD target and loss, the
exploration schedule, the target-network update).
"""
