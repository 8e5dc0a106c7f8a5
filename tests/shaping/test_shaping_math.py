"""Potential-based shaping: telescoping, the terminal convention and policy invariance on exact MDPs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from coda.shaping.math import (
    ShapingError,
    chunk_rewards,
    chunk_shaping,
    discounted_sum,
    shaped_chunk_reward,
    shaped_return,
    shaping_offset,
    shaping_term,
)

# ---- trajectories --------------------------------------------------------------------------------------


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_shaped_return_equals_unshaped_plus_offset(seed: int, terminal: bool) -> None:
    rng = np.random.default_rng(seed)
    T = int(rng.integers(1, 60))
    gamma = float(rng.uniform(0.5, 1.0))
    rewards = rng.normal(size=T)
    phis = rng.uniform(-3, 3, size=T + 1)
    want = discounted_sum(rewards, gamma) + gamma**T * (0.0 if terminal else phis[-1]) - phis[0]
    assert shaped_return(rewards, phis, gamma, terminal) == pytest.approx(want, abs=1e-10)
    assert shaping_offset(phis, gamma, terminal) == pytest.approx(want - discounted_sum(rewards, gamma), abs=1e-10)


def test_terminal_convention_ignores_the_final_potential() -> None:
    rewards = [0.0, 0.0, 1.0]
    a = shaped_return(rewards, [0.2, 0.5, 0.9, 123.0], 0.9, terminal=True)
    b = shaped_return(rewards, [0.2, 0.5, 0.9, -7.0], 0.9, terminal=True)
    c = shaped_return(rewards, [0.2, 0.5, 0.9, 123.0], 0.9, terminal=False)
    assert a == b != c


def test_chunk_shaping_telescopes_exactly() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        h = int(rng.integers(1, 12))
        gamma = Fraction(int(rng.integers(1, 100)), 100)
        phis = [Fraction(int(rng.integers(-1000, 1000)), 997) for _ in range(h + 1)]
        per_step = sum(gamma**i * shaping_term(phis[i], phis[i + 1], gamma) for i in range(h))
        assert chunk_shaping(phis[0], phis[h], gamma, h) == per_step  # exact rational arithmetic
        per_step_term = sum(
            gamma**i * shaping_term(phis[i], phis[i + 1], gamma, terminal=(i == h - 1)) for i in range(h)
        )
        assert chunk_shaping(phis[0], phis[h], gamma, h, terminal=True) == per_step_term


@pytest.mark.parametrize("terminal", [False, True])
def test_chunked_rewards_sum_to_the_shaped_return(terminal: bool) -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        T, h = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        gamma = float(rng.uniform(0.8, 1.0))
        rewards, phis = rng.normal(size=T), rng.uniform(0, 1, size=T + 1)
        chunks = chunk_rewards(rewards, phis, gamma, h, terminal)
        total = sum(gamma ** (j * h) * c for j, c in enumerate(chunks))
        assert total == pytest.approx(shaped_return(rewards, phis, gamma, terminal), abs=1e-10)
        assert chunks[0] == pytest.approx(shaped_chunk_reward(rewards[:h], phis[0], phis[min(h, T)], gamma,
                                                              terminal and h >= T))


def test_batched_tensors_with_a_terminal_mask() -> None:
    phi_t = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    phi_th = torch.tensor([0.4, 0.8, 1.0], dtype=torch.float64)
    done = torch.tensor([False, True, False])
    out = chunk_shaping(phi_t, phi_th, 0.9, 4, terminal=done)
    want = torch.tensor([0.9**4 * 0.4 - 0.1, -0.5, 0.9**4 * 1.0 - 0.9], dtype=torch.float64)
    assert isinstance(out, torch.Tensor) and torch.allclose(out, want)
    arr = chunk_shaping(phi_t.numpy(), phi_th.numpy(), 0.9, 4, terminal=done.numpy())
    assert np.allclose(arr, want.numpy())


def test_bad_inputs_name_the_value() -> None:
    with pytest.raises(ShapingError, match=r"gamma = 1.5"):
        shaping_term(0.0, 1.0, 1.5)
    with pytest.raises(ShapingError, match=r"h = 0"):
        chunk_shaping(0.0, 1.0, 0.9, 0)
    with pytest.raises(ShapingError, match=r"potentials has 3 entries"):
        shaped_return([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], 0.9)
    with pytest.raises(ShapingError, match="empty"):
        shaped_chunk_reward([], 0.0, 0.0, 0.9)


# ---- exact MDPs ----------------------------------------------------------------------------------------


def value_iteration(P: np.ndarray, R: np.ndarray, terminal: np.ndarray, gamma: float) -> np.ndarray:
    """Q*(s, a) of a finite MDP; P, R are (S, A, S); terminal states are absorbing with value 0."""
    S = P.shape[0]
    V = np.zeros(S)
    for _ in range(10_000):
        Q = np.einsum("ijk,ijk->ij", P, R + gamma * V[None, None, :])
        V_new = np.where(terminal, 0.0, Q.max(axis=1))
        if np.max(np.abs(V_new - V)) < 1e-12:
            break
        V = V_new
    return np.einsum("ijk,ijk->ij", P, R + gamma * V[None, None, :])


def potential_bonus(phi: np.ndarray, terminal: np.ndarray, gamma: float, S: int, A: int) -> np.ndarray:
    """F(s, a, s') = γ Φ(s') − Φ(s) with Φ(terminal) = 0, as an (S, A, S) array built from shaping_term."""
    F = np.zeros((S, A, S))
    for s in range(S):
        for s2 in range(S):
            F[s, :, s2] = shaping_term(phi[s], phi[s2], gamma, terminal=bool(terminal[s2]))
    return F


def random_mdp(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    S, A = int(rng.integers(4, 9)), int(rng.integers(2, 5))
    terminal = np.zeros(S, dtype=bool)
    terminal[rng.choice(S, size=int(rng.integers(1, 3)), replace=False)] = True
    P = rng.dirichlet(np.full(S, 0.5), size=(S, A))
    R = rng.normal(size=(S, A, S))
    P[terminal] = np.eye(S)[terminal][:, None, :]  # absorbing
    R[terminal] = 0.0
    return P, R, terminal


def greedy(Q: np.ndarray, terminal: np.ndarray) -> list[int]:
    return [int(np.argmax(Q[s])) for s in range(Q.shape[0]) if not terminal[s]]


def test_potential_shaping_keeps_the_optimal_policy_on_random_mdps() -> None:
    rng = np.random.default_rng(2024)
    compared = 0
    for _ in range(50):
        P, R, terminal = random_mdp(rng)
        S, A, _ = P.shape
        gamma = float(rng.uniform(0.7, 0.97))
        phi = rng.uniform(-5, 5, size=S)  # large next to the rewards, to stress the invariance
        Q = value_iteration(P, R, terminal, gamma)
        Qs = value_iteration(P, R + potential_bonus(phi, terminal, gamma, S, A), terminal, gamma)
        live = ~terminal
        assert np.allclose(Qs[live], Q[live] - phi[live, None], atol=1e-8)  # Q' = Q − Φ(s)
        assert greedy(Qs, terminal) == greedy(Q, terminal)
        compared += int(live.sum())
    assert compared >= 150


def test_a_non_potential_bonus_of_the_same_size_changes_the_optimal_policy() -> None:
    # State 0: "stay" loops back to 0 with reward 0; "go" ends the episode (state 1) with reward 1.
    S, A, gamma = 2, 2, 0.9
    P = np.zeros((S, A, S))
    P[0, 0, 0] = P[0, 1, 1] = P[1, :, 1] = 1.0
    R = np.zeros((S, A, S))
    R[0, 1, 1] = 1.0
    terminal = np.array([False, True])
    assert greedy(value_iteration(P, R, terminal, gamma), terminal) == [1]

    phi = np.array([1.0, 0.5])
    F = potential_bonus(phi, terminal, gamma, S, A)
    assert greedy(value_iteration(P, R + F, terminal, gamma), terminal) == [1]

    bonus = np.zeros_like(R)
    bonus[0, 0, 0] = np.max(np.abs(F))  # same magnitude, but paid for looping: not a potential difference
    assert bonus[0, 0, 0] == pytest.approx(1.0)
    assert greedy(value_iteration(P, R + bonus, terminal, gamma), terminal) == [0]


def test_a_nonzero_terminal_potential_would_change_the_optimal_policy() -> None:
    # From state 0: action 0 ends in terminal A (reward 1), action 1 in terminal B (reward 0.5).
    S, A, gamma = 3, 2, 0.9
    P = np.zeros((S, A, S))
    P[0, 0, 1] = P[0, 1, 2] = 1.0
    P[1, :, 1] = P[2, :, 2] = 1.0
    R = np.zeros((S, A, S))
    R[0, 0, 1], R[0, 1, 2] = 1.0, 0.5
    terminal = np.array([False, True, True])
    phi = np.array([0.0, 0.0, 1.0])
    assert greedy(value_iteration(P, R, terminal, gamma), terminal) == [0]
    convention = potential_bonus(phi, terminal, gamma, S, A)
    assert greedy(value_iteration(P, R + convention, terminal, gamma), terminal) == [0]
    ignoring = potential_bonus(phi, np.zeros(S, dtype=bool), gamma, S, A)  # Φ(B) = 1 left in place
    assert greedy(value_iteration(P, R + ignoring, terminal, gamma), terminal) == [1]


def test_chunk_shaping_keeps_the_optimal_chunk_policy() -> None:
    """Open-loop chunks of h actions on deterministic MDPs: shaping with chunk_shaping keeps the argmax."""
    rng = np.random.default_rng(7)
    h = 3
    for _ in range(50):
        S, A = int(rng.integers(3, 7)), 2
        nxt = rng.integers(0, S, size=(S, A))
        r = rng.normal(size=(S, A))
        gamma = float(rng.uniform(0.7, 0.95))
        phi = rng.uniform(-3, 3, size=S)
        chunks = [tuple((c >> i) & 1 for i in range(h)) for c in range(A**h)]

        def rollout(s: int, chunk: tuple[int, ...]) -> tuple[float, int]:
            ret = 0.0
            for i, a in enumerate(chunk):
                ret += gamma**i * r[s, a]
                s = int(nxt[s, a])
            return ret, s

        table = {(s, c): rollout(s, c) for s in range(S) for c in chunks}

        def solve(shaped: bool) -> np.ndarray:
            V = np.zeros(S)
            for _ in range(5000):
                Q = np.array([[table[s, c][0] + (chunk_shaping(phi[s], phi[table[s, c][1]], gamma, h) if shaped else 0.0)
                               + gamma**h * V[table[s, c][1]] for c in chunks] for s in range(S)])
                V_new = Q.max(axis=1)
                if np.max(np.abs(V_new - V)) < 1e-12:
                    break
                V = V_new
            return Q

        Q, Qs = solve(False), solve(True)
        assert np.allclose(Qs, Q - phi[:, None], atol=1e-7)
        assert [int(np.argmax(q)) for q in Qs] == [int(np.argmax(q)) for q in Q]


def test_training_shapes_its_chunk_targets_with_this_formula() -> None:
    """The chunk critic's targets compute shaping through `discounted_shaping`, the function these tests prove."""
    import torch

    from coda.policy import targets
    from coda.shaping import math as shaping_math

    assert targets.discounted_shaping is shaping_math.discounted_shaping
    phi, phi_next = torch.tensor([0.2, 0.5, 0.9]), torch.tensor([0.4, 0.7, 1.0])
    disc, done = torch.tensor([0.9**4, 0.9**4, 0.9**2]), torch.tensor([False, False, True])
    zeros = torch.zeros(3)
    got = targets.chunk_targets(zeros, disc, done, zeros, phi, phi_next)
    want = [float(shaping_math.chunk_shaping(float(p), float(q), 0.9, h, terminal=bool(d)))
            for p, q, h, d in zip(phi, phi_next, (4, 4, 2), done)]
    assert got.tolist() == pytest.approx(want, abs=1e-6)
