"""Fixtures for the policy tests: tiny configs, the hashing embedder, MiniLM loaded once per session."""

from __future__ import annotations

import os

import pytest
import torch

from coda.policy.text import HashingTextEncoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
