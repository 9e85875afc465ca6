"""What the RL testbeds share: the PPO-clip loss with its aggregation modes and KL estimators
(``losses``), the batch-shape rule for the batch_size slot (``batch_shape``) and how each
fills the advantage family's batch (``advantage_batch``)."""
