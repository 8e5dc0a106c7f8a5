"""Helpers shared by the benchmarks: scene source, cached evaluation scenes and result files."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from coda.scene.spec import ScenarioSpec

RESULTS = Path(__file__).parent / "results"


def scene_source() -> tuple[Callable[[str, np.random.Generator], ScenarioSpec], str]:
    """The scene sampler to benchmark on: the project's base-scene generators when present, else the
    tabletop backend's reference scenes. Returns (sample(family, rng), name of the source)."""
    try:
        from coda.scene.generators import sample_base
    except ImportError:
        from coda.sim.tabletop.reference import reference_scene

        return reference_scene, "coda.sim.tabletop.reference.reference_scene"
    return sample_base, "coda.scene.generators.sample_base"


def scenes(work: Path, family: str, split: str, n: int, seed: int, workers: int) -> list[ScenarioSpec]:
    """The first n valid scenes of a split (cached as a split file under `work`)."""
    from coda.scene.splits import build_split, read_split, write_split
    from coda.sim.tabletop.validity import sim_check

    path = work / family / "scenes" / f"{split}_s{seed}_n{n}.jsonl"
    if path.exists():
        return read_split(path)[1]
    valid = build_split(family, split, n, seed, workers=workers, check=sim_check).valid
    write_split(path, valid, family=family, split=split, seed=seed)
    return valid


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import os

    import mujoco

    return {"python": platform.python_version(), "mujoco": mujoco.__version__, "cpus": os.cpu_count(), "machine": platform.machine()}


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write `bench/results/<name>.json` (sorted keys, indented) and return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return out
