"""Executor configuration (cheap)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coda.config_base import Section


class RuntimeConfig(Section):
    executor: Literal["local", "ray"] = "local"  # where policy rollouts run: local worker processes, or Ray actors (coda.runtime.executor)
    ray_address: str | None = None  # executor "ray": a running cluster ("auto", "ray://host:10001"); none starts a local Ray
    workers: int = Field(2, ge=1)  # parallel rollout processes
    rollout_batch: int = Field(16, ge=1)  # episodes one process runs together, one policy call for all that need a chunk (episodes do not depend on it)
    run_root: str = "runs"  # parent folder of run directories
