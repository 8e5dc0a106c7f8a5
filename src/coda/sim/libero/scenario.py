"""`LiberoScenario`: what a LIBERO episode starts from (cheap: imports neither LIBERO nor MuJoCo)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from coda.sim.libero.errors import LiberoError


BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
PRO_VARIANTS = ("_swap", "_lan", "_task", "_object")  # LIBERO-PRO suite suffixes


def base_suite(suite: str) -> str:
    """The base suite of a LIBERO-PRO variant (`libero_object_lan` -> `libero_object`); any other name as is."""
    for v in PRO_VARIANTS:
        if suite.endswith(v) and suite[: -len(v)] in BASE_SUITES:
            return suite[: -len(v)]
    return suite


@dataclass(frozen=True)
class LiberoScenario:
    """A LIBERO task instance: a suite's task, optionally with edited BDDL text, started either from one of
    the task's official initial states or from placements sampled from the BDDL regions with a seed."""

    suite: str  # suite the task (and its official initial states) come from, e.g. "libero_object"
    task_id: int  # task index in the suite's default order
    bddl: str | None = None  # custom BDDL text; None = the task's official BDDL file
    init_state: int | None = 0  # index of an official initial state; None = sample placements with `seed`
    seed: int = 0  # seeds the placement sampling when `init_state` is None (same seed -> same placements)

    def __post_init__(self) -> None:
        if not isinstance(self.suite, str) or not self.suite:
            raise LiberoError(f"scenario suite = {self.suite!r} must be a non-empty suite name")
        if not isinstance(self.task_id, int) or isinstance(self.task_id, bool) or self.task_id < 0:
            raise LiberoError(f"scenario task_id = {self.task_id!r} must be an int >= 0")
        if self.bddl is not None and (not isinstance(self.bddl, str) or "(define" not in self.bddl):
            raise LiberoError(f"scenario bddl must be None or BDDL text with a '(define ...)' form, got {str(self.bddl)[:60]!r}")
        if self.init_state is not None and (
            not isinstance(self.init_state, int) or isinstance(self.init_state, bool) or self.init_state < 0
        ):
            raise LiberoError(f"scenario init_state = {self.init_state!r} must be None or an int >= 0")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**32:
            raise LiberoError(f"scenario seed = {self.seed!r} must be an int in [0, 2**32)")

    @property
    def spec_id(self) -> str:
        """Content hash (16 hex chars) of the scenario: its identity in datasets and records."""
        key = json.dumps([self.suite, self.task_id, self.bddl, self.init_state, self.seed])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def family(self) -> str:
        """The base suite (a PRO variant's too: `libero_spatial_swap` -> `libero_spatial`), the scenario's
        family in datasets, records and statistics."""
        return base_suite(self.suite)

    def to_dict(self) -> dict[str, object]:
        """The scenario as JSON-able data (`from_dict` reads it back)."""
        return {"backend": "libero", "suite": self.suite, "task_id": self.task_id, "bddl": self.bddl,
                "init_state": self.init_state, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: object) -> "LiberoScenario":
        """A scenario from `to_dict` data. Raises LiberoError naming a missing or unknown field."""
        if not isinstance(data, dict):
            raise LiberoError(f"a LIBERO scenario record must be a mapping, got {type(data).__name__}")
        fields = {k: v for k, v in data.items() if k != "backend"}
        unknown = sorted(set(fields) - {"suite", "task_id", "bddl", "init_state", "seed"})
        if unknown:
            raise LiberoError(f"LIBERO scenario record has unknown field(s) {unknown}")
        if "suite" not in fields or "task_id" not in fields:
            raise LiberoError(f"LIBERO scenario record needs 'suite' and 'task_id', got {sorted(fields)}")
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def is_official(self) -> bool:
        """True when the scenario uses the task's official BDDL file and one of its official initial states."""
        return self.bddl is None and self.init_state is not None

    def bddl_text(self) -> str:
        """The BDDL text the episode is built from (custom, else the official file's)."""
        if self.bddl is not None:
            return self.bddl
        from coda.sim.libero.suites import get_task

        return get_task(self.suite, self.task_id).bddl_text()

    def instruction(self) -> str:
        """The instruction of the episode: the BDDL `(:language ...)` field."""
        from coda.sim.libero.suites import bddl_language

        return bddl_language(self.bddl_text())
