"""Scene-language configuration (cheap: no MuJoCo import)."""

from __future__ import annotations

from pydantic import Field, field_validator

from coda.config_base import Section


class SceneConfig(Section):
    families: tuple[str, ...] = Field(("pick_place", "stack", "push", "drawer"), min_length=1)  # task families in play (of the backend)
    sft_scenes_per_family: int = Field(200, ge=1)  # scenes in each family's sft split
    ood_scenes_per_split: int = Field(100, ge=1)  # scenes in each OOD split per family
    train_seed: int = Field(0, ge=0)  # seed of the sft training split
    eval_seed: int = Field(1000, ge=0)  # seed of the evaluation splits (differs from train_seed: unseen layouts)
    validate_with_expert: bool = True  # a generated scene is valid only if the scripted expert solves it
    settle_seconds: float = Field(0.5, gt=0)  # objects must settle within this time at validity check
    penetration_tol: float = Field(0.004, gt=0)  # allowed interpenetration (m) after settling

    @field_validator("families")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"lists a family twice: {list(v)}")
        return v
