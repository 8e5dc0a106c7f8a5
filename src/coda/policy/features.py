"""Observations as tensors, relative action chunks, and normalisation statistics.

The env contract (see `coda.sim.tabletop`): an observation is a mapping with

- "proprio"      float32 (P,)   gripper position x, y, z (0:3), sin yaw (3), cos yaw (4), finger gap (5),
                                last grip command (6), gripper velocity (7:10), then the rest;
- "objects"      float32 (M, F) one zero-padded row per entity, its position x, y, z first (0:3);
- "object_mask"  int8 (M,)      1 for a real entity, 0 for padding;
- "object_text"  M strings      an entity's description in words ("" for padding);
- "instruction"  str.

An action is float32 (5,): absolute end-effector target x, y, z, yaw and grip in [0, 1] (1 = open).
The policy predicts chunks RELATIVE to the gripper pose at the chunk's first observation (deltas of x, y, z
and yaw; grip stays absolute) because absolute-coordinate chunks do not extrapolate to unseen regions.
P, M and F are read from the observations; only the leading layout above is fixed.

Task frame (`policy.frame = "task"`): the network may read the scene in the frame of its goal instead of the
world's. The origin is the entity the goal moves, the x axis points from it to its destination in the table
plane. Positions (gripper, entities), the gripper's velocity and its yaw are expressed in that frame, and
chunks are predicted there: a push towards an unseen region is then the push the demos showed, turned. Only
the leading layout above is turned; the other feature columns (an entity's heading, say) stay in the
world's frame. Parallel jaws look the same after a half turn, and an expert's world yaw lies in a half turn,
so in a turned frame the gripper's yaw is read as (sin 2 yaw, cos 2 yaw) and a chunk's yaw deltas are taken
modulo a half turn. A goal without a direction (a drawer's opening: no destination) is not turned: it is
read exactly as in the gripper's frame, where yaw keeps its own meaning (a drawer handle is grasped at the
end of the yaw range, where a half-turn reading would be ambiguous).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from coda.policy.errors import ObservationError
from coda.policy.text import TextEmbedder

ACTION_DIM = 5  # x, y, z, yaw, grip
PROPRIO_POS = slice(0, 3)  # gripper position in proprio
PROPRIO_YAW_SIN, PROPRIO_YAW_COS = 3, 4  # gripper yaw as (sin, cos) in proprio
PROPRIO_MOTION = slice(6, 10)  # last grip command and gripper velocity: the policy's own recent motion
OBJECT_POS = slice(0, 3)  # entity position in an object row
PROPRIO_VEL = slice(7, 10)  # gripper velocity in proprio
OBS_KEYS = ("proprio", "objects", "object_mask", "object_text", "instruction")
INPUT_STD_FLOOR = 1e-2  # constant input columns must not blow up when they vary out of distribution
ACTION_STD_FLOOR = 1e-3
INPUT_CLIP = 10.0  # normalised inputs are clipped to +-this (out-of-distribution colours, far positions)
FRAMES = ("gripper", "task")  # where the network reads the scene and predicts chunks (see the module docstring)
FRAME_MIN_DIST = 1e-3  # m: a destination closer than this to the moved entity gives no direction (world axes)
YAW_SLACK = 0.1  # rad: a turned frame's yaw target this far past the yaw range stays (clipped), not a half turn away


class ObsBatch(NamedTuple):
    """A batch of observations in raw units with text already embedded (sentences and word pieces)."""

    proprio: Tensor  # (B, P)
    objects: Tensor  # (B, M, F)
    object_mask: Tensor  # (B, M) bool, True = real entity
    object_emb: Tensor  # (B, M, E) description embeddings (zeros for padding)
    instruction_emb: Tensor  # (B, E)
    object_tokens: Tensor  # (B, M, J, E) word-piece embeddings of each description (zeros past its length)
    object_token_mask: Tensor  # (B, M, J) bool, True = a real word piece
    instruction_tokens: Tensor  # (B, L, E) word-piece embeddings of the instruction
    instruction_token_mask: Tensor  # (B, L) bool

    def index(self, idx: Tensor) -> "ObsBatch":
        """Rows `idx` of every field."""
        return ObsBatch(*(t[idx] for t in self))


@dataclass(frozen=True)
class ObsDims:
    """Sizes the network is built for; M (entities per scene) is free."""

    proprio: int  # P
    object_features: int  # F
    text: int  # E
    action: int = ACTION_DIM  # A

    def as_dict(self) -> dict[str, int]:
        return {"proprio": self.proprio, "object_features": self.object_features, "text": self.text, "action": self.action}


def validate_obs(obs: Mapping[str, Any], where: str = "observation") -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], str]:
    """Check one observation against the contract and return its parts as arrays.

    Returns:
        (proprio (P,), objects (M, F), mask (M,) bool, object_text (M,), instruction).
    Raises:
        ObservationError: a key is missing or a field has the wrong shape or type (named).
    """
    if not isinstance(obs, Mapping):
        raise ObservationError(f"{where} must be a mapping with keys {list(OBS_KEYS)}, got {type(obs).__name__}")
    for k in OBS_KEYS:
        if k not in obs:
            raise ObservationError(f"{where} field '{k}' is missing (have {sorted(obs)})")
    proprio = np.asarray(obs["proprio"], dtype=np.float32)
    if proprio.ndim != 1 or proprio.shape[0] < 5:
        raise ObservationError(f"{where} field 'proprio' must have shape (P,) with P >= 5, got {proprio.shape}")
    objects = np.asarray(obs["objects"], dtype=np.float32)
    mask = np.asarray(obs["object_mask"]).astype(bool)
    text = list(obs["object_text"])
    if objects.ndim != 2 or objects.shape[1] < 3:
        raise ObservationError(f"{where} field 'objects' must have shape (M, F) with F >= 3, got {objects.shape}")
    if mask.shape != (objects.shape[0],):
        raise ObservationError(f"{where} field 'object_mask' must have shape ({objects.shape[0]},), got {mask.shape}")
    if len(text) != objects.shape[0]:
        raise ObservationError(f"{where} field 'object_text' must hold {objects.shape[0]} strings, got {len(text)}")
    instruction = obs["instruction"]
    if not isinstance(instruction, str) or not instruction:
        raise ObservationError(f"{where} field 'instruction' must be a non-empty str, got {instruction!r}")
    if not np.all(np.isfinite(proprio)) or not np.all(np.isfinite(objects)):
        raise ObservationError(f"{where} fields 'proprio'/'objects' hold non-finite values")
    return proprio, objects, mask, [str(t) for t in text], instruction


def obs_to_batch(observations: Sequence[Mapping[str, Any]], text: TextEmbedder, word_pieces: bool = True) -> ObsBatch:
    """Stack env observations (any number of entities each) into an ObsBatch, padding M to the largest.
    Without `word_pieces` the word-piece fields hold one masked-out zero slot per text (J = L = 1): for a
    caller that already has what the words read as and reads no word piece.

    Raises:
        ObservationError: an observation breaks the contract, or P/F differ between observations.
    """
    parts = [validate_obs(o, f"observation {i}") for i, o in enumerate(observations)]
    if not parts:
        raise ObservationError("observations must not be empty")
    p_dim, f_dim = parts[0][0].shape[0], parts[0][1].shape[1]
    # slots after the last real entity only cost attention time: keep up to the last one in any observation
    m_max = max(1, max((int(np.flatnonzero(p[2])[-1]) + 1) if p[2].any() else 0 for p in parts))
    b = len(parts)
    proprio = np.zeros((b, p_dim), np.float32)
    objects = np.zeros((b, m_max, f_dim), np.float32)
    mask = np.zeros((b, m_max), bool)
    obj_text = [""] * (b * m_max)
    for i, (pr, ob, mk, tx, _) in enumerate(parts):
        if pr.shape[0] != p_dim or ob.shape[1] != f_dim:
            raise ObservationError(
                f"observation {i} has P={pr.shape[0]}, F={ob.shape[1]} but observation 0 has P={p_dim}, F={f_dim}"
            )
        m = min(ob.shape[0], m_max)
        proprio[i], objects[i, :m], mask[i, :m] = pr, ob[:m], mk[:m]
        obj_text[i * m_max : i * m_max + m] = [t if k else "" for t, k in zip(tx[:m], mk[:m])]
    emb = text.encode(obj_text).reshape(b, m_max, -1)
    instr = text.encode([p[4] for p in parts])
    if word_pieces:
        obj_tok, obj_tok_mask = pad_tokens(text.encode_tokens(obj_text), text.dim)
        ins_tok, ins_tok_mask = pad_tokens(text.encode_tokens([p[4] for p in parts]), text.dim)
    else:
        obj_tok, obj_tok_mask = np.zeros((b * m_max, 1, text.dim), np.float32), np.zeros((b * m_max, 1), bool)
        ins_tok, ins_tok_mask = np.zeros((b, 1, text.dim), np.float32), np.zeros((b, 1), bool)
    return ObsBatch(
        torch.from_numpy(proprio),
        torch.from_numpy(objects),
        torch.from_numpy(mask),
        torch.from_numpy(emb),
        torch.from_numpy(instr),
        torch.from_numpy(obj_tok).view(b, m_max, *obj_tok.shape[1:]),
        torch.from_numpy(obj_tok_mask).view(b, m_max, -1),
        torch.from_numpy(ins_tok),
        torch.from_numpy(ins_tok_mask),
    )


def padded_sizes(ob: ObsBatch) -> Tensor:
    """(B, 3) long: each row's own entity, description-token and instruction-token extents (M up to its last
    real entity, J its longest description, L its instruction; each at least 1), what `obs_to_batch` would pad
    that row to alone."""
    b, m_max = ob.object_mask.shape
    slots = torch.arange(1, m_max + 1).expand(b, m_max)
    m = torch.where(ob.object_mask, slots, 0).amax(dim=1).clamp(min=1)
    j = ob.object_token_mask.sum(dim=2).amax(dim=1).clamp(min=1)
    ln = ob.instruction_token_mask.sum(dim=1).clamp(min=1)
    return torch.stack([m, j, ln], dim=1)


def resize_batch(ob: ObsBatch, m: int, j: int, ln: int) -> ObsBatch:
    """`ob` with M, J and L padded (zeros, masked out) or cut to exactly m, j and ln; cutting must drop only
    padding (`padded_sizes` of every row at most (m, j, ln))."""

    def fit(t: Tensor, dim: int, n: int) -> Tensor:
        if t.shape[dim] >= n:
            return t.narrow(dim, 0, n)
        shape = list(t.shape)
        shape[dim] = n - t.shape[dim]
        return torch.cat([t, t.new_zeros(shape)], dim=dim)

    objects, mask, emb = (fit(t, 1, m) for t in (ob.objects, ob.object_mask, ob.object_emb))
    obj_tok = fit(fit(ob.object_tokens, 1, m), 2, j)
    obj_tok_mask = fit(fit(ob.object_token_mask, 1, m), 2, j)
    return ObsBatch(ob.proprio, objects, mask, emb, ob.instruction_emb, obj_tok, obj_tok_mask,
                    fit(ob.instruction_tokens, 1, ln), fit(ob.instruction_token_mask, 1, ln))


def pad_tokens(tokens: Sequence[np.ndarray], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-text token arrays (L_i, E) -> zero-padded (N, L, E) and mask (N, L), L = max(1, max L_i)."""
    length = max([1, *(len(t) for t in tokens)])
    out = np.zeros((len(tokens), length, dim), np.float32)
    mask = np.zeros((len(tokens), length), bool)
    for i, t in enumerate(tokens):
        out[i, : len(t)] = t
        mask[i, : len(t)] = True
    return out, mask


