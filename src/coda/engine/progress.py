"""Learning progress per failure mode, mode status, and the split of a round's generation budget.

**Learning progress** of a mode in a round is its success rate on held-apart probe scenes (scenes of the
mode's generation program that are never trained on) after training minus before training. Generation
follows where the policy is learning (as in learning-progress curricula): a mode's share of the budget is
proportional to |progress| — a drop (forgetting) is as informative as a gain.

**Status** (`mode_status`): ``solved`` once the latest success after training reaches `solved_threshold`;
``stuck`` when each of the last `stuck_rounds` rounds gained less than `min_progress`; else ``active``.

**Budget** (`allocate_budget`; `mode_shares` with the run's settings): solved modes retire (0 scenes). An ``explore`` share of the budget probes
new random variations (all of it when no mode is active). The rest, R, goes to the active modes: each gets
`exploration_floor` × R, and the remaining (1 − n × floor) × R is split in proportion to |progress| of each
mode's latest round. Modes without history get only the floor — unless no mode has history (or every
|progress| is 0), in which case that remainder is split equally. With `max_modes`, only that many active
modes share R in a round: those never measured first, then by |progress| of their latest round (ties in
random order); the others wait with 0 scenes, so a round's cost stays bounded however many modes the run has
found and each chosen mode gets enough scenes to learn from. Fractional quotas are rounded by the
largest-remainder method, with ties broken by the given rng, so the counts are integers that sum exactly
to the budget and each differs from its quota by less than one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coda.errors import CodaError

EXPLORE = "explore"  # the budget key of new random variations
Status = Literal["active", "solved", "stuck"]


class ProgressError(CodaError, ValueError):
    """Bad learning-progress or budget input; the message names the field and value."""


class LearningProgress(BaseModel):
    """Success of the policy on a mode's probe scenes before and after one round of training."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str  # failure mode key
    round: int = Field(ge=0)  # the round whose training is measured
    before: float = Field(ge=0, le=1)  # success rate before training
    after: float = Field(ge=0, le=1)  # success rate after training
    n: int = Field(default=0, ge=0)  # probe scenes measured (0 = not recorded)

    @model_validator(mode="after")
    def _finite(self) -> LearningProgress:
        if not (math.isfinite(self.before) and math.isfinite(self.after)):
            raise ValueError(f"before {self.before} and after {self.after} must be finite")
        return self

    @property
    def progress(self) -> float:
        """after − before."""
        return self.after - self.before

    @classmethod
    def measure(cls, mode: str, round: int, before: Sequence[bool], after: Sequence[bool]) -> LearningProgress:
        """Progress from per-probe-scene outcomes (the same probe scenes, in the same order, before and after).

        Raises:
            ProgressError: no probe scenes, or different numbers before and after.
        """
        if len(before) != len(after):
            raise ProgressError(f"after has {len(after)} probe outcomes but before has {len(before)}; they must be the same scenes")
        if not before:
            raise ProgressError(f"before: mode {mode!r} round {round} has no probe outcomes")
        n = len(before)
        return cls(mode=mode, round=round, before=sum(map(bool, before)) / n, after=sum(map(bool, after)) / n, n=n)

    def record_fields(self, budget_share: float) -> dict[str, float]:
        """The measured fields of a memory `LearningProgress` record (the engine adds the failure_mode_id)."""
        return {"before": self.before, "after": self.after, "budget_share": budget_share}


def _check_history(history: Sequence[LearningProgress], where: str, mode: str | None = None) -> None:
    last = -1
    for i, lp in enumerate(history):
        if not isinstance(lp, LearningProgress):
            raise ProgressError(f"{where}[{i}] is a {type(lp).__name__}, not a LearningProgress")
        if mode is not None and lp.mode != mode:
            raise ProgressError(f"{where}[{i}].mode = {lp.mode!r} is not the mode it is listed under ({mode!r})")
        if lp.round <= last:
            raise ProgressError(f"{where}[{i}].round = {lp.round} must come after round {last} (one entry per round, in order)")
        last = lp.round


def mode_status(
    history: Sequence[LearningProgress],
    *,
    solved_threshold: float = 0.9,
    stuck_rounds: int = 2,
    min_progress: float = 0.05,
) -> Status:
    """``solved``, ``stuck`` or ``active`` from a mode's progress history (rounds in order; see the module docstring).

    Raises:
        ProgressError: a threshold out of range, or a history out of round order or mixing modes.
    """
    if not 0 < solved_threshold <= 1:
        raise ProgressError(f"solved_threshold = {solved_threshold} must be in (0, 1]")
    if not isinstance(stuck_rounds, int) or stuck_rounds < 1:
        raise ProgressError(f"stuck_rounds = {stuck_rounds!r} must be a positive integer")
    if not 0 <= min_progress <= 1:
        raise ProgressError(f"min_progress = {min_progress} must be in [0, 1]")
    _check_history(history, "history", history[0].mode if history else None)
    if not history:
        return "active"
    if history[-1].after >= solved_threshold:
        return "solved"
    recent = history[-stuck_rounds:]
    if len(recent) == stuck_rounds and all(lp.progress < min_progress for lp in recent):
        return "stuck"
    return "active"


def largest_remainder(quotas: Mapping[str, float], total: int, rng: np.random.Generator) -> dict[str, int]:
    """Integers that sum to `total`, each the floor or ceiling of its quota (quotas must sum to `total`).

    Units left after flooring go to the largest fractional parts; equal parts are ordered by `rng`.
    """
    keys = list(quotas)
    base = {k: math.floor(quotas[k]) for k in keys}
    left = total - sum(base.values())
    tie = rng.permutation(len(keys))  # a random order among equal remainders
    rank = sorted(range(len(keys)), key=lambda i: (-(quotas[keys[i]] - base[keys[i]]), int(tie[i])))
    for i in rank[: max(0, left)]:
        base[keys[i]] += 1
    return base


