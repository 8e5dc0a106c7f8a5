"""Executor configuration (cheap)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coda.config_base import Section


class RuntimeConfig(Section):
    executor: Literal["local"] = "local"  # where parallel jobs run: local worker processes (no other executor yet)
    workers: int = Field(2, ge=1)  # parallel rollout processes
    rollout_batch: int = Field(16, ge=1)  # episodes one process steps in lockstep, one policy call per chunk boundary for all (episodes do not depend on it)
    run_root: str = "runs"  # parent folder of run directories
