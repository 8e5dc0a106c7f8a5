"""The critic-value bench: AUC with ties, the paired episode bootstrap, the metrics read off scored held-out
states (value = V + w Φ, first states, Q sign agreement on failed episodes), and its critic-only training and
scoring on a chain MDP whose values are known."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from coda.policy.checkpoint import load_policy, save_checkpoint
from coda.policy.data import DemoWriter, Episode
from coda.policy.samples import ChunkDataset
from coda.policy.text import HashingTextEncoder
from coda.policy.train import build_policy
from bench_module import load_bench
from policy_synthetic import CHAIN_N, chain_action, chain_chunk, chain_episodes, chain_obs, tiny_cfg


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("critic_value")


def brute_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels], scores[~labels]
    wins = sum(float(p > n) + 0.5 * float(p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auc_orders_ties_and_matches_pairwise_count(bench: ModuleType) -> None:
    auc = bench.auc
    y = np.array([0, 0, 1, 1, 1], bool)
    assert auc([0.1, 0.2, 0.3, 0.4, 0.5], y) == 1.0
    assert auc([0.5, 0.4, 0.3, 0.2, 0.1], y) == 0.0
    assert auc(np.full(5, 0.7), y) == 0.5
    assert auc([0.1, 0.3, 0.3, 0.9, 0.2], y) == pytest.approx(brute_auc(np.array([0.1, 0.3, 0.3, 0.9, 0.2]), y))
    assert np.isnan(auc([0.1, 0.2], [True, True])) and np.isnan(auc([], []))
    with pytest.raises(ValueError, match="3 scores for 2 labels"):
        auc([1, 2, 3], [True, False])
    rng = np.random.default_rng(3)
    for n in (7, 40, 200):
        s = rng.integers(0, 6, n).astype(float)  # few distinct values: many ties
        lab = rng.random(n) < 0.4
        assert auc(s, lab) == pytest.approx(brute_auc(s, lab), abs=1e-12)
        s = rng.normal(size=n)
        assert auc(s, lab) == pytest.approx(brute_auc(s, lab), abs=1e-12)


def test_paired_bootstrap_contains_its_estimate_and_is_seeded(bench: ModuleType) -> None:
    rng = np.random.default_rng(0)
    a = [rng.normal(0.3, 1.0, 40), rng.normal(0.3, 1.0, 25)]  # two strata (families)
    b = [x - rng.normal(0.2, 0.5, len(x)) for x in a]

    def stat(eps: list[np.ndarray]) -> float:
        return float(np.mean(np.concatenate([a[i][e] - b[i][e] for i, e in enumerate(eps)])))

    sizes = [len(x) for x in a]
    r = bench.paired_bootstrap(stat, sizes, resamples=500, seed=0)
    lo, hi = r["ci95"]
    assert r["diff"] == pytest.approx(stat([np.arange(n) for n in sizes]))
    assert lo < r["diff"] < hi and hi - lo < 0.5
    assert bench.paired_bootstrap(stat, sizes, resamples=500, seed=0) == r
    assert bench.paired_bootstrap(stat, sizes, resamples=500, seed=1) != r
    nan = bench.paired_bootstrap(lambda eps: float("nan"), sizes, resamples=20)
    assert nan == {"diff": None, "ci95": [None, None]}


def test_metrics_of_scored_states(bench: ModuleType) -> None:
    """Three episodes: a success and two failures. The shaped critic's V alone ranks them at chance, V + Φ
    rightly; the sparse critic ranks them rightly with V alone. Q agreements are counted on failures only."""
    nan = np.nan
    rows_of = [np.array([0, 1]), np.array([2, 3, 4]), np.array([5])]
    phi = np.array([0.0, 0.9, 0.0, 0.2, 0.3, 0.1])
    held = bench.HeldOut(
        success=np.array([True, False, False]), rows_of=rows_of, phi=phi,
        v={"shaped": np.array([0.5, -0.3, 0.1, 0.0, 0.0, 0.0]), "sparse": np.array([0.6, 0.9, 0.1, 0.2, 0.2, 0.0])},
        q_expert={"shaped": np.array([nan, nan, 1.0, 1.0, 0.0, 2.0]), "sparse": np.array([nan, nan, 0.0, 0.0, 0.0, 0.0])},
        q_policy={"shaped": np.array([nan, nan, 0.0, 2.0, 0.0, 1.0]), "sparse": np.array([nan, nan, 1.0, 1.0, 1.0, 1.0])},
        weights={"shaped": 1.0, "sparse": 0.0},
    )
    shaped = bench.critic_metrics([held], "shaped")
    assert shaped["auc"] == 1.0  # values 0.5, 0.6 (success) against 0.1, 0.2, 0.3, 0.1
    assert shaped["auc_raw"] == pytest.approx(brute_auc(held.v["shaped"], np.repeat([True, False, False], [2, 3, 1])))
    assert shaped["auc_start"] == 1.0  # first states: 0.5 against 0.1 and 0.1
    assert shaped["sign_agreement"] == pytest.approx(2 / 4)  # states 2 and 5 agree; 3 and 4 do not (4 ties)
    sparse = bench.critic_metrics([held], "sparse")
    assert sparse["auc"] == sparse["auc_raw"] and sparse["sign_agreement"] == 0.0
    assert bench.agreement_counts(held, "shaped", np.array([0, 0])) == (0, 0)  # a success has no Q comparison
    # a family with one outcome has no AUC and is left out of the mean; it still counts for sign agreement
    failures = bench.HeldOut(np.array([False]), [np.array([0])], np.zeros(1), {"shaped": np.zeros(1)},
                             {"shaped": np.ones(1)}, {"shaped": np.zeros(1)}, {"shaped": 1.0})
    both = bench.critic_metrics([held, failures], "shaped")
    assert both["auc"] == 1.0 and both["sign_agreement"] == pytest.approx(3 / 5)
    assert bench.critic_metrics([failures], "shaped")["auc"] is None
    assert bench.phi_auc([held]) == pytest.approx(4.5 / 8)  # Φ alone: 0.0 ties one failure, 0.9 beats all
    pr = bench.paired([held], resamples=200)
    assert pr["sign_agreement"]["diff"] == pytest.approx(0.5) and pr["auc"]["diff"] == pytest.approx(0.0)


def phi(s: int) -> float:
    return s / (CHAIN_N - 1)


def walk(states: list[int], expert: tuple[int, ...] | None) -> Episode:
    """A chain episode through `states`; with `expert`, each state labelled with those moves' chunk."""
    acts = np.stack([chain_action(s, int(np.sign(b - s)) or -1) for s, b in zip(states, states[1:])])
    done = states[-1] == CHAIN_N - 1
    return Episode(observations=[chain_obs(s) for s in states], actions=acts,
                   rewards=np.array([0.0] * (len(acts) - 1) + [float(done)], np.float32), terminated=done,
                   success=done, potentials=np.array([phi(s) for s in states], np.float32),
                   label_chunks=None if expert is None else [chain_chunk(s, expert) for s in states[:-1]] + [None],
                   corrective=expert is not None)


