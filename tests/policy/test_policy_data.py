"""Demo datasets on disk: round trip, shards and index, corrective samples, collection, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coda.policy.data import DemoDataset, DemoWriter, Episode, collect_demos, corrective_episode, replayed_episode
from coda.policy.errors import DatasetError
from coda.policy.samples import ChunkDataset
from policy_synthetic import PointReachEnv, ReachExpert, expert_episodes, make_specs


def _assert_same_episode(a: Episode, b: Episode) -> None:
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert (a.terminated, a.success, a.corrective, a.spec_id) == (b.terminated, b.success, b.corrective, b.spec_id)
    for oa, ob in zip(a.observations, b.observations):
        for k in ("proprio", "objects", "object_mask"):
            np.testing.assert_array_equal(np.asarray(oa[k]), ob[k])
        assert tuple(oa["object_text"]) == ob["object_text"] and oa["instruction"] == ob["instruction"]


def test_round_trip_across_shards(tmp_path: Path) -> None:
    eps = expert_episodes(make_specs(5, seed=2))
    eps[1].potentials = np.linspace(0, 1, eps[1].length + 1).astype(np.float32)
    with DemoWriter(tmp_path / "d", episodes_per_shard=2) as w:
        ids = [w.add(e) for e in eps]
    assert ids == [0, 1, 2, 3, 4]
    ds = DemoDataset(tmp_path / "d")
    assert len(ds) == 5 and len(ds.index["shards"]) == 3
    assert ds.dims == {"proprio": 7, "object_features": 10, "action": 5}
    back = list(ds.episodes())
    for a, b in zip(eps, back):
        _assert_same_episode(a, b)
    np.testing.assert_array_equal(back[1].potentials, eps[1].potentials)
    assert back[0].potentials is None
    only = list(ds.episodes(where=lambda rec: rec["id"] in (3,)))
    assert len(only) == 1 and only[0].spec_id == eps[3].spec_id


def test_corrective_rows_use_expert_labels(tmp_path: Path, hashing) -> None:
    """A failed trajectory with expert labels: BC targets are the labels; the critic sees the executed chunk."""
    env = PointReachEnv(max_steps=6)
    spec = make_specs(1, seed=4)[0]
    obs, _ = env.reset_to(spec)
    observations, actions, labels = [obs], [], []
    for _ in range(6):  # a policy that drifts away instead of reaching
        labels.append(ReachExpert(k=3).act(env.state()))
        a = np.array([*(obs["proprio"][:3] + [0.0, 0.03, 0.0]), 0.0, 1.0], np.float32)
        obs, _, _, _, _ = env.step(a)
        observations.append(obs)
        actions.append(a)
    labels.append(None)
    ep = Episode(observations, np.stack(actions), np.zeros(6, np.float32), terminated=False, success=False,
                 label_chunks=labels, corrective=True, spec_id="fail-1")
    with DemoWriter(tmp_path / "c") as w:
        w.add(ep)
    back = next(DemoDataset(tmp_path / "c").episodes())
    assert back.corrective and not back.success
    np.testing.assert_array_equal(back.label_chunks[2], labels[2])
    assert back.label_chunks[-1] is None
    data = ChunkDataset([back], hashing, chunk_len=4)
    assert data.n_bc == 6 and data.n_critic == 6
    # label (3 steps) padded to 4 by repeating its last action, relative to the gripper at that row
    pose = data.proprio[data.bc_row[0], :3].numpy()
    want = np.concatenate([labels[0], labels[0][-1:]])[:, :3] - pose
    np.testing.assert_allclose(data.bc_chunk[0, :, :3].numpy(), want, atol=1e-6)
    np.testing.assert_allclose(data.cr_chunk[0, 0, :3].numpy(), actions[0][:3] - pose, atol=1e-6)


def test_collect_demos_records_successes_and_reports_failures(tmp_path: Path) -> None:
    specs = make_specs(4, seed=3)
    report = collect_demos(PointReachEnv(max_steps=40), specs, lambda s: ReachExpert(), tmp_path / "demos")
    assert (report.attempted, report.succeeded, report.written) == (4, 4, 4)
    # a time limit too short for the expert: failures are reported, kept only on request
    report = collect_demos(PointReachEnv(max_steps=3), specs[:2], lambda s: ReachExpert(), tmp_path / "short",
                           keep_failures=True, potential_fn=lambda spec, states: np.zeros(len(states)))
    assert report.succeeded == 0 and report.failed_specs == [s.spec_id for s in specs[:2]] and report.written == 2
    ds = DemoDataset(tmp_path / "short")
    assert [e["success"] for e in ds.index["episodes"]] == [False, False]
    assert all(e["has_potentials"] for e in ds.index["episodes"])
    with pytest.raises(DatasetError, match="already holds a dataset"):
        collect_demos(PointReachEnv(), specs[:1], lambda s: ReachExpert(), tmp_path / "demos")
    collect_demos(PointReachEnv(), specs[:1], lambda s: ReachExpert(), tmp_path / "demos", append=True)
    assert len(DemoDataset(tmp_path / "demos")) == 5
    with pytest.raises(DatasetError, match="no behaviour-cloning samples: 2 episodes given"):
        from coda.policy.text import HashingTextEncoder

        ChunkDataset(DemoDataset(tmp_path / "short").episodes(), HashingTextEncoder(), 4)


def test_bad_datasets_are_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="has no index.json"):
        DemoDataset(tmp_path)
    (tmp_path / "index.json").write_text("{oops")
    with pytest.raises(DatasetError, match="is not valid JSON"):
        DemoDataset(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"format": "coda-demos", "version": 99}))
    with pytest.raises(DatasetError, match="field 'version' = 99"):
        DemoDataset(tmp_path)
    eps = expert_episodes(make_specs(1, seed=5))
    with DemoWriter(tmp_path / "ok") as w:
        w.add(eps[0])
    (tmp_path / "ok" / "shard-00000.parquet").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match="shard-00000.parquet' is unreadable"):
        list(DemoDataset(tmp_path / "ok").episodes())
    with pytest.raises(DatasetError, match="has 2 observations for 2 actions"):
        Episode(eps[0].observations[:2], eps[0].actions[:2], eps[0].rewards[:2], True, True, spec_id="x")


def test_corrective_episode_replays_and_labels_every_k(hashing) -> None:
    env = PointReachEnv(max_steps=8)
    spec = make_specs(1, seed=6)[0]
    drift = np.array([[*spec.start[:2], 0.2, 0.0, 1.0]] * 8, np.float32)  # a policy that never moves
    ep = corrective_episode(
        env, spec, drift, ReachExpert(k=4), label_every=2
    )
    assert ep.corrective and not ep.success and ep.length == 8 and not ep.terminated
    assert [lab is not None for lab in ep.label_chunks] == [True, False] * 4 + [False]
    env.reset_to(spec)
    np.testing.assert_array_equal(ep.label_chunks[0], ReachExpert(k=4).act(env.state()))
    data = ChunkDataset([ep], hashing, chunk_len=4)
    assert data.n_bc == 4 and data.n_critic == 8


def test_replayed_episode_gives_critic_samples_and_no_bc_sample(tmp_path: Path, hashing) -> None:
    """A policy's own rollout, replayed: the same states, no labels, so the critic learns from it and behaviour
    cloning never imitates it; it survives a round trip through the demo files."""
    env = PointReachEnv(max_steps=8)
    spec = make_specs(1, seed=6)[0]
    drift = np.array([[*spec.start[:2], 0.2, 0.0, 1.0]] * 8, np.float32)
    states: list = []
    ep = replayed_episode(env, spec, drift, states=states)
    assert ep.corrective and not ep.success and ep.length == 8
    assert all(lab is None for lab in ep.label_chunks)
    np.testing.assert_array_equal(ep.actions, drift)
    from coda.engine.round import replay_states

    again = replay_states(env, spec, ep.actions)  # the states it recorded are the replay's own
    assert len(states) == len(again) == 9
    for a, b in zip(states, again):
        np.testing.assert_array_equal(a["gripper"], b["gripper"])
        assert a["grip"] == b["grip"]
    assert not np.array_equal(states[0]["gripper"], states[-1]["gripper"])  # the replay moved
    with DemoWriter(tmp_path) as w:
        w.add(ep)
    (back,) = DemoDataset(tmp_path).episodes()
    data = ChunkDataset([back, *expert_episodes(make_specs(1, seed=9))], hashing, chunk_len=4)
    assert data.n_critic == 8 + data.n_bc  # the demo gives both, the rollout critic rows only
    with pytest.raises(DatasetError, match="label_every = -1"):
        corrective_episode(env, spec, drift, ReachExpert(k=4), label_every=-1)
    with pytest.raises(DatasetError, match="needs an expert"):
        corrective_episode(env, spec, drift, None, label_every=2)


def test_source_weights_set_each_sources_share_of_bc_batches(hashing) -> None:
    """Two sources of very different sizes: with weights 1:1 each fills half of the batches; with 0 for one
    it never appears; without weights sampling is proportional to size."""
    import torch

    eps = expert_episodes(make_specs(9, seed=7))
    sources = ["old"] * 8 + ["new"]

    def share(data: ChunkDataset) -> float:
        g = torch.Generator().manual_seed(0)
        idx = torch.cat([data.bc_indices(256, g) for _ in range(40)])
        return float(np.mean([data.bc_source[i] == "new" for i in idx.tolist()]))

    even = ChunkDataset(eps, hashing, 4, sources=sources, source_weights={"old": 1.0, "new": 1.0})
    assert even.bc_source.count("new") == eps[-1].length  # one BC row per step of the new demo
    assert abs(share(even) - 0.5) < 0.03
    assert share(ChunkDataset(eps, hashing, 4, sources=sources, source_weights={"old": 1.0, "new": 0.0})) == 0.0
    plain = ChunkDataset(eps, hashing, 4, sources=sources)
    assert plain.bc_prob is None and abs(share(plain) - eps[-1].length / plain.n_bc) < 0.03
    assert share(plain) < 0.2


def test_unfamiliar_rate_swaps_in_the_episodes_own_variants_and_costs_no_draw_when_off(hashing) -> None:
    """With variants held, `unfamiliar_rate` q shows about q of the samples one of their own episode's
    unfamiliar-word variants; at q = 0 (or with no variants) the batch, and the generator after it, are those
    of a dataset without variants."""
    import torch

    from coda.policy.text import unfamiliar_variants

    eps = expert_episodes(make_specs(3, seed=5))
    plain = ChunkDataset(eps, hashing, 4)
    held = ChunkDataset(eps, hashing, 4, unfamiliar_variants=3)
    assert plain.unfamiliar_ids.shape == (3, 0) and held.unfamiliar_ids.shape == (3, 3)
    idx = torch.arange(held.n_bc).repeat(20)
    g = torch.Generator().manual_seed(1)
    batch = held.bc_batch(idx, generator=g, unfamiliar_rate=0.4)
    rows = held.bc_row[idx]
    recorded = held.text_table[held.instruction_id[rows]]
    swapped = ~(batch.obs.instruction_emb == recorded).all(dim=1)
    assert abs(float(swapped.float().mean()) - 0.4) < 0.05
    for i in torch.nonzero(swapped).flatten()[:50].tolist():
        ep = eps[int(held.row_episode[rows[i]])]
        said = held.strings[int(held.instruction_id[rows[i]])]
        assert said == ep.observations[0]["instruction"]
        allowed = {held.strings.index(v) for v in unfamiliar_variants(said, 3)}
        shown = [j for j in allowed if torch.equal(held.text_table[j], batch.obs.instruction_emb[i])]
        assert shown, f"sample {i} shows a wording that is not one of its episode's variants"
    for rate, data in ((0.0, held), (0.5, plain)):
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        a = data.bc_batch(idx[:64], generator=g1, unfamiliar_rate=rate)
        b = plain.bc_batch(idx[:64], generator=g2)
        assert torch.equal(a.obs.instruction_emb, b.obs.instruction_emb)
        assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


def test_max_oversample_caps_a_small_sources_share_and_gives_the_rest_to_the_others(hashing) -> None:
    """A source of 10 samples in 100 with weight 1 of 3 would fill a third of the batch; capped at 2x uniform it
    gets 0.2, the other two share the remaining 0.8 by their weights; a cap of 1 is uniform sampling."""
    from coda.policy.samples import source_shares

    counts = {"replay": 60, "expert": 30, "corrective": 10}
    weights = {"replay": 1.0, "expert": 1.0, "corrective": 1.0}
    assert source_shares(counts, weights) == pytest.approx({s: 1 / 3 for s in counts})
    capped = source_shares(counts, weights, max_oversample=2.0)
    assert capped["corrective"] == pytest.approx(0.2)
    assert capped["replay"] == pytest.approx(0.4) and capped["expert"] == pytest.approx(0.4)
    # a cap that the redistribution pushes another source over: expert (30%) is capped at 0.36 too
    tight = source_shares(counts, {"replay": 1.0, "expert": 2.0, "corrective": 1.0}, max_oversample=1.2)
    assert tight["corrective"] == pytest.approx(0.12) and tight["expert"] == pytest.approx(0.36)
    assert tight["replay"] == pytest.approx(0.52) and sum(tight.values()) == pytest.approx(1.0)
    assert source_shares(counts, weights, max_oversample=1.0) == pytest.approx({"replay": 0.6, "expert": 0.3,
                                                                                 "corrective": 0.1})
    # every weighted source over its cap (replay has weight 0): they are drawn uniformly over their samples
    alone = source_shares(counts, {"replay": 0.0, "expert": 1.0, "corrective": 1.0}, max_oversample=2.0)
    assert alone == pytest.approx({"replay": 0.0, "expert": 0.75, "corrective": 0.25})
    with pytest.raises(DatasetError, match=r"max_oversample = 0.5"):
        source_shares(counts, weights, max_oversample=0.5)

    eps = expert_episodes(make_specs(9, seed=7))
    data = ChunkDataset(eps, hashing, 4, sources=["old"] * 8 + ["new"], source_weights={"old": 1.0, "new": 1.0},
                        max_oversample=2.0)
    new = [i for i, s in enumerate(data.bc_source) if s == "new"]
    assert float(data.bc_prob[new].sum()) == pytest.approx(2.0 * len(new) / data.n_bc)


def test_bad_source_weights_are_named(hashing) -> None:
    eps = expert_episodes(make_specs(2, seed=8))
    with pytest.raises(DatasetError, match="no weight for source 'b'"):
        ChunkDataset(eps, hashing, 4, sources=["a", "b"], source_weights={"a": 1.0})
    with pytest.raises(DatasetError, match=r"source_weights\['a'\] = -1.0"):
        ChunkDataset(eps, hashing, 4, sources=["a", "a"], source_weights={"a": -1.0})
    with pytest.raises(DatasetError, match="weight 0 to every source"):
        ChunkDataset(eps, hashing, 4, sources=["a", "a"], source_weights={"a": 0.0})
    with pytest.raises(DatasetError, match="sources has 1 entries"):
        ChunkDataset(eps, hashing, 4, sources=["a"], source_weights={"a": 1.0})
    with pytest.raises(DatasetError, match="without sources"):
        ChunkDataset(eps, hashing, 4, source_weights={"a": 1.0})


def test_corrective_labels_are_what_the_expert_executes(hashing) -> None:
    """Relabelling an expert's own demonstration in the simulator gives back exactly the actions it executed
    (labels come from closed-loop expert branches off snapshots, like demos), and the replay is unchanged."""
    from coda.policy.data import run_expert_episode
    from coda.scene.generators import sample_base
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for

    spec = sample_base("stack", np.random.default_rng(3))
    env = TabletopEnv()
    try:
        demo = run_expert_episode(env, spec, expert_for(spec, 8))
        cor = corrective_episode(env, spec, demo.actions, expert_for(spec, 8), label_every=4, label_len=8)
    finally:
        env.close()
    assert demo.success and cor.success and len(cor.actions) == len(demo.actions)
    labelled = [t for t, c in enumerate(cor.label_chunks) if c is not None]
    assert labelled == list(range(0, len(demo.actions), 4))
    for t in labelled:
        want = demo.actions[t : t + 8]
        np.testing.assert_array_equal(cor.label_chunks[t][: len(want)], want)
    for a, b in zip(demo.observations, cor.observations):
        np.testing.assert_array_equal(a["proprio"], b["proprio"])
