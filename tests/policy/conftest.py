"""Fixtures for the policy tests: tiny configs, the hashing embedder, MiniLM loaded once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from coda.policy.text import HashingTextEncoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the helper module `policy_synthetic` sits beside the tests; make it importable in any pytest import mode
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(1)  # the machine is shared; tests are tiny


@pytest.fixture(scope="session")
def minilm():
    """The real MiniLM encoder, loaded once per test session."""
    from coda.policy.text import TextEncoder

    enc = TextEncoder()
    enc.encode(["warm up"])
    return enc


@pytest.fixture
def hashing() -> HashingTextEncoder:
    return HashingTextEncoder()
