"""A third simulator backend, declared by one entry point and edited into nothing, runs round 0 and a `coda`
round through the engine: `mirror` answers the simulator contract with the tabletop's simulator under its own
name, so its run must hold exactly the records the tabletop's run holds (the engine reads the simulator only
through the contract, never by name)."""

from __future__ import annotations

import importlib.metadata as md
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402

MIRROR = '''
from coda.sim.backends import TabletopBackend


class Mirror(TabletopBackend):
    name = "mirror"


BACKEND = Mirror()
'''


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mirror_backend` on the path, declared under `coda.sim_backends` beside what is installed."""
    (tmp_path / "mirror_backend.py").write_text(textwrap.dedent(MIRROR))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mirror_backend", raising=False)
    installed = md.entry_points
    extra = [md.EntryPoint("mirror", "mirror_backend:BACKEND", "coda.sim_backends")]

    def entry_points(*, group: str):  # type: ignore[no-untyped-def]
        return [*installed(group=group), *(extra if group == "coda.sim_backends" else [])]

    monkeypatch.setattr(md, "entry_points", entry_points)
    from coda.engine import backend
    from coda.sim import backends

    for reg in (backend.BACKENDS, backends.BACKENDS):  # read the groups again, as a fresh process would
        monkeypatch.setattr(reg, "_declared", None)
        monkeypatch.setattr(reg, "_items", dict(reg._items))


def test_a_round_on_a_third_backend_holds_what_the_tabletop_round_holds(mirror, tmp_path: Path) -> None:
    from coda.engine.backend import RoundBackend
    from coda.engine.loop import run, start_run

    round0 = tmp_path / "mirror_round0"
    with start_run(E.config("sft", 0, extra=("sim.backend=mirror",)), round0) as ctx:
        assert type(ctx.backend) is RoundBackend and ctx.backend.name == "mirror"  # the generic round backend
        run(ctx)
    path = tmp_path / "mirror_coda"
    with start_run(E.config("coda", extra=("sim.backend=mirror",)), path, from_round0=round0) as ctx:
        run(ctx)
    assert E.memory_contents(round0) == E.memory_contents(E.round0())
    got, reference = E.memory_contents(path), E.memory_contents(E.strategy_run("coda"))
    assert got.keys() == reference.keys() and any(reference["diagnosis"])
    for kind in reference:
        assert got[kind] == reference[kind], f"{kind} records differ between the mirror and the tabletop"


def test_coda_eval_runs_a_third_backend_by_name(mirror, tmp_path: Path) -> None:
    """`coda eval --backend mirror` builds the evaluation split through the contract and scores the checkpoint
    as the tabletop's evaluation does: the CLI names no backend either."""
    import json

    from typer.testing import CliRunner

    from coda.cli import app

    ckpt = E.round0() / "checkpoints" / "round_000.pt"
    results = {}
    for backend in ("mirror", "tabletop"):
        out = tmp_path / f"{backend}.json"
        r = CliRunner().invoke(app, ["eval", "--checkpoint", str(ckpt), "--backend", backend, "--family", E.FAMILY,
                                     "--split", "position", "--n", "3", "--json", str(out), "--preset", "tiny",
                                     *(a for s in E.SETTINGS for a in ("--set", s))])
        assert r.exit_code == 0, r.output
        results[backend] = json.loads(out.read_text())[E.FAMILY]["position"]
    assert results["mirror"] == results["tabletop"] and results["mirror"]["n"] == 3
