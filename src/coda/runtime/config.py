"""Executor configuration (cheap)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from coda.config_base import Section


class RuntimeConfig(Section):
    executor: Literal["local", "ray"] = "local"  # where policy rollouts run: local worker processes, or Ray actors (coda.runtime.executor)
    ray_address: str | None = None  # executor "ray": a running cluster ("auto", "ray://host:10001"); none starts a local Ray
    workers: int = Field(2, ge=1)  # parallel rollout processes
    rollout_batch: int = Field(16, ge=1)  # episodes one process runs together, one policy call for all that need a chunk (episodes do not depend on it)
    run_root: str = "runs"  # parent folder of run directories
    text_cache: str | None = Field("auto", min_length=1)  # SQLite file of MiniLM text embeddings shared by processes and runs, so no string is embedded twice (coda.policy.text.EmbeddingStore): "auto" = .text_cache.sqlite beside the run directory (runs in one folder share it), off (or null) = none, or a file path

    @field_validator("text_cache", mode="before")
    @classmethod
    def _off(cls, v: object) -> object:
        return None if v is False or v == "off" else v  # YAML reads a bare `off` as false


def text_cache_file(cfg: RuntimeConfig, run_dir: Path) -> Path | None:
    """The text-embedding cache file `cfg.text_cache` names for a run in `run_dir` (None: "off")."""
    if cfg.text_cache is None:
        return None
    if cfg.text_cache == "auto":
        return Path(run_dir).resolve().parent / ".text_cache.sqlite"
    return Path(cfg.text_cache).expanduser()
