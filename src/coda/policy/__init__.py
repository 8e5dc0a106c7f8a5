"""Action-chunk policy: set-transformer encoder, Gaussian chunk actor, chunk critic, data, training.

Importing `coda.policy` (or `coda.policy.config`) does not import torch; the names below load their module
on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PolicyConfig": "coda.policy.config",
    "ChunkPolicy": "coda.policy.policy",
    "ObsBatch": "coda.policy.features",
    "NormStats": "coda.policy.features",
    "ObsDims": "coda.policy.features",
    "Episode": "coda.policy.data",
    "DemoWriter": "coda.policy.data",
    "DemoDataset": "coda.policy.data",
    "collect_demos": "coda.policy.data",
    "ChunkDataset": "coda.policy.samples",
    "TrainBatch": "coda.policy.samples",
    "train_policy": "coda.policy.train",
    "train_sft": "coda.policy.train",
    "save_checkpoint": "coda.policy.checkpoint",
    "load_policy": "coda.policy.checkpoint",
    "load_into": "coda.policy.checkpoint",
    "TextEncoder": "coda.policy.text",
    "HashingTextEncoder": "coda.policy.text",
    "wilson_interval": "coda.policy.stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'coda.policy' has no attribute '{name}'")
