"""The task frame (`policy.frame = "task"`): the scene read from the moved entity towards its destination, so a
turned and shifted scene is the same scene, and chunks predicted there turn back into the world's."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from policy_synthetic import expert_episodes, make_specs, tiny_cfg

from coda.policy.checkpoint import load_policy, save_checkpoint
from coda.policy.errors import CheckpointError
from coda.policy.features import (
    YAW_SLACK, Frame, chunk_from_frame, chunk_in_frame, gripper_pose, inputs_in_frame, obs_to_batch, rotate_xy, task_frame, to_absolute,
    to_relative, wrap_half_turn,
)
from coda.policy.networks import VALUE_BINS
from coda.policy.policy import ChunkPolicy
from coda.policy.samples import ChunkDataset
from coda.policy.train import build_policy, train_policy


def _scene(rng: np.random.Generator, m: int = 4, f: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    proprio = torch.zeros(1, 12)
    proprio[0, 0:3] = torch.tensor([*rng.uniform(-0.3, 0.3, 2), 0.2])
    yaw = float(rng.uniform(-1.5, 1.5))
    proprio[0, 3], proprio[0, 4] = math.sin(yaw), math.cos(yaw)
    proprio[0, 5:] = torch.from_numpy(rng.uniform(-0.1, 0.1, 7).astype(np.float32))
    objects = torch.from_numpy(rng.uniform(0.0, 1.0, (1, m, f)).astype(np.float32))
    objects[0, :, 0:2] = torch.from_numpy(rng.uniform(-0.3, 0.3, (m, 2)).astype(np.float32))
    mask = torch.ones(1, m, dtype=torch.bool)
    mask[0, -1] = False
    objects[0, -1] = 0.0
    return proprio, objects, mask


def _turned(proprio: torch.Tensor, objects: torch.Tensor, mask: torch.Tensor, angle: float, shift: tuple[float, float]):
    """The same scene turned by `angle` about the world's origin and shifted by `shift` (the gripper's yaw
    wrapped to the env's half turn)."""
    a = torch.tensor([angle])
    s = torch.tensor(shift)
    pr, ob = proprio.clone(), objects.clone()
    pr[:, 0:2] = rotate_xy(proprio[:, 0:2], a) + s
    yaw = wrap_half_turn(torch.atan2(proprio[:, 3], proprio[:, 4]) + angle)
    pr[:, 3], pr[:, 4] = torch.sin(yaw), torch.cos(yaw)
    if pr.shape[1] >= 10:
        pr[:, 7:9] = rotate_xy(proprio[:, 7:9], a)
    ob[..., 0:2] = (rotate_xy(objects[..., 0:2], a) + s) * mask.unsqueeze(-1)
    return pr, ob


def test_task_frame_origin_and_heading() -> None:
    objects = torch.zeros(1, 3, 5)
    objects[0, 0, :2] = torch.tensor([0.1, 0.2])
    objects[0, 1, :2] = torch.tensor([0.1, 0.5])
    mask = torch.tensor([[True, True, False]])
    rows = torch.tensor([[0, 1], [0, -1], [-1, 1], [0, 2], [1, 1]])
    f = task_frame(objects.expand(5, -1, -1), mask.expand(5, -1), rows)
    assert torch.allclose(f.origin[0], torch.tensor([0.1, 0.2])) and math.isclose(float(f.angle[0]), math.pi / 2, abs_tol=1e-6)
    assert torch.equal(f.origin[1], torch.zeros(2)) and float(f.angle[1]) == 0.0  # no destination: the world's frame
    assert torch.equal(f.origin[2], torch.zeros(2)) and float(f.angle[2]) == 0.0  # nothing moved: the world's frame
    assert float(f.angle[3]) == 0.0  # a padding row is no destination
    assert float(f.angle[4]) == 0.0 and torch.equal(f.origin[4], torch.zeros(2))  # a destination at the moved entity