# ---- relative action chunks -----------------------------------------------------------------------


def wrap_angle(x: Tensor) -> Tensor:
    """Angles wrapped to [-pi, pi)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


def gripper_pose(proprio: Tensor) -> Tensor:
    """(..., P) proprio -> (..., 4) gripper x, y, z, yaw."""
    yaw = torch.atan2(proprio[..., PROPRIO_YAW_SIN], proprio[..., PROPRIO_YAW_COS])
    return torch.cat([proprio[..., PROPRIO_POS], yaw.unsqueeze(-1)], dim=-1)


def to_relative(actions: Tensor, pose: Tensor) -> Tensor:
    """Absolute targets (..., H, A) -> deltas from `pose` (..., 4) for x, y, z, yaw; grip unchanged."""
    p = pose.unsqueeze(-2)
    out = actions.clone()
    out[..., 0:3] = actions[..., 0:3] - p[..., 0:3]
    out[..., 3] = wrap_angle(actions[..., 3] - p[..., 3])
    return out


def to_absolute(rel: Tensor, pose: Tensor, half_turn: Tensor | bool = False) -> Tensor:
    """Inverse of `to_relative`: deltas (..., H, A) + pose (..., 4) -> absolute targets, grip in [0, 1].

    Where `half_turn` (a bool, or (B,) per leading row) the yaw deltas are read modulo a half turn
    (`chunk_in_frame`): the target is the nearest yaw of the same jaws, moved by a half turn only once it lies
    beyond the yaw range [-pi/2, pi/2] by more than `YAW_SLACK` (the env clips what is in between), so a target
    at the end of the range does not flip from one end to the other from one chunk to the next."""
    p = pose.unsqueeze(-2)
    out = rel.clone()
    out[..., 0:3] = rel[..., 0:3] + p[..., 0:3]
    out[..., 3] = wrap_angle(rel[..., 3] + p[..., 3])
    turned = torch.as_tensor(half_turn, dtype=torch.bool)
    if bool(turned.any()):
        yaw = p[..., 3] + wrap_half_turn(rel[..., 3])
        yaw = torch.where(yaw > math.pi / 2 + YAW_SLACK, yaw - math.pi, yaw)
        yaw = torch.where(yaw < -math.pi / 2 - YAW_SLACK, yaw + math.pi, yaw)
        turned = turned.view(*turned.shape, *([1] * (yaw.dim() - turned.dim())))
        out[..., 3] = torch.where(turned, yaw, out[..., 3])
    out[..., 4] = rel[..., 4].clamp(0.0, 1.0)
    return out


def wrap_half_turn(x: Tensor) -> Tensor:
    """Angles wrapped to [-pi/2, pi/2): parallel jaws at yaw and yaw + pi are the same gripper."""
    return torch.remainder(x + math.pi / 2, math.pi) - math.pi / 2


def rotate_xy(v: Tensor, angle: Tensor) -> Tensor:
    """(B, ..., 2) vectors turned by `angle` (B,) radians about the z axis."""
    c, s = torch.cos(angle), torch.sin(angle)
    shape = (-1, *([1] * (v.dim() - 2)))
    c, s = c.view(shape), s.view(shape)
    x, y = v[..., 0], v[..., 1]
    return torch.stack([c * x - s * y, s * x + c * y], dim=-1)


class Frame(NamedTuple):
    """A task frame per observation: its origin in the table plane, the heading of its x axis, and whether it
    is turned at all (a goal with a direction) or the world's, read as in the gripper's frame."""

    origin: Tensor  # (B, 2) xy of the moved entity (zeros: the world's origin)
    angle: Tensor  # (B,) heading of the x axis, radians (0: the world's axes)
    turned: Tensor  # (B,) bool: a goal with a direction (half-turn yaw); False: the world's frame

    def index(self, idx: Tensor) -> "Frame":
        """The frames of the observations `idx`."""
        return Frame(self.origin[idx], self.angle[idx], self.turned[idx])


def task_frame(objects: Tensor, mask: Tensor, rows: Tensor) -> Frame:
    """The task frame of each observation from raw entity rows `objects` (B, M, F), `mask` (B, M) and the rows
    (B, 2) of the moved entity and its destination (-1: none). A goal without a direction (no moved entity,
    no destination, or one at the moved entity, as a drawer's) has no task frame: the world's."""
    b, m = mask.shape
    moved, dest = rows[:, 0], rows[:, 1]
    i = torch.arange(b)
    has_m = (moved >= 0) & (moved < m)
    has_m &= mask[i, moved.clamp(0, m - 1)]
    has_d = has_m & (dest >= 0) & (dest < m)
    has_d &= mask[i, dest.clamp(0, m - 1)]
    xy = objects[..., 0:2]
    origin = torch.where(has_m.unsqueeze(1), xy[i, moved.clamp(0, m - 1)], torch.zeros(b, 2, dtype=xy.dtype))
    delta = torch.where(has_d.unsqueeze(1), xy[i, dest.clamp(0, m - 1)] - origin, torch.zeros_like(origin))
    far = delta.norm(dim=1) > FRAME_MIN_DIST
    angle = torch.where(far, torch.atan2(delta[:, 1], delta[:, 0]), torch.zeros_like(delta[:, 0]))
    origin = torch.where(far.unsqueeze(1), origin, torch.zeros_like(origin))
    return Frame(origin, angle, far)


def inputs_in_frame(proprio: Tensor, objects: Tensor, mask: Tensor, frame: Frame) -> tuple[Tensor, Tensor]:
    """Raw proprio (B, P) and entity rows (B, M, F) expressed in `frame`: positions from its origin along its
    axes, the gripper's velocity along its axes and, in a turned frame, its yaw as (sin, cos) of twice the
    yaw from the frame's x axis (the world's frame leaves the yaw as it is)."""
    pr, ob = proprio.clone(), objects.clone()
    pr[:, 0:2] = rotate_xy(proprio[:, 0:2] - frame.origin, -frame.angle)
    yaw = torch.atan2(proprio[:, PROPRIO_YAW_SIN], proprio[:, PROPRIO_YAW_COS]) - frame.angle
    pr[:, PROPRIO_YAW_SIN] = torch.where(frame.turned, torch.sin(2 * yaw), proprio[:, PROPRIO_YAW_SIN])
    pr[:, PROPRIO_YAW_COS] = torch.where(frame.turned, torch.cos(2 * yaw), proprio[:, PROPRIO_YAW_COS])
    if pr.shape[1] >= PROPRIO_VEL.stop:
        pr[:, PROPRIO_VEL.start : PROPRIO_VEL.start + 2] = rotate_xy(proprio[:, PROPRIO_VEL.start : PROPRIO_VEL.start + 2], -frame.angle)
    ob[..., 0:2] = rotate_xy(objects[..., 0:2] - frame.origin.unsqueeze(1), -frame.angle) * mask.unsqueeze(-1)
    return pr, ob


def obs_in_frame(obs: ObsBatch, frame: Frame) -> ObsBatch:
    """`obs` with its proprio and entity rows expressed in `frame` (`inputs_in_frame`); text unchanged."""
    pr, ob = inputs_in_frame(obs.proprio, obs.objects, obs.object_mask, frame)
    return obs._replace(proprio=pr, objects=ob)


def chunk_in_frame(rel: Tensor, frame: Frame) -> Tensor:
    """Relative chunks (B, ..., H, A) in the world's axes -> along `frame`'s axes (B frames), yaw deltas
    modulo a half turn where the frame is turned."""
    out = rel.clone()
    out[..., 0:2] = rotate_xy(rel[..., 0:2], -frame.angle)
    turned = frame.turned.view(-1, *([1] * (rel.dim() - 2)))
    out[..., 3] = torch.where(turned, wrap_half_turn(rel[..., 3]), rel[..., 3])
    return out


def chunk_from_frame(rel: Tensor, frame: Frame) -> Tensor:
    """Inverse of `chunk_in_frame` up to the half turn: chunks along `frame`'s axes -> the world's axes (the
    yaw deltas are read modulo a half turn by `to_absolute(..., half_turn=frame.turned)`)."""
    out = rel.clone()
    out[..., 0:2] = rotate_xy(rel[..., 0:2], frame.angle)
    return out


def relative_positions(obs: ObsBatch) -> Tensor:
    """(B, M, 3) entity positions relative to the gripper (zeros for padding)."""
    rel = obs.objects[..., OBJECT_POS] - obs.proprio[:, None, PROPRIO_POS]
    return rel * obs.object_mask.unsqueeze(-1)


# ---- normalisation ----------------------------------------------------------------------------------


@dataclass
class NormStats:
    """Mean and std of the inputs and of the relative action chunks, computed from the training data."""

    proprio_mean: Tensor  # (P,)
    proprio_std: Tensor  # (P,)
    object_mean: Tensor  # (F,)
    object_std: Tensor  # (F,)
    relpos_mean: Tensor  # (3,)
    relpos_std: Tensor  # (3,)
    action_mean: Tensor  # (H, A) per chunk step: later steps move farther
    action_std: Tensor  # (H, A)

    FIELDS = (
        "proprio_mean", "proprio_std", "object_mean", "object_std",
        "relpos_mean", "relpos_std", "action_mean", "action_std",
    )

    def to_dict(self) -> dict[str, Tensor]:
        return {k: getattr(self, k).clone() for k in self.FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Tensor]) -> "NormStats":
        return cls(**{k: torch.as_tensor(d[k], dtype=torch.float32).clone() for k in cls.FIELDS})

    @classmethod
    def compute(cls, proprio: Tensor, objects: Tensor, mask: Tensor, actions: Tensor) -> "NormStats":
        """Statistics over rows: proprio (N, P), objects (N, M, F) with mask (N, M), relative chunks (K, H, A).

        Padded chunk steps (the episode's last action repeated) count: they are trained on as 'hold'.
        """
        valid = objects[mask]  # (V, F)
        if valid.shape[0] == 0:
            valid = torch.zeros(1, objects.shape[-1])
        rel = (objects[..., OBJECT_POS] - proprio[:, None, PROPRIO_POS])[mask]
        if rel.shape[0] == 0:
            rel = torch.zeros(1, 3)
        return cls(
            proprio.mean(0), proprio.std(0, correction=0).clamp_min(INPUT_STD_FLOOR),
            valid.mean(0), valid.std(0, correction=0).clamp_min(INPUT_STD_FLOOR),
            rel.mean(0), rel.std(0, correction=0).clamp_min(INPUT_STD_FLOOR),
            actions.mean(0), actions.std(0, correction=0).clamp_min(ACTION_STD_FLOOR),
        )

    def normalize_obs(self, obs: ObsBatch) -> tuple[Tensor, Tensor, Tensor]:
        """(proprio (B, P), objects (B, M, F), relative positions (B, M, 3)), normalised and clipped."""
        c = INPUT_CLIP
        pr = ((obs.proprio - self.proprio_mean) / self.proprio_std).clamp(-c, c)
        ob = ((obs.objects - self.object_mean) / self.object_std).clamp(-c, c)
        rp = ((relative_positions(obs) - self.relpos_mean) / self.relpos_std).clamp(-c, c)
        m = obs.object_mask.unsqueeze(-1)
        return pr, ob * m, rp * m

    def normalize_actions(self, rel: Tensor) -> Tensor:
        """Relative chunk (..., H, A) -> normalised."""
        return (rel - self.action_mean) / self.action_std

    def denormalize_actions(self, z: Tensor) -> Tensor:
        """Normalised chunk (..., H, A) -> relative."""
        return z * self.action_std + self.action_mean
