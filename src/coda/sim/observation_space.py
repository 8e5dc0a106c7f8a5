"""The observation contract every backend shares: proprioception, one row per scene entity with its
description in words, a mask, and the instruction (see `coda.policy.features`). Backends differ only in the
two widths, so the gymnasium space and the text check live here."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from coda.scene.spec import TEXT_CHARSET as CHARSET
from coda.scene.spec import outside_charset


def observation_space(proprio_dim: int, entity_dim: int, max_entities: int, max_text: int) -> spaces.Dict:
    """The gymnasium space of a backend's observation with these widths."""
    return spaces.Dict(
        {
            "proprio": spaces.Box(-np.inf, np.inf, (proprio_dim,), np.float32),
            "objects": spaces.Box(-np.inf, np.inf, (max_entities, entity_dim), np.float32),
            "object_mask": spaces.Box(0, 1, (max_entities,), np.int8),
            "object_text": spaces.Tuple(
                [spaces.Text(max_text, min_length=0, charset=CHARSET) for _ in range(max_entities)]
            ),
            "instruction": spaces.Text(max_text, min_length=1, charset=CHARSET),
        }
    )


def text_problem(field: str, text: str, max_text: int) -> str | None:
    """Why `text` does not fit the Text space (length, charset), or None when it does."""
    if len(text) > max_text:
        return f"{field} has {len(text)} characters, more than sim.max_text_length ({max_text})"
    bad = outside_charset(text)
    if bad:
        return f"{field} = {text!r} has characters outside the observation charset: {bad}"
    return None
