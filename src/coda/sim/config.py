"""Simulator configuration (cheap: no MuJoCo import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from coda.config_base import Section


class SimConfig(Section):
    backend: str = "tabletop"  # which simulator backend runs the scenes (a name in `coda.sim.backends.BACKENDS`)
    control_hz: float = Field(20.0, gt=0)  # policy/expert control frequency (Hz)
    physics_dt: float = Field(0.002, gt=0, le=0.01)  # MuJoCo timestep (s)
    max_steps: int = Field(200, ge=1)  # episode horizon in control steps
    success_hold_steps: int = Field(10, ge=1, le=1000)  # control steps the goal must hold, nothing of it in the jaws, to end an episode in success
    render_size: int = Field(128, ge=16, le=1024)  # keyframe width and height (px)
    gl_backend: Literal["egl", "osmesa", "auto"] = "auto"  # headless OpenGL backend for rendering
    max_entities: int = Field(10, ge=1, le=64)  # rows of the "objects" observation (entities per scene at most)
    max_text_length: int = Field(256, ge=16, le=4096)  # longest instruction or entity description observed
    settle_steps: int = Field(2, ge=0, le=100)  # control steps run at reset (gripper held) so objects start at rest
    expert_chunk: int = Field(8, ge=1, le=64)  # actions in one scripted-expert chunk

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        from coda.sim.backends import BACKENDS  # lazy: the registry module imports this one

        if v not in BACKENDS:
            raise ValueError(f"unknown simulator backend {v!r}. Available: {BACKENDS.names()}")
        return v

    @model_validator(mode="after")
    def _whole_substeps(self) -> "SimConfig":
        n = 1.0 / (self.control_hz * self.physics_dt)
        if abs(n - round(n)) > 1e-6:
            raise ValueError(
                f"control_hz ({self.control_hz}) x physics_dt ({self.physics_dt}) must give a whole number "
                f"of physics steps per control step, got {n:.4f}"
            )
        return self
