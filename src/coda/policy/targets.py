"""n-step chunk returns and potential-based shaping for the chunk critic.

For a chunk of h actions taken from s_t (fewer if the episode ends first, k = min(h, T - t)):

    R_t     = sum_{i<k} gamma^i r_{t+i}
    target  = R_t + gamma^k (1 - done) V(s_{t+k})  +  w * (gamma^k (1 - done) Phi(s_{t+k}) - Phi(s_t))

Convention: Phi(terminal) = 0. Callers pass the raw potential of every state, the terminal one included;
the `(1 - done)` factor zeroes it. With that convention the shaped return of an episode equals the unshaped
one minus Phi(s_0), so the learned values satisfy Q_shaped(s, a) = Q(s, a) - w Phi(s) and
V_shaped(s) = V(s) - w Phi(s), and the greedy policy is unchanged (Ng et al., 1999). A time-limit
truncation is not terminal: it bootstraps from V and Phi of the last state. The shaping term is
`coda.shaping.math.discounted_shaping`, the formula the invariance tests prove.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from coda.shaping.math import discounted_shaping


def nstep_chunks(
    rewards: np.ndarray, terminated: bool, h: int, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Chunk transitions of one episode with T steps (T+1 observations).

    Args:
        rewards: (T,) per-step rewards r_t for the action taken at s_t.
        terminated: the episode ended in a terminal state (not a time limit).
        h: chunk length.
        gamma: per-step discount.
    Returns:
        reward_sum (T,), discount gamma^k (T,), done (T,) bool, next_index t+k (T,) int64 into the T+1 states.
    """
    t_len = len(rewards)
    r = np.asarray(rewards, dtype=np.float64)
    steps = np.minimum(h, t_len - np.arange(t_len))
    disc_pows = gamma ** np.arange(h, dtype=np.float64)
    reward_sum = np.array([float(np.dot(disc_pows[:k], r[t : t + k])) for t, k in enumerate(steps)])
    next_index = np.arange(t_len) + steps
    done = np.logical_and(terminated, next_index == t_len)
    return reward_sum.astype(np.float32), (gamma**steps).astype(np.float32), done, next_index.astype(np.int64)


def chunk_targets(
    reward_sum: Tensor,
    discount: Tensor,
    done: Tensor,
    v_next: Tensor,
    phi: Tensor | None = None,
    phi_next: Tensor | None = None,
) -> Tensor:
    """Q targets (B,) for chunk transitions; shaping is added when potentials are given.

    `phi` and `phi_next` come already scaled by the shaping weight w (`ChunkDataset` scales the potentials
    it loads), so w is applied in one place.
    """
    target = reward_sum + discount * (1.0 - done.float()) * v_next
    if phi is not None and phi_next is not None:
        target = target + discounted_shaping(phi, phi_next, discount, done)
    return target


def expectile_loss(diff: Tensor, tau: float) -> Tensor:
    """Mean asymmetric squared error |tau - 1(diff < 0)| diff^2 (diff = target - prediction)."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def awr_weights(advantage: Tensor, beta: float, max_weight: float) -> tuple[Tensor, dict[str, float]]:
    """Advantage-weighted regression weights of a batch (no gradient) and what they look like.

    The advantages are normalised over the batch (zero mean, unit std), so `beta` is a temperature in units
    of the batch's spread whatever the reward scale; w = exp(A_norm / beta), divided by its batch mean (an
    average sample keeps weight 1, the BC loss keeps its scale), then clipped to `max_weight`.

    Returns:
        weights (B,) and {"awr_clip_frac": share of samples at the clip, "awr_ess": effective sample size
        (sum w)^2 / (B sum w^2) in (0, 1], 1 = uniform, "adv_std": the raw advantages' spread}.
    """
    a = advantage.detach()
    std = a.std(correction=0) if a.numel() > 1 else a.new_zeros(())
    a_n = (a - a.mean()) / (std + 1e-6)
    w = torch.exp(a_n / beta)
    w = w / w.mean()
    clipped = w >= max_weight
    w = w.clamp(max=max_weight)
    ess = float(w.sum() ** 2 / (len(w) * (w * w).sum()))
    return w, {"awr_clip_frac": float(clipped.float().mean()), "awr_ess": ess, "adv_std": float(std)}
