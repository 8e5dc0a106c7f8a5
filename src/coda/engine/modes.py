"""Failure modes: verified diagnoses grouped by what failed and which scene factors caused it.

A *mode key* is derived from data, never from free text: the diagnosis's failure mode plus one token per
verified factor (the factors whose counterfactual reproduced the failure, `Verdict.verified_factors`),
sorted and joined with ``+``::

    missed_grasp|position:far_left
    wrong_object|instruction
    slip_during_transport|object:size=small+physics:friction=low
    imprecise_placement|position@goal:far_right

Factor tokens are ``kind[@role]:value`` and carry over between scenes (entities are named by their role,
the convention of `coda.critic.verify.factor_ops`: ``target`` is the object the goal moves — or the drawer —,
``goal`` its destination, ``alt`` a container or region outside the goal, ``other`` any other entity; the
role is left out when it is ``target``):

| factor kind              | token                                  | from the factor's value                     |
| ------------------------ | -------------------------------------- | ------------------------------------------- |
| position, region         | ``position[@role]:<region>``           | a region name; ``x,y`` maps to its grid cell |
| position (gripper start) | ``position:robot_start``               | ``robot_start``                             |
| instruction              | ``instruction``                        | (the phrase varies per scene; not kept)     |
| task                     | ``task``                               | (the requested target varies per scene)     |
| object_attribute         | ``object[@role]:<attr>=<word>``        | ``color=red``, ``size=small``, ``shape=...`` |
| distractor               | ``distractor``                         | (the distractor varies per scene)           |
| physics                  | ``physics:<name>=low|high``, ``physics:damping`` | ``friction_scale=0.4`` → low (< 1)   |

Diagnoses without verified factors key on the failure mode alone (``no_progress``).

**Merging.** Diagnoses with the same key form one group; a group's embedding is the normalised mean of the
MiniLM embeddings of its explanations and its description is the explanation closest to that mean. Groups are
then visited in key order: a group whose key is a known mode joins it; otherwise it joins the known mode, or
else the mode formed earlier in this call, *of the same failure mode* whose embedding is most similar
(cosine ≥ `threshold`, ties to the smaller key) *whose tokens have the same kinds* (`factor_kinds`), and
founds a new mode when none is. Keys therefore separate failure modes and factor axes outright — a
`wrong_object|task` group never joins `wrong_object|distractor`, however alike the two explanations read —
and embeddings only merge near-identical explanations filed under slightly different factor values
(`position:far` and `position:far_left`). Existing modes keep their key, description and embedding (stable anchors for later
rounds). The result depends only on the inputs (sorted visits, cached embeddings): same inputs, same modes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from coda.critic.diagnosis import FAILURE_MODES, Diagnosis, SceneFactor
from coda.critic.verify import Verdict
from coda.errors import CodaError
from coda.scene.regions import REGIONS, grid_region_of
from coda.scene.spec import ScenarioSpec, entity_kinds
from coda.sim.tabletop.factors import role_of

KEY_MAX = 256  # the memory's key column width
ROLES = ("target", "goal", "alt", "other")
TOKEN_KINDS = ("position", "object", "instruction", "task", "distractor", "physics")
OBJECT_ATTRS = ("color", "size", "shape")
PHYSICS_NAMES = ("friction", "mass", "damping")
_TOKEN = re.compile(r"^(?P<kind>[a-z_]+)(?:@(?P<role>[a-z_]+))?(?::(?P<value>[a-z0-9_.=-]+))?$")
_WORD = re.compile(r"[^a-z0-9_.-]+")


class ModeError(CodaError, ValueError):
    """A mode key, factor or clustering input is invalid; the message names the field and value."""


class Encoder(Protocol):
    """What clustering needs from a text encoder (`coda.policy.text.TextEncoder` fits)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


# ---- roles and tokens (an entity's role: coda.critic.verify.role_of) ------------------------------------------


def entity_for_role(role: str, spec: ScenarioSpec) -> str | None:
    """An entity of `spec` with that role (the first in scene order), or None when the scene has none."""
    if role not in ROLES:
        raise ModeError(f"role = {role!r} is not one of {list(ROLES)}")
    names = list(entity_kinds(spec))  # scene order: objects, containers, drawers, regions
    return next((n for n in names if role_of(n, spec) == role), None)


