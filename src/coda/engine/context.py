"""The run directory and what every phase of a run shares: configuration, memory, artifacts, seeds.

Test hook: with the environment variable `CODA_KILL_AT=ROUND:PHASE[:WHEN]` set (e.g. `1:train:commit`), the
engine kills its own process with SIGKILL when that phase of that round starts (WHEN = `start`, the default)
or when its work is done and its records are about to commit (WHEN = `commit`). The resume tests use it to
show that a run killed anywhere resumes without lost or duplicated records; nothing else should set it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from coda.config import CodaConfig, dump_config, load_config_file
from coda.errors import CodaError

CONFIG_FILE = "config.yaml"
LOCK_FILE = ".lock"
KILL_ENV = "CODA_KILL_AT"
KILL_POINTS = ("start", "commit")


class RunDirError(CodaError):
    """A run directory is missing, already used, or inconsistent with the requested run."""


class RunDirLock:
    """The one writer of a run directory: an exclusive `flock` on `RUN/.lock`, holding the writer's pid.

    The operating system releases it when the holder exits, however it exits (a killed run can be resumed at
    once); a second writer is refused at once, with the holder's pid.

    Raises:
        RunDirError: another process holds the lock.
    """

    def __init__(self, run_dir: Path) -> None:
        import fcntl

        self.path = Path(run_dir) / LOCK_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            self._fd = None
            raise RunDirError(f"run directory '{run_dir}' is in use by process {holder} (lock {self.path}); "
                              "wait for it to finish or stop it, then --resume") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up (closing the file releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
    lock: RunDirLock | None = field(default=None, repr=False)  # held while this process writes the run
    _backend: Any = field(default=None, repr=False)
    _executor: Any = field(default=None, repr=False)
    _started: dict[tuple[int, str], dt.datetime] = field(default_factory=dict, repr=False)

    @property
    def backend(self) -> Any:
        """The simulator backend the phases go through (`coda.engine.backend`), built once."""
        if self._backend is None:
            from coda.engine.backend import backend_for

            self._backend = backend_for(self.cfg, self.executor)  # its parallel jobs run where the rollouts do
        return self._backend

    @property
    def executor(self) -> Any:
        """Where the phases' parallel jobs run (`coda.runtime.executor`, from `runtime`), made once: policy
        rollouts, and the backend's validity checks, demos and verification episodes."""
        if self._executor is None:
            from coda.runtime.executor import make_executor

            self._executor = make_executor(self.cfg.runtime)
        return self._executor

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

    def close(self) -> None:
        """Close the memory and the executor, and release the run directory's lock."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        self.memory.close()
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> "RunContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pending(self, round_idx: int, phase: str) -> bool:
        """Whether that phase of that round still has to run (it has no commit marker)."""
        if self.memory.phase_done(self.run_id, round_idx, phase):
            return False
        kill_point(round_idx, phase, "start")
        self._started.setdefault((round_idx, phase), dt.datetime.now(dt.timezone.utc))  # the phase's work starts
        return True

    def commit(self, round_idx: int, phase: str) -> Any:
        """The transaction a phase commits all its records in, with its marker (`memory.phase`) carrying the
        time the phase's work started (its first `pending` in this process)."""
        kill_point(round_idx, phase, "commit")
        return self.memory.phase(self.run_id, round_idx, phase, started_at=self._started.pop((round_idx, phase), None))


def kill_point(round_idx: int, phase: str, when: str = "start") -> None:
    """SIGKILL this process if `CODA_KILL_AT` names this point (the test hook in the module docstring).

    Raises:
        RunDirError: `CODA_KILL_AT` is set but malformed.
    """
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or (len(parts) == 3 and parts[2] not in KILL_POINTS):
        raise RunDirError(f"{KILL_ENV} = {spec!r} must look like ROUND:PHASE or ROUND:PHASE:WHEN, WHEN in {list(KILL_POINTS)}")
    if (int(parts[0]), parts[1], parts[2] if len(parts) == 3 else "start") == (round_idx, phase, when):
        os.kill(os.getpid(), signal.SIGKILL)


def write_config(cfg: CodaConfig, run_dir: Path) -> Path:
    """Write the resolved configuration into the run directory."""
    return dump_config(cfg, run_dir / CONFIG_FILE)
