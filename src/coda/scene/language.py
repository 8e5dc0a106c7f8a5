"""Words for scenes: object descriptions, synonyms and instruction templates."""

from __future__ import annotations

from coda.scene.spec import ObjectSpec


def shape_noun(obj: ObjectSpec) -> str:
    """The canonical noun for an object's shape: cube, block, cylinder or ball."""
    if obj.shape == "box":
        sx, sy, sz = obj.size
        return "cube" if max(sx, sy, sz) <= 1.25 * min(sx, sy, sz) else "block"
    return {"cylinder": "cylinder", "sphere": "ball"}[obj.shape]


def size_word(obj: ObjectSpec) -> str:
    """"small" or "large" from the object's largest horizontal half extent."""
    return "large" if max(obj.size[0], obj.size[1]) > 0.03 else "small"


def describe(obj: ObjectSpec) -> str:
    """The canonical description of an object in words, e.g. "small red cube"."""
    return f"{size_word(obj)} {obj.color} {shape_noun(obj)}"
