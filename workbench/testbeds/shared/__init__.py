"""What both RL testbeds share: the PPO-clip loss with its aggregation modes and KL estimators
(``losses``) and the batch-shape rule for the batch_size slot (``batch_shape``)."""
