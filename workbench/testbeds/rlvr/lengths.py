"""Response length split by correctness: what Dr. GRPO's length bias shows up in.

GRPO averages each response's token terms over its own length, 1/|o_i| (``loss_agg``
``seq-mean-token-mean``), so a wrong response (negative advantage) is penalised less per token
the longer it is, and wrong responses grow over training; Dr. GRPO removes that normaliser (and
the std division of the advantage). The split lengths make the drift visible:

    length_correct   = mean_{i : c_i}     |o_i|
    length_incorrect = mean_{i : not c_i} |o_i|

over the completions i of a step (or of an evaluation), |o_i| its response tokens (the
end-of-sequence token included, as ``response_length``) and c_i whether the checker verified its
answer. A name whose subset is empty is left out (no NaN), so always
n_correct * length_correct + n_incorrect * length_incorrect = n * response_length.

Reference: Liu et al., "Understanding R1-Zero-like training: a critical perspective" (2025),
the analysis of GRPO's biases (output length of correct and incorrect responses over training).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def lengths_by_correctness(lengths: torch.Tensor | Sequence[float],
                           correct: torch.Tensor | Sequence[bool],
                           prefix: str) -> dict[str, float]:
    """``{prefix}/response_length_correct`` and ``..._incorrect``: the mean of ``lengths`` (B,)
    over the rows where ``correct`` (B,) is true, and over the others; each only when its
    subset is not empty."""
    lengths = torch.as_tensor(lengths, dtype=torch.float64).flatten()
    correct = torch.as_tensor(correct, dtype=torch.bool, device=lengths.device).flatten()
    if lengths.shape != correct.shape:
        raise ValueError(f"lengths and correct must have one entry per completion, got "
                         f"{tuple(lengths.shape)} and {tuple(correct.shape)}")
    out = {}
    for name, rows in (("correct", correct), ("incorrect", ~correct)):
        if rows.any():
            out[f"{prefix}/response_length_{name}"] = float(lengths[rows].mean())
    return out
