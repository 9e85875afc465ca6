"""The stale sampler of ``staleness`` = k: rollouts drawn by the policy of k updates before, as
an asynchronous actor's would be (the RLVR loop's counterpart of the control testbed's
``LaggedPolicy``).

The rollout backend is built on ``sampler``, a frozen copy of the policy (``task``); after each
update ``advance`` records the policy's parameters and loads into the copy those of k updates
before (the initial ones during the first k updates), so the rollout of update u (counted from
0) is sampled by the policy after update max(0, u - k). The loss's PPO ratio stays against the
learner's log-probabilities before the update (``old``), and the sampler's own log-probabilities
(the backend's, ``mismatch``) give the truncated importance weights min(exp(log pi_old - log
mu), tis_cap) with ``tis_cap``: the decoupled correction of an asynchronous actor's stale data
(Yao et al. 2025 for the weights; Espeholt et al. 2018, IMPALA, for the actor-learner lag).

Held-out evaluation measures the learner, not the sampler (``learner``). The snapshots are kept
on the policy's device: k + 1 copies of its parameters besides the sampler's.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator

import torch


class StalePolicy:
    """``sampler`` holding ``policy``'s parameters of ``staleness`` updates before."""

    def __init__(self, policy: torch.nn.Module, sampler: torch.nn.Module, staleness: int):
        if staleness < 1:
            raise ValueError(f"staleness must be at least 1 for a stale sampler, got {staleness}")
        if sampler is None or sampler is policy:
            raise ValueError("staleness needs a sampler, a copy of the policy that the rollout "
                             "backend samples from (not the policy itself)")
        self.policy, self.sampler = policy, sampler
        self.snapshots: deque[dict[str, torch.Tensor]] = deque([self._snapshot()],
                                                               maxlen=staleness + 1)
        self.sampler.load_state_dict(self.snapshots[0])

    def _snapshot(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def advance(self) -> torch.nn.Module:
        """After an update: record the policy's parameters; the sampler with those of
        ``staleness`` updates ago (the oldest kept)."""
        self.snapshots.append(self._snapshot())
        self.sampler.load_state_dict(self.snapshots[0])
        return self.sampler

    @contextlib.contextmanager
    def learner(self, backend) -> Iterator[None]:
        """The backend samples from the current policy inside, from the stale one after."""
        self.sampler.load_state_dict(self.policy.state_dict())
        backend.sync_weights(self.sampler)
        try:
            yield
        finally:
            self.sampler.load_state_dict(self.snapshots[0])
            backend.sync_weights(self.sampler)
