"""Policy checkpoints: weights, config, normalisation stats, embedding-model id and architecture signature.

File layout: an 8-byte magic (`CODAPOL` + format byte), the SHA-256 of the payload (32 bytes), then the
payload written by `torch.save` and read back with `weights_only=True` (plain containers and tensors, no
pickled code). The digest turns any truncation or flipped byte into a clear error instead of silently
wrong weights. Files are written to a temporary name and renamed, so a crash never leaves half a file.

Loading into an existing policy compares the architecture signature field by field and names what
differs; loading by path rebuilds the policy from the stored config.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from coda.policy.config import PolicyConfig
from coda.policy.errors import CheckpointError
from coda.policy.features import NormStats, ObsDims
from coda.policy.policy import ChunkPolicy
from coda.policy.text import TextEmbedder, TextEncoderError, text_encoder_for

MAGIC = b"CODAPOL\x01"
FORMAT = "coda-policy"
FORMAT_VERSION = 1
REQUIRED = {"architecture": dict, "config": dict, "text_model_id": str, "state_dict": dict, "meta": dict}


def save_checkpoint(policy: ChunkPolicy, path: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
    """Write `policy` (weights, config, stats, text-model id, architecture, `meta`) atomically to `path`."""
    payload = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "architecture": policy.architecture(),
        "config": policy.cfg.model_dump(mode="json"),
        "text_model_id": policy.text.model_id,
        "state_dict": {k: v.detach().clone() for k, v in policy.state_dict().items()},
        "meta": dict(meta or {}),
    }
    buf = io.BytesIO()
    torch.save(payload, buf)
    data = buf.getvalue()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")  # two writers never share a temporary file
    with open(tmp, "wb") as f:
        f.write(MAGIC + hashlib.sha256(data).digest() + data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    return p


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read and verify a checkpoint file; returns its payload.

    Raises:
        CheckpointError: missing file, not a CoDA policy checkpoint, corrupted (digest mismatch), or a
            newer format.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint '{p}' does not exist")
    raw = p.read_bytes()
    head = len(MAGIC) + 32
    if len(raw) < head or raw[: len(MAGIC) - 1] != MAGIC[:-1]:
        raise CheckpointError(f"checkpoint '{p}' is not a CoDA policy checkpoint (bad header)")
    if raw[len(MAGIC) - 1] != MAGIC[-1]:
        raise CheckpointError(f"checkpoint '{p}' has container format {raw[len(MAGIC) - 1]}, this CoDA reads {MAGIC[-1]}")
    digest, data = raw[len(MAGIC) : head], raw[head:]
    if hashlib.sha256(data).digest() != digest:
        raise CheckpointError(f"checkpoint '{p}' is corrupted: SHA-256 of its {len(data)} payload bytes does not match")
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a corrupted file to the user
        raise CheckpointError(f"checkpoint '{p}' is corrupted: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint '{p}' field 'format' must be '{FORMAT}'")
    if payload.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint '{p}' field 'version' = {payload.get('version')!r}, this CoDA reads {FORMAT_VERSION}")
    for field, kind in REQUIRED.items():
        if not isinstance(payload.get(field), kind):
            got = type(payload.get(field)).__name__ if field in payload else "missing"
            raise CheckpointError(f"checkpoint '{p}' field '{field}' must be a {kind.__name__}, got {got}")
    bad = [k for k, v in payload["state_dict"].items() if not isinstance(v, torch.Tensor) or not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"checkpoint '{p}' has non-finite or non-tensor weights: {bad[:3]}")
    return payload


def _check_architecture(path: str | Path, stored: Mapping[str, Any], want: Mapping[str, Any]) -> None:
    diffs = [f"{k} = {stored.get(k)!r} (policy has {want.get(k)!r})" for k in sorted(set(stored) | set(want)) if stored.get(k) != want.get(k)]
    if diffs:
        raise CheckpointError(f"checkpoint '{path}' is from another architecture: " + "; ".join(diffs))


def load_into(policy: ChunkPolicy, path: str | Path) -> dict[str, Any]:
    """Load weights and stats from `path` into `policy` (exactly); returns the checkpoint's `meta`.

    Raises:
        CheckpointError: corrupted file, or an architecture that differs (the differing fields are named).
    """
    return _load_payload(policy, path, read_checkpoint(path))


def _load_payload(policy: ChunkPolicy, path: str | Path, payload: dict[str, Any]) -> dict[str, Any]:
    _check_architecture(path, payload["architecture"], policy.architecture())
    try:
        policy.fit_buffers(payload["state_dict"])
        policy.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint '{path}' weights do not fit the policy: {str(e).splitlines()[0]}") from None
    policy.reset()
    return dict(payload.get("meta", {}))


def load_policy(
    path: str | Path, text: TextEmbedder | None = None, overrides: Mapping[str, Any] | None = None
) -> ChunkPolicy:
    """Rebuild a policy from a checkpoint.

    Args:
        path: checkpoint file.
        text: the sentence embedder to use (default: the one the checkpoint names). It must be the model
            the policy was trained with.
        overrides: config fields to change for inference (e.g. `value_guided_samples`); fields that change
            the architecture make loading fail.
    Raises:
        CheckpointError: corrupted file, unknown text model, or an override that changes the architecture.
    """
    payload = read_checkpoint(path)
    arch = payload["architecture"]
    try:
        cfg = PolicyConfig.model_validate({**payload["config"], **dict(overrides or {})})
    except Exception as e:  # noqa: BLE001 - pydantic's message is already specific
        raise CheckpointError(f"checkpoint '{path}' config is invalid with overrides {dict(overrides or {})}: {str(e).splitlines()[-1].strip()}") from None
    try:
        text = text if text is not None else text_encoder_for(str(payload["text_model_id"]))
    except TextEncoderError as e:
        raise CheckpointError(f"checkpoint '{path}': {e}") from None
    if text.model_id != payload["text_model_id"]:
        raise CheckpointError(
            f"checkpoint '{path}' was trained with text model '{payload['text_model_id']}', not '{text.model_id}'"
        )
    try:
        dims = ObsDims(
            proprio=int(arch["proprio"]), object_features=int(arch["object_features"]),
            text=int(arch["text"]), action=int(arch["action"]),
        )
        state = payload["state_dict"]
        stats = NormStats.from_dict({k: state[f"stats_{k}"] for k in NormStats.FIELDS})
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint '{path}' lacks architecture or stats field {e}") from None
    policy = ChunkPolicy(cfg, dims, stats, text)
    _load_payload(policy, path, payload)
    return policy
