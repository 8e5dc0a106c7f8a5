"""Headless keyframe rendering of tabletop scenes.

Shadows, reflections and the skybox are switched off (about 20x faster on a CPU rasteriser); renderers are
closed explicitly (left to the garbage collector at exit, EGL contexts can raise errors). The GL backend is
chosen on import of `coda.sim.tabletop` (EGL, then OSMesa; an explicit `MUJOCO_GL` wins).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coda.sim.tabletop import _gl

import mujoco  # noqa: E402

from coda.errors import CodaError  # noqa: E402
from coda.scene.spec import ScenarioSpec  # noqa: E402
from coda.sim.config import SimConfig  # noqa: E402

CAMERAS = ("front", "wrist")


class RenderError(CodaError, RuntimeError):
    """Rendering failed: no headless GL backend, an unknown camera or a bad size."""


def make_renderer(model: mujoco.MjModel, size: int) -> mujoco.Renderer:
    """A square offscreen renderer for `model` with the slow effects off. Close it when done."""
    if not 16 <= size <= 1024:
        raise RenderError(f"render size = {size} must be in [16, 1024] pixels")
    try:
        r = mujoco.Renderer(model, size, size)
    except Exception as e:  # the GL stack reports failures with assorted exception types
        raise RenderError(f"cannot create a {_gl.GL_BACKEND or 'GL'} rendering context: {e}") from None
    flags = r.scene.flags
    flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = 0
    return r


def render_frame(renderer: mujoco.Renderer, data: mujoco.MjData, camera: str) -> np.ndarray:
    """Render `data` from `camera` ("front" or "wrist"): uint8 array (H, W, 3), a fresh copy."""
    if camera not in CAMERAS:
        raise RenderError(f"camera = {camera!r} is not known; available: {list(CAMERAS)}")
    renderer.update_scene(data, camera=camera)
    return renderer.render().copy()


def render_png(spec: ScenarioSpec, path: str | Path, camera: str = "front", size: int = 256, config: SimConfig | None = None) -> Path:
    """Render the initial state of `spec` (after the reset settle) to a PNG file and return its path."""
    from PIL import Image

    from coda.sim.tabletop.env import TabletopEnv

    env = TabletopEnv(spec, config)
    try:
        env.reset()
        img = env.render(camera=camera, size=size)
    finally:
        env.close()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(out)
    return out
