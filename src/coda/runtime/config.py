"""Executor configuration (cheap)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coda.config_base import Section


class RuntimeConfig(Section):
    executor: Literal["local", "ray"] = "local"  # where rollouts run
    workers: int = Field(2, ge=1)  # parallel rollout processes
    ray_address: str | None = None  # `ray://host:port` for a cluster; None starts a local one
    run_root: str = "runs"  # parent folder of run directories