@pytest.mark.parametrize("angle", [0.7, -2.4, math.pi / 2])
def test_inputs_in_frame_do_not_change_when_the_scene_turns_and_shifts(angle: float) -> None:
    rng = np.random.default_rng(3)
    proprio, objects, mask = _scene(rng)
    rows = torch.tensor([[1, 0]])
    pr0, ob0 = inputs_in_frame(proprio, objects, mask, task_frame(objects, mask, rows))
    pr_t, ob_t = _turned(proprio, objects, mask, angle, (0.05, -0.12))
    pr1, ob1 = inputs_in_frame(pr_t, ob_t, mask, task_frame(ob_t, mask, rows))
    assert torch.allclose(pr0, pr1, atol=1e-5)
    assert torch.allclose(ob0, ob1, atol=1e-5)
    assert torch.allclose(ob0[0, 1, 0:2], torch.zeros(2), atol=1e-6)  # the moved entity is the origin
    assert float(ob0[0, 0, 0]) > 0 and abs(float(ob0[0, 0, 1])) < 1e-5  # its destination lies on the x axis


def test_chunks_turn_into_the_frame_and_back() -> None:
    g = torch.Generator().manual_seed(0)
    rel = torch.randn(6, 4, 5, generator=g) * 0.2
    rel[..., 3] = torch.rand(6, 4, generator=g) * 2 * math.pi - math.pi
    frame = Frame(torch.zeros(6, 2), torch.rand(6, generator=g) * 6 - 3, torch.ones(6, dtype=torch.bool))
    back = chunk_from_frame(chunk_in_frame(rel, frame), frame)
    assert torch.allclose(back[..., [0, 1, 2, 4]], rel[..., [0, 1, 2, 4]], atol=1e-6)
    assert torch.allclose(torch.sin(2 * back[..., 3]), torch.sin(2 * rel[..., 3]), atol=1e-5)  # the same jaws
    pose = torch.zeros(6, 4)
    pose[:, 3] = torch.rand(6, generator=g) * math.pi - math.pi / 2
    yaw = to_absolute(back, pose, half_turn=frame.turned)[..., 3]
    assert bool(((yaw >= -math.pi / 2 - YAW_SLACK) & (yaw <= math.pi / 2 + YAW_SLACK)).all())  # within the yaw range
    assert torch.allclose(torch.cos(2 * yaw), torch.cos(2 * (rel[..., 3] + pose[:, None, 3])), atol=1e-5)


def test_a_yaw_target_at_the_end_of_the_range_does_not_flip_a_half_turn() -> None:
    """A gripper at +pi/2 asked for a little more keeps its end of the range (the env clips), whatever the
    sign of the small delta; only a target well past the range is met from the other end."""
    pose = torch.tensor([[0.0, 0.0, 0.1, math.pi / 2]])
    rel = torch.zeros(1, 3, 5)
    rel[0, :, 3] = torch.tensor([0.02, -0.02, 0.5])
    yaw = to_absolute(rel, pose, half_turn=True)[0, :, 3]
    assert torch.allclose(yaw[:2], torch.tensor([math.pi / 2 + 0.02, math.pi / 2 - 0.02]), atol=1e-6)
    assert math.isclose(float(yaw[2]), math.pi / 2 + 0.5 - math.pi, abs_tol=1e-6)
    unturned = to_absolute(rel, pose, half_turn=False)[0, :, 3]  # the gripper's frame: yaw deltas as they are
    assert math.isclose(float(unturned[2]), math.pi / 2 + 0.5, abs_tol=1e-6)


def test_a_goal_without_direction_is_read_as_in_the_gripper_frame() -> None:
    """No destination: the world's frame, where the yaw keeps its meaning (no half turn) and chunks are the
    gripper frame's, so a drawer policy reads what it would read without the task frame."""
    rng = np.random.default_rng(5)
    proprio, objects, mask = _scene(rng)
    proprio[0, 3], proprio[0, 4] = math.sin(1.5), math.cos(1.5)
    frame = task_frame(objects, mask, torch.tensor([[1, -1]]))
    assert not bool(frame.turned[0])
    pr, ob = inputs_in_frame(proprio, objects, mask, frame)
    assert torch.equal(pr, proprio) and torch.equal(ob, objects)
    rel = torch.zeros(1, 2, 5)
    rel[0, :, 3] = torch.tensor([1.57, -1.2])
    assert torch.equal(chunk_in_frame(rel, frame), rel)
    pose = torch.tensor([[0.0, 0.0, 0.1, 0.0]])
    assert torch.equal(to_absolute(chunk_from_frame(rel, frame), pose, half_turn=frame.turned), to_absolute(rel, pose))


