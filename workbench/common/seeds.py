"""Named random streams: every random draw of a run comes from one stream per purpose.

A run's ``seed`` and a purpose name give a ``numpy.random.SeedSequence``::

    stream(seed, purpose, *keys) = SeedSequence(seed, spawn_key=(PURPOSES[purpose], *keys))

which is exactly child ``PURPOSES[purpose]`` of ``SeedSequence(seed).spawn(...)``; a per-step
stream (``keys = (step,)``) is in turn child ``step`` of the purpose's stream. SeedSequence
hashes the seed and the whole spawn key into the generator's state, so streams of different
seeds, purposes or steps are independent (no ``seed + 1`` of one run is another run's stream)
and none of them is the plain ``SeedSequence(seed)`` a library seeded with the bare seed uses.

Stability: each purpose has a fixed position in ``PURPOSES``. New purposes are appended with
the next unused position; a position is never renumbered or reused, so adding a purpose
changes no existing stream (``tests/test_seeds.py`` pins the positions).

Helpers turn a stream into what a library takes: ``numpy_generator`` (PCG64),
``torch_generator`` (a ``torch.Generator`` on a device) and ``int_seed`` (63 bits, for
libraries that take an integer: ``torch.manual_seed`` inside ``fork_rng`` where a library
draws from the global RNG, Python's ``random.Random``, an environment's ``reset(seed=...)``).
"""

from __future__ import annotations

import numpy as np
import torch

# purpose -> spawn position. Append only: never renumber, reuse or remove a position.
PURPOSES: dict[str, int] = {
    "global": 0,  # torch's global RNG, seeded by the runner for any library draw from it
    "data": 1,  # a drawn data set or problem, a train/validation split
    "init": 2,  # initial weights or iterate
    "batches": 3,  # the order of minibatches over a data set
    "env": 4,  # environment reset states
    "actions": 5,  # actions sampled by a control policy
    "minibatches": 6,  # the order of rows within an RL update's epochs
    "prompts": 7,  # the prompts drawn for each RL step
    "rollouts": 8,  # sampled completions, keyed by (step, draw)
    "eval": 9,  # sampled evaluation (pass@k)
    "baselines": 10,  # greedy baseline rollouts, keyed by step
    "branches": 11,  # the nodes a tree sampler expands and the leaves it keeps, keyed by step
    "demonstrations": 12,  # a noisy expert's random actions (a warm-up's demonstrations)
    "replay": 13,  # the transitions drawn from a replay buffer for each update
}

_INT_SEED_MASK = (1 << 63) - 1


def stream(seed: int, purpose: str, *keys: int) -> np.random.SeedSequence:
    """The run's stream for ``purpose`` (child ``keys`` of it for per-step streams)."""
    if seed < 0 or any(key < 0 for key in keys):
        raise ValueError(f"seed and keys must be non-negative, got {seed} and {keys}")
    try:
        position = PURPOSES[purpose]
    except KeyError:
        raise ValueError(f"unknown seed purpose {purpose!r}; known: {sorted(PURPOSES)} "
                         "(add a new one to workbench.common.seeds.PURPOSES)") from None
    return np.random.SeedSequence(int(seed), spawn_key=(position, *map(int, keys)))


def int_seed(seed: int, purpose: str, *keys: int) -> int:
    """A 63-bit integer drawn from the stream, for libraries that take an integer seed."""
    state = stream(seed, purpose, *keys).generate_state(1, np.uint64)
    return int(state[0]) & _INT_SEED_MASK


def numpy_generator(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A NumPy generator (PCG64) on the stream."""
    return np.random.Generator(np.random.PCG64(stream(seed, purpose, *keys)))


def torch_generator(seed: int, purpose: str, *keys: int,
                    device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from the stream (no global state touched)."""
    return torch.Generator(device=device).manual_seed(int_seed(seed, purpose, *keys))
