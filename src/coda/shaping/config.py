"""Text2potential configuration (cheap)."""

from __future__ import annotations

from pydantic import Field

from coda.config_base import Section


class ShapingConfig(Section):
    weight: float = Field(1.0, ge=0)  # scale of Φ in the shaping term
    min_rank_corr: float = Field(0.8, ge=-1, le=1)  # Φ must rise along expert demos at least this much
