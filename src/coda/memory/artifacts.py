"""Large artifacts (state traces, keyframes, checkpoints) as files in the run directory.

Records in the memory reference them by relative path + sha256 checksum (`ArtifactRef`). Files are written
atomically: into a temporary file beside the target, flushed to disk, then renamed over it, so a reader (or a
run resumed after a crash) sees either the old file, the complete new one, or none. A process killed
mid-write leaves only a hidden `.NAME.tmp-*` file, which `remove_partial` deletes. Paths inside a phase should
be deterministic (e.g. `traces/r2/ep_17.npz`) so a re-run phase overwrites what its killed attempt wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from coda.memory.errors import ArtifactError

_CHUNK = 1 << 20
_TMP_MARK = ".tmp-"


@dataclass(frozen=True)
class ArtifactRef:
    """A file in the run directory: relative POSIX path, sha256 of its bytes, size in bytes."""

    path: str
    sha256: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form stored in records: `{"path": ..., "sha256": ..., "size": ...}`."""
        return {"path": self.path, "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ArtifactRef":
        """Parse the JSON form. Raises ArtifactError naming the bad field."""
        if not isinstance(data, Mapping):
            raise ArtifactError(f"artifact reference must be a mapping, got {type(data).__name__}")
        for name, typ in (("path", str), ("sha256", str), ("size", int)):
            if not isinstance(data.get(name), typ) or isinstance(data.get(name), bool):
                raise ArtifactError(f"artifact reference field '{name}' = {data.get(name)!r}: expected {typ.__name__}")
        return cls(path=data["path"], sha256=data["sha256"], size=data["size"])


def sha256_file(path: Path) -> tuple[str, int]:
    """sha256 hex digest and size of a file."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ArtifactStore:
    """Atomic, checksummed files under a run directory.

    Args:
        run_dir: the run directory; every artifact path is relative to it and must stay inside it.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.root = Path(run_dir)

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    def resolve(self, relpath: str | PurePosixPath) -> Path:
        """The absolute path of an artifact.

        Raises:
            ArtifactError: the path is empty, absolute, or leaves the run directory.
        """
        text = str(relpath)
        pure = PurePosixPath(text)
        if not text or text in (".", "/") or pure.is_absolute() or "\\" in text or ".." in pure.parts:
            raise ArtifactError(f"artifact path {text!r} must be relative to the run directory, without '..'")
        if any(_TMP_MARK in part for part in pure.parts):
            raise ArtifactError(f"artifact path {text!r} must not contain '{_TMP_MARK}' (reserved for partial files)")
        return self.root.joinpath(*pure.parts)

    @contextlib.contextmanager
    def open_write(self, relpath: str) -> Iterator[BinaryIO]:
        """Write an artifact atomically: yields a binary file; on normal exit it replaces the target.

        On an exception the temporary file is removed and the target is left as it was.
        """
        target = self.resolve(relpath)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            with tmp.open("wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)

    def put_bytes(self, relpath: str, data: bytes) -> ArtifactRef:
        """Write `data` atomically and return its reference."""
        with self.open_write(relpath) as f:
            f.write(data)
        return ArtifactRef(path=str(PurePosixPath(relpath)), sha256=hashlib.sha256(data).hexdigest(), size=len(data))

    def put_json(self, relpath: str, obj: Any) -> ArtifactRef:
        """Write `obj` as JSON (sorted keys) atomically. Raises ArtifactError if it is not JSON data."""
        try:
            data = json.dumps(obj, sort_keys=True, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise ArtifactError(f"artifact {relpath!r} is not JSON data: {e}") from None
        return self.put_bytes(relpath, data)

    def put_arrays(self, relpath: str, **arrays: Any) -> ArtifactRef:
        """Write numpy arrays as a compressed `.npz` (e.g. a state trace) atomically."""
        import numpy as np

        with self.open_write(relpath) as f:
            np.savez_compressed(f, **arrays)
        return self.ref(relpath)

    def put_file(self, relpath: str, src: str | Path) -> ArtifactRef:
        """Copy an existing file into the run directory atomically. Raises ArtifactError if `src` is missing."""
        src = Path(src)
        if not src.is_file():
            raise ArtifactError(f"artifact source '{src}' is not a file")
        with self.open_write(relpath) as f, src.open("rb") as s:
            while chunk := s.read(_CHUNK):
                f.write(chunk)
        return self.ref(relpath)

    def ref(self, relpath: str) -> ArtifactRef:
        """Checksum an artifact already in place (e.g. one written with `open_write`).

        Raises:
            ArtifactError: no such file.
        """
        path = self.resolve(relpath)
        if not path.is_file():
            raise ArtifactError(f"artifact '{relpath}' does not exist under '{self.root}'")
        digest, size = sha256_file(path)
        return ArtifactRef(path=str(PurePosixPath(relpath)), sha256=digest, size=size)

    def path(self, ref: ArtifactRef | Mapping[str, Any]) -> Path:
        """Absolute path of a referenced artifact (not verified)."""
        r = ref if isinstance(ref, ArtifactRef) else ArtifactRef.from_dict(ref)
        return self.resolve(r.path)

    def verify(self, ref: ArtifactRef | Mapping[str, Any]) -> None:
        """Check that the referenced file exists and matches its size and checksum.

        Raises:
            ArtifactError: `artifact 'traces/ep1.npz' under 'runs/x': sha256 mismatch (stored ab12..., file cd34...)`.
        """
        r = ref if isinstance(ref, ArtifactRef) else ArtifactRef.from_dict(ref)
        path = self.resolve(r.path)
        if not path.is_file():
            raise ArtifactError(f"artifact '{r.path}' under '{self.root}' is missing")
        digest, size = sha256_file(path)
        if size != r.size:
            raise ArtifactError(f"artifact '{r.path}' under '{self.root}': size {size} bytes, reference says {r.size}")
        if digest != r.sha256:
            raise ArtifactError(
                f"artifact '{r.path}' under '{self.root}': sha256 mismatch (stored {r.sha256[:12]}..., file {digest[:12]}...)"
            )

    def is_valid(self, ref: ArtifactRef | Mapping[str, Any]) -> bool:
        """Whether `verify` passes."""
        try:
            self.verify(ref)
        except ArtifactError:
            return False
        return True

    def read_bytes(self, ref: ArtifactRef | Mapping[str, Any], *, verify: bool = True) -> bytes:
        """The artifact's bytes, checked against its checksum unless `verify` is False."""
        r = ref if isinstance(ref, ArtifactRef) else ArtifactRef.from_dict(ref)
        path = self.resolve(r.path)
        if not path.is_file():
            raise ArtifactError(f"artifact '{r.path}' under '{self.root}' is missing")
        data = path.read_bytes()
        if verify and hashlib.sha256(data).hexdigest() != r.sha256:
            raise ArtifactError(f"artifact '{r.path}' under '{self.root}': sha256 mismatch")
        return data

    def remove_partial(self) -> list[Path]:
        """Delete temporary files left by writers that died mid-write; returns what was removed."""
        if not self.root.is_dir():
            return []
        removed = [p for p in self.root.rglob(f".*{_TMP_MARK}*") if p.is_file()]
        for p in removed:
            p.unlink(missing_ok=True)
        return removed