def choose_modes(progress_by_mode: Mapping[str, Sequence[LearningProgress]], k: int, rng: np.random.Generator) -> list[str]:
    """The `k` modes a capped round gives scenes to, in key order: never-measured modes first, then by
    |progress| of the latest round, equal ones in an order drawn from `rng`."""
    keys = sorted(progress_by_mode)
    tie = rng.permutation(len(keys))

    def rank(i: int) -> tuple[bool, float, int]:
        hist = progress_by_mode[keys[i]]
        return (bool(hist), -abs(hist[-1].progress) if hist else 0.0, int(tie[i]))

    return sorted(keys[i] for i in sorted(range(len(keys)), key=rank)[:k])


def allocate_budget(
    progress_by_mode: Mapping[str, Sequence[LearningProgress]],
    budget: int,
    exploration_floor: float,
    explore_share: float,
    solved_threshold: float,
    rng: np.random.Generator,
    max_modes: int = 0,
) -> dict[str, int]:
    """Split a round's generation budget across failure modes and exploration (see the module docstring).

    Args:
        progress_by_mode: mode key -> its progress history, rounds in order (empty = no history yet).
        budget: scenes to generate this round (>= 0).
        exploration_floor: minimum share of the modes' part per active mode; at most 1 / (active modes).
        explore_share: share of the budget for new random variations (key "explore").
        solved_threshold: success after training at which a mode retires.
        rng: breaks ties in the choice of modes and in the rounding (same rng state, same counts).
        max_modes: at most this many active modes get scenes (0: all of them).

    Returns:
        {mode key: scenes, ..., "explore": scenes}; every given mode is present (retired and waiting ones
        with 0) and the counts sum exactly to `budget`.

    Raises:
        ProgressError: negative budget or max_modes, shares out of [0, 1], a floor the chosen modes cannot
            all get, a mode named "explore", or a history listed under another mode or out of round order.
    """
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ProgressError(f"budget = {budget!r} must be a non-negative integer")
    budget = int(budget)
    for name, v in (("exploration_floor", exploration_floor), ("explore_share", explore_share)):
        if not (isinstance(v, (int, float)) and 0 <= v <= 1):
            raise ProgressError(f"{name} = {v!r} must be a number in [0, 1]")
    if not 0 < solved_threshold <= 1:
        raise ProgressError(f"solved_threshold = {solved_threshold!r} must be in (0, 1]")
    if isinstance(max_modes, bool) or not isinstance(max_modes, (int, np.integer)) or max_modes < 0:
        raise ProgressError(f"max_modes = {max_modes!r} must be a non-negative integer (0: no limit)")
    if EXPLORE in progress_by_mode:
        raise ProgressError(f"progress_by_mode: '{EXPLORE}' is reserved for exploration, not a mode key")
    for key, hist in progress_by_mode.items():
        _check_history(hist, f"progress_by_mode[{key!r}]", key)
    keys = sorted(progress_by_mode)  # a fixed order: the result does not depend on the mapping's order
    active = [k for k in keys if not (progress_by_mode[k] and progress_by_mode[k][-1].after >= solved_threshold)]
    if max_modes and len(active) > max_modes:
        active = choose_modes({k: progress_by_mode[k] for k in active}, max_modes, rng)
    n = len(active)
    if n and exploration_floor * n > 1 + 1e-9:
        raise ProgressError(
            f"exploration_floor = {exploration_floor} is impossible for {n} active modes: {n} x {exploration_floor} > 1 "
            f"(at most {1 / n:.4f})"
        )
    quotas: dict[str, float] = {k: 0.0 for k in keys}
    explore = float(budget) if n == 0 else explore_share * budget
    quotas[EXPLORE] = explore
    if n:
        rest = budget - explore
        lp = {k: abs(progress_by_mode[k][-1].progress) if progress_by_mode[k] else 0.0 for k in active}
        total_lp = sum(lp.values())
        free = (1.0 - exploration_floor * n) * rest
        for k in active:
            share = lp[k] / total_lp if total_lp > 0 else 1.0 / n
            quotas[k] = exploration_floor * rest + free * share
    return largest_remainder(quotas, budget, rng)


def mode_shares(active: Mapping[str, Sequence[LearningProgress]], budget: int, cfg: Any,
                rng: np.random.Generator) -> dict[str, int]:
    """A round's budget split by `allocate_budget` with the run's engine settings (`cfg`: exploration_floor,
    explore_share, solved_threshold, max_modes); with more unsolved modes than `1 / exploration_floor` (of those
    that get scenes), each is guaranteed an equal share of the modes' part instead of the floor."""
    unsolved = sum(1 for v in active.values() if not (v and v[-1].after >= cfg.solved_threshold))
    if cfg.max_modes:
        unsolved = min(unsolved, cfg.max_modes)
    floor = min(cfg.exploration_floor, 1.0 / unsolved) if unsolved else cfg.exploration_floor
    return allocate_budget(active, budget, floor, cfg.explore_share, cfg.solved_threshold, rng, max_modes=cfg.max_modes)


__all__ = [
    "EXPLORE",
    "LearningProgress",
    "ProgressError",
    "Status",
    "allocate_budget",
    "mode_shares",
    "choose_modes",
    "largest_remainder",
    "mode_status",
]
