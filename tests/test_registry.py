"""Registries find implementations that installed packages declare by entry point: a third simulator backend
is added without editing the engine (`coda.sim.backends.BACKENDS`; the engine's round-loop extensions,
`coda.engine.backend.BACKENDS`, are optional)."""

from __future__ import annotations

import importlib.metadata as md
import sys
import textwrap
from pathlib import Path

import pytest

from coda.errors import RegistryError
from coda.registry import Registry

TOY = '''
LOADS = []


class ToyEnv:
    def __init__(self, spec=None, config=None, **kwargs):
        self.spec, self.config = spec, config


class ToySim:
    name = "toy"
    eval_splits = ("sft", "far")
    max_level = 0

    def build_split(self, family, name, split, n, seed, check_many=None):
        return [{"ok": True, "split": split, "seed": seed + i} for i in range(n)], []

    def scenario_from_dict(self, data):
        return dict(data)

    def make_env(self, config, spec=None, **kwargs):
        return ToyEnv(spec, config)

    def target_env(self, config):
        return ToyEnv(config=config)

    def expert(self, spec, env, config):
        return ("expert", spec)

    def rollout_expert(self, env, spec, max_steps=None):
        raise NotImplementedError

    def check(self, spec, env=None):
        return bool(spec.get("ok")), "" if spec.get("ok") else "not ok", None

    def predicates(self, spec, first_state=None):
        return "toy predicates"

    def wordings(self, spec, n):
        return tuple(f"do it, take {i}" for i in range(n))

    def goal_labels(self, spec):
        return (3, 0, 1), 0.5

    def factor_edits(self, factors, spec, tier="train"):
        from coda.sim.backends import FactorEdit

        return [FactorEdit(indices=(i,), apply=None, undo=lambda rng: spec, error="a toy scene has no factors")
                for i, _ in enumerate(factors)]

    def same_task(self, spec, base):
        return spec == base

    def mode_tokens(self, factors, spec, where="factors"):
        return tuple(sorted({f.kind for f in factors}))

    def check_token(self, token, where="token"):
        pass

    def entity_roles(self, spec):
        return {}

    def mode_program(self, mode, examples, *, level, parent, seed, count, name, reason, rediagnose=False):
        from coda.scene.factors import CompileError

        raise CompileError(f"mode = {mode!r}: a toy scene has no generation programs")


BACKEND = ToySim()
LOADS.append("imported")
'''


@pytest.fixture
def declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A package `toy_backend` on the path, declared under the groups CoDA reads (beside what is installed)."""
    (tmp_path / "toy_backend.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_backend", raising=False)
    extra = {
        "coda.sim_backends": [md.EntryPoint("toy", "toy_backend:BACKEND", "coda.sim_backends"),
                              md.EntryPoint("broken", "toy_backend:Missing", "coda.sim_backends")],
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
    _, backends = declared
    assert "toy" in backends.BACKENDS.names() and "toy" in backends.BACKENDS and "toy_backend" not in sys.modules
    sim = backends.BACKENDS.get("toy")
    assert type(sim).__name__ == "ToySim" and sys.modules["toy_backend"].LOADS == ["imported"]
    assert backends.BACKENDS.get("toy") is sim and sys.modules["toy_backend"].LOADS == ["imported"]  # imported once
    assert isinstance(sim, backends.SimBackend)  # the typed contract, checked member by member
    with pytest.raises(RegistryError, match=r"sim backend 'broken' \(entry point 'toy_backend:Missing' of group "
                                            r"'coda.sim_backends'\) failed to import"):
        backends.BACKENDS.get("broken")
    with pytest.raises(RegistryError, match=r"Unknown sim backend 'isaac'. Available: \['broken', 'libero', "
                                            r"'tabletop', 'toy'\]"):
        backends.sim_backend("isaac")


def test_a_third_backend_runs_through_the_engine_without_editing_it(declared) -> None:  # type: ignore[no-untyped-def]
    """Declared once, as a simulator backend, it gets the generic round backend: envs, expert, scene records,
    splits and validity checks all come from it, and its predicates are what stages bind to."""
    from coda.config import build_config
    from coda.engine.backend import RoundBackend
    from coda.shaping.stages import make_context
    from coda.sim.config import SimConfig

    backend, backends = declared
    cfg = build_config("tiny", overrides=["sim.backend=toy"])
    rb = backend.backend_for(cfg)
    assert type(rb) is RoundBackend and rb.name == "toy"
    env = backend.round_env(cfg.sim)  # what rollout workers call
    assert type(env).__name__ == "ToyEnv" and env.config.backend == "toy"
    assert type(rb.make_env()).__name__ == "ToyEnv"
    assert rb.expert({"id": 1}, env) == ("expert", {"id": 1})
    assert rb.scenario_from_dict({"a": 1}) == {"a": 1}
    assert rb.check_many([{"ok": True}, {"ok": False}]) == [(True, ""), (False, "not ok")]
    assert rb.eval_splits == ("sft", "far")
    assert rb.wordings({"id": 1}) == ("do it, take 0", "do it, take 1", "do it, take 2", "do it, take 3")
    assert rb.goal_labels({"id": 1}) == ((3, 0), 0.5)  # cut to the roles the policy grounds
    assert rb.build_split("box", "far", "far", 2, 7) == ([{"ok": True, "split": "far", "seed": 7},
                                                        {"ok": True, "split": "far", "seed": 8}], [])
    assert type(backends.make_env(SimConfig(backend="toy"))).__name__ == "ToyEnv"
    assert make_context(None, rb.sim.predicates(None), kinds={"a": "object"}).P == "toy predicates"
    with pytest.raises(RegistryError, match=r"Unknown sim backend 'isaac'"):
        backend.round_backend_class("isaac")
    with pytest.raises(ValueError, match="unknown simulator backend 'isaac'. Available: \\['broken', 'libero', 'tabletop', 'toy'\\]"):
        SimConfig(backend="isaac")


def test_this_package_declares_libero_by_entry_point() -> None:
    from coda.engine.backend import BACKENDS, round_backend_class
    from coda.engine.strategies import STREAMS
    from coda.sim.backends import BACKENDS as SIM
    from coda.sim.backends import SimBackend

    assert round_backend_class("libero").__name__ == "LiberoBackend" and BACKENDS.names() == ["libero"]
    assert round_backend_class("tabletop").__name__ == "RoundBackend"  # the generic one: no extension
    assert STREAMS.get("libero").__name__ == "libero_stream"
    assert type(SIM.get("libero")).__name__ == "LiberoBackend" and isinstance(SIM.get("libero"), SimBackend)
    assert isinstance(SIM.get("tabletop"), SimBackend)


def test_a_registry_without_a_group_lists_only_what_was_registered() -> None:
    reg: Registry[int] = Registry("number")
    reg.register("one", 1)
    assert reg.names() == ["one"] and len(reg) == 1 and list(reg) == ["one"]
    with pytest.raises(RegistryError, match="Duplicate number 'one'"):
        reg.register("one", 2)
