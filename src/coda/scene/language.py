"""Words for scenes: object descriptions, synonyms, instruction templates and seeded paraphrase.

Instructions come in three vocabulary *tiers* with disjoint distinguishing words:

- ``canonical`` — one template per task kind and the canonical words (palette colour names, "cube",
  "tray", ...). Training splits (`sft`) use only this tier.
- ``train`` — paraphrase templates and synonyms that generation programs may use to teach a policy
  paraphrases during the rounds.
- ``heldout`` — templates and synonyms reserved for the `instruction` evaluation split; none of their
  distinguishing words appear in the other two tiers (`heldout_only_words()`), and every held-out template
  contains at least one of them.

Descriptions identify an object by (size word, colour, shape class); generators keep that key unique in a
scene (`object_key`), so a synonym of the shape noun ("box" for "cube") never becomes ambiguous.
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np

from coda.errors import CodaError
from coda.scene.spec import PALETTE, ContainerSpec, DrawerSpec, ObjectSpec, RegionSpec, ScenarioSpec

Tier = Literal["canonical", "train", "heldout"]
TIERS: tuple[Tier, ...] = ("canonical", "train", "heldout")
TaskKind = Literal["pick_place", "stack", "push", "drawer_open", "drawer_close", "drawer_half"]

# Drawer goals: opening fraction per word and the tolerance the goal predicate carries.
DRAWER_FRACTIONS: dict[str, float] = {"open": 1.0, "half": 0.5, "close": 0.0}
DRAWER_TOL = 0.1


class LanguageError(CodaError, ValueError):
    """An instruction cannot be written for a scene (unknown tier, unsupported goal, ...)."""


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


def object_key(obj: ObjectSpec) -> tuple[str, str, str]:
    """What the words of a description can tell apart: (size word, colour, shape class)."""
    return (size_word(obj), obj.color, obj.shape)


def container_key(c: ContainerSpec) -> tuple[str, str]:
    return (c.color, c.kind)


# ---- synonyms per tier -------------------------------------------------------------------------
# Each maps a canonical word to its alternatives in that tier; the canonical word itself is always usable
# in the canonical tier only.

COLOR_SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "red": ("scarlet",), "green": ("lime",), "blue": ("azure",), "yellow": ("lemon",),
        "orange": ("tangerine",), "purple": ("violet",), "white": ("ivory",), "black": ("jet",),
        "pink": ("rose",), "brown": ("chocolate",), "gray": ("grey",), "cyan": ("turquoise",),
    },
    "heldout": {
        "red": ("crimson", "ruby"), "green": ("emerald", "jade"), "blue": ("navy", "cobalt"),
        "yellow": ("golden", "mustard"), "orange": ("apricot", "pumpkin"), "purple": ("plum", "lilac"),
        "white": ("snowy", "pearl"), "black": ("ebony", "onyx"), "pink": ("fuchsia", "blush"),
        "brown": ("chestnut", "coffee"), "gray": ("slate", "silver"), "cyan": ("teal", "aqua"),
    },
}
SHAPE_SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {"cube": ("box",), "block": ("box",), "cylinder": ("tube",), "ball": ("sphere",)},
    "heldout": {"cube": ("cuboid",), "block": ("brick", "bar"), "cylinder": ("canister", "can"), "ball": ("orb", "globe")},
}
SIZE_SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {"small": ("little",), "large": ("big",)},
    "heldout": {"small": ("tiny", "mini"), "large": ("bulky", "huge")},
}
CONTAINER_NOUNS: dict[str, dict[str, tuple[str, ...]]] = {
    "canonical": {"tray": ("tray",), "bowl": ("bowl",)},
    "train": {"tray": ("plate",), "bowl": ("basin",)},
    "heldout": {"tray": ("dish", "platter"), "bowl": ("pot", "vessel")},
}
REGION_NOUNS: dict[str, tuple[str, ...]] = {
    "canonical": ("area",),
    "train": ("zone", "square"),
    "heldout": ("patch", "spot"),
}
DRAWER_NOUNS: dict[str, tuple[str, ...]] = {
    "canonical": ("drawer",),
    "train": ("drawer",),
    "heldout": ("drawer",),
}

# ---- templates per tier and task kind ------------------------------------------------------------
# Slots: {obj}, {container}, {top}, {bottom}, {region}, {drawer}. A template whose first clause names the
# destination before the action is a reordered one (paraphrase can ask for either order).

TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "canonical": {
        "pick_place": ("put the {obj} in the {container}",),
        "stack": ("stack the {top} on the {bottom}",),
        "push": ("push the {obj} into the {region}",),
        "drawer_open": ("open the {drawer}",),
        "drawer_close": ("close the {drawer}",),
        "drawer_half": ("open the {drawer} halfway",),
    },
    "train": {
        "pick_place": (
            "place the {obj} in the {container}",
            "move the {obj} into the {container}",
            "pick up the {obj} and place it in the {container}",
            "into the {container}, move the {obj}",
        ),
        "stack": (
            "place the {top} on top of the {bottom}",
            "put the {top} onto the {bottom}",
            "pick up the {top} and put it on the {bottom}",
            "onto the {bottom}, place the {top}",
        ),
        "push": (
            "slide the {obj} into the {region}",
            "move the {obj} onto the {region} by pushing it",
            "into the {region}, slide the {obj}",
        ),
        "drawer_open": ("pull the {drawer} open", "slide the {drawer} open"),
        "drawer_close": ("shut the {drawer}", "slide the {drawer} closed"),
        "drawer_half": ("pull the {drawer} half open", "slide the {drawer} open half of the way"),
    },
    "heldout": {
        "pick_place": (
            "drop the {obj} inside the {container}",
            "grab the {obj} and set it down inside the {container}",
            "inside the {container}, deposit the {obj}",
            "the {obj} belongs inside the {container}",
        ),
        "stack": (
            "set the {top} atop the {bottom}",
            "grab the {top} and rest it upon the {bottom}",
            "atop the {bottom}, pile the {top}",
            "the {top} belongs atop the {bottom}",
        ),
        "push": (
            "shove the {obj} over to the {region}",
            "nudge the {obj} until it sits within the {region}",
            "within the {region}, nudge the {obj}",
        ),
        "drawer_open": ("draw the {drawer} out fully", "extend the {drawer} all the way"),
        "drawer_close": ("tuck the {drawer} back in", "retract the {drawer} fully"),
        "drawer_half": ("draw the {drawer} out partway", "extend the {drawer} to its midpoint"),
    },
}
_REORDERED_START = ("into ", "onto ", "inside ", "atop ", "within ")


def tokens(text: str) -> list[str]:
    """Lower-case words of a text (letters only)."""
    return re.findall(r"[a-z]+", text.lower())


def _tier_words(tier: str) -> set[str]:
    words: set[str] = set()
    for kind_templates in TEMPLATES[tier].values():
        for t in kind_templates:
            words.update(tokens(re.sub(r"\{\w+\}", " ", t)))
    if tier == "canonical":
        words.update(PALETTE)
        words.update(("cube", "block", "cylinder", "ball", "small", "large"))
    else:
        for table in (COLOR_SYNONYMS, SHAPE_SYNONYMS, SIZE_SYNONYMS):
            for alts in table[tier].values():
                for a in alts:
                    words.update(tokens(a))
    for alts in CONTAINER_NOUNS[tier].values():
        for a in alts:
            words.update(tokens(a))
    for a in (*REGION_NOUNS[tier], *DRAWER_NOUNS[tier]):
        words.update(tokens(a))
    return words


def vocabulary(tier: Tier) -> frozenset[str]:
    """Every word a tier's templates and synonyms can produce (besides colour/shape words it inherits)."""
    _check_tier(tier)
    return frozenset(_tier_words(tier))


