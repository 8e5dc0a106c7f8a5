"""Scene checks and round episodes on LIBERO: one process vs `runtime.workers = 2`, measured in one run.

Draws 8 valid scenes from a seeded single-edit generation stream over libero_object and libero_spatial
(`coda.engine.backend.valid_scenes`, each check builds the scene, settles it and runs the expert), then
records the expert's episodes in those scenes with Φ (`LiberoBackend.round_episodes`, as the train phase
does). Alternates 1, 2, 1, 2 workers; the worker pool's start-up is included. Checks that both settings
keep the same scenes and the same episodes. Writes `bench/results/libero_workers.json`:

    {"checks": {"1": [s, s], "2": [s, s]}, "episodes": {...}, "ratio": {"checks": float, "episodes": float},
     "command": str}

Usage:
    python bench/libero_workers.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# This folder holds bench/libero.py, named like the LIBERO package: keep it off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

OUT = Path(__file__).parent / "results" / "libero_workers.json"
FAMILIES = ["libero_object", "libero_spatial"]


def main() -> None:
    from coda.config import build_config
    from coda.engine.backend import EpisodeJob, backend_for, valid_scenes
    from coda.engine.strategies import candidate_stream

    res: dict[str, dict[int, list[float]]] = {"checks": {1: [], 2: []}, "episodes": {1: [], 2: []}}
    ref = None
    for w in (1, 2, 1, 2):
        overrides = [f"scene.families=[{','.join(FAMILIES)}]", f"runtime.workers={w}", "memory.url=null"]
        backend = backend_for(build_config("libero", overrides=overrides))
        body = backend.explore_body(FAMILIES, 8, 1, seed=123)
        t0 = time.perf_counter()
        drawn = valid_scenes(backend, candidate_stream(body), 8, 42)
        t1 = time.perf_counter()
        episodes = backend.round_episodes([EpisodeJob("expert", s) for s in drawn.valid])
        t2 = time.perf_counter()
        backend.close()
        key = ([s.spec_id for s in drawn.valid], [None if e is None else e.potentials.tolist() for e in episodes])
        if ref is not None and key != ref:
            raise SystemExit(f"workers = {w} kept other scenes or episodes than workers = 1")
        ref = key
        res["checks"][w].append(t1 - t0)
        res["episodes"][w].append(t2 - t1)
        print(f"workers {w}: checks {t1 - t0:.1f} s ({len(drawn.checked)} checked), "
              f"episodes {t2 - t1:.1f} s ({sum(e is not None for e in episodes)} solved)", flush=True)
    out = {k: {str(w): v for w, v in d.items()} for k, d in res.items()}
    out["ratio"] = {k: sum(d[1]) / sum(d[2]) for k, d in res.items()}
    out["command"] = "python bench/libero_workers.py"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(f"one process vs 2 workers: checks {out['ratio']['checks']:.2f}x, episodes {out['ratio']['episodes']:.2f}x; wrote {OUT}")


if __name__ == "__main__":
    main()
