"""The policy CLI groups end to end at tiny size: collect demos, train SFT, evaluate; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from coda.cli.policy import demos_app, eval_command, train_app


def _app() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(demos_app, name="demos")
    app.add_typer(train_app, name="train")
    app.command("eval")(eval_command)
    return app


def test_collect_train_eval(tmp_path: Path) -> None:
    app, runner = _app(), CliRunner()
    demos, ckpt = tmp_path / "demos", tmp_path / "p.pt"
    r = runner.invoke(app, ["demos", "collect", "--family", "pick_place", "--n", "2", "--no-check", "--out", str(demos)])
    assert r.exit_code == 0, r.output
    assert "wrote 2 episodes" in r.output
    r = runner.invoke(app, ["train", "sft", "--demos", str(demos), "--out", str(ckpt), "--preset", "tiny",
                            "--set", "policy.text_model=hashing", "--steps", "3"])
    assert r.exit_code == 0, r.output
    assert ckpt.is_file() and ckpt.with_suffix(".metrics.jsonl").is_file()
    r = runner.invoke(app, ["eval", "--checkpoint", str(ckpt), "--family", "pick_place", "--n", "1",
                            "--json", str(tmp_path / "e.json"), "--preset", "tiny", "--set", "sim.max_steps=5"])
    assert r.exit_code == 0, r.output
    out = json.loads((tmp_path / "e.json").read_text())["pick_place"]["sft"]
    assert out["n"] == 1 and 0 <= out["ci95"][0] <= out["success"] <= out["ci95"][1] <= 1
    r = runner.invoke(app, ["eval", "--checkpoint", str(ckpt), "--family", "pick_place", "--split", "juggling"])
    assert r.exit_code == 2 and "--split 'juggling' is not an evaluation split of backend 'tabletop'" in r.output
    r = runner.invoke(app, ["eval", "--checkpoint", str(ckpt), "--backend", "libero"])
    assert r.exit_code == 2 and "--family is required: a family of backend 'libero' (or --suite" in r.output


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    app, runner = _app(), CliRunner()
    r = runner.invoke(app, ["eval", "--checkpoint", str(tmp_path / "none.pt"), "--family", "pick_place"])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["train", "sft", "--demos", str(tmp_path), "--out", str(tmp_path / "x.pt")])
    assert r.exit_code == 2 and "has no index.json" in r.output
    r = runner.invoke(app, ["demos", "collect", "--family", "juggle", "--n", "1", "--no-check", "--out", str(tmp_path / "d")])
    assert r.exit_code == 2 and "Unknown family 'juggle'" in r.output
    r = runner.invoke(app, ["eval", "--family", "pick_place"])
    assert r.exit_code == 2 and "--checkpoint is required" in r.output
    r = runner.invoke(app, ["eval", "--backend", "isaac", "--expert"])
    assert r.exit_code == 2 and "Unknown sim backend 'isaac'. Available: ['libero', 'tabletop']" in r.output
    r = runner.invoke(app, ["eval", "--backend", "libero", "--expert"])
    assert r.exit_code == 2 and "--suite is required" in r.output
    r = runner.invoke(app, ["eval", "--suite", "libero_object", "--expert"])
    assert r.exit_code == 2 and "use them with --backend libero, not 'tabletop'" in r.output