def heldout_only_words() -> frozenset[str]:
    """Words of the held-out tier that neither the canonical nor the train tier ever uses."""
    return frozenset(_tier_words("heldout") - _tier_words("canonical") - _tier_words("train"))


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise LanguageError(f"unknown vocabulary tier '{tier}'. Available: {list(TIERS)}")


# ---- describing entities -------------------------------------------------------------------------


def _pick(rng: np.random.Generator | None, options: tuple[str, ...]) -> str:
    return options[0] if rng is None or len(options) == 1 else options[int(rng.integers(len(options)))]


def _swap(rng: np.random.Generator | None, word: str, table: dict[str, tuple[str, ...]], p: float) -> str:
    # Replace a canonical word by a tier synonym with probability p (always when rng is None and p >= 1).
    alts = table.get(word)
    if not alts or rng is None or rng.random() >= p:
        return word
    return _pick(rng, alts)


def object_phrase(obj: ObjectSpec, tier: Tier = "canonical", rng: np.random.Generator | None = None, p: float = 0.7) -> str:
    """Words for an object in a tier: canonical "small red cube"; paraphrased e.g. "tiny crimson cuboid"."""
    _check_tier(tier)
    size, color, noun = size_word(obj), obj.color, shape_noun(obj)
    if tier == "canonical":
        return f"{size} {color} {noun}"
    return " ".join(
        (
            _swap(rng, size, SIZE_SYNONYMS[tier], p),
            _swap(rng, color, COLOR_SYNONYMS[tier], p),
            _swap(rng, noun, SHAPE_SYNONYMS[tier], p),
        )
    )


def container_phrase(c: ContainerSpec, tier: Tier = "canonical", rng: np.random.Generator | None = None, p: float = 0.7) -> str:
    """Words for a container, e.g. "blue tray" / "navy platter"."""
    _check_tier(tier)
    color = c.color if tier == "canonical" else _swap(rng, c.color, COLOR_SYNONYMS[tier], p)
    return f"{color} {_pick(rng, CONTAINER_NOUNS[tier][c.kind])}"


def region_phrase(r: RegionSpec, tier: Tier = "canonical", rng: np.random.Generator | None = None, p: float = 0.7) -> str:
    """Words for a marked goal region, e.g. "green area" / "jade patch"."""
    _check_tier(tier)
    color = r.color if tier == "canonical" else _swap(rng, r.color, COLOR_SYNONYMS[tier], p)
    return f"{color} {_pick(rng, REGION_NOUNS[tier])}"


