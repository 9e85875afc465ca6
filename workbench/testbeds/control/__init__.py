"""The control testbed: PPO or REINFORCE on batched classic-control environments.

``task`` (the registered tasks and their parameters), ``loop`` (the training loop), ``ppo``,
``reinforce``, ``rollout``, ``policy`` (its pieces) and ``envs`` (the environments).
"""
