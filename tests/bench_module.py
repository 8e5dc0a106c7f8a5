"""Load a benchmark script (`bench/<name>.py`, not a package) as a module for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """`bench/<name>.py` imported as module `bench_<name>` (registered, so its dataclasses resolve). `bench/`
    is on sys.path only while the script runs its imports (as when it is run), so its own `_common` resolves
    but `bench/libero.py` never shadows the `libero` package afterwards, in this process or its workers."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    saved = list(sys.path)
    sys.path.insert(0, str(BENCH_DIR))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = saved
    return mod
