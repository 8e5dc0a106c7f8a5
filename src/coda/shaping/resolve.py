"""Resolve object phrases in plans ("the crimson block", "the blue bowl", "the drawer handle") to scene entities.

A phrase is read word by word: colour, size and shape words (with the synonyms of every vocabulary tier of
`coda.scene.language`, plus a few general ones), kind nouns (bowl, tray, region, drawer...), and entity
names written as such (`obj0`). Every attribute the phrase states must match the entity; a phrase must
match exactly one entity. A word the vocabulary does not know is an error rather than ignored, so
"the mauve cube" never silently resolves to the only cube.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from coda.errors import CodaError
from coda.scene import language as L
from coda.scene.spec import PALETTE, ContainerSpec, DrawerSpec, ObjectSpec, RegionSpec, ScenarioSpec

Entity = ObjectSpec | ContainerSpec | DrawerSpec | RegionSpec


class PlanParseError(CodaError, ValueError):
    """A plan step or phrase cannot be mapped to stages or scene entities.

    Attributes:
        phrase: the words that could not be mapped.
    """

    def __init__(self, message: str, phrase: str) -> None:
        super().__init__(message)
        self.phrase = phrase


def _invert(tables: list[dict[str, tuple[str, ...]]], extra: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for table in tables:
        for canon, alts in table.items():
            out[canon] = canon
            for a in alts:
                out[a] = canon
    out.update(extra)
    return out


COLOR_WORDS: dict[str, str] = _invert(
    [dict.fromkeys(PALETTE, ()), *L.COLOR_SYNONYMS.values()], {"grey": "gray", "violet": "purple"}
)
SIZE_WORDS: dict[str, str] = _invert(list(L.SIZE_SYNONYMS.values()), {"big": "large", "little": "small"})
_SHAPE_CLASS = {"cube": "box", "block": "box", "cylinder": "cylinder", "ball": "sphere"}
SHAPE_WORDS: dict[str, str] = {
    w: _SHAPE_CLASS[canon]
    for w, canon in _invert(list(L.SHAPE_SYNONYMS.values()), {"cuboid": "cube", "brick": "block", "sphere": "ball"}).items()
}
CONTAINER_WORDS: dict[str, str] = _invert(list(L.CONTAINER_NOUNS.values()), {"bin": "", "container": "", "basket": ""})
REGION_WORDS = frozenset(
    {w for ws in L.REGION_NOUNS.values() for w in ws} | {"region", "zone", "mark", "marker", "pad"}
)
DRAWER_WORDS = frozenset({"drawer", "cabinet", "handle"})
OBJECT_WORDS = frozenset({"object", "item", "thing", "piece", "one", "toy"})
STOP_WORDS = frozenset(
    {"the", "a", "an", "that", "this", "its", "of", "same", "s", "target", "goal", "correct", "marked"}
)


@dataclass(frozen=True)
class PhraseKey:
    """What a phrase says about the entity it names."""

    kind: str | None  # "object" | "container" | "region" | "drawer" | None (unstated)
    color: str | None = None
    size: str | None = None
    shape: str | None = None  # box | cylinder | sphere
    container: str | None = None  # bowl | tray
    name: str | None = None  # an entity name written as such


def words(text: str) -> list[str]:
    """Lower-case word tokens, keeping entity names like `obj0` whole."""
    return re.findall(r"[a-z][a-z0-9_]*", text.lower())


def read_phrase(phrase: str, names: set[str]) -> PhraseKey:
    """Read the attributes a phrase states. Raises PlanParseError on a word the vocabulary does not know."""
    kind = color = size = shape = container = name = None
    for w in words(phrase):
        if w in names:
            name = w
        elif w in STOP_WORDS:
            continue
        elif w in COLOR_WORDS:
            color = COLOR_WORDS[w]
        elif w in SIZE_WORDS:
            size = SIZE_WORDS[w]
        elif w in SHAPE_WORDS:
            kind, shape = "object", SHAPE_WORDS[w]
        elif w in OBJECT_WORDS:
            kind = "object"
        elif w in CONTAINER_WORDS:
            kind, container = "container", CONTAINER_WORDS[w] or None
        elif w in REGION_WORDS:
            kind = "region"
        elif w in DRAWER_WORDS:
            kind = "drawer"
        else:
            raise PlanParseError(f"cannot map phrase '{phrase.strip()}': unknown word '{w}'", phrase.strip())
    return PhraseKey(kind=kind, color=color, size=size, shape=shape, container=container, name=name)


def all_entities(spec: ScenarioSpec) -> list[Entity]:
    """Every entity of a scene: objects, containers, drawers, regions (in that order)."""
    return [*spec.objects, *spec.containers, *spec.drawers, *spec.regions]


def entity_kind(e: Entity) -> str:
    """"object" | "container" | "drawer" | "region"."""
    if isinstance(e, ObjectSpec):
        return "object"
    if isinstance(e, ContainerSpec):
        return "container"
    return "drawer" if isinstance(e, DrawerSpec) else "region"


def entity_words(e: Entity) -> str:
    """The canonical words for an entity ("small red cube", "blue bowl", "green area", "brown drawer")."""
    if isinstance(e, ObjectSpec):
        return L.object_phrase(e)
    if isinstance(e, ContainerSpec):
        return L.container_phrase(e)
    if isinstance(e, RegionSpec):
        return L.region_phrase(e)
    return L.drawer_phrase(e)


def _matches(key: PhraseKey, e: Entity) -> bool:
    k = entity_kind(e)
    if key.kind is not None and key.kind != k:
        return False
    if key.color is not None and key.color != e.color:
        return False
    if key.size is not None and (not isinstance(e, ObjectSpec) or L.size_word(e) != key.size):
        return False
    if key.shape is not None and (not isinstance(e, ObjectSpec) or e.shape != key.shape):
        return False
    return key.container is None or (isinstance(e, ContainerSpec) and e.kind == key.container)


@dataclass(frozen=True)
class NamedEntities:
    """A scene of another simulator backend as a plan names it: each entity's kind and its words.

    A phrase names an entity by its name written as such (`akita_black_bowl_1`) or by words that all occur in
    the entity's words ("the soup", "the alphabet soup" for "alphabet soup"); articles and general nouns
    ("object", "item") are skipped. A word no entity has is an error, as for tabletop scenes.

    Args:
        kinds: entity name -> "object" | "container" | "drawer" | "region".
        words: entity name -> its words ("alphabet soup"); an entity without words is named by its name only.
    """

    kinds: Mapping[str, str]
    words: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = sorted(set(self.words) - set(self.kinds))
        if bad:
            raise ValueError(f"words: entity '{bad[0]}' has no kind")

    def describe(self, name: str) -> str:
        return f"{name} ({self.words.get(name, name)})"

    def resolve(self, phrase: str, kinds: tuple[str, ...] | None = None) -> str:
        """The name of the one entity a phrase names. Raises PlanParseError as `resolve` does."""
        text = phrase.strip()
        tokens = [w for w in words(text) if w not in STOP_WORDS and w not in OBJECT_WORDS]
        named = [w for w in tokens if w in self.kinds]
        vocab = {w for ws in self.words.values() for w in words(ws)}
        if named:
            hit = [named[0]]
        else:
            unknown = [w for w in tokens if w not in vocab]
            if unknown:
                raise PlanParseError(f"cannot map phrase '{text}': unknown word '{unknown[0]}'", text)
            if not tokens:
                raise PlanParseError(f"cannot map phrase '{text}': it names no entity", text)
            hit = [n for n in self.kinds if set(tokens) <= set(words(self.words.get(n, "")))]
            if kinds is not None and len(hit) > 1:
                hit = [n for n in hit if self.kinds[n] in kinds] or hit
        if not hit:
            have = ", ".join(self.describe(n) for n in self.kinds)
            raise PlanParseError(f"cannot map phrase '{text}': no entity of the scene matches (scene: {have})", text)
        if len(hit) > 1:
            raise PlanParseError(f"cannot map phrase '{text}': ambiguous, matches "
                                 f"{', '.join(self.describe(n) for n in hit)}", text)
        name = hit[0]
        if kinds is not None and self.kinds[name] not in kinds:
            raise PlanParseError(f"cannot map phrase '{text}': it names {self.describe(name)}, a {self.kinds[name]}, "
                                 f"where {' or '.join(kinds)} is expected", text)
        return name


def resolve(phrase: str, spec: ScenarioSpec | NamedEntities, kinds: tuple[str, ...] | None = None) -> str:
    """The name of the one entity of `spec` a phrase describes.

    Args:
        phrase: e.g. "the crimson block", "blue bowl", "obj2", "the drawer handle".
        spec: the scene (a tabletop ScenarioSpec, or another backend's NamedEntities).
        kinds: entity kinds allowed in this position (e.g. ("object",) for what is grasped); None = any.

    Raises:
        PlanParseError: unknown word, no matching entity, or several (each named with its words).
    """
    if isinstance(spec, NamedEntities):
        return spec.resolve(phrase, kinds)
    text = phrase.strip()
    entities = all_entities(spec)
    key = read_phrase(text, {e.name for e in entities})
    if key.name is not None:
        hit = [e for e in entities if e.name == key.name]
    else:
        if key == PhraseKey(kind=None):
            raise PlanParseError(f"cannot map phrase '{text}': it names no colour, shape or kind", text)
        hit = [e for e in entities if _matches(key, e)]
        if kinds is not None and len(hit) > 1:
            hit = [e for e in hit if entity_kind(e) in kinds] or hit
    if not hit:
        have = ", ".join(f"{e.name} ({entity_words(e)})" for e in entities)
        raise PlanParseError(f"cannot map phrase '{text}': no entity of the scene matches (scene: {have})", text)
    if len(hit) > 1:
        which = ", ".join(f"{e.name} ({entity_words(e)})" for e in hit)
        raise PlanParseError(f"cannot map phrase '{text}': ambiguous, matches {which}", text)
    e = hit[0]
    if kinds is not None and entity_kind(e) not in kinds:
        raise PlanParseError(
            f"cannot map phrase '{text}': it names {e.name} ({entity_words(e)}), a {entity_kind(e)}, "
            f"where {' or '.join(kinds)} is expected",
            text,
        )
    return e.name


def short_words(e: Entity, spec: ScenarioSpec) -> str:
    """The shortest canonical description that picks `e` out in `spec` (colour + noun, else with size)."""
    full = entity_words(e)
    if not isinstance(e, ObjectSpec):
        return full
    short = f"{e.color} {L.shape_noun(e)}"
    try:
        return short if resolve(short, spec) == e.name else full
    except PlanParseError:
        return full
