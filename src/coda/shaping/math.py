"""Potential-based reward shaping, per step and per action chunk.

Shaping adds `F(s, s') = γ Φ(s') − Φ(s)` to each reward (Ng, Harada & Russell, 1999). Because the terms
telescope, the shaped return of any trajectory is the unshaped one plus `γ^T Φ(s_T) − Φ(s_0)`, and the
optimal policy is unchanged: `Q'(s, a) = Q(s, a) − Φ(s)`.

Terminal convention: **Φ(terminal) = 0.** When an episode *terminates* (success, failure, or any absorbing
state), the potential of the final state is taken as 0, whatever the potential function would say about
it. This is what keeps the optimal policy invariant in episodic tasks: an absorbing state contributes no
future value, so a non-zero potential there would pay a one-off bonus for *where* the episode ended and
could change which ending is optimal. When an episode is *truncated* by a time limit the final state is
not absorbing, so its potential is kept (the value of the remaining future is bootstrapped instead).

Potentials must be finite. All functions use only arithmetic on their inputs, so they accept Python floats, NumPy arrays and PyTorch
tensors alike (potentials may be batched; `terminal` may then be a 0/1 or boolean array of the same shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from coda.errors import CodaError

X = TypeVar("X")

#: The potential of a terminal (absorbing) state, by convention.
TERMINAL_PHI = 0.0


class ShapingError(CodaError, ValueError):
    """Shaping inputs are inconsistent (lengths, discount, chunk length); the message names the value."""


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ShapingError(f"discount gamma = {gamma!r} must be in [0, 1]")


def _end_phi(phi_next: Any, terminal: Any) -> Any:
    """Φ of the next state with the terminal convention applied (works for scalars and arrays)."""
    if isinstance(terminal, bool):
        if not terminal:
            return phi_next
        # Keep exact types (Fraction, tensors) exact; plain numbers get the constant.
        return TERMINAL_PHI if isinstance(phi_next, (float, int)) else phi_next * 0
    # Batched: a mask of terminals; multiply so that tensors and arrays keep their type.
    return phi_next * (1 - (terminal * 1))


def discounted_shaping(phi_s: X, phi_next: X, discount: Any, terminal: Any = False) -> X:
    """The one shaping formula: `discount · Φ(s') − Φ(s)`, with Φ(s') = 0 when s' is terminal.

    `discount` is γ for one step and γ^k for a chunk of k steps (a batch may hold a different k per sample);
    `shaping_term`, `chunk_shaping` and the chunk critic's targets (`coda.policy.targets.chunk_targets`) all
    compute shaping through this function.
    """
    return discount * _end_phi(phi_next, terminal) - phi_s  # type: ignore[no-any-return]


def shaping_term(phi_s: X, phi_next: X, gamma: float, terminal: Any = False) -> X:
    """Per-step shaping `F = γ Φ(s') − Φ(s)`, with Φ(s') = 0 when s' is terminal.

    Args:
        phi_s: Φ(s) of the state the step starts from (scalar or batch).
        phi_next: Φ(s') of the state the step ends in.
        gamma: discount in [0, 1].
        terminal: whether s' is terminal (bool, or a 0/1 mask matching the batch).

    Returns:
        The shaping term, same type as the inputs.

    Raises:
        ShapingError: gamma outside [0, 1].
    """
    _check_gamma(gamma)
    return discounted_shaping(phi_s, phi_next, gamma, terminal)


def chunk_shaping(phi_t: X, phi_th: X, gamma: float, h: int, terminal: Any = False) -> X:
    """Shaping for an action chunk of h steps: `γ^h Φ(s_{t+h}) − Φ(s_t)`.

    This equals `Σ_{i<h} γ^i F(s_{t+i}, s_{t+i+1})` exactly (the intermediate potentials cancel), so the
    chunk critic can be shaped without the intermediate states. If the episode terminates inside the chunk,
    pass the terminal state as s_{t+h}, its actual step count as h, and `terminal=True`.

    Raises:
        ShapingError: gamma outside [0, 1] or h < 1.
    """
    _check_gamma(gamma)
    if h < 1:
        raise ShapingError(f"chunk length h = {h!r} must be >= 1")
    return discounted_shaping(phi_t, phi_th, gamma**h, terminal)


def discounted_sum(rewards: Sequence[float] | np.ndarray, gamma: float) -> float:
    """`Σ_i γ^i r_i` of a reward sequence."""
    _check_gamma(gamma)
    r = np.asarray(rewards, dtype=np.float64)
    return float(np.sum(r * gamma ** np.arange(r.shape[0])))


def shaped_chunk_reward(
    rewards: Sequence[float] | np.ndarray, phi_t: float, phi_th: float, gamma: float, terminal: bool = False
) -> float:
    """`R_chunk = Σ_{i<h} γ^i r_{t+i} + γ^h Φ(s_{t+h}) − Φ(s_t)`, with h = len(rewards).

    Raises:
        ShapingError: empty rewards or gamma outside [0, 1].
    """
    h = len(rewards)
    if h == 0:
        raise ShapingError("shaped_chunk_reward: rewards is empty; a chunk has at least one step")
    return discounted_sum(rewards, gamma) + float(chunk_shaping(phi_t, phi_th, gamma, h, terminal))


def _check_traj(rewards: np.ndarray, phis: np.ndarray) -> None:
    if rewards.ndim != 1 or phis.ndim != 1:
        raise ShapingError(f"rewards and potentials must be 1-D, got shapes {rewards.shape} and {phis.shape}")
    if phis.shape[0] != rewards.shape[0] + 1:
        raise ShapingError(
            f"potentials has {phis.shape[0]} entries but a trajectory of {rewards.shape[0]} rewards visits "
            f"{rewards.shape[0] + 1} states (s_0 .. s_T)"
        )


def shaped_rewards(
    rewards: Sequence[float] | np.ndarray, phis: Sequence[float] | np.ndarray, gamma: float, terminal: bool = False
) -> np.ndarray:
    """Per-step shaped rewards `r_t + γ Φ(s_{t+1}) − Φ(s_t)` of one trajectory.

    Args:
        rewards: r_0 .. r_{T-1}.
        phis: Φ(s_0) .. Φ(s_T) as the potential function gives them (T + 1 values).
        gamma: discount in [0, 1].
        terminal: whether s_T is terminal; then Φ(s_T) is replaced by 0 (see the module docstring).

    Raises:
        ShapingError: mismatched lengths or gamma outside [0, 1].
    """
    _check_gamma(gamma)
    r = np.asarray(rewards, dtype=np.float64)
    p = np.array(phis, dtype=np.float64)
    _check_traj(r, p)
    if terminal:
        p[-1] = TERMINAL_PHI
    return r + gamma * p[1:] - p[:-1]


def shaped_return(
    rewards: Sequence[float] | np.ndarray, phis: Sequence[float] | np.ndarray, gamma: float, terminal: bool = False
) -> float:
    """Discounted return of the shaped rewards (see `shaped_rewards`)."""
    return discounted_sum(shaped_rewards(rewards, phis, gamma, terminal), gamma)


def shaping_offset(phis: Sequence[float] | np.ndarray, gamma: float, terminal: bool = False) -> float:
    """`γ^T Φ(s_T) − Φ(s_0)` (Φ(s_T) = 0 if terminal): shaped return minus unshaped return."""
    _check_gamma(gamma)
    p = np.asarray(phis, dtype=np.float64)
    if p.ndim != 1 or p.shape[0] < 1:
        raise ShapingError(f"potentials must be a non-empty 1-D sequence, got shape {p.shape}")
    end = TERMINAL_PHI if terminal else float(p[-1])
    return float(gamma ** (p.shape[0] - 1) * end - p[0])


def chunk_rewards(
    rewards: Sequence[float] | np.ndarray,
    phis: Sequence[float] | np.ndarray,
    gamma: float,
    h: int,
    terminal: bool = False,
) -> np.ndarray:
    """Shaped chunk rewards of one trajectory cut into consecutive chunks of h steps (last may be shorter).

    Chunk j covers steps [j h, min((j+1) h, T)); its reward is `shaped_chunk_reward` over that span.
    The discounted sum of chunk rewards with discount γ^h (γ^len for the last) equals `shaped_return`.

    Raises:
        ShapingError: mismatched lengths, h < 1 or gamma outside [0, 1].
    """
    _check_gamma(gamma)
    if h < 1:
        raise ShapingError(f"chunk length h = {h!r} must be >= 1")
    r = np.asarray(rewards, dtype=np.float64)
    p = np.asarray(phis, dtype=np.float64)
    _check_traj(r, p)
    n = r.shape[0]
    out = []
    for start in range(0, n, h):
        stop = min(start + h, n)
        last = stop == n
        out.append(shaped_chunk_reward(r[start:stop], float(p[start]), float(p[stop]), gamma, terminal and last))
    return np.asarray(out, dtype=np.float64)