def drawer_phrase(d: DrawerSpec, tier: Tier = "canonical", rng: np.random.Generator | None = None, p: float = 0.7) -> str:
    """Words for a drawer, e.g. "brown drawer"."""
    _check_tier(tier)
    color = d.color if tier == "canonical" else _swap(rng, d.color, COLOR_SYNONYMS[tier], p)
    return f"{color} {_pick(rng, DRAWER_NOUNS[tier])}"


def fraction_word(value: float) -> str:
    """The drawer goal word for an opening fraction: "open" (>= 0.75), "close" (<= 0.25) or "half"."""
    return "open" if value >= 0.75 else ("close" if value <= 0.25 else "half")


# ---- instructions --------------------------------------------------------------------------------


def task_kind(spec: ScenarioSpec) -> TaskKind:
    """Which template family an instruction for this scene uses, from its family and first goal."""
    g = spec.goal[0]
    kinds: dict[str, TaskKind] = {"pick_place": "pick_place", "stack": "stack", "push": "push"}
    if spec.family in kinds:
        return kinds[spec.family]
    if g.name != "drawer_fraction" or g.value is None:
        raise LanguageError(f"drawer scene needs a drawer_fraction goal, got {g.name}{tuple(g.args)}")
    return {"open": "drawer_open", "half": "drawer_half", "close": "drawer_close"}[fraction_word(g.value)]  # type: ignore[return-value]


def _slots(spec: ScenarioSpec, tier: Tier, rng: np.random.Generator | None, p: float) -> dict[str, str]:
    g = spec.goal[0]
    ent = [spec.entity(a) for a in g.args]
    want = {"pick_place": "in", "stack": "on", "push": "at_region", "drawer": "drawer_fraction"}[spec.family]
    if g.name != want:
        raise LanguageError(f"{spec.family} scene needs a '{want}' goal first, got '{g.name}'")

    def words(e: object) -> str:
        if isinstance(e, ObjectSpec):
            return object_phrase(e, tier, rng, p)
        if isinstance(e, ContainerSpec):
            return container_phrase(e, tier, rng, p)
        if isinstance(e, RegionSpec):
            return region_phrase(e, tier, rng, p)
        if isinstance(e, DrawerSpec):
            return drawer_phrase(e, tier, rng, p)
        raise LanguageError(f"goal argument {e!r} cannot be described")

    names = {"pick_place": ("obj", "container"), "stack": ("top", "bottom"), "push": ("obj", "region"), "drawer": ("drawer",)}
    return {slot: words(e) for slot, e in zip(names[spec.family], ent)}


def canonical_instruction(spec: ScenarioSpec) -> str:
    """The one canonical instruction for a scene's goal, e.g. "put the small red cube in the blue tray"."""
    return TEMPLATES["canonical"][task_kind(spec)][0].format(**_slots(spec, "canonical", None, 0.0))


def paraphrase(
    spec: ScenarioSpec,
    rng: np.random.Generator,
    tier: Tier = "train",
    *,
    reorder: bool | None = None,
    p_synonym: float = 0.7,
) -> str:
    """A seeded paraphrase of the scene's goal in a vocabulary tier: another template, synonyms.

    Args:
        spec: the scene (its goal and entities give the content; its current instruction is avoided).
        rng: the only source of randomness.
        tier: "train" or "heldout" (see the module docstring).
        reorder: True = destination clause first ("inside the dish, drop ..."), False = verb first,
            None = either.
        p_synonym: probability of replacing each describable word by a tier synonym.

    Returns:
        An instruction with the same meaning, different from the current one when the tier allows it.
    """
    if tier == "canonical":
        return canonical_instruction(spec)
    _check_tier(tier)
    kind = task_kind(spec)
    options = TEMPLATES[tier][kind]
    if reorder is not None:
        filtered = tuple(t for t in options if t.startswith(_REORDERED_START) == reorder)
        options = filtered or options
    text = spec.instruction
    for _ in range(8):  # a few draws to avoid returning the current wording unchanged
        template = _pick(rng, options)
        text = template.format(**_slots(spec, tier, rng, p_synonym))
        if text != spec.instruction:
            break
    return text


def wordings(spec: ScenarioSpec, n: int, tier: Tier = "train") -> tuple[str, ...]:
    """Up to `n` distinct paraphrases of the scene's goal in a vocabulary tier, none equal to its instruction.

    Seeded by the scene's id, so the same scene always gets the same wordings. Training uses them to show
    a demonstration with other words for the same goal (`coda.policy.samples`); the held-out tier is for
    evaluation only and never given here by the engine.
    """
    import hashlib

    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(str(spec.spec_id).encode()).digest()[:8], "little"))
    out: list[str] = []
    for _ in range(4 * n):
        if len(out) >= n:
            break
        text = paraphrase(spec, rng, tier)
        if text != spec.instruction and text not in out:
            out.append(text)
    return tuple(out)
