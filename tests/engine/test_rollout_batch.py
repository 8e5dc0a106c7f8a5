"""Batched rollouts (`coda.engine.rollout.rollout_batch`): a policy's chunk for an observation does not depend
on the batch it is computed in, so an episode is the same, bit for bit, whatever batch, worker count or
neighbouring scenes it ran with; a policy that cannot batch runs its episodes one at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from coda.config import build_config
from coda.engine.backend import RoundBackend
from coda.engine.rollout import evaluate_checkpoint, rollout_batch, rollout_policy
from coda.policy.checkpoint import load_policy
from coda.policy.policy import INFERENCE_ROWS, block_sizes
from coda.policy.train import train_sft
from coda.scene.splits import build_split
from coda.sim.tabletop.validity import sim_check
from coda.sim.tabletop.env import TabletopEnv

SETTINGS = ["policy.text_model=hashing", "policy.torch_threads=1", "policy.hidden=32", "policy.layers=1",
            "policy.heads=2", "policy.batch_size=32", "policy.train_steps=30"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path, list]:
    """A briefly trained tabletop policy (with a critic, for value-guided selection) and scenes of two
    families whose entity and word counts differ."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("batch")
    cfg = build_config("tiny", overrides=[*SETTINGS, "policy.train_critic=true"])
    RoundBackend(cfg).collect_demos(build_split("pick_place", "sft", 2, seed=0, check=sim_check).valid, root / "demos")
    torch.manual_seed(0)
    train_sft([root / "demos"], cfg.policy, root / "policy.pt")
    cfg = build_config("tiny", overrides=[*SETTINGS, "sim.max_steps=40"])  # short episodes for the rollouts
    scenes = (build_split("pick_place", "position", 3, seed=1, check=sim_check).valid
              + build_split("stack", "distractor", 3, seed=1, check=sim_check).valid)
    return cfg, root / "policy.pt", scenes


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.spec.spec_id == y.spec.spec_id
        assert (x.length, x.success, x.episode_return, x.error) == (y.length, y.success, y.episode_return, y.error)
        np.testing.assert_array_equal(x.actions, y.actions)


def _one_by_one(cfg, policy, scenes, **kw) -> list:  # type: ignore[no-untyped-def]
    env = TabletopEnv(config=cfg.sim)
    try:
        with torch.no_grad():
            return [rollout_policy(env, policy, s, **kw) for s in scenes]
    finally:
        env.close()


