"""Benchmark configuration (cheap)."""

from __future__ import annotations

from pydantic import Field

from coda.config_base import Section


class BenchConfig(Section):
    eval_scenes_per_split: int = Field(50, ge=1)  # evaluation scenes per family and split
