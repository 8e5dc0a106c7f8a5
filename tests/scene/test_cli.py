"""`coda scenes` commands, run through typer's CliRunner on the sub-app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from coda.cli.scenes import app
from coda.scene.splits import make_split, read_split

runner = CliRunner()


def test_make_without_check_writes_the_split(tmp_path: Path) -> None:
    out = tmp_path / "push_task.jsonl"
    r = runner.invoke(app, ["make", "push", "task", "--n", "3", "--seed", "5", "--out", str(out), "--no-check"])
    assert r.exit_code == 0, r.output
    header, specs = read_split(out)
    assert header["family"] == "push" and header["split"] == "task" and header["seed"] == 5 and header["checked"] == "no"
    assert [s.to_json() for s in specs] == [s.to_json() for s in make_split("push", "task", 3, 5)]


def test_show_prints_one_scene_as_json(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    runner.invoke(app, ["make", "stack", "sft", "--n", "2", "--out", str(out), "--no-check"])
    r = runner.invoke(app, ["show", str(out), "--index", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == read_split(out)[1][1].model_dump(mode="json")


def test_bad_inputs_fail_on_one_line(tmp_path: Path) -> None:
    r = runner.invoke(app, ["make", "juggle", "sft", "--n", "1", "--out", str(tmp_path / "x.jsonl"), "--no-check"])
    assert r.exit_code == 2 and "Unknown family 'juggle'" in r.output
    r = runner.invoke(app, ["show", str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 2 and "does not exist" in r.output
    out = tmp_path / "s.jsonl"
    runner.invoke(app, ["make", "drawer", "sft", "--n", "1", "--out", str(out), "--no-check"])
    r = runner.invoke(app, ["show", str(out), "--index", "4"])
    assert r.exit_code == 2 and "--index 4 is out of range" in r.output


def test_run_writes_a_programs_scenes(tmp_path: Path) -> None:
    prog = tmp_path / "p.json"
    prog.write_text(json.dumps({"name": "recolour", "seed": 2, "budget": 2, "base": {"family": "stack", "split": "sft"},
                                "ops": [{"op": "recolor", "args": {"colors": ["pink", "cyan"]}}]}))
    out = tmp_path / "p.jsonl"
    r = runner.invoke(app, ["run", str(prog), "--out", str(out)])
    assert r.exit_code == 0, r.output
    header, specs = read_split(out)
    assert header["program"] == "recolour" and len(specs) == 2
    assert all(s.object(s.goal[0].args[0]).color in ("pink", "cyan") for s in specs)
    prog.write_text(json.dumps({"name": "bad", "base": {"family": "stack"}, "ops": [{"op": "melt"}]}))
    r = runner.invoke(app, ["run", str(prog), "--out", str(out)])
    assert r.exit_code == 2 and "Unknown operator 'melt'" in r.output


def test_ops_lists_every_operator() -> None:
    from coda.scene.operators import OPERATORS

    r = runner.invoke(app, ["ops"])
    assert r.exit_code == 0 and all(n in r.output for n in OPERATORS.names())


def test_render_writes_a_png(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("coda.sim.tabletop.render")
    import numpy as np
    from PIL import Image

    out = tmp_path / "s.jsonl"
    runner.invoke(app, ["make", "drawer", "sft", "--n", "1", "--out", str(out), "--no-check"])
    png = tmp_path / "d.png"
    r = runner.invoke(app, ["render", str(out), "--index", "0", "--out", str(png), "--size", "48"])
    assert r.exit_code == 0, r.output
    img = Image.open(png)
    pixels = np.asarray(img).reshape(-1, 3)
    assert img.size == (48, 48) and len(np.unique(pixels, axis=0)) > 4  # a scene, not a blank frame
    r = runner.invoke(app, ["render", str(out), "--out", str(png), "--camera", "ceiling"])
    assert r.exit_code == 2 and "ceiling" in r.output
