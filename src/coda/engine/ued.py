"""Unsupervised-environment-design samplers for the baselines: level scores, a level buffer, PLR and ACCEL.

In the jaxued / minimax split this is the *sampler*; scene generators and mutators live in
`coda.engine.mutate` and the learner in `coda.policy`. A sampler holds hyper-parameters only; the state is
a `LevelBuffer` (an immutable record) that every operation takes and returns anew:

    sampler = PLRSampler(capacity=64, replay_prob=0.8)
    buf = sampler.initial_buffer()
    if sampler.decide(buf, rng) == "replay":
        buf, idx = sampler.sample_replay(buf, rng, n)          # train on [buf.scenes[i] for i in idx]
        buf = sampler.update_scores(buf, idx, new_scores)      # after evaluating the policy on them
    else:
        buf = sampler.insert(buf, fresh_scenes, fresh_scores)  # fresh scenes from the generator

Replay weights follow Jiang et al. 2021 (Prioritized Level Replay):
``P = (1 - staleness_coef) * P_S + staleness_coef * P_C`` with the score priority
``P_S(i) ∝ h(S_i) ** (1 / temperature)``, ``h = 1 / rank`` ("rank") or ``h = S`` ("power"), and the
staleness priority ``P_C(i) ∝ tick - last_sampled_i``.

The tick counts sampling events: every `insert` of a non-empty batch (the new scenes were just played)
and every `sample_replay` batch advances it by one, and stamps the levels involved with the new tick.

Scores must be finite: `insert` and `update_scores` REJECT NaN and ±inf with a `UEDError` naming the
entry (they are never clamped), so a bad evaluation cannot poison the buffer. With the "power"
prioritisation, scores must also be >= 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from coda.errors import CodaError
from coda.sim.backends import scenario_record


def _is_scene(s: Any) -> bool:
    """A scene of any backend: it has a `spec_id` and gives its record with `to_dict()`."""
    return isinstance(getattr(s, "spec_id", None), str) and callable(getattr(s, "to_dict", None))


class UEDError(CodaError, ValueError):
    """Bad sampler hyper-parameters, scores or buffer operations; the message names the field and value."""


# ---- scores --------------------------------------------------------------------------------------------


def _vector(name: str, values: ArrayLike) -> np.ndarray:
    """A non-empty, finite 1-D float64 array, or a UEDError naming `name`."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise UEDError(f"{name} = {values!r} is not an array of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise UEDError(f"{name} has shape {arr.shape}; it must be a non-empty 1-D array")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise UEDError(f"{name}[{int(bad[0])}] = {arr[bad[0]]}: values must be finite")
    return arr


def _success_rate(successes: ArrayLike) -> float:
    arr = _vector("successes", successes)
    bad = np.flatnonzero((arr != 0.0) & (arr != 1.0))
    if bad.size:
        raise UEDError(f"successes[{int(bad[0])}] = {arr[bad[0]]}: each rollout's success must be 0/1 or a bool")
    return float(arr.mean())


def failure(successes: ArrayLike) -> float:
    """1 − success rate over a scene's rollouts: a regret proxy, since the expert solves every valid scene.

    Args:
        successes: (R,) one 0/1 (or bool) outcome per rollout of the policy on the scene.

    Returns:
        A score in [0, 1]; 1 = the policy never succeeds.

    Raises:
        UEDError: empty, non-finite or non-binary outcomes.
    """
    return 1.0 - _success_rate(successes)


def learnability(successes: ArrayLike) -> float:
    """p (1 − p) of the success rate p over several rollouts: highest for scenes solved half of the time.

    Args:
        successes: (R,) one 0/1 (or bool) outcome per rollout; with R = 1 the score is always 0.

    Returns:
        A score in [0, 0.25].

    Raises:
        UEDError: empty, non-finite or non-binary outcomes.
    """
    p = _success_rate(successes)
    return p * (1.0 - p)


