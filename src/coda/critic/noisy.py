"""The `noisy` critic: wraps any critic and corrupts a seeded fraction of its diagnoses.

It exists to measure verification: the bench knows exactly which diagnoses are wrong (the `corruptions`
log is the ground truth) and checks that the verifier rejects them. Whether an episode is corrupted, and
how, depends only on (seed, episode_id), not on the order episodes arrive in.

Corruption kinds:
- `mode`: the failure mode is replaced by a different one;
- `object`: the first implicated object is replaced by another object of the scene;
- `factor`: the first implicated factor is replaced by one of a different kind (or a spurious one added).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from coda.critic.base import Critic, EpisodeRecord
from coda.critic.diagnosis import FACTOR_KINDS, FAILURE_MODES, CriticResult, Diagnosis, SceneFactor
from coda.errors import CodaError
from coda.scene.spec import PALETTE
from coda.shaping.resolve import entity_words

CorruptionKind = Literal["mode", "object", "factor"]
CORRUPTION_KINDS: tuple[CorruptionKind, ...] = ("mode", "object", "factor")
# Table regions a corrupted position factor may name (the 3 x 3 grid of coda.scene.regions).
_GRID = tuple(f"{x}_{y}" for x in ("near", "mid", "far") for y in ("right", "mid", "left"))


class Corruption(BaseModel):
    """What the noisy critic changed in one diagnosis (ground truth for the verification bench)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episode_id: str
    kind: CorruptionKind
    original: str  # JSON of the field before
    corrupted: str  # JSON of the field after


def _episode_seed(seed: int, episode_id: str) -> list[int]:
    digest = hashlib.sha256(episode_id.encode()).digest()
    return [seed & 0xFFFFFFFF, int.from_bytes(digest[:8], "little")]


class NoisyCritic:
    """Corrupts a fraction `rate` of `base`'s diagnoses; rejections pass through untouched.

    Args:
        base: the critic to wrap.
        rate: probability in [0, 1] that an episode's diagnosis is corrupted.
        seed: seed of the draws (with the episode id).
        kinds: corruption kinds to draw from (uniformly).
        name: the name written into every diagnosis it returns (corrupted or not, so the name leaks nothing).

    Raises:
        CodaError: rate outside [0, 1] or an unknown/empty kinds list.
    """

    def __init__(
        self,
        base: Critic,
        rate: float,
        seed: int = 0,
        kinds: tuple[CorruptionKind, ...] = CORRUPTION_KINDS,
        name: str = "noisy",
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise CodaError(f"noisy critic rate = {rate!r} must be in [0, 1]")
        bad = [k for k in kinds if k not in CORRUPTION_KINDS]
        if bad or not kinds:
            raise CodaError(f"noisy critic kinds = {list(kinds)!r}: each must be one of {list(CORRUPTION_KINDS)}")
        self.base, self.rate, self.seed, self.kinds, self.name = base, rate, seed, tuple(kinds), name
        self.corruptions: dict[str, Corruption] = {}

    def diagnose(self, episode: EpisodeRecord) -> CriticResult:
        """The base critic's answer, corrupted with probability `rate` (recorded in `corruptions`)."""
        result = self.base.diagnose(episode)
        if not isinstance(result, Diagnosis):
            return result
        result = result.model_copy(update={"critic": self.name})
        rng = np.random.default_rng(_episode_seed(self.seed, episode.episode_id))
        if rng.random() >= self.rate:
            return result
        kind = self.kinds[int(rng.integers(len(self.kinds)))]
        corrupted, record = _corrupt(result, episode, kind, rng)
        self.corruptions[episode.episode_id] = record
        return corrupted

    def corrupted(self, episode_id: str) -> Corruption | None:
        """The corruption applied to an episode's diagnosis, or None if it was left as the base wrote it."""
        return self.corruptions.get(episode_id)


def _corrupt(d: Diagnosis, episode: EpisodeRecord, kind: CorruptionKind, rng: np.random.Generator) -> tuple[Diagnosis, Corruption]:
    spec = episode.spec
    if kind == "object":
        others = [o.name for o in spec.objects if o.name not in d.objects[:1]]
        if not others:  # a one-object scene: nothing to swap in, so corrupt the mode instead
            kind = "mode"
        else:
            new_obj = others[int(rng.integers(len(others)))]
            new = (new_obj, *d.objects[1:]) if d.objects else (new_obj,)
            return _apply(d, episode, "object", "objects", list(d.objects), list(new), {"objects": new})
    if kind == "mode":
        modes = [m for m in FAILURE_MODES if m != d.failure_mode]
        m = modes[int(rng.integers(len(modes)))]
        return _apply(d, episode, "mode", "failure_mode", d.failure_mode, m, {"failure_mode": m})
    old = d.factors[0] if d.factors else None
    f = _wrong_factor(old, episode, rng)
    factors = (f, *d.factors[1:]) if d.factors else (f,)
    before = [x.model_dump() for x in d.factors]
    return _apply(d, episode, "factor", "factors", before, [x.model_dump() for x in factors], {"factors": factors})


def _apply(
    d: Diagnosis, episode: EpisodeRecord, kind: CorruptionKind, field: str, before: object, after: object, update: dict[str, Any]
) -> tuple[Diagnosis, Corruption]:
    rec = Corruption(
        episode_id=episode.episode_id,
        kind=kind,
        original=json.dumps({field: before}, sort_keys=True),
        corrupted=json.dumps({field: after}, sort_keys=True),
    )
    return d.model_copy(update=update), rec


def _wrong_factor(old: SceneFactor | None, episode: EpisodeRecord, rng: np.random.Generator) -> SceneFactor:
    """A factor of a kind different from `old` (any kind if there was none), about a scene entity."""
    spec = episode.spec
    kinds = [k for k in FACTOR_KINDS if old is None or k != old.kind]
    kind = kinds[int(rng.integers(len(kinds)))]
    objects = [o.name for o in spec.objects]
    ent = objects[int(rng.integers(len(objects)))] if objects else None
    if kind in ("position", "region"):
        value = _GRID[int(rng.integers(len(_GRID)))]
    elif kind == "instruction":
        words = episode.instruction.split()
        value = " ".join(words[-2:]) if words else "instruction"
        ent = None
    elif kind == "task":
        value = entity_words(spec.entity(ent)) if ent is not None else "another object"
    elif kind == "object_attribute":
        colors = sorted(PALETTE)
        value = f"color={colors[int(rng.integers(len(colors)))]}"
    elif kind == "distractor":
        value = "look-alike object"
    else:
        value = ("friction_scale=0.4", "mass_scale=3", "gravity=14")[int(rng.integers(3))]
        ent = None
    return SceneFactor(kind=kind, entity=ent, value=value, detail="")
