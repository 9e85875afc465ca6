"""The RLVR testbed: RL with verifiable rewards on a small language model (issue 8).

``task`` (the registered tasks and their parameters), ``loop`` (the training loop);
``problems`` generates seeded arithmetic and countdown problems with their exact answers and
worked solutions; ``checker`` verifies a model's completion and turns it into a reward;
``model``, ``tokenizer`` and ``warmup`` build the policy, ``backends`` sample from it
(``vllm_backend``: the vLLM engine); ``prompting`` puts a problem to a pretrained model (prompt
templates, the ``####`` answer rule, stop strings); ``mismatch`` compares the sampler's
log-probabilities with the trainer's (metrics, truncated importance sampling).
"""