def _word(text: str) -> str:
    return _WORD.sub("_", text.strip().lower()).strip("_")


def _physics_token(value: str, where: str) -> str:
    name, _, num = value.partition("=")
    key = _word(name).removesuffix("_scale")
    if key not in PHYSICS_NAMES:
        raise ModeError(f"{where}.value = {value!r}: physics factor must name one of {list(PHYSICS_NAMES)}")
    if key == "damping":
        return "physics:damping"
    try:
        v: float | None = float(num.strip())
    except ValueError:
        v = None
    # without a number, the direction factor_ops assumes: low friction, heavy objects
    direction = ("low" if key == "friction" else "high") if v is None or v <= 0 else ("low" if v < 1.0 else "high")
    return f"physics:{key}={direction}"


def factor_token(factor: SceneFactor, spec: ScenarioSpec | None = None, where: str = "factor") -> str:
    """The scene-independent token of a factor (see the module docstring).

    Args:
        factor: the factor.
        spec: the scene the factor was diagnosed in; needed when the factor names an entity whose role
            matters (position, object_attribute).
        where: how error messages name the factor, e.g. ``verdicts[2].verified_factors[0]``.

    Raises:
        ModeError: a value the operators cannot express, or an entity without its scene.
    """

    def role() -> str:
        if factor.entity is None:
            return ""
        if spec is None:
            raise ModeError(f"{where}.entity = {factor.entity!r}: no scene given for its episode to resolve its role")
        if factor.entity not in entity_kinds(spec):
            raise ModeError(f"{where}.entity = {factor.entity!r} is not an entity of the episode's scene")
        r = role_of(factor.entity, spec)
        return "" if r == "target" else f"@{r}"

    if factor.kind in ("position", "region"):
        value = factor.value.strip().lower()
        if value == "robot_start":
            return "position:robot_start"
        if value not in REGIONS:
            try:
                x, y = (float(p) for p in value.split(","))
            except ValueError:
                raise ModeError(
                    f"{where}.value = {factor.value!r} is neither a region name ({sorted(REGIONS)}) nor 'x,y' in metres"
                ) from None
            value = grid_region_of(x, y)
        return f"position{role()}:{value}"
    if factor.kind == "instruction":
        return "instruction"
    if factor.kind == "task":
        return "task"
    if factor.kind == "distractor":
        return "distractor"
    if factor.kind == "object_attribute":
        attr, _, val = factor.value.partition("=")
        attr = {"colour": "color"}.get(_word(attr), _word(attr))
        if attr not in OBJECT_ATTRS or not _word(val):
            raise ModeError(f"{where}.value = {factor.value!r} must be attribute=word with attribute in {list(OBJECT_ATTRS)}")
        return f"object{role()}:{attr}={_word(val)}"
    return _physics_token(factor.value, where)


def mode_key(failure_mode: str, tokens: Sequence[str]) -> str:
    """The canonical key: `failure_mode|token+token` (tokens sorted, unique), or the failure mode alone.

    Raises:
        ModeError: unknown failure mode, malformed token, or a key longer than the memory column.
    """
    key = failure_mode + ("|" + "+".join(sorted(set(tokens))) if tokens else "")
    parse_mode_key(key)
    return key


