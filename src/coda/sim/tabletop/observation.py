"""The tabletop observation: layout, gymnasium spaces and a fast builder.

Observation (a dict; stable layout, version `OBS_VERSION`):

- "proprio"      float32 (12,): [0:3] TCP position (m), [3] sin yaw, [4] cos yaw, [5] finger gap (m),
                 [6] last grip command (1 open .. 0 closed), [7:10] TCP linear velocity (m/s),
                 [10] left finger touches something, [11] right finger touches something (0/1).
- "objects"      float32 (M, 24), M = `SimConfig.max_entities`, one row per entity in spec order
                 (objects, containers, drawers, regions), zero rows after the last entity:
                 [0:3]   position (object centre; container floor centre; drawer handle; region centre), m
                 [3:6]   half extents (containers: inner x, y and wall half-height; drawers: cabinet), m
                 [6:8]   sin, cos of the heading (yaw of the entity's x axis); precisely the world y, x
                         components of that axis, so they shrink towards 0 as the axis tips out of the
                         table plane (exactly sin, cos of the yaw while upright)
                 [8:11]  the entity's z axis in the world (0, 0, 1 when upright)
                 [11:14] colour RGB in [0, 1]
                 [14:21] type one-hot: box, cylinder, sphere, tray, bowl, drawer, region
                 [21]    drawer opening fraction (0 for other entities)
                 [22:24] left, right finger touches this entity (0/1)
- "object_mask"  int8 (M,): 1 for rows that hold an entity.
- "object_text"  tuple of M strings: each entity in words ("small red cube", "gray tray",
                 "white drawer", "green goal region"); "" for empty rows.
- "instruction"  the scene's instruction.

The observation is role-free: nothing marks which entity the instruction is about.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from coda.errors import CodaError
from coda.sim.observation_space import observation_space as shared_space
from coda.sim.observation_space import text_problem
from coda.sim.tabletop.builder import TYPES, SceneIndex
from coda.sim.tabletop.predicates import TabletopState

OBS_VERSION = 1
PROPRIO_DIM = 12
ENTITY_DIM = 24
# Characters allowed in instructions and descriptions (printable ASCII, single spaces and punctuation).

# Column slices of an "objects" row, for code that reads the layout by name.
COL_POS, COL_SIZE, COL_YAW, COL_ZAXIS, COL_RGB = slice(0, 3), slice(3, 6), slice(6, 8), slice(8, 11), slice(11, 14)
COL_TYPE, COL_FRACTION, COL_TOUCH = slice(14, 21), 21, slice(22, 24)


class ObservationError(CodaError, ValueError):
    """A scene cannot be observed with this layout (too many entities, text out of the charset or too long)."""


def observation_space(max_entities: int, max_text: int) -> spaces.Dict:
    """The gymnasium space of the observation above."""
    return shared_space(PROPRIO_DIM, ENTITY_DIM, max_entities, max_text)


def check_text(field: str, text: str, max_text: int) -> None:
    """Raise ObservationError if `text` does not fit the Text space (length, charset)."""
    problem = text_problem(field, text, max_text)
    if problem is not None:
        raise ObservationError(problem)


class ObservationBuilder:
    """Writes observations of one scene; static columns are filled once per scene."""

    def __init__(self, index: SceneIndex, instruction: str, max_entities: int, max_text: int) -> None:
        n = len(index.names)
        if n > max_entities:
            raise ObservationError(f"scene has {n} entities {list(index.names)}, more than sim.max_entities ({max_entities})")
        check_text("instruction", instruction, max_text)
        for name, t in zip(index.names, index.texts):
            check_text(f"description of '{name}'", t, max_text)
        self._n = n
        rows = np.zeros((max_entities, ENTITY_DIM), dtype=np.float32)
        rows[:n, COL_SIZE] = index.size
        rows[:n, COL_RGB] = index.rgb
        for i, t in enumerate(index.types):
            rows[i, 14 + TYPES.index(t)] = 1.0
        self._static = rows
        self._mask = np.zeros(max_entities, dtype=np.int8)
        self._mask[:n] = 1
        self._text = tuple(index.texts) + ("",) * (max_entities - n)
        self._instruction = instruction

    def build(self, s: TabletopState) -> dict[str, object]:
        """The observation of state `s` (fresh arrays; the strings are shared, immutable)."""
        n = self._n
        left, right = s.finger_contacts
        yaw = s.gripper_yaw
        proprio = np.array(
            (*s.gripper_pos.tolist(), math.sin(yaw), math.cos(yaw), s.gripper_width, s.grip_cmd,
             *s.gripper_vel.tolist(), 1.0 if left else 0.0, 1.0 if right else 0.0),
            dtype=np.float32,
        )
        rows = self._static.copy()
        if n:
            rot = s.rot
            rows[:n, COL_POS] = s.pos
            rows[:n, COL_YAW] = rot[:, 1::-1, 0]  # (y, x) of the x axis: (sin, cos) of the yaw when upright
            rows[:n, COL_ZAXIS] = rot[:, :, 2]
            rows[:n, COL_FRACTION] = s.fraction
            if left or right:
                for col, touched in ((22, left), (23, right)):
                    for name in touched:
                        i = s.index.get(name)
                        if i is not None:
                            rows[i, col] = 1.0
        return {
            "proprio": proprio,
            "objects": rows,
            "object_mask": self._mask.copy(),  # gymnasium requires fresh data on every call
            "object_text": self._text,
            "instruction": self._instruction,
        }
