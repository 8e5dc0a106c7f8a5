"""Registries find implementations that installed packages declare by entry point: a third backend is added
without editing the engine (`coda.engine.backend.BACKENDS`, `coda.sim.backends.BACKENDS`)."""

from __future__ import annotations

import importlib.metadata as md
import sys
import textwrap
from pathlib import Path

import pytest

from coda.errors import RegistryError
from coda.registry import Registry

TOY = '''
from coda.engine.backend import RoundBackend

LOADS = []


class ToyEnv:
    def __init__(self, spec=None, config=None, **kwargs):
        self.spec, self.config = spec, config


class ToyBackend(RoundBackend):
    name = "toy"

    @classmethod
    def round_env(cls, sim):
        return ToyEnv(config=sim)


LOADS.append("imported")
'''


@pytest.fixture
def declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A package `toy_backend` on the path, declared under the groups CoDA reads (beside what is installed)."""
    (tmp_path / "toy_backend.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_backend", raising=False)
    extra = {
        "coda.sim_backends": [md.EntryPoint("toy", "toy_backend:ToyEnv", "coda.sim_backends")],
        "coda.backends": [md.EntryPoint("toy", "toy_backend:ToyBackend", "coda.backends"),
                          md.EntryPoint("broken", "toy_backend:Missing", "coda.backends")],
    }
    installed = md.entry_points

    def entry_points(*, group: str):  # type: ignore[no-untyped-def]
        return [*installed(group=group), *extra.get(group, [])]

    monkeypatch.setattr(md, "entry_points", entry_points)
    from coda.engine import backend
    from coda.sim import backends

    for reg in (backend.BACKENDS, backends.BACKENDS):  # read the groups again, as a fresh process would
        monkeypatch.setattr(reg, "_declared", None)
        monkeypatch.setattr(reg, "_items", dict(reg._items))  # and forget what the test loads
    return backend, backends


def test_a_declared_implementation_is_listed_and_imported_on_first_use(declared) -> None:  # type: ignore[no-untyped-def]
    backend, _ = declared
    assert "toy" in backend.BACKENDS.names() and "toy" in backend.BACKENDS and "toy_backend" not in sys.modules
    cls = backend.BACKENDS.get("toy")
    assert cls.__name__ == "ToyBackend" and sys.modules["toy_backend"].LOADS == ["imported"]
    assert backend.BACKENDS.get("toy") is cls and sys.modules["toy_backend"].LOADS == ["imported"]  # imported once
    with pytest.raises(RegistryError, match=r"round backend 'broken' \(entry point 'toy_backend:Missing' of group "
                                            r"'coda.backends'\) failed to import"):
        backend.BACKENDS.get("broken")
    with pytest.raises(RegistryError, match=r"Unknown round backend 'isaac'. Available: \['broken', 'libero', "
                                            r"'tabletop', 'toy'\]"):
        backend.BACKENDS.get("isaac")


def test_a_third_backend_runs_through_the_engine_without_editing_it(declared) -> None:  # type: ignore[no-untyped-def]
    from coda.config import build_config
    from coda.sim.config import SimConfig

    backend, backends = declared
    cfg = build_config("tiny", overrides=["sim.backend=toy"])
    rb = backend.backend_for(cfg)
    assert type(rb).__name__ == "ToyBackend"
    env = backend.round_env(cfg.sim)  # what rollout workers call
    assert type(env).__name__ == "ToyEnv" and env.config.backend == "toy"
    assert type(rb.make_env()).__name__ == "ToyEnv"
    assert type(backends.make_env(SimConfig(backend="toy"))).__name__ == "ToyEnv"
    with pytest.raises(ValueError, match="unknown simulator backend 'isaac'. Available: \\['libero', 'tabletop', 'toy'\\]"):
        SimConfig(backend="isaac")


def test_this_package_declares_libero_by_entry_point() -> None:
    from coda.engine.backend import BACKENDS
    from coda.engine.strategies import STREAMS
    from coda.sim.backends import BACKENDS as SIM

    assert BACKENDS.get("libero").__name__ == "LiberoBackend"
    assert STREAMS.get("libero").__name__ == "libero_stream"
    assert SIM.get("libero").__name__ == "LiberoEnv"


def test_a_registry_without_a_group_lists_only_what_was_registered() -> None:
    reg: Registry[int] = Registry("number")
    reg.register("one", 1)
    assert reg.names() == ["one"] and len(reg) == 1 and list(reg) == ["one"]
    with pytest.raises(RegistryError, match="Duplicate number 'one'"):
        reg.register("one", 2)
