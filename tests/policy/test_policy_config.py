"""PolicyConfig: validation messages name fields and values; importing it does not import torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coda.config import build_config
from coda.errors import ConfigError
from coda.policy.config import PolicyConfig


def test_config_import_does_not_import_torch() -> None:
    code = "import sys, coda.policy.config, coda.policy; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("policy.n_action_steps=9", "n_action_steps (9) must not exceed chunk_len (8)"),
        ("policy.improvement=awr", "improvement 'awr' needs train_critic = true"),
        ("policy.value_guided_samples=4", "value_guided_samples (4) needs train_critic = true"),
        ("policy.heads=3", "heads (3) must divide hidden (64)"),
        ("policy.expectile=1.5", "'policy.expectile' = 1.5"),
    ],
)
def test_bad_values_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match="invalid config") as e:
        build_config("full", overrides=["policy.hidden=64", override])
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_presets_resolve() -> None:
    for preset in ("tiny", "quick", "full"):
        cfg = build_config(preset)
        assert isinstance(cfg.policy, PolicyConfig)
        assert cfg.policy.n_action_steps <= cfg.policy.chunk_len
