"""The LIBERO observation for state-based policies, in the layout contract of `coda.policy.features`.

Observation (a dict; layout version `OBS_VERSION`):

- "proprio"      float32 (16,): [0:3] grip site position (world, m), [3] sin yaw, [4] cos yaw of the grip
                 site's x axis, [5] finger gap (m), [6] last grip command (1 open .. 0 closed),
                 [7:10] grip site linear velocity (m/s), [10] left, [11] right finger touches something
                 (0/1), [12:15] the grip site's z axis (approach direction) in the world, [15] 0 (reserved).
- "objects"      float32 (M, 15), one row per entity (BDDL objects, then fixtures other than tables), zero
                 rows after the last one:
                 [0:3]   centre of the entity's collision bounding box (world, m)
                 [3:6]   half extents of that box (world axes, m)
                 [6:8]   sin, cos of the heading (world y, x components of the body's x axis)
                 [8:11]  the body's z axis in the world (0, 0, 1 when upright)
                 [11]    1 for a fixture (cabinet, stove, rack...), 0 for a movable object
                 [12]    held: both fingers touch it (0/1)
                 [13:15] left, right finger touches it (0/1)
- "object_mask"  int8 (M,): 1 for rows that hold an entity.
- "object_text"  tuple of M strings: each entity's category in words ("alphabet soup", "black bowl"), "".
- "instruction"  the BDDL `(:language ...)` instruction.

Like the tabletop observation it is role-free: every entity of the scene is a token and nothing marks the
instruction's target (BDDL `obj_of_interest` would give it away).
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from coda.sim.libero.errors import LiberoError
from coda.sim.libero.state import LiberoState
from coda.sim.observation_space import observation_space as shared_space
from coda.sim.observation_space import text_problem

OBS_VERSION = 1
PROPRIO_DIM = 16
ENTITY_DIM = 15

COL_POS, COL_SIZE, COL_YAW, COL_ZAXIS = slice(0, 3), slice(3, 6), slice(6, 8), slice(8, 11)
COL_FIXTURE, COL_HELD, COL_TOUCH = 11, 12, slice(13, 15)


def observation_space(max_entities: int, max_text: int) -> spaces.Dict:
    """The gymnasium space of the observation above."""
    return shared_space(PROPRIO_DIM, ENTITY_DIM, max_entities, max_text)


def check_text(field: str, text: str, max_text: int) -> None:
    """Raise LiberoError if `text` does not fit the Text space (length, charset)."""
    problem = text_problem(field, text, max_text)
    if problem is not None:
        raise LiberoError(problem)


class ObservationBuilder:
    """Writes observations of one scene (entity list and instruction fixed)."""

    def __init__(self, names: tuple[str, ...], texts: tuple[str, ...], fixture: np.ndarray, instruction: str,
                 max_entities: int, max_text: int) -> None:
        n = len(names)
        if n > max_entities:
            raise LiberoError(f"scene has {n} entities {list(names)}, more than sim.max_entities ({max_entities})")
        check_text("instruction", instruction, max_text)
        if not instruction:
            raise LiberoError("instruction is empty: the BDDL '(:language ...)' field has no words")
        for name, t in zip(names, texts):
            check_text(f"description of '{name}'", t, max_text)
        self._n = n
        self._max = max_entities
        self._fixture = fixture.astype(np.float32)
        self._mask = np.zeros(max_entities, dtype=np.int8)
        self._mask[:n] = 1
        self._text = tuple(texts) + ("",) * (max_entities - n)
        self._instruction = instruction

    def build(self, s: LiberoState) -> dict[str, object]:
        """The observation of state `s` (fresh arrays)."""
        n = self._n
        yaw = s.eef_yaw
        left, right = bool(s.left_touch), bool(s.right_touch)
        proprio = np.array(
            (*s.eef_pos.tolist(), math.sin(yaw), math.cos(yaw), s.gripper_width, (1.0 - s.grip_cmd) / 2.0,
             *s.eef_vel.tolist(), float(left), float(right), *s.eef_rot[:, 2].tolist(), 0.0),
            dtype=np.float32,
        )
        rows = np.zeros((self._max, ENTITY_DIM), dtype=np.float32)
        if n:
            rows[:n, COL_POS] = s.center
            rows[:n, COL_SIZE] = s.half
            rows[:n, COL_YAW] = s.rot[:, 1::-1, 0]  # (y, x) of the body's x axis
            rows[:n, COL_ZAXIS] = s.rot[:, :, 2]
            rows[:n, COL_FIXTURE] = self._fixture
            if left or right:
                idx = s.index
                for col, touched in ((13, s.left_touch), (14, s.right_touch)):
                    for name in touched:
                        rows[idx[name], col] = 1.0
                for name in s.grasped:
                    rows[idx[name], COL_HELD] = 1.0
        return {
            "proprio": proprio,
            "objects": rows,
            "object_mask": self._mask.copy(),
            "object_text": self._text,
            "instruction": self._instruction,
        }
