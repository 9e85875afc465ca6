"""Policy-gradient building blocks shared by the RL tasks: policies, rollouts, losses, loops."""