def positive_value_loss(returns: ArrayLike, values: ArrayLike) -> float:
    """Mean of max(0, G_t − V(s_t)): how much better the outcome was than the critic expected.

    With Monte-Carlo returns this is the positive value loss of Jiang et al. 2021 at λ = 1.

    Args:
        returns: (T,) return-to-go G_t at each step (all of a scene's episodes concatenated).
        values: (T,) the value estimate V(s_t) at the same steps.

    Returns:
        A score >= 0.

    Raises:
        UEDError: empty or non-finite arrays, or shapes that differ.
    """
    g, v = _vector("returns", returns), _vector("values", values)
    if g.shape != v.shape:
        raise UEDError(f"returns has shape {g.shape} but values has shape {v.shape}; they must match")
    return float(np.maximum(g - v, 0.0).mean())


class SceneResults(NamedTuple):
    """A policy's results on one scene, as the score functions read them."""

    successes: ArrayLike  # (R,) 0/1 outcome per rollout
    returns: ArrayLike | None = None  # (T,) return-to-go per step, for positive_value_loss
    values: ArrayLike | None = None  # (T,) value estimate per step, for positive_value_loss


class Score(str, Enum):
    """A level score; `compute` dispatches to the pure function of the same name."""

    FAILURE = "failure"
    LEARNABILITY = "learnability"
    POSITIVE_VALUE_LOSS = "positive_value_loss"

    @classmethod
    def parse(cls, name: str | Score) -> Score:
        """The score called `name`. Raises UEDError listing the scores that exist."""
        try:
            return cls(name)
        except ValueError:
            raise UEDError(f"Unknown score '{name}'. Available: {[s.value for s in cls]}") from None

    def compute(self, results: SceneResults) -> float:
        """This score of a policy's results on one scene (see the module functions)."""
        if self is Score.FAILURE:
            return failure(results.successes)
        if self is Score.LEARNABILITY:
            return learnability(results.successes)
        if results.returns is None or results.values is None:
            raise UEDError("score 'positive_value_loss' needs SceneResults fields 'returns' and 'values'")
        return positive_value_loss(results.returns, results.values)


# ---- the level buffer ----------------------------------------------------------------------------------


def _frozen(arr: np.ndarray) -> np.ndarray:
    out = np.array(arr, copy=True)
    out.setflags(write=False)  # buffers are values: nobody may edit one in place
    return out