def _check_token(token: str, where: str) -> None:
    m = _TOKEN.match(token)
    if not m:
        raise ModeError(f"{where} token {token!r} is not kind[@role][:value]")
    kind, role, value = m.group("kind"), m.group("role"), m.group("value")
    if kind not in TOKEN_KINDS:
        raise ModeError(f"{where} token {token!r}: kind {kind!r} is not one of {list(TOKEN_KINDS)}")
    if role is not None and (role not in ROLES or role == "target" or kind not in ("position", "object")):
        raise ModeError(f"{where} token {token!r}: role {role!r} must be one of {list(ROLES[1:])} on position/object")
    if kind in ("instruction", "task", "distractor"):
        if value is not None:
            raise ModeError(f"{where} token {token!r}: '{kind}' takes no value")
        return
    if value is None:
        if kind == "physics":
            raise ModeError(f"{where} token {token!r}: physics needs a value (friction=low, mass=high, damping)")
        raise ModeError(f"{where} token {token!r}: '{kind}' needs a value")
    if kind == "position" and value not in REGIONS and value != "robot_start":
        raise ModeError(f"{where} token {token!r}: region {value!r} is not one of {sorted(REGIONS)} or robot_start")
    if kind == "object":
        attr, eq, word = value.partition("=")
        if attr not in OBJECT_ATTRS or not eq or not word:
            raise ModeError(f"{where} token {token!r}: object value must be attribute=word, attribute in {list(OBJECT_ATTRS)}")
    if kind == "physics" and value != "damping":
        name, _, direction = value.partition("=")
        if name not in ("friction", "mass") or direction not in ("low", "high"):
            raise ModeError(f"{where} token {token!r}: physics value must be friction|mass=low|high or damping")


def factor_kinds(key: str) -> frozenset[str]:
    """The factor axes a mode key names, without values or roles: `missed_grasp|position@goal:far+task` →
    {"position", "task"}."""
    _, _, tokens = key.partition("|")
    return frozenset(t.split(":")[0].split("@")[0] for t in tokens.split("+") if t)


def parse_mode_key(key: str, where: str = "mode") -> tuple[str, tuple[str, ...]]:
    """(failure mode, factor tokens) of a mode key; validates every part.

    Raises:
        ModeError: naming `where` and the key, e.g. `mode = 'bogus|x': failure mode 'bogus' is unknown`.
    """
    if not isinstance(key, str) or not key:
        raise ModeError(f"{where} = {key!r} must be a non-empty mode key string")
    if len(key) > KEY_MAX:
        raise ModeError(f"{where} = {key[:60]!r}...: the key is {len(key)} characters, more than {KEY_MAX}")
    failure_mode, bar, rest = key.partition("|")
    if failure_mode not in FAILURE_MODES:
        raise ModeError(f"{where} = {key!r}: failure mode {failure_mode!r} is unknown. Available: {list(FAILURE_MODES)}")
    if bar and not rest:
        raise ModeError(f"{where} = {key!r}: '|' must be followed by factor tokens")
    tokens = tuple(rest.split("+")) if rest else ()
    for t in tokens:
        _check_token(t, f"{where} = {key!r}:")
    if list(tokens) != sorted(set(tokens)):
        raise ModeError(f"{where} = {key!r}: factor tokens must be unique and sorted ({sorted(set(tokens))})")
    return failure_mode, tokens


# ---- modes --------------------------------------------------------------------------------------------


class Mode(BaseModel):
    """A failure mode: its key (failure mode + factor tokens), a description and an embedding.

    `episodes` lists the episodes assigned to it by the `cluster` call that returned it (empty for a mode
    read back from memory). `from_record` rebuilds a mode from a memory `FailureMode` record's fields.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    failure_mode: str
    factors: tuple[str, ...]  # factor tokens, sorted
    description: str
    embedding: tuple[float, ...] | None = None  # normalised sentence embedding of its explanations
    episodes: tuple[str, ...] = ()  # episode ids assigned in this call

    @classmethod
    def from_key(cls, key: str, description: str = "", embedding: Sequence[float] | None = None, where: str = "mode") -> Mode:
        """A mode from its key (validated), with an optional description and embedding."""
        fm, tokens = parse_mode_key(key, where)
        emb = tuple(float(x) for x in embedding) if embedding is not None else None
        return cls(key=key, failure_mode=fm, factors=tokens, description=description or key, embedding=emb)

    @classmethod
    def from_record(cls, record: Any) -> Mode:
        """A mode from a memory `FailureMode` record (or anything with key, description, embedding)."""
        return cls.from_key(record.key, record.description, record.embedding, where=f"failure_mode {record.key!r}.key")

    def record_fields(self) -> dict[str, Any]:
        """The fields of a memory `FailureMode` record (key, description, embedding)."""
        return {"key": self.key, "description": self.description,
                "embedding": list(self.embedding) if self.embedding is not None else None}


class ModeAssignment(BaseModel):
    """What `cluster` decided, aligned with its input lists.

    Attributes:
        mode_of: per diagnosis, the key of its mode (None when skipped).
        raw_keys: per diagnosis, the key derived from it before merging (None when skipped).
        skipped: diagnosis index -> why it was not clustered (its verdict was not accepted).
        modes: key -> Mode for every mode that received a diagnosis (new and existing).
        new: keys of modes founded by this call, in key order.
        similarity: per diagnosis that merged under another key, the cosine that decided it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode_of: tuple[str | None, ...]
    raw_keys: tuple[str | None, ...]
    skipped: dict[int, str] = Field(default_factory=dict)
    modes: dict[str, Mode] = Field(default_factory=dict)
    new: tuple[str, ...] = ()
    similarity: dict[int, float] = Field(default_factory=dict)

    def members(self, key: str) -> list[int]:
        """Indices of the diagnoses assigned to mode `key`."""
        return [i for i, k in enumerate(self.mode_of) if k == key]