def test_critics_train_alone_and_score_a_chain(bench: ModuleType, tmp_path: Path) -> None:
    """Both critics, trained from one checkpoint by the bench's critic-only loop on random walks, rank a
    success's states above a failure's and prefer the expert's rightward chunk to the executed leftward
    one; the actor is untouched and the two critics differ only through the shaping weight."""
    text = HashingTextEncoder()
    train = chain_episodes(200, seed=0, potential=phi)
    cfg = tiny_cfg(chunk_len=2, n_action_steps=1, expectile=0.5, polyak=0.5, lr=1e-2, batch_size=32, gamma=0.9)
    sft = save_checkpoint(build_policy(cfg, ChunkDataset(train, text, 2, gamma=0.9), text), tmp_path / "sft.pt")
    with DemoWriter(tmp_path / "data") as writer:
        for ep in train:
            writer.add(ep)
    torch.manual_seed(123)  # the bench seeds from the config, not from the global state
    critics = {name: bench.train_critic(sft, [tmp_path / "data"], w, 150)[0] for name, w in bench.WEIGHTS.items()}
    start = load_policy(sft)
    for pol in critics.values():
        assert all(torch.equal(a, b) for a, b in zip(start.actor_parameters(), pol.actor_parameters()))
        assert not all(torch.equal(a, b) for a, b in zip(start.critic.parameters(), pol.critic.parameters()))
    again = bench.train_critic(sft, [tmp_path / "data"], 0.0, 150)[0]
    assert all(torch.equal(a, b) for a, b in zip(again.critic.parameters(), critics["sparse"].critic.parameters()))
    held = [walk([3, 4, 5], None), walk([3, 2, 1, 0, 0], (1, 1))]
    h = bench.score_held_out(held, critics, every=1)
    assert h.n_states == 2 + 4 and [len(r) for r in h.rows_of] == [2, 4]
    np.testing.assert_allclose(h.phi, [phi(s) for s in (3, 4, 3, 2, 1, 0)], rtol=1e-6)
    assert np.isnan(h.q_expert["shaped"][:2]).all() and np.isfinite(h.q_expert["shaped"][2:]).all()
    # the shaped critic's V is the task value minus Φ: with Φ added back it ranks as the sparse one does
    assert not np.allclose(h.v["shaped"], h.v["sparse"], atol=0.05)
    assert bench.critic_metrics([h], "shaped")["auc_raw"] < 0.5  # V alone falls as Φ rises along the chain
    for name in bench.WEIGHTS:
        m = bench.critic_metrics([h], name)
        assert m["auc"] >= 0.9, (name, m, h.value(name))
        assert m["sign_agreement"] == 1.0, (name, h.q_expert[name], h.q_policy[name])
