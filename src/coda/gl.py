"""Headless OpenGL selection for MuJoCo rendering on machines without a display.

MuJoCo reads MUJOCO_GL when it is first imported, so this must run before `import mujoco` in any process
that renders. EGL (Mesa llvmpipe on a CPU machine) is preferred; OSMesa is the fallback.
"""

from __future__ import annotations

import os
import sys


def configure_headless_gl(backend: str = "auto") -> str:
    """Set MUJOCO_GL / PYOPENGL_PLATFORM for headless rendering unless the user already chose.

    Args:
        backend: "egl", "osmesa" or "auto" (keep an existing MUJOCO_GL, else egl).
    Returns:
        The backend in effect (unchanged if MuJoCo was already imported in this process).
    """
    if backend == "auto":
        backend = os.environ.get("MUJOCO_GL") or "egl"
    if "mujoco" not in sys.modules:  # once MuJoCo is imported its GL backend is fixed
        os.environ["MUJOCO_GL"] = backend
        os.environ["PYOPENGL_PLATFORM"] = backend
    return os.environ.get("MUJOCO_GL", backend)
