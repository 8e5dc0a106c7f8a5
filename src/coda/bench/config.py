"""Benchmark configuration (cheap)."""

from __future__ import annotations

from pydantic import Field

from coda.config_base import Section


class BenchConfig(Section):
    seeds: int = Field(3, ge=1)  # seeds per strategy
    eval_scenes_per_split: int = Field(50, ge=1)  # evaluation scenes per family and split