def _goal_episodes(n: int, seed: int):
    """Reach demos whose goal names the reached object (moved role) and, as destination, the next object."""
    specs = make_specs(n, seed)
    return [dataclasses.replace(ep, goal_rows=(s.target, (s.target + 1) % len(s.objects)))
            for s, ep in zip(specs, expert_episodes(specs))]


def test_a_task_frame_policy_acts_the_same_in_a_turned_scene(hashing) -> None:
    eps = _goal_episodes(6, 0)
    data = ChunkDataset(eps, hashing, chunk_len=4)
    policy = ChunkPolicy(tiny_cfg(frame="task"), data.dims, data.stats("task"), hashing)
    obs = dict(eps[0].observations[0])
    ob = obs_to_batch([obs], hashing)
    rows = torch.tensor([[eps[0].goal_rows[0], 2]])
    angle, shift = 1.1, (0.03, 0.07)
    pr_t, ob_t = _turned(ob.proprio, ob.objects, ob.object_mask, angle, shift)
    turned = ob._replace(proprio=pr_t, objects=ob_t)
    with torch.no_grad():
        e0, e1 = policy.encoder.encode(ob, policy.stats, rows), policy.encoder.encode(turned, policy.stats, rows)
        assert torch.allclose(e0.z, e1.z, atol=1e-4)
        c0 = policy._to_env(policy.actor(e0.z)[0], ob, e0.frame)
        c1 = policy._to_env(policy.actor(e1.z)[0], turned, e1.frame)
    want = rotate_xy(c0[..., 0:2], torch.tensor([angle])) + torch.tensor(shift)
    assert torch.allclose(c1[..., 0:2], want, atol=1e-4)
    assert torch.allclose(c1[..., 2], c0[..., 2], atol=1e-4)  # heights and grip do not turn
    assert torch.allclose(c1[..., 4], c0[..., 4], atol=1e-4)
    turned_yaw = c0[..., 3] + angle
    assert torch.allclose(torch.sin(2 * c1[..., 3]), torch.sin(2 * turned_yaw), atol=1e-4)


def test_task_frame_statistics_are_read_in_each_goal_frame(hashing) -> None:
    eps = _goal_episodes(6, 1)
    data = ChunkDataset(eps, hashing, chunk_len=4)
    rows = data.goal_rows[data.row_episode]
    i = torch.arange(len(rows))
    moved, dest = data.objects[i, rows[:, 0], 0:2], data.objects[i, rows[:, 1], 0:2]
    angle = torch.atan2(*(dest - moved).flip(1).T)
    want = rotate_xy(data.proprio[:, 0:2] - moved, -angle).mean(0)
    assert torch.allclose(data.stats("task").proprio_mean[0:2], want, atol=1e-5)


def test_a_goal_without_destination_is_read_in_the_world_frame(hashing) -> None:
    eps = [dataclasses.replace(ep, goal_rows=(ep.goal_rows[0], -1)) for ep in _goal_episodes(6, 1)]
    data = ChunkDataset(eps, hashing, chunk_len=4)
    world, task = data.stats("gripper"), data.stats("task")
    rows = data.goal_rows[data.row_episode]
    assert torch.allclose(world.proprio_mean[0:2], task.proprio_mean[0:2], atol=1e-6)  # no destination: the world's
    assert torch.allclose(world.object_mean[0:3], task.object_mean[0:3], atol=1e-6)
    assert torch.allclose(world.action_mean, task.action_mean, atol=1e-6)
    with pytest.raises(Exception, match="frame"):
        data.stats("table")


def test_a_task_frame_policy_trains_saves_and_refuses_the_other_frame(hashing, tmp_path) -> None:
    eps = _goal_episodes(6, 2)
    cfg = tiny_cfg(frame="task", train_steps=20)
    data = ChunkDataset(eps, hashing, chunk_len=cfg.chunk_len)
    policy = build_policy(cfg, data, hashing)
    result = train_policy(policy, data, steps=20)
    assert np.isfinite(result.metrics["loss"])
    ckpt = save_checkpoint(policy, tmp_path / "task.pt")
    again = load_policy(ckpt, text=hashing)
    obs = eps[0].observations[0]
    assert np.array_equal(again.predict_chunks([obs]), policy.predict_chunks([obs]))
    with pytest.raises(CheckpointError, match="frame"):
        load_policy(ckpt, text=hashing, overrides={"frame": "gripper"})
    rel = to_relative(torch.from_numpy(again.predict_chunks([obs])), gripper_pose(obs_to_batch([obs], hashing).proprio))
    assert bool(torch.isfinite(rel).all())


