"""Chunk critic: n-step chunk targets, chunk shaping telescopes, known values on a chain MDP with and
without a shaping potential (Q_shaped = Q - Phi(s)), AWR improves on the data, value-guided selection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from coda.policy.checkpoint import load_policy, save_checkpoint
from coda.policy.samples import ChunkDataset
from coda.policy.targets import chunk_targets, nstep_chunks
from coda.shaping.math import shaped_rewards
from coda.policy.text import HashingTextEncoder
from coda.policy.train import build_policy, train_policy
from policy_synthetic import (
    CHAIN_N,
    chain_chunk,
    chain_chunk_value,
    chain_episodes,
    chain_obs,
    chain_values,
    tiny_cfg,
)

GAMMA = 0.9
H = 2
MOVES = [(-1, -1), (-1, 1), (1, -1), (1, 1)]
TOL = 0.08  # values lie in [0, 1]


def phi(s: int) -> float:
    return s / 5.0


def test_nstep_chunk_targets_by_hand() -> None:
    r = np.array([0.0, 1.0, 0.0, 2.0], np.float32)
    r_sum, disc, done, nxt = nstep_chunks(r, terminated=True, h=3, gamma=0.5)
    np.testing.assert_allclose(r_sum, [0 + 0.5 * 1 + 0.25 * 0, 1 + 0 + 0.25 * 2, 0 + 0.5 * 2, 2])
    np.testing.assert_allclose(disc, [0.125, 0.125, 0.25, 0.5])
    assert done.tolist() == [False, True, True, True] and nxt.tolist() == [3, 4, 4, 4]
    _, _, done, _ = nstep_chunks(r, terminated=False, h=3, gamma=0.5)
    assert not done.any(), "a time limit is not terminal: it bootstraps"


@pytest.mark.parametrize("terminated", [True, False])
def test_chunk_shaping_equals_sum_of_per_step_terms(terminated: bool) -> None:
    rng = np.random.default_rng(0)
    t_len, h, gamma = 11, 4, 0.95
    pots = rng.uniform(0, 1, t_len + 1).astype(np.float32)
    per_step = shaped_rewards(np.zeros(t_len), pots, gamma, terminal=terminated)
    _, disc, done, nxt = nstep_chunks(np.zeros(t_len), terminated, h, gamma)
    zeros = torch.zeros(t_len)
    got = chunk_targets(zeros, torch.tensor(disc), torch.tensor(done), zeros,  # the targets training computes
                        torch.tensor(pots[:-1]), torch.tensor(pots[nxt]))
    want = [sum(gamma**i * per_step[t + i] for i in range(nxt[t] - t)) for t in range(t_len)]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    # and over a whole episode the shaped return is the unshaped one plus gamma^T Phi(s_T) - Phi(s_0)
    total = sum(gamma**t * per_step[t] for t in range(t_len))
    end = 0.0 if terminated else gamma**t_len * pots[-1]
    assert total == pytest.approx(end - pots[0], abs=1e-5)


def _train_chain(shaped: bool, improvement: str, baseline: str = "value") -> tuple:
    text = HashingTextEncoder()
    data = ChunkDataset(chain_episodes(200, seed=0, potential=phi if shaped else None), text, H, gamma=GAMMA)
    cfg = tiny_cfg(chunk_len=H, n_action_steps=1, train_critic=True, improvement=improvement, expectile=0.5,
                   polyak=0.5, lr=1e-2, batch_size=32, gamma=GAMMA, awr_beta=0.05, bc_loss="mse",
                   awr_baseline=baseline)
    policy = build_policy(cfg, data, text)
    train_policy(policy, data, steps=250)
    return policy, data


@pytest.fixture(scope="module")
def chain_plain():
    return _train_chain(shaped=False, improvement="awr")


@pytest.fixture(scope="module")
def chain_shaped():
    return _train_chain(shaped=True, improvement="bc")


def _learned(policy) -> tuple[np.ndarray, np.ndarray]:
    q = np.array([[policy.value(chain_obs(s), chain_chunk(s, m)) for m in MOVES] for s in range(CHAIN_N - 1)])
    v = np.array([policy.state_value(chain_obs(s)) for s in range(CHAIN_N - 1)])
    return q, v


def _analytic() -> tuple[np.ndarray, np.ndarray]:
    v = chain_values(GAMMA)
    q = np.array([[chain_chunk_value(s, m, GAMMA, v) for m in MOVES] for s in range(CHAIN_N - 1)])
    return q, v[: CHAIN_N - 1]


def test_critic_recovers_known_chain_values(chain_plain) -> None:
    q, v = _learned(chain_plain[0])
    q_true, v_true = _analytic()
    assert np.abs(q - q_true).max() < TOL, f"Q error {np.abs(q - q_true).max():.3f}\n{q}\n{q_true}"
    assert np.abs(v - v_true).max() < TOL, f"V error {np.abs(v - v_true).max():.3f}: {v} vs {v_true}"


def test_shaped_critic_learns_q_minus_potential(chain_plain, chain_shaped) -> None:
    q_sh, v_sh = _learned(chain_shaped[0])
    q_true, v_true = _analytic()
    pots = np.array([phi(s) for s in range(CHAIN_N - 1)])
    # shaping theory: Q_shaped(s, a) = Q(s, a) - Phi(s), V_shaped(s) = V(s) - Phi(s)
    assert np.abs(q_sh - (q_true - pots[:, None])).max() < TOL
    assert np.abs(v_sh - (v_true - pots)).max() < TOL
    q, _ = _learned(chain_plain[0])
    assert np.abs((q_sh + pots[:, None]) - q).max() < 2 * TOL
    # the same greedy chunk wherever the true gap is clear
    gap = np.sort(q_true, axis=1)[:, -1] - np.sort(q_true, axis=1)[:, -2]
    clear = gap > 2 * TOL
    assert clear.any()
    assert (q_sh.argmax(1)[clear] == q_true.argmax(1)[clear]).all()


def test_awr_moves_the_actor_towards_higher_value_chunks(chain_plain, chain_shaped) -> None:
    """The data is a random walk (slightly right-leaning in successful episodes): the MSE-BC mean step is
    near 0; AWR weights it towards the reward."""
    awr, bc = chain_plain[0], chain_shaped[0]
    dx_awr = [awr.predict_chunk(chain_obs(s))[0, 0] - chain_obs(s)["proprio"][0] for s in range(1, CHAIN_N - 1)]
    dx_bc = [bc.predict_chunk(chain_obs(s))[0, 0] - chain_obs(s)["proprio"][0] for s in range(1, CHAIN_N - 1)]
    assert min(dx_awr) > 0.01, dx_awr  # a step is 0.05
    assert np.mean(dx_awr) > np.mean(dx_bc) + 0.01, (dx_awr, dx_bc)


def test_awr_against_the_policys_own_chunks_moves_the_actor_the_same_way(chain_shaped) -> None:
    """With the advantage measured against chunks sampled from the actor (Q(s, a) - mean Q(s, a')) instead of
    V(s), AWR still prefers the rewarded direction over plain BC."""
    awr = _train_chain(shaped=False, improvement="awr", baseline="policy")[0]
    bc = chain_shaped[0]
    dx_awr = [awr.predict_chunk(chain_obs(s))[0, 0] - chain_obs(s)["proprio"][0] for s in range(1, CHAIN_N - 1)]
    dx_bc = [bc.predict_chunk(chain_obs(s))[0, 0] - chain_obs(s)["proprio"][0] for s in range(1, CHAIN_N - 1)]
    assert min(dx_awr) > 0.01, dx_awr
    assert np.mean(dx_awr) > np.mean(dx_bc) + 0.01, (dx_awr, dx_bc)


def test_value_guided_selection_executes_the_highest_q_candidate(chain_plain, tmp_path: Path) -> None:
    path = save_checkpoint(chain_plain[0], tmp_path / "chain.pt")
    policy = load_policy(path, overrides={"value_guided_samples": 8, "sample_temperature": 2.0})
    s = 3
    obs = chain_obs(s)
    policy.reset(seed=7)
    candidates = policy.sample_chunks(obs, 8)
    q = np.array([policy.value(obs, c) for c in candidates])
    policy.reset(seed=7)  # the same random stream: predict_chunk draws the same candidates
    chosen = policy.predict_chunk(obs)
    np.testing.assert_allclose(chosen, candidates[q.argmax()], atol=1e-6)
    assert q.max() >= q[0]  # never worse than the mean chunk by the critic's own estimate
    # on chunks with known values the critic ranks the way the analytic values do
    right, left = chain_chunk(4, (1, 1)), chain_chunk(4, (-1, -1))
    assert policy.value(chain_obs(4), right) > policy.value(chain_obs(4), left) + 0.2


def test_awr_weights_are_normalised_over_the_batch_and_report_their_spread() -> None:
    from coda.policy.targets import awr_weights

    adv = torch.tensor([0.0, 0.0, 0.0, 0.0])
    w, m = awr_weights(adv, beta=1.0, max_weight=20.0)
    assert torch.allclose(w, torch.ones(4)) and m["awr_ess"] == pytest.approx(1.0) and m["awr_clip_frac"] == 0.0
    # the same ranking at any reward scale: weights depend on the advantages' spread, not their units
    adv = torch.tensor([-1.0, 0.0, 0.5, 3.0])
    w1, _ = awr_weights(adv, 1.0, 20.0)
    w2, _ = awr_weights(adv * 1e-2, 1.0, 20.0)
    assert torch.allclose(w1, w2, atol=1e-3) and torch.all(w1[1:] >= w1[:-1])
    w, m = awr_weights(torch.tensor([0.0] * 7 + [10.0]), beta=0.1, max_weight=5.0)
    assert float(w.max()) == 5.0 and m["awr_clip_frac"] == pytest.approx(1 / 8) and m["awr_ess"] < 0.5