def diagnosis_key(d: Diagnosis, v: Verdict, spec: ScenarioSpec | None = None, where: str = "diagnosis") -> str:
    """The mode key of one verified diagnosis: its failure mode + its verdict's verified factor tokens."""
    tokens = [factor_token(f, spec, f"{where}.verified_factors[{j}]") for j, f in enumerate(v.verified_factors)]
    return mode_key(d.failure_mode, tokens)


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def cluster(
    diagnoses: Sequence[Diagnosis],
    verdicts: Sequence[Verdict],
    existing_modes: Sequence[Mode],
    encoder: Encoder,
    *,
    scenes: Mapping[str, ScenarioSpec] | None = None,
    threshold: float = 0.8,
) -> ModeAssignment:
    """Group verified diagnoses into failure modes (see the module docstring).

    Args:
        diagnoses: diagnoses of failed episodes.
        verdicts: their verdicts, in the same order; diagnoses whose verdict is not accepted are skipped.
        existing_modes: modes already in memory (`Mode.from_record`).
        encoder: sentence embedder for the explanations (MiniLM in runs; any `encode(texts) -> (N, D)`).
        scenes: episode id -> scene, to resolve the roles of implicated entities.
        threshold: cosine similarity at or above which a group joins a mode of the same failure mode
            under another key (EngineConfig.mode_merge_threshold).

    Returns:
        ModeAssignment (per-diagnosis mode keys, new modes, each touched mode's description and embedding).

    Raises:
        ModeError: lists of different lengths, a verdict of another episode or failure mode, a threshold
            outside [-1, 1], duplicate existing keys, or a factor that cannot be keyed.
    """
    if len(diagnoses) != len(verdicts):
        raise ModeError(f"verdicts has {len(verdicts)} entries for {len(diagnoses)} diagnoses; they must pair up")
    if not -1.0 <= threshold <= 1.0:
        raise ModeError(f"threshold = {threshold} must be a cosine similarity in [-1, 1]")
    known: dict[str, Mode] = {}
    for i, m in enumerate(existing_modes):
        if m.key in known:
            raise ModeError(f"existing_modes[{i}].key = {m.key!r} appears twice")
        known[m.key] = m
    raw, skipped = _raw_keys(diagnoses, verdicts, scenes or {})
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(raw):
        if k is not None:
            groups.setdefault(k, []).append(i)
    row = _embed_groups(diagnoses, groups, encoder)

    mode_of: list[str | None] = [None] * len(diagnoses)
    similarity: dict[int, float] = {}
    touched: dict[str, Mode] = {}
    founded: list[str] = []
    members: dict[str, list[int]] = {}
    anchors: dict[str, np.ndarray] = {k: _unit(np.asarray(m.embedding, dtype=np.float64))
                                      for k, m in known.items() if m.embedding is not None}
    for k in sorted(groups):
        idx = groups[k]
        vecs = np.stack([row[i] for i in idx])
        centre = _unit(vecs.mean(axis=0))
        target, cos = (k, None) if k in known else _merge_target(k, centre, known, founded, anchors, threshold)
        if target == k and k not in known:
            medoid = idx[int(np.argmax(vecs @ centre))]
            touched[k] = Mode.from_key(k, diagnoses[medoid].explanation, [round(float(x), 6) for x in centre])
            anchors[k] = _unit(np.asarray(touched[k].embedding, dtype=np.float64))
            founded.append(k)
        elif target not in touched:
            touched[target] = known[target]
        for i in idx:
            mode_of[i] = target
            if cos is not None:
                similarity[i] = round(cos, 6)
        members.setdefault(target, []).extend(idx)

    modes = {
        k: m.model_copy(update={"episodes": tuple(e for i in sorted(members[k]) if (e := diagnoses[i].episode_id) is not None)})
        for k, m in sorted(touched.items())
    }
    return ModeAssignment(mode_of=tuple(mode_of), raw_keys=tuple(raw), skipped=skipped, modes=modes,
                          new=tuple(sorted(founded)), similarity=similarity)


