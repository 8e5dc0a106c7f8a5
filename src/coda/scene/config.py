"""Scene-language configuration (cheap: no MuJoCo import)."""

from __future__ import annotations

from pydantic import Field, field_validator

from coda.config_base import Section


class SceneConfig(Section):
    families: tuple[str, ...] = Field(("pick_place", "stack", "push", "drawer"), min_length=1)  # task families in play (of the backend)
    sft_scenes_per_family: int = Field(200, ge=1)  # scenes in each family's sft split

    @field_validator("families")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"lists a family twice: {list(v)}")
        return v
