"""Checkpoints: exact round trip, architecture mismatch and corrupted files give one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from coda.policy.checkpoint import load_into, load_policy, read_checkpoint, save_checkpoint
from coda.policy.errors import CheckpointError
from coda.policy.samples import ChunkDataset
from coda.policy.text import HASHING_ID
from coda.policy.train import build_policy, train_policy
from policy_synthetic import PointReachEnv, expert_episodes, make_specs, tiny_cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from coda.policy.text import HashingTextEncoder

    text = HashingTextEncoder()
    data = ChunkDataset(expert_episodes(make_specs(6, seed=8)), text, chunk_len=4)
    policy = build_policy(tiny_cfg(train_critic=True), data, text)
    train_policy(policy, data, steps=5)
    path = save_checkpoint(policy, tmp_path_factory.mktemp("ckpt") / "p.pt", {"note": "x"})
    return policy, data, path


def test_save_load_is_exact(trained) -> None:
    policy, _, path = trained
    loaded = load_policy(path)
    a, b = policy.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k  # atol = 0
    assert int(loaded.critic_updates) == 5
    assert loaded.cfg == policy.cfg and loaded.text.model_id == HASHING_ID
    obs = PointReachEnv().reset_to(make_specs(1, 9)[0])[0]
    np.testing.assert_array_equal(loaded.predict_chunk(obs), policy.predict_chunk(obs))
    assert loaded.value(obs, policy.predict_chunk(obs)) == policy.value(obs, policy.predict_chunk(obs))
    payload = read_checkpoint(path)
    assert payload["meta"]["note"] == "x" and payload["architecture"]["hidden"] == 16
    assert payload["text_model_id"] == HASHING_ID


def test_inference_overrides(trained) -> None:
    _, _, path = trained
    p = load_policy(path, overrides={"value_guided_samples": 3})
    assert p.cfg.value_guided_samples == 3
    with pytest.raises(CheckpointError, match="is from another architecture: hidden = 16 \\(policy has 32\\)"):
        load_policy(path, overrides={"hidden": 32})


def test_other_architecture_is_refused_naming_fields(trained) -> None:
    _, data, path = trained
    other = build_policy(tiny_cfg(hidden=24, layers=2), data)
    with pytest.raises(CheckpointError) as e:
        load_into(other, path)
    msg = str(e.value)
    assert "another architecture" in msg and "layers = 1 (policy has 2)" in msg and "hidden = 16 (policy has 24)" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_corrupted_files_are_refused(trained, tmp_path: Path, damage: str) -> None:
    _, _, path = trained
    raw = bytearray(path.read_bytes())
    bad = tmp_path / "bad.pt"
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x01
        bad.write_bytes(bytes(raw))
    elif damage == "truncate":
        bad.write_bytes(bytes(raw[: len(raw) - 100]))
    elif damage == "garbage":
        bad.write_bytes(b"PK\x03\x04 definitely not a checkpoint")
    else:
        bad.write_bytes(b"")
    with pytest.raises(CheckpointError) as e:
        load_policy(bad)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    assert ("corrupted" in str(e.value)) or ("not a CoDA policy checkpoint" in str(e.value))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy(tmp_path / "missing.pt")
