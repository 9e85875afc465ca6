"""BiPACE: steps clustered by the actor's own hidden state, and action-conditioned peer
baselines within each cluster, added to GiGPO's episode advantage.

Rows are episodes of up to T steps; ``group_ids`` put the G episodes of one task instance in
one group; ``hidden_states`` hold the sampling policy's last hidden layer at each step's
observation and ``action_ids`` each step's action. With R_{i,t} = sum_{k >= t} gamma^(k - t)
r_{i,k} the discounted return from step t (as GiGPO's):

1. BiGPO clusters: within each group, the valid steps' embeddings e = h / |h| are clustered
   agglomeratively (``linkage``) on the cosine distance 1 - e . e', cut at distance ``tau``
   (a proxy for bisimulation: steps the actor represents alike share a cluster C, where
   GiGPO's exact anchor states would leave most of them alone).
2. PACE, ``estimator = q`` (the Q-style instance, Q(s, a) - V(s) without a critic):

       A^S_{i,t} = mean_{(j,k) in C, a_{j,k} = a_{i,t}} R_{j,k} - mean_{(j,k) in C} R_{j,k}

   ``estimator = v`` (a peer baseline that leaves out the step's own action):

       A^S_{i,t} = R_{i,t} - mean_{(j,k) in C, a_{j,k} != a_{i,t}} R_{j,k}

   and, where every step of C took a_{i,t}, R_{i,t} - mean_C(R) (GiGPO's step advantage over
   the cluster). A cluster of one step gives 0 either way.
3. A_{i,t} = A^E_i + ``step_weight`` * A^S_{i,t}, with A^E GiGPO's episode advantage (the
   score minus the group's mean over its steps; / std + ``epsilon`` under mean_std_norm).

Returns = advantages (as GiGPO). 0 at padding. Actions are equivalent when their ids are equal
(the reference's exact-string rule; here an action is one move or tool).

Reference: "Bisimulation-Guided Policy Optimization with Action Counterfactual Estimation"
(BiPACE, 2026), as the literature card summarises it (catalogue-001 #113): clustering of the
actor's last-layer hidden state by cosine distance with a threshold tau, PACE-Q and PACE-V
recentring of GiGPO-style returns within a cluster, combined with the episode advantage as in
GiGPO. Reconstructed: the linkage (average by default; the card names agglomerative
clustering without its linkage), PACE-V's fallback where no peer took another action,
gamma = 0.95 and the episode term from GiGPO's defaults, and tau = 0.02, this workbench's
choice: for an untrained policy (hidden 128) distinct observations lie at cosine distances
from about 0.018 (median about 0.03 on key-door), and one batch of 16 instances x 8 rollouts
gave (exact anchor states -> clusters, purity = the share of a cluster's steps in its most
common anchor state) key-door 194 -> 170 (purity 0.96) at tau 0.02 and 31 (0.39) at 0.05;
tool-calc 273 -> 273 at 0.02 and 194 (0.91) at 0.05. Identical observations share a cluster at
any tau > 0 (their distance is rounding error). The embedding is the policy
network's last tanh layer at the observation (the MLP has no token to pick).

Fidelity: reconstructed (no reference code read or run). tests/test_step_potential_methods.py
checks hand-worked values.
"""

from __future__ import annotations

import numpy as np
import torch

from methods.advantage._outcome import masked
from methods.advantage._steps import discounted_returns, episode_advantages
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


def clusters(embeddings: torch.Tensor, tau: float, linkage: str) -> np.ndarray:
    """(N,) a cluster label per row of ``embeddings`` (N, D): agglomerative clustering on the
    cosine distance, cut at ``tau``; a zero vector is its own cluster's only member unless
    another is zero too (distance 1 to every nonzero one)."""
    from scipy.cluster import hierarchy  # only when the method runs

    n = len(embeddings)
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    x = embeddings.detach().to(torch.float64).cpu()
    norm = x.norm(dim=1, keepdim=True)
    unit = torch.where(norm > 0, x / norm.clamp(min=1e-300), torch.zeros_like(x))
    distance = (1.0 - unit @ unit.T).clamp(min=0.0)
    both_zero = (norm == 0) & (norm == 0).T
    distance = torch.where(both_zero, torch.zeros_like(distance), distance)
    distance.fill_diagonal_(0.0)
    distance = ((distance + distance.T) / 2).numpy()
    rows, cols = np.triu_indices(n, k=1)
    tree = hierarchy.linkage(distance[rows, cols], method=linkage)
    return hierarchy.fcluster(tree, t=tau, criterion="distance").astype(np.int64)


@register
class BiPACE(AdvantageMethod):
    name = "bipace"
    hyperparameters = {
        "tau": Float(0.02, low=0.005, high=0.1, log=True, minimum=0.0, maximum=2.0,
                     help="cosine-distance threshold that cuts the clustering"),
        "linkage": Choice("average", ("average", "complete", "single"),
                          help="agglomerative linkage of the clustering"),
        "estimator": Choice("q", ("q", "v"),
                            help="PACE-Q (same-action mean minus cluster mean) or PACE-V "
                                 "(return minus the other actions' mean)"),
        "gamma": Float(0.95, minimum=0.0, maximum=1.0, help="discount of the step returns"),
        "step_weight": Float(1.0, low=0.1, high=2.0, minimum=0.0,
                             help="weight of the cluster advantage (GiGPO's omega)"),
        "mode": Choice("mean_norm", ("mean_norm", "mean_std_norm"),
                       help="episode advantage: subtract the group mean, or also divide by "
                            "its std"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the std (mean_std_norm)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "hidden_states", "action_ids"})
    reference = Reference(
        "Bisimulation-Guided Policy Optimization with Action Counterfactual Estimation "
        "(BiPACE)", 2026, "literature card catalogue-001 #113 (no code used)")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, hidden_states, action_ids, **_):
        with torch.no_grad():
            ok = (mask != 0).to(rewards.device)
            r = masked(rewards, mask)
            divide = self.hp.mode == "mean_std_norm"
            episode = episode_advantages(r.sum(dim=1), ok, group_ids, across_steps=True,
                                         divide=divide, epsilon=self.hp.epsilon)
            returns = discounted_returns(r, ok, self.hp.gamma)
            step = torch.zeros_like(returns)
            rows_of = group_ids.to(rewards.device)
            for group in torch.unique(rows_of).tolist():
                where = ok & (rows_of == group)[:, None]
                if not bool(where.any()):
                    continue
                step[where] = self._cluster_advantages(
                    returns[where], hidden_states[where], action_ids[where])
            advantages = (episode[:, None] + self.hp.step_weight * step) * ok
        return advantages, advantages.clone()

    def _cluster_advantages(self, g: torch.Tensor, h: torch.Tensor, a: torch.Tensor
                            ) -> torch.Tensor:
        """(N,) PACE over one group's N valid steps (returns ``g``, embeddings ``h``,
        actions ``a``)."""
        label = torch.as_tensor(clusters(h, self.hp.tau, self.hp.linkage), device=g.device)
        same_cluster = label[:, None] == label[None, :]
        same_action = a[:, None] == a[None, :]
        weights = same_cluster.to(g.dtype)
        cluster_mean = (weights @ g) / weights.sum(dim=1)
        if self.hp.estimator == "q":
            peers = (same_cluster & same_action).to(g.dtype)
            return (peers @ g) / peers.sum(dim=1) - cluster_mean
        others = (same_cluster & ~same_action).to(g.dtype)
        count = others.sum(dim=1)
        other_mean = (others @ g) / count.clamp(min=1)
        return torch.where(count > 0, g - other_mean, g - cluster_mean)