@dataclass(frozen=True, eq=False)
class LevelBuffer:
    """The replay buffer of scored scenes; immutable, every sampler operation returns a new one."""

    scenes: tuple[Any, ...]  # (size,) stored scenes of any backend (`spec_id`, `to_dict`), distinct by spec_id
    scores: np.ndarray  # (size,) float64, finite
    last_sampled: np.ndarray  # (size,) int64, tick of the last sampling event of each scene
    inserted_at: np.ndarray  # (size,) int64, tick at which each scene entered the buffer
    capacity: int  # the most scenes the buffer holds
    tick: int = 0  # sampling events so far (see the module docstring)

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, (int, np.integer)) or self.capacity < 1:
            raise UEDError(f"LevelBuffer field 'capacity' = {self.capacity!r} must be an integer >= 1")
        if isinstance(self.tick, bool) or not isinstance(self.tick, (int, np.integer)) or self.tick < 0:
            raise UEDError(f"LevelBuffer field 'tick' = {self.tick!r} must be an integer >= 0")
        scenes = tuple(self.scenes)
        for k, s in enumerate(scenes):
            if not _is_scene(s):
                raise UEDError(f"LevelBuffer field 'scenes[{k}]' is a {type(s).__name__}, not a scene (spec_id, to_dict)")
        n = len(scenes)
        if n > self.capacity:
            raise UEDError(f"LevelBuffer holds {n} scenes but field 'capacity' = {self.capacity}")
        ids = [s.spec_id for s in scenes]
        if len(set(ids)) != n:
            raise UEDError("LevelBuffer field 'scenes' holds the same scene twice")
        scores = np.asarray(self.scores, dtype=np.float64)
        stamps = {}
        for name in ("last_sampled", "inserted_at"):
            arr = np.asarray(getattr(self, name))
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                raise UEDError(f"LevelBuffer field '{name}' has dtype {arr.dtype}; ticks are integers")
            stamps[name] = arr.astype(np.int64)
        for name, arr in (("scores", scores), *stamps.items()):
            if arr.shape != (n,):
                raise UEDError(f"LevelBuffer field '{name}' has shape {arr.shape}; expected ({n},) for {n} scenes")
        _check_scores("LevelBuffer field 'scores'", scores)
        last, ins = stamps["last_sampled"], stamps["inserted_at"]
        if n and not (np.all(ins >= 0) and np.all(ins <= last) and np.all(last <= self.tick)):
            raise UEDError(
                f"LevelBuffer ticks must satisfy 0 <= inserted_at <= last_sampled <= tick ({self.tick}); "
                f"got inserted_at={ins.tolist()}, last_sampled={last.tolist()}"
            )
        object.__setattr__(self, "scenes", scenes)
        object.__setattr__(self, "scores", _frozen(scores))
        object.__setattr__(self, "last_sampled", _frozen(last))
        object.__setattr__(self, "inserted_at", _frozen(ins))
        object.__setattr__(self, "capacity", int(self.capacity))
        object.__setattr__(self, "tick", int(self.tick))

    def _with(self, scores: np.ndarray | None = None, last_sampled: np.ndarray | None = None,
              tick: int | None = None) -> LevelBuffer:
        # same scenes, new (already checked) arrays: skips re-hashing every scene on each replay draw
        out = object.__new__(LevelBuffer)
        for name, value in (("scenes", self.scenes), ("capacity", self.capacity), ("inserted_at", self.inserted_at),
                            ("scores", self.scores if scores is None else _frozen(scores)),
                            ("last_sampled", self.last_sampled if last_sampled is None else _frozen(last_sampled)),
                            ("tick", self.tick if tick is None else int(tick))):
            object.__setattr__(out, name, value)
        return out

    @classmethod
    def empty(cls, capacity: int) -> LevelBuffer:
        """A buffer with no scenes."""
        none = np.zeros(0, dtype=np.int64)
        return cls((), np.zeros(0), none, none, capacity, 0)

    def __len__(self) -> int:
        return len(self.scenes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LevelBuffer):
            return NotImplemented
        return (
            self.capacity == other.capacity
            and self.tick == other.tick
            and self.scenes == other.scenes
            and np.array_equal(self.scores, other.scores)
            and np.array_equal(self.last_sampled, other.last_sampled)
            and np.array_equal(self.inserted_at, other.inserted_at)
        )

    __hash__ = None  # type: ignore[assignment]  # equal buffers compare by content; not hashable

    @property
    def full(self) -> bool:
        """True if the buffer holds `capacity` scenes."""
        return len(self) >= self.capacity

    @property
    def staleness(self) -> np.ndarray:
        """(size,) int64: sampling events since each scene was last sampled."""
        return self.tick - self.last_sampled

    def index_of(self, spec: Any) -> int | None:
        """Position of a scene (or a spec_id) in the buffer, or None."""
        sid = spec if isinstance(spec, str) else spec.spec_id
        for k, s in enumerate(self.scenes):
            if s.spec_id == sid:
                return k
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (scenes as dicts); `from_dict` restores an equal buffer."""
        return {
            "capacity": self.capacity,
            "tick": self.tick,
            "scenes": [s.to_dict() for s in self.scenes],
            "scores": [float(x) for x in self.scores],
            "last_sampled": [int(x) for x in self.last_sampled],
            "inserted_at": [int(x) for x in self.inserted_at],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelBuffer:
        """Inverse of `to_dict`. Raises UEDError (or SpecError for a bad scene) naming the field."""
        if not isinstance(data, dict):
            raise UEDError(f"a level buffer must be a mapping, got {type(data).__name__}")
        missing = [k for k in ("capacity", "tick", "scenes", "scores", "last_sampled", "inserted_at") if k not in data]
        if missing:
            raise UEDError(f"level buffer field '{missing[0]}' is missing")
        return cls(
            scenes=tuple(scenario_record(s) for s in data["scenes"]),
            scores=np.asarray(data["scores"], dtype=np.float64),
            last_sampled=np.asarray(data["last_sampled"], dtype=np.int64),
            inserted_at=np.asarray(data["inserted_at"], dtype=np.int64),
            capacity=data["capacity"],
            tick=data["tick"],
        )


def _check_scores(what: str, scores: np.ndarray, non_negative: bool = False) -> None:
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        k = int(bad[0])
        raise UEDError(f"{what}[{k}] = {scores[k]}: a level score must be finite (NaN and ±inf are rejected, never stored)")
    if non_negative:
        neg = np.flatnonzero(scores < 0)
        if neg.size:
            k = int(neg[0])
            raise UEDError(f"{what}[{k}] = {scores[k]}: prioritization 'power' needs scores >= 0")


# ---- samplers ------------------------------------------------------------------------------------------

Prioritization = Literal["rank", "power"]
Decision = Literal["replay", "new"]


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(v)


@dataclass(frozen=True)
class PLRSampler:
    """Prioritised level replay (Jiang et al. 2021): hyper-parameters only; the state is a LevelBuffer."""

    capacity: int = 256  # scenes the buffer holds; when full, a new scene replaces the lowest-scoring one
    replay_prob: float = 0.8  # chance `decide` answers "replay" once the buffer holds min_fill scenes
    temperature: float = 0.3  # β: score priority ∝ h(S) ** (1 / β); smaller = greedier
    staleness_coef: float = 0.3  # ρ: weight of the staleness priority in the replay distribution
    prioritization: Prioritization = "rank"  # h(S) = 1 / rank(S) ("rank") or S itself ("power", S >= 0)
    min_fill: int = 1  # scenes the buffer must hold before `decide` may answer "replay"

    def __post_init__(self) -> None:
        self._validate()

    def _fail(self, name: str, rule: str) -> UEDError:
        return UEDError(f"{type(self).__name__} field '{name}' = {getattr(self, name)!r} {rule}")

    def _validate(self) -> None:
        if not _is_int(self.capacity) or self.capacity < 1:
            raise self._fail("capacity", "must be an integer >= 1")
        if not _is_number(self.replay_prob) or not 0.0 <= self.replay_prob <= 1.0:
            raise self._fail("replay_prob", "must be a number in [0, 1]")
        if not _is_number(self.temperature) or self.temperature <= 0:
            raise self._fail("temperature", "must be a finite number > 0")
        if not _is_number(self.staleness_coef) or not 0.0 <= self.staleness_coef <= 1.0:
            raise self._fail("staleness_coef", "must be a number in [0, 1]")
        if self.prioritization not in ("rank", "power"):
            raise self._fail("prioritization", "must be 'rank' or 'power'")
        if not _is_int(self.min_fill) or not 1 <= self.min_fill <= self.capacity:
            raise self._fail("min_fill", f"must be an integer in [1, capacity = {self.capacity}]")

    # ---- state --------------------------------------------------------------------------------------

    def initial_buffer(self) -> LevelBuffer:
        """An empty buffer of this sampler's capacity."""
        return LevelBuffer.empty(self.capacity)

    def _own(self, buf: LevelBuffer) -> None:
        if not isinstance(buf, LevelBuffer):
            raise UEDError(f"buffer must be a LevelBuffer, got {type(buf).__name__}")
        if buf.capacity != self.capacity:
            raise UEDError(f"buffer capacity {buf.capacity} does not match {type(self).__name__} field 'capacity' = {self.capacity}")

    def _scores(self, what: str, scores: ArrayLike, n: int) -> np.ndarray:
        try:
            arr = np.asarray(scores, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise UEDError(f"{what} = {scores!r} is not an array of numbers") from None
        if arr.size != n:
            raise UEDError(f"{what} has {arr.size} entries for {n} scenes")
        _check_scores(what, arr, non_negative=self.prioritization == "power")
        return arr

    def insert(self, buf: LevelBuffer, scenes: Sequence[Any], scores: ArrayLike) -> LevelBuffer:
        """Add freshly played scenes with their scores (one sampling event).

        A scene already in the buffer (same spec_id) gets the new score instead of a second entry. While
        the buffer has room, scenes are appended; once full, a scene replaces the lowest-scoring entry
        (ties: the stalest, then the first) if its score is strictly higher, and is dropped otherwise.

        Args:
            buf: the current buffer (capacity = this sampler's).
            scenes: (n,) scenes just played.
            scores: (n,) their scores; NaN and ±inf are rejected (the whole call fails, nothing is stored).

        Returns:
            The new buffer; its tick is one higher when `scenes` is non-empty.

        Raises:
            UEDError: a non-finite (or, for "power", negative) score, mismatched lengths, a non-scene.
        """
        self._own(buf)
        scenes = tuple(scenes)
        for k, s in enumerate(scenes):
            if not _is_scene(s):
                raise UEDError(f"scenes[{k}] is a {type(s).__name__}, not a scene (spec_id, to_dict)")
        vals = self._scores("scores", scores, len(scenes))
        if not scenes:
            return buf
        tick = buf.tick + 1
        levels = list(buf.scenes)
        sc, last, ins = list(buf.scores), list(buf.last_sampled), list(buf.inserted_at)
        where = {s.spec_id: k for k, s in enumerate(levels)}
        for spec, score in zip(scenes, vals):
            hit = where.get(spec.spec_id)
            if hit is not None:
                sc[hit], last[hit] = float(score), tick
                continue
            if len(levels) < self.capacity:
                k = len(levels)
                levels.append(spec)
                sc.append(0.0)
                last.append(0)
                ins.append(0)
            else:
                # the lowest score goes first; among equals the stalest, then the first stored
                k = min(range(len(levels)), key=lambda j: (sc[j], last[j], j))
                if not score > sc[k]:
                    continue
                del where[levels[k].spec_id]
                levels[k] = spec
            sc[k], last[k], ins[k] = float(score), tick, tick
            where[spec.spec_id] = k
        return LevelBuffer(tuple(levels), np.asarray(sc), np.asarray(last, dtype=np.int64),
                           np.asarray(ins, dtype=np.int64), self.capacity, tick)

    def update_scores(self, buf: LevelBuffer, indices: ArrayLike, scores: ArrayLike) -> LevelBuffer:
        """New scores for stored scenes (after the policy played them again); the tick is unchanged.

        Raises:
            UEDError: an index out of range or repeated, a non-finite (or, for "power", negative) score.
        """
        self._own(buf)
        idx = self._indices(buf, indices)
        vals = self._scores("scores", scores, idx.size)
        sc = np.array(buf.scores)
        sc[idx] = vals
        return buf._with(scores=sc)

    def _indices(self, buf: LevelBuffer, indices: ArrayLike) -> np.ndarray:
        arr = np.asarray(indices).reshape(-1)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise UEDError(f"indices = {arr.tolist()} must be integers")
        arr = arr.astype(np.int64)
        out = np.flatnonzero((arr < 0) | (arr >= len(buf)))
        if out.size:
            raise UEDError(f"indices[{int(out[0])}] = {int(arr[out[0]])} is outside the buffer of {len(buf)} scenes")
        if np.unique(arr).size != arr.size:
            raise UEDError(f"indices = {arr.tolist()} repeat a scene; give each scene one score")
        return arr

    # ---- replay distribution -------------------------------------------------------------------------

    def score_weights(self, buf: LevelBuffer) -> np.ndarray:
        """(size,) P_S: the score priority, normalised (uniform if every h(S) is 0)."""
        s = buf.scores
        if len(s) == 0:
            return np.zeros(0)
        if self.prioritization == "rank":
            # tied scores share the best rank, so equal scores always get equal weight
            rank = 1.0 + (s[None, :] > s[:, None]).sum(axis=1)
            h = (1.0 / rank) ** (1.0 / self.temperature)
        else:
            _check_scores("buffer scores", s, non_negative=True)
            top = s.max()
            h = (s / top) ** (1.0 / self.temperature) if top > 0 else np.zeros_like(s)  # scaled: no overflow
        total = h.sum()
        return h / total if total > 0 else np.full(len(s), 1.0 / len(s))

    def staleness_weights(self, buf: LevelBuffer) -> np.ndarray:
        """(size,) P_C ∝ tick − last_sampled, normalised (uniform if nothing is stale)."""
        st = buf.staleness.astype(np.float64)
        if len(st) == 0:
            return np.zeros(0)
        total = st.sum()
        return st / total if total > 0 else np.full(len(st), 1.0 / len(st))

    def weights(self, buf: LevelBuffer) -> np.ndarray:
        """(size,) replay distribution (1 − ρ) P_S + ρ P_C; sums to 1 (empty for an empty buffer)."""
        self._own(buf)
        w = (1.0 - self.staleness_coef) * self.score_weights(buf) + self.staleness_coef * self.staleness_weights(buf)
        return w / w.sum() if len(w) else w

    def sample_replay(
        self, buf: LevelBuffer, rng: np.random.Generator, n: int, *, unique: bool = False
    ) -> tuple[LevelBuffer, np.ndarray]:
        """Draw `n` stored scenes to replay (one sampling event); always scenes of the buffer.

        Args:
            buf: a non-empty buffer.
            rng: the only source of randomness.
            n: scenes to draw (>= 1).
            unique: draw without replacement (then n <= size); default: n independent draws from `weights`.

        Returns:
            (new buffer with tick + 1 and the drawn scenes' last_sampled = that tick, (n,) int64 indices).

        Raises:
            UEDError: an empty buffer, n < 1, or unique with n > size.
        """
        self._own(buf)
        if not _is_int(n) or n < 1:
            raise UEDError(f"n = {n!r} must be an integer >= 1")
        if len(buf) == 0:
            raise UEDError("cannot replay from an empty level buffer; insert scored scenes first")
        if unique and n > len(buf):
            raise UEDError(f"n = {n} unique scenes requested but the buffer holds {len(buf)}")
        idx = rng.choice(len(buf), size=int(n), replace=not unique, p=self.weights(buf)).astype(np.int64)
        tick = buf.tick + 1
        last = np.array(buf.last_sampled)
        last[idx] = tick
        return buf._with(last_sampled=last, tick=tick), idx

    def decide(self, buf: LevelBuffer, rng: np.random.Generator) -> Decision:
        """Answer "replay" with probability replay_prob once the buffer holds min_fill scenes, else "new".

        One uniform number is drawn either way, so the rng stream does not depend on the buffer's fill.
        """
        self._own(buf)
        u = float(rng.random())
        return "replay" if len(buf) >= self.min_fill and u < self.replay_prob else "new"


@dataclass(frozen=True)
class ACCELSampler(PLRSampler):
    """ACCEL (Parker-Holder et al. 2022): PLR whose new scenes are edits of the top-scoring stored ones.

    The strategy mutates `select_parents(buf, rng, n)` with `coda.engine.mutate.mutate(rng, parent,
    n_edits)`, scores the children and `insert`s them; replay follows PLR (score and staleness).
    """

    n_edits: int = 1  # random edits per child scene

    def _validate(self) -> None:
        super()._validate()
        if not _is_int(self.n_edits) or self.n_edits < 1:
            raise self._fail("n_edits", "must be an integer >= 1")

    def select_parents(self, buf: LevelBuffer, rng: np.random.Generator, n: int) -> np.ndarray:
        """Indices of the `n` top-scoring stored scenes, best first; the buffer is not changed.

        Ties in score are broken at random (by `rng`); when n exceeds the buffer's size the ranking is
        repeated, so every stored scene parents about n / size children.

        Raises:
            UEDError: an empty buffer or n < 1.
        """
        self._own(buf)
        if not _is_int(n) or n < 1:
            raise UEDError(f"n = {n!r} must be an integer >= 1")
        if len(buf) == 0:
            raise UEDError("cannot select parents from an empty level buffer; insert scored scenes first")
        shuffled = rng.permutation(len(buf))
        order = shuffled[np.argsort(-buf.scores[shuffled], kind="stable")]
        return np.resize(order, int(n)).astype(np.int64)


__all__ = [
    "ACCELSampler",
    "LevelBuffer",
    "PLRSampler",
    "SceneResults",
    "Score",
    "UEDError",
    "failure",
    "learnability",
    "positive_value_loss",
]
