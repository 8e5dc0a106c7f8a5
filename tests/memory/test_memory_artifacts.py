"""Artifacts: atomic writes, checksums, verification, unsafe paths."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from coda.memory import ArtifactError, ArtifactRef, ArtifactStore


def test_put_verify_read_and_tamper_detection(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = store.put_bytes("keyframes/r0/ep3.png", b"\x89PNG fake image")
    assert ref.path == "keyframes/r0/ep3.png" and ref.size == 15 and len(ref.sha256) == 64
    assert ArtifactRef.from_dict(ref.to_dict()) == ref
    store.verify(ref)
    store.verify(ref.to_dict())
    assert store.read_bytes(ref) == b"\x89PNG fake image"
    (tmp_path / "keyframes/r0/ep3.png").write_bytes(b"\x89PNG fake imagE")  # same size, one byte changed
    with pytest.raises(ArtifactError, match=r"'keyframes/r0/ep3.png' under .*: sha256 mismatch"):
        store.verify(ref)
    with pytest.raises(ArtifactError, match="sha256 mismatch"):
        store.read_bytes(ref)
    assert not store.is_valid(ref)
    (tmp_path / "keyframes/r0/ep3.png").write_bytes(b"short")
    with pytest.raises(ArtifactError, match="size 5 bytes, reference says 15"):
        store.verify(ref)
    (tmp_path / "keyframes/r0/ep3.png").unlink()
    with pytest.raises(ArtifactError, match="is missing"):
        store.verify(ref)
    with pytest.raises(ArtifactError, match="field 'size' = '15': expected int"):
        ArtifactRef.from_dict({**ref.to_dict(), "size": "15"})


def test_arrays_json_and_file_copies_round_trip(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "run")
    trace = np.arange(12, dtype=np.float32).reshape(4, 3)
    ref = store.put_arrays("traces/ep0.npz", qpos=trace, success=np.array([False, True]))
    store.verify(ref)
    with np.load(io.BytesIO(store.read_bytes(ref))) as data:
        np.testing.assert_array_equal(data["qpos"], trace)
        assert data["success"].tolist() == [False, True]
    jref = store.put_json("programs/p.json", {"b": 1, "a": [1.5]})
    assert store.read_bytes(jref) == b'{"a": [1.5], "b": 1}'
    with pytest.raises(ArtifactError, match="is not JSON data"):
        store.put_json("bad.json", {"x": float("nan")})
    src = tmp_path / "ckpt.pt"
    src.write_bytes(b"weights" * 1000)
    cref = store.put_file("checkpoints/r1.pt", src)
    assert cref.size == 7000 and store.path(cref) == tmp_path / "run/checkpoints/r1.pt"
    store.verify(cref)


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../outside", "a/../../b", "a\\b", "x/.f.tmp-1-ab"])
def test_unsafe_paths_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ArtifactError, match="artifact path"):
        ArtifactStore(tmp_path).put_bytes(bad, b"x")


def test_failed_write_keeps_the_old_file_and_leaves_no_partial(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    old = store.put_bytes("traces/t.bin", b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with store.open_write("traces/t.bin") as f:
            f.write(b"new, half written")
            raise RuntimeError("disk full")
    store.verify(old)
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["t.bin"]
    stale = tmp_path / "traces" / ".t.bin.tmp-999-deadbeef"  # what a killed writer leaves behind
    stale.write_bytes(b"partial")
    assert store.remove_partial() == [stale] and not stale.exists()
    store.verify(old)