def test_a_chunk_does_not_depend_on_the_batch_it_is_computed_in(trained) -> None:
    cfg, ckpt, scenes = trained
    policy = load_policy(ckpt)
    env = TabletopEnv(config=cfg.sim)
    obs = [env.reset_to(s)[0] for s in scenes]
    obs = (obs * (INFERENCE_ROWS // len(obs) + 2))[: INFERENCE_ROWS + 3]  # more than one block
    env.close()
    alone = np.stack([policy.predict_chunks([o]) for o in obs])[:, 0]
    together = policy.predict_chunks(obs)
    reversed_ = policy.predict_chunks(obs[::-1])[::-1]
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(reversed_, alone)


@pytest.mark.parametrize("frame", ["gripper", "task"])
def test_words_read_at_an_episodes_first_chunk_give_the_chunks_a_fresh_reading_gives(trained, frame) -> None:
    """An episode's words are read once (`EpisodeActions.text`); every later chunk is the bits reading them
    again gives, alone or in a batch of scenes that pad to different shapes. Read words, rows of one entity
    extent share a block whatever their word counts (drawer and stack: 4 entity slots, 8 and 16 instruction
    word pieces)."""
    cfg, ckpt, scenes = trained
    scenes = (scenes + build_split("drawer", "sft", 2, seed=1, check=sim_check).valid
              + build_split("stack", "sft", 2, seed=1, check=sim_check).valid)
    policy = load_policy(ckpt, overrides={"frame": frame} if frame == "task" else None)
    envs = [TabletopEnv(config=cfg.sim) for _ in scenes]
    obs = [e.reset_to(s)[0] for e, s in zip(envs, scenes)]
    episodes = [policy.episode_actions(i) for i in range(len(scenes))]
    sizes = block_sizes(policy._batch(obs))
    four = sizes[sizes[:, 0] == 4]
    assert len(four) >= 4 and len({tuple(r) for r in four.tolist()}) > 1  # one entity extent, other word counts
    try:
        for _ in range(3):
            with torch.no_grad():
                kept = policy.chunks_for(obs, episodes)
            rows = torch.stack([e.rows for e in episodes]) if episodes[0].rows is not None else None
            values = torch.stack([e.value for e in episodes])
            assert all(e.text is not None for e in episodes)
            np.testing.assert_array_equal(kept, policy.predict_chunks(obs, rows=rows, values=values))
            alone = [policy.predict_chunks([o], rows=None if rows is None else rows[i:i + 1], values=values[i:i + 1])
                     for i, o in enumerate(obs)]
            np.testing.assert_array_equal(kept, np.concatenate(alone))
            obs = [e.step(c[0])[0] for e, c in zip(envs, kept)]
    finally:
        for e in envs:
            e.close()


def test_value_guided_candidates_come_from_each_episodes_own_stream(trained) -> None:
    cfg, ckpt, scenes = trained
    policy = load_policy(ckpt, overrides={"value_guided_samples": 4})
    env = TabletopEnv(config=cfg.sim)
    obs = [env.reset_to(s)[0] for s in scenes]
    env.close()
    gens = lambda: [torch.Generator().manual_seed(100 + i) for i in range(len(obs))]  # noqa: E731
    alone = np.stack([policy.predict_chunks([o], [g]) for o, g in zip(obs, gens())])[:, 0]
    np.testing.assert_array_equal(policy.predict_chunks(obs, gens()), alone)
    other = policy.predict_chunks(obs, [torch.Generator().manual_seed(7) for _ in obs])
    assert not np.array_equal(other, alone)  # the streams matter: candidates are sampled
    with pytest.raises(Exception, match="2 streams for 6 observations"):
        policy.predict_chunks(obs, gens()[:2])


@pytest.mark.parametrize("overrides", [None, {"temporal_ensemble": 0.3}, {"value_guided_samples": 4}])
def test_batched_episodes_equal_one_at_a_time(trained, overrides) -> None:
    cfg, ckpt, scenes = trained
    policy = load_policy(ckpt, overrides=overrides)
    ref = _one_by_one(cfg, policy, scenes, record_states=True)
    envs = [TabletopEnv(config=cfg.sim) for _ in range(4)]  # fewer envs than scenes: scenes stream in
    done: list[int] = []
    try:
        with torch.no_grad():
            got = rollout_batch(envs, policy, scenes, record_states=True, on_done=lambda i, _: done.append(i))
    finally:
        for e in envs:
            e.close()
    _same(ref, got)
    assert sorted(done) == list(range(len(scenes)))
    for a, b in zip(ref, got):  # the state traces too
        assert len(a.states) == len(b.states) == a.length + 1
        for x, y in zip(a.states, b.states):
            assert x.time == y.time
            np.testing.assert_array_equal(x.gripper_pos, y.gripper_pos)
            np.testing.assert_array_equal(x.pos, y.pos)


def test_workers_and_batch_sizes_give_the_same_episodes(trained) -> None:
    cfg, ckpt, scenes = trained
    ref = evaluate_checkpoint(ckpt, scenes, cfg.sim, workers=1, batch=1, record_states=False)
    _same(ref, evaluate_checkpoint(ckpt, scenes, cfg.sim, workers=1, batch=5, record_states=False))
    _same(ref, evaluate_checkpoint(ckpt, scenes, cfg.sim, workers=2, batch=2, record_states=False))


class Still:
    """Holds the gripper where it starts, open; reset and select_action only."""

    def reset(self) -> None:
        self.obs = None

    def select_action(self, obs: dict) -> np.ndarray:
        p = obs["proprio"]
        return np.array([p[0], p[1], p[2], np.arctan2(p[3], p[4]), 1.0], np.float32)


def test_a_policy_that_cannot_batch_runs_one_episode_at_a_time(trained) -> None:
    cfg, _, scenes = trained
    envs = [TabletopEnv(config=cfg.sim) for _ in range(3)]
    try:
        got = rollout_batch(envs, Still(), scenes[:2], record_states=False)
    finally:
        for e in envs:
            e.close()
    assert [r.length for r in got] == [cfg.sim.max_steps] * 2 and not any(r.success for r in got)


class _Replay:
    """Plays back a fixed action sequence (then repeats its last action)."""

    def __init__(self, actions: np.ndarray) -> None:
        self.actions, self.t = actions, 0

    def reset(self) -> None:
        self.t = 0

    def select_action(self, obs: object) -> np.ndarray:
        a = self.actions[min(self.t, len(self.actions) - 1)]
        self.t += 1
        return a


def test_only_failed_episodes_are_rendered() -> None:
    from coda.sim.tabletop.experts import rollout_expert

    cfg = build_config("tiny", overrides=SETTINGS)
    spec = build_split("pick_place", "sft", 1, seed=3, check=sim_check).valid[0]
    env = TabletopEnv(config=cfg.sim)
    try:
        demo = rollout_expert(env, spec)
        assert demo.success
        solved = rollout_policy(env, _Replay(demo.actions), spec, keyframes=3, record_states=False)
        idle = rollout_policy(env, Still(), spec, max_steps=20, keyframes=3, record_states=False)
    finally:
        env.close()
    assert solved.success and solved.keyframes == {}
    assert not idle.success and sorted(idle.keyframes) == [0, 10, 20]
    assert all(f.shape == (cfg.sim.render_size, cfg.sim.render_size, 3) for f in idle.keyframes.values())
