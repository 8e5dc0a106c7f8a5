"""The run directory and what every phase of a run shares: configuration, memory, artifacts, seeds."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from coda.config import CodaConfig, dump_config, load_config_file
from coda.errors import CodaError

CONFIG_FILE = "config.yaml"


class RunDirError(CodaError):
    """A run directory is missing, already used, or inconsistent with the requested run."""


def new_run_dir(cfg: CodaConfig, root: str | Path | None = None, name: str | None = None) -> Path:
    """A fresh run directory `ROOT/<strategy>-<preset>-s<seed>-<UTC time>` (or ROOT/name)."""
    root = Path(root if root is not None else cfg.runtime.run_root)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    name = name or f"{cfg.engine.strategy}-{cfg.preset}-s{cfg.engine.seed}-{stamp}"
    path = root / name
    if path.exists() and any(path.iterdir()):
        raise RunDirError(f"run directory '{path}' already exists and is not empty; use --resume to continue it")
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_run_config(run_dir: str | Path) -> CodaConfig:
    """The resolved configuration a run directory was started with."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunDirError(f"'{run_dir}' is not a CoDA run directory: no {CONFIG_FILE}")
    return load_config_file(path)


def derive_seed(master: int, *parts: Any) -> int:
    """A 31-bit seed derived from the master seed and a path of names/numbers (stable across runs)."""
    text = json.dumps([master, *parts], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF


@dataclass
class RunContext:
    """What the phases of one run share. Phases read and write memory only through `memory.phase(...)`."""

    cfg: CodaConfig
    run_dir: Path
    run_id: str
    memory: Any  # coda.memory.Memory
    console: Console = field(default_factory=Console)
    families: tuple[str, ...] = ()

    @property
    def seed(self) -> int:
        return self.cfg.engine.seed

    def seed_for(self, *parts: Any) -> int:
        return derive_seed(self.seed, *parts)

    def path(self, *parts: str) -> Path:
        p = self.run_dir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def rel(self, path: Path) -> str:
        return path.relative_to(self.run_dir).as_posix()


def write_config(cfg: CodaConfig, run_dir: Path) -> Path:
    """Write the resolved configuration into the run directory."""
    return dump_config(cfg, run_dir / CONFIG_FILE)
