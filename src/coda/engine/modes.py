"""Failure modes: verified diagnoses grouped by what failed and which scene factors caused it.

A *mode key* is derived from data, never from free text: the diagnosis's failure mode plus one token per
verified factor (the factors whose counterfactual reproduced the failure, `Verdict.verified_factors`),
sorted and joined with ``+``::

    missed_grasp|position:far_left
    wrong_object|instruction
    slip_during_transport|object:size=small+physics:friction=low
    imprecise_placement|position@goal:far_right

Factor tokens are ``kind[@role][:value]`` and carry over between scenes. Which tokens a factor becomes is the
simulator's vocabulary (`Vocabulary`: `SimBackend.mode_tokens` and `check_token`; the tabletop's in
`coda.sim.tabletop.tokens`, LIBERO's roles of the BDDL goal in `coda.sim.libero.factors`); this module
knows only the key's grammar.

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
from coda.scene.factors import FactorError

KEY_MAX = 256  # the memory's key column width
_TOKEN = re.compile(r"^[a-z_]+(?:@[a-z_]+)?(?::[a-z0-9_.=-]+)?$")


class ModeError(CodaError, ValueError):
    """A mode key, factor or clustering input is invalid; the message names the field and value."""


class Encoder(Protocol):
    """What clustering needs from a text encoder (`coda.policy.text.TextEncoder` fits)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class Vocabulary(Protocol):
    """A simulator's mode tokens (`coda.sim.backends.SimBackend` fits)."""

    def mode_tokens(self, factors: Sequence[SceneFactor], spec: Any, where: str = "factors") -> tuple[str, ...]: ...

    def check_token(self, token: str, where: str = "token") -> None: ...


def mode_key(failure_mode: str, tokens: Sequence[str], vocabulary: Vocabulary | None = None) -> str:
    """The canonical key: `failure_mode|token+token` (tokens sorted, unique), or the failure mode alone.

    Raises:
        ModeError: unknown failure mode, malformed token (or one `vocabulary` does not know), or a key longer
            than the memory column.
    """
    key = failure_mode + ("|" + "+".join(sorted(set(tokens))) if tokens else "")
    parse_mode_key(key, vocabulary=vocabulary)
    return key


def factor_kinds(key: str) -> frozenset[str]:
    """The factor axes a mode key names, without values or roles: `missed_grasp|position@goal:far+task` →
    {"position", "task"}."""
    _, _, tokens = key.partition("|")
    return frozenset(t.split(":")[0].split("@")[0] for t in tokens.split("+") if t)


def parse_mode_key(key: str, where: str = "mode", vocabulary: Vocabulary | None = None) -> tuple[str, tuple[str, ...]]:
    """(failure mode, factor tokens) of a mode key; validates its grammar and, given a simulator's
    `vocabulary`, that every token is one of its tokens.

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
        if not _TOKEN.match(t):
            raise ModeError(f"{where} = {key!r}: token {t!r} is not kind[@role][:value]")
        if vocabulary is not None:
            try:
                vocabulary.check_token(t, f"{where} = {key!r}:")
            except FactorError as e:
                raise ModeError(str(e)) from None
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


def diagnosis_key(d: Diagnosis, v: Verdict, spec: Any, vocabulary: Vocabulary, where: str = "diagnosis") -> str:
    """The mode key of one verified diagnosis: its failure mode + the simulator's tokens of its verdict's
    verified factors in `spec`, the episode's scene (None when unknown)."""
    try:
        tokens = vocabulary.mode_tokens(v.verified_factors, spec, f"{where}.verified_factors")
    except FactorError as e:
        raise ModeError(str(e)) from None
    return mode_key(d.failure_mode, tokens, vocabulary)


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def cluster(
    diagnoses: Sequence[Diagnosis],
    verdicts: Sequence[Verdict],
    existing_modes: Sequence[Mode],
    encoder: Encoder,
    *,
    vocabulary: Vocabulary,
    scenes: Mapping[str, Any] | None = None,
    threshold: float = 0.8,
) -> ModeAssignment:
    """Group verified diagnoses into failure modes (see the module docstring).

    Args:
        diagnoses: diagnoses of failed episodes.
        verdicts: their verdicts, in the same order; diagnoses whose verdict is not accepted are skipped.
        existing_modes: modes already in memory (`Mode.from_record`).
        encoder: sentence embedder for the explanations (MiniLM in runs; any `encode(texts) -> (N, D)`).
        vocabulary: the simulator's mode tokens (`SimBackend.mode_tokens`, `check_token`).
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
    raw, skipped = _raw_keys(diagnoses, verdicts, scenes or {}, vocabulary)
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


def _raw_keys(diagnoses: Sequence[Diagnosis], verdicts: Sequence[Verdict], scenes: Mapping[str, Any],
              vocabulary: Vocabulary) -> tuple[list[str | None], dict[int, str]]:
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
        raw[i] = diagnosis_key(d, v, spec, vocabulary, f"verdicts[{i}]")
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
    "Vocabulary",
    "cluster",
    "diagnosis_key",
    "factor_kinds",
    "mode_key",
    "parse_mode_key",
]