def test_task_frame_needs_token_grounding() -> None:
    with pytest.raises(ValueError, match="frame 'task' needs grounding 'tokens'"):
        tiny_cfg(frame="task", grounding="sentence")


def test_task_frame_statistics_need_goal_rows(hashing) -> None:
    eps = expert_episodes(make_specs(3, 4))  # no goal rows recorded
    with pytest.raises(Exception, match="policy.frame = 'task' needs episodes whose goal names"):
        ChunkDataset(eps, hashing, chunk_len=4).stats("task")


def test_an_episode_acts_on_the_entities_its_first_chunk_picked(hashing) -> None:
    """With `ground_once` an episode's role pointers are read at its first chunk and kept: later chunks act in
    the task frame of those entities, whatever the pointers would pick from the later layout."""
    eps = _goal_episodes(6, 3)
    data = ChunkDataset(eps, hashing, chunk_len=4)
    policy = ChunkPolicy(tiny_cfg(frame="task", value_once=False), data.dims, data.stats("task"), hashing)
    first, later = dict(eps[0].observations[0]), dict(eps[0].observations[6])
    ep = policy.episode_actions(3)
    policy.chunks_for([first], [ep])
    assert ep.rows is not None and torch.equal(ep.rows, policy.ground([first])[0])  # fixed at the first chunk
    n = int(obs_to_batch([later], hashing).object_mask.sum())
    own = policy.ground([later])[0]
    ep.rows = torch.tensor([int(own[0]), (int(own[1]) + 1) % n])  # a destination the later pointers do not pick
    kept = policy.chunks_for([later], [ep])
    np.testing.assert_array_equal(kept, policy.predict_chunks([later], rows=ep.rows[None]))
    assert not np.allclose(kept, policy.predict_chunks([later]))  # its own picks would act elsewhere
    policy.cfg = policy.cfg.model_copy(update={"ground_once": False})
    fresh = policy.episode_actions(3)
    policy.chunks_for([first], [fresh])
    assert fresh.rows is None  # off: every chunk reads the pointers again
    np.testing.assert_array_equal(policy.chunks_for([later], [fresh]), policy.predict_chunks([later]))


def test_an_episode_acts_on_the_goal_number_its_first_chunk_read(hashing) -> None:
    """With `value_once` the goal's number is read at an episode's first chunk and kept: later chunks act on
    it, whatever the number's prior would read from the later state (a drawer asked "all the way" in unfamiliar
    words otherwise slides to "halfway" as it passes half open)."""
    eps = _goal_episodes(6, 3)
    data = ChunkDataset(eps, hashing, chunk_len=4)
    policy = ChunkPolicy(tiny_cfg(frame="task"), data.dims, data.stats("task"), hashing)
    first, later = dict(eps[0].observations[0]), dict(eps[0].observations[6])
    ep = policy.episode_actions(3)
    policy.chunks_for([first], [ep])
    rows, values = policy.read_instruction([first])
    assert ep.value is not None and float(ep.value) == float(values[0]) and float(ep.value) in VALUE_BINS
    assert torch.equal(ep.rows, rows[0])
    own = float(policy.read_instruction([later])[1][0])
    ep.value = torch.tensor(1.0 if own != 1.0 else 0.0)  # a number the later reading does not give
    kept = policy.chunks_for([later], [ep])
    np.testing.assert_array_equal(kept, policy.predict_chunks([later], rows=ep.rows[None], values=ep.value[None]))
    assert not np.allclose(kept, policy.predict_chunks([later], rows=ep.rows[None]))  # its own reading acts otherwise
    policy.cfg = policy.cfg.model_copy(update={"value_once": False})
    fresh = policy.episode_actions(3)
    policy.chunks_for([first], [fresh])
    assert fresh.value is None  # off: every chunk reads the number again
    np.testing.assert_array_equal(policy.chunks_for([later], [fresh]),
                                  policy.predict_chunks([later], rows=fresh.rows[None]))
