"""Simulator configuration (cheap: no MuJoCo import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coda.config_base import Section


class SimConfig(Section):
    backend: Literal["tabletop", "libero"] = "tabletop"  # which simulator backend runs the scenes
    control_hz: float = Field(20.0, gt=0)  # policy/expert control frequency (Hz)
    physics_dt: float = Field(0.002, gt=0, le=0.01)  # MuJoCo timestep (s)
    max_steps: int = Field(200, ge=1)  # episode horizon in control steps
    render_size: int = Field(128, ge=16, le=1024)  # keyframe width and height (px)
    cameras: tuple[str, ...] = ("front", "wrist")  # cameras rendered for keyframes
    gl_backend: Literal["egl", "osmesa", "auto"] = "auto"  # headless OpenGL backend for rendering
