"""Pick the headless OpenGL backend before MuJoCo is imported.

MuJoCo and PyOpenGL read `MUJOCO_GL` / `PYOPENGL_PLATFORM` once, at import time, so the choice has to
be made here, ahead of any `import mujoco`. An explicit setting in the environment always wins;
otherwise EGL is used when its library is present, then OSMesa. Importing `coda.sim.tabletop` after
MuJoCo was already imported with another backend keeps that backend.
"""

from __future__ import annotations

import ctypes.util
import os


def choose_gl_backend() -> str | None:
    """Set `MUJOCO_GL` and `PYOPENGL_PLATFORM` if unset; return the backend in force (None: none found)."""
    chosen = os.environ.get("MUJOCO_GL")
    if not chosen:
        for name, lib in (("egl", "EGL"), ("osmesa", "OSMesa")):
            if ctypes.util.find_library(lib):
                chosen = name
                break
    if chosen:
        os.environ["MUJOCO_GL"] = chosen
        if chosen in ("egl", "osmesa"):
            os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
    return chosen


GL_BACKEND = choose_gl_backend()
