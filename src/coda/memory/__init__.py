"""The shared heterogeneous memory: runs, phases, scenes, programs, episodes, diagnoses, verdicts, failure modes,
potentials, learning progress and checkpoints in one SQL database (SQLite file by default, PostgreSQL by URL),
with large artifacts as checksummed files in the run directory.

Importing `coda.memory` (or `coda.memory.config`) is cheap: SQLAlchemy loads on first use of a name below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it
_EXPORTS = {
    "open_memory": "coda.memory.connect",
    "open_memory_from_config": "coda.memory.connect",
    "Memory": "coda.memory.store",
    "MemoryView": "coda.memory.store",
    "PhaseTx": "coda.memory.store",
    "KINDS": "coda.memory.store",
    "ArtifactStore": "coda.memory.artifacts",
    "ArtifactRef": "coda.memory.artifacts",
    "SCHEMA_VERSION": "coda.memory.schema",
    "run_readonly_query": "coda.memory.query",
    **{
        name: "coda.memory.models"
        for name in (
            "Run", "PhaseMarker", "Scenario", "GenerationProgram", "TrainingProgram", "Episode", "Diagnosis",
            "Verdict", "FailureMode", "Potential", "LearningProgress", "Checkpoint",
        )
    },
    **{
        name: "coda.memory.errors"
        for name in (
            "MemoryStoreError", "MemoryConnectError", "MemoryNotFoundError", "RecordNotFoundError",
            "DuplicateRecordError", "InvalidRecordError", "PhaseCommittedError", "ReadOnlyQueryError",
            "QueryError", "ArtifactError",
        )
    },
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'coda.memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from coda.memory.artifacts import ArtifactRef, ArtifactStore
    from coda.memory.connect import open_memory, open_memory_from_config
    from coda.memory.errors import (
        ArtifactError,
        DuplicateRecordError,
        InvalidRecordError,
        MemoryConnectError,
        MemoryNotFoundError,
        MemoryStoreError,
        PhaseCommittedError,
        QueryError,
        ReadOnlyQueryError,
        RecordNotFoundError,
    )
    from coda.memory.models import (
        Checkpoint,
        Diagnosis,
        Episode,
        FailureMode,
        GenerationProgram,
        LearningProgress,
        PhaseMarker,
        Potential,
        Run,
        Scenario,
        TrainingProgram,
        Verdict,
    )
    from coda.memory.query import run_readonly_query
    from coda.memory.schema import SCHEMA_VERSION
    from coda.memory.store import KINDS, Memory, MemoryView, PhaseTx