def _raw_keys(diagnoses: Sequence[Diagnosis], verdicts: Sequence[Verdict],
              scenes: Mapping[str, ScenarioSpec]) -> tuple[list[str | None], dict[int, str]]:
    """Per diagnosis, its own mode key (None when its verdict was not accepted), and why each skipped one was."""
    raw: list[str | None] = [None] * len(diagnoses)
    skipped: dict[int, str] = {}
    for i, (d, v) in enumerate(zip(diagnoses, verdicts)):
        if not isinstance(d, Diagnosis):
            raise ModeError(f"diagnoses[{i}] is a {type(d).__name__}, not a Diagnosis")
        if v.episode_id != d.episode_id:
            raise ModeError(f"verdicts[{i}].episode_id = {v.episode_id!r} differs from diagnoses[{i}].episode_id = {d.episode_id!r}")
        if not v.accepted:
            skipped[i] = "verdict not accepted: " + ("; ".join(v.reasons) or "no reason given")
            continue
        if v.failure_mode != d.failure_mode:
            raise ModeError(f"verdicts[{i}].failure_mode = {v.failure_mode!r} differs from diagnoses[{i}].failure_mode = {d.failure_mode!r}")
        spec = scenes.get(d.episode_id) if d.episode_id is not None else None
        raw[i] = diagnosis_key(d, v, spec, f"verdicts[{i}]")
    return raw, skipped


def _embed_groups(diagnoses: Sequence[Diagnosis], groups: Mapping[str, list[int]],
                  encoder: Encoder) -> dict[int, np.ndarray]:
    """Diagnosis index -> embedding of its explanation, encoded in one call in key order."""
    texts = [diagnoses[i].explanation for k in sorted(groups) for i in groups[k]]
    emb = np.asarray(encoder.encode(texts), dtype=np.float64) if texts else np.zeros((0, 1))
    row: dict[int, np.ndarray] = {}
    n = 0
    for k in sorted(groups):
        for i in groups[k]:
            row[i] = emb[n]
            n += 1
    return row


def _merge_target(key: str, centre: np.ndarray, known: Mapping[str, Mode], founded: Sequence[str],
                  anchors: Mapping[str, np.ndarray], threshold: float) -> tuple[str, float | None]:
    """The mode a group of a new key joins: the most similar mode of the same failure mode and factor kinds at
    cosine >= `threshold` (known modes first, then modes founded in this call), with that cosine; else the
    group's own key and None."""
    fm = key.partition("|")[0]
    for pool in (sorted(known), founded):
        best: tuple[float, str] | None = None
        for other in pool:
            a = anchors.get(other)
            if other.partition("|")[0] != fm or a is None or a.shape != centre.shape:
                continue
            if factor_kinds(other) != factor_kinds(key):
                continue
            c = float(a @ centre)
            if c >= threshold and (best is None or c > best[0]):
                best = (c, other)
        if best is not None:
            return best[1], best[0]
    return key, None

__all__ = [
    "Encoder",
    "Mode",
    "ModeAssignment",
    "ModeError",
    "cluster",
    "diagnosis_key",
    "entity_for_role",
    "factor_token",
    "mode_key",
    "parse_mode_key",
    "role_of",
]
