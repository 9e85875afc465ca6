"""A batch of b samples laid out as rows x columns (environments x rollout steps, prompts x
completions per prompt): the batch-size slot gives b, the task says which factor changes."""

from __future__ import annotations


def reshape_batch(samples: int, rows: int, columns: int, change: str) -> tuple[int, int]:
    """(rows, columns) with rows * columns close to ``samples`` (at least one of each),
    changing only ``change`` ("rows" or "columns") and keeping the other as given."""
    samples = max(1, int(samples))
    if change == "rows":
        return max(1, round(samples / columns)), columns
    return rows, max(1, round(samples / rows))
