"""Shapes and contracts: observations -> tensors, relative chunks, forward, predict, select, reset."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from coda.policy.errors import ObservationError, PolicyUsageError
from coda.policy.features import gripper_pose, obs_to_batch, to_absolute, to_relative
from coda.policy.samples import ChunkDataset
from coda.policy.train import build_policy
from policy_synthetic import PointReachEnv, expert_episodes, make_specs, tiny_cfg


@pytest.fixture(scope="module")
def data():
    from coda.policy.text import HashingTextEncoder

    return ChunkDataset(expert_episodes(make_specs(6, seed=1)), HashingTextEncoder(), chunk_len=4)


def test_relative_round_trip_wraps_yaw() -> None:
    g = torch.Generator().manual_seed(0)
    pose = torch.tensor([[0.1, -0.2, 0.3, 3.0]])
    chunk = torch.rand((1, 4, 5), generator=g)
    chunk[..., 3] = torch.tensor([-3.0, 3.1, 0.0, -3.1])
    rel = to_relative(chunk, pose)
    assert rel[..., 3].abs().max() <= math.pi
    assert abs(float(rel[0, 0, 3]) - (-3.0 - 3.0 + 2 * math.pi)) < 1e-5  # wrapped, not -6
    back = to_absolute(rel, pose)
    torch.testing.assert_close(back[..., :3], chunk[..., :3])
    torch.testing.assert_close(torch.cos(back[..., 3]), torch.cos(chunk[..., 3]))
    proprio = torch.tensor([[0.1, 0.2, 0.3, math.sin(1.0), math.cos(1.0), 1.0]])
    torch.testing.assert_close(gripper_pose(proprio), torch.tensor([[0.1, 0.2, 0.3, 1.0]]))


def test_observations_stack_with_any_entity_count(hashing) -> None:
    env = PointReachEnv()
    o3 = env.reset_to(make_specs(1, 0, n_objects=3)[0])[0]
    o5 = env.reset_to(make_specs(1, 0, n_objects=5)[0])[0]
    b = obs_to_batch([o3, o5], hashing)
    assert b.proprio.shape == (2, 7)
    assert b.objects.shape == (2, 5, 10) and b.object_mask.shape == (2, 5)  # trailing padding trimmed
    assert b.object_emb.shape == (2, 5, 384) and b.instruction_emb.shape == (2, 384)
    assert b.object_mask.sum(1).tolist() == [3, 5]
    assert not b.object_emb[0, 3:].any(), "padding slots embed to zeros"
    assert b.object_mask[:, :3].all() and not b.object_mask[0, 3:].any()
    light = obs_to_batch([o3, o5], hashing, word_pieces=False)  # what a policy that has read the words needs
    assert light.object_tokens.shape == (2, 5, 1, 384) and light.instruction_tokens.shape == (2, 1, 384)
    assert not light.object_token_mask.any() and not light.instruction_token_mask.any()
    assert b.object_token_mask.any() and b.instruction_token_mask.any()
    for name in ("proprio", "objects", "object_mask", "object_emb", "instruction_emb"):
        assert torch.equal(getattr(light, name), getattr(b, name)), name


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("proprio", np.zeros(3, np.float32), "field 'proprio' must have shape (P,) with P >= 5, got (3,)"),
        ("object_mask", np.ones(2, np.int8), "field 'object_mask' must have shape (4,), got (2,)"),
        ("object_text", ("a",), "field 'object_text' must hold 4 strings, got 1"),
        ("instruction", "", "field 'instruction' must be a non-empty str, got ''"),
    ],
)
def test_bad_observations_are_named(hashing, key: str, value: object, message: str) -> None:
    obs = dict(PointReachEnv().reset_to(make_specs(1, 0)[0])[0])
    obs[key] = value
    with pytest.raises(ObservationError) as e:
        obs_to_batch([obs], hashing)
    assert message in str(e.value)
    del obs[key]
    with pytest.raises(ObservationError, match=f"field '{key}' is missing"):
        obs_to_batch([obs], hashing)


def test_forward_and_inference_shapes(data, hashing) -> None:
    cfg = tiny_cfg()
    policy = build_policy(cfg, data, hashing)
    batch = data.sample(8, torch.Generator().manual_seed(0))
    assert batch.bc.chunk.shape == (8, 4, 5)
    loss, metrics = policy(batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert {"loss", "bc", "std_nll"} <= metrics.keys()
    obs = PointReachEnv().reset_to(make_specs(1, 5)[0])[0]
    chunk = policy.predict_chunk(obs)
    assert chunk.shape == (4, 5) and chunk.dtype == np.float32
    assert ((chunk[:, 4] >= 0) & (chunk[:, 4] <= 1)).all()
    assert policy.sample_chunks(obs, 5).shape == (5, 4, 5)
    with pytest.raises(PolicyUsageError, match="needs a trained critic"):
        policy.value(obs, chunk)


def test_padding_rows_do_not_change_the_prediction(data, hashing) -> None:
    policy = build_policy(tiny_cfg(), data, hashing)
    env = PointReachEnv()
    small = env.reset_to(make_specs(1, 7, n_objects=3)[0])[0]
    large = env.reset_to(make_specs(1, 8, n_objects=5)[0])[0]
    alone = obs_to_batch([small], hashing)
    mixed = obs_to_batch([small, large], hashing)  # small is padded to 5 entities here
    assert alone.objects.shape[1] == 3 and mixed.objects.shape[1] == 5
    with torch.no_grad():
        z_alone = policy.encoder(alone, policy.stats)[0]
        z_mixed = policy.encoder(mixed, policy.stats)[0]
    torch.testing.assert_close(z_alone, z_mixed, atol=1e-5, rtol=0)


def test_select_action_queue_and_reset(data, hashing) -> None:
    policy = build_policy(tiny_cfg(n_action_steps=2), data, hashing)
    env = PointReachEnv()
    obs = env.reset_to(make_specs(1, 3)[0])[0]
    chunk = policy.predict_chunk(obs)
    a0 = policy.select_action(obs)
    np.testing.assert_array_equal(a0, chunk[0])
    np.testing.assert_array_equal(policy.select_action(obs), chunk[1])  # from the queue, not re-planned
    assert len(policy._episode.queue) == 0
    policy.reset()
    np.testing.assert_array_equal(policy.select_action(obs), a0)


def test_temporal_ensemble_averages_overlapping_chunks(data, hashing) -> None:
    policy = build_policy(tiny_cfg(temporal_ensemble=0.5), data, hashing)
    env = PointReachEnv()
    o0 = env.reset_to(make_specs(1, 3)[0])[0]
    c0 = policy.predict_chunk(o0)
    np.testing.assert_allclose(policy.select_action(o0), c0[0], atol=1e-6)
    o1 = env.step(c0[0])[0]
    c1 = policy.predict_chunk(o1)
    w = np.exp(-0.5 * np.arange(2))
    w /= w.sum()
    want = w[0] * c0[1] + w[1] * c1[0]
    got = policy.select_action(o1)
    np.testing.assert_allclose(got[[0, 1, 2, 4]], want[[0, 1, 2, 4]], atol=1e-5)


def test_same_seed_same_weights(data, hashing) -> None:
    a = build_policy(tiny_cfg(seed=3), data, hashing).state_dict()
    b = build_policy(tiny_cfg(seed=3), data, hashing).state_dict()
    c = build_policy(tiny_cfg(seed=4), data, hashing).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
