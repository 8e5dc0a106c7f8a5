"""Bad inputs are refused up front with one line that names the field and the value; nothing is half-done.

Scene values (non-finite, off the table, negative sizes, unprintable instructions), config files and `--set`
values (not UTF-8, past 64 bits, non-finite, alias bombs, unknown families and names), record ids and query
parameters past 64 bits, a query that never ends, a checkpoint missing fields or holding non-finite weights,
an unwritable output and a render size of 0.
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from coda.cli import app
from coda.config import build_config
from coda.errors import ConfigError
from coda.scene.spec import ScenarioSpec, SpecError

runner = CliRunner()


def _one_line_error(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (args, r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


@pytest.fixture(scope="module")
def scene() -> dict:
    from coda.scene.splits import build_split
    from coda.sim.tabletop.validity import sim_check

    return build_split("pick_place", "sft", 1, seed=0, check=sim_check).valid[0].model_dump(mode="json")


@pytest.mark.parametrize("path,value,needle", [
    (("objects", 0, "pos", 0), math.nan, "'objects.0.pos.0' = nan: Input should be a finite number"),
    (("objects", 0, "pos", 1), math.inf, "'objects.0.pos.1' = inf"),
    (("objects", 0, "pos", 0), 3.0, "'objects.0.pos.0' = 3.0: Input should be less than or equal to 0.3"),
    (("objects", 0, "yaw"), 1e9, "'objects.0.yaw' = 1000000000.0"),
    (("containers", 0, "size", 0), -0.05, "'containers.0.size.0' = -0.05: Input should be greater than or equal to 0.005"),
    (("robot", "pos", 2), -1.0, "'robot.pos.2' = -1.0"),
    (("instruction",), "put it\x00 there", "'instruction'"),
])
def test_scene_values_are_checked_before_the_simulator(scene, tmp_path: Path, path, value, needle) -> None:
    bad = json.loads(json.dumps(scene))
    node = bad
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(SpecError) as e:
        ScenarioSpec.from_json(json.dumps(bad))
    assert needle in str(e.value) and "\n" not in str(e.value)
    from coda.scene.splits import write_split

    f = tmp_path / "bad.jsonl"
    write_split(f, [ScenarioSpec.from_dict(scene)], family="pick_place", split="sft", seed=0)
    header, _ = f.read_text().splitlines()
    f.write_text(header + "\n" + json.dumps(bad) + "\n")
    for cmd in (["scenes", "show", str(f)], ["scenes", "render", str(f), "--out", str(tmp_path / "x.png")]):
        line = _one_line_error(cmd)
        assert needle in line and "line 2" in line, line
    assert not (tmp_path / "x.png").exists()


def test_config_files_that_are_not_utf8_or_explode_are_one_line_errors(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"engine: {seed: 1}\n# caf\xe9\n")
    assert "is not UTF-8 text" in _one_line_error(["config", "show", "--config", str(latin)])
    bomb = tmp_path / "bomb.yaml"
    rows = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefg", "bcdefgh"):
        rows.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    bomb.write_text("\n".join(rows) + "\nscene: {families: *h}\n")
    assert bomb.stat().st_size < 600
    t0 = time.monotonic()
    line = _one_line_error(["config", "show", "--config", str(bomb)])
    assert "more than 100000 values" in line and len(line) < 300 and time.monotonic() - t0 < 10


@pytest.mark.parametrize("override,needle", [
    (f"engine.seed={2**64}", "'engine.seed' = 18446744073709551616: integers must lie in"),
    ("policy.lr=.inf", "'policy.lr' = inf: Input should be a finite number"),
    ("policy.lr=nan", "'policy.lr' = 'nan': Input should be a finite number"),
    ("scene.families=[]", "'scene.families' = []"),
    ("scene.families=[pick_place, bogus]", "['bogus'] are not families of the tabletop backend"),
    ("scene.families=[stack, stack]", "lists a family twice"),
    ("engine.seed=[1, &a [2]]", "'engine.seed'"),
    ("runtime.executor=spark", "'runtime.executor' = 'spark': Input should be 'local' or 'ray'"),
    ("runtime.ray_adress=auto", "unknown key 'runtime.ray_adress'"),
    ("bench.seeds=3", "unknown key 'bench.seeds'"),
])
def test_set_values_are_validated_up_front(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config("tiny", overrides=[override])
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_unknown_names_and_presets_fail_before_anything_is_written(tmp_path: Path) -> None:
    for override, needle in (("critic.name=bogus", "critic.name = 'bogus' is not registered"),
                             ("critic.fallback=oracle", "critic.fallback = 'oracle' is not registered"),
                             ("engine.strategy=bogus", "engine.strategy = 'bogus' is not registered")):
        run_dir = tmp_path / override.split("=")[0]
        line = _one_line_error(["run", "--preset", "tiny", "--set", override, "--run-dir", str(run_dir)])
        assert needle in line, line
        assert not run_dir.exists()
    line = _one_line_error(["run", "--preset", "../../x", "--run-dir", str(tmp_path / "p")])
    assert "unknown preset '../../x'" in line and not (tmp_path / "p").exists()


def test_ids_and_query_parameters_past_64_bits_and_endless_queries(tmp_path: Path) -> None:
    from coda.memory import open_memory

    with open_memory(tmp_path) as mem:
        mem.create_run(tmp_path.name, config={}, seed=0, strategy="sft")
    big = str(2**64)
    assert "out of range" in _one_line_error(["memory", "show", str(tmp_path), "episode", big])
    assert "integers must lie in" in _one_line_error(["memory", "sql", str(tmp_path), "select :x", "-p", f"x={big}"])
    endless = "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c"
    t0 = time.monotonic()
    line = _one_line_error(["memory", "sql", str(tmp_path), endless, "--timeout", "1"])
    assert "time limit of 1s" in line and time.monotonic() - t0 < 10


def test_checkpoints_missing_fields_or_with_non_finite_weights_are_refused(tmp_path: Path) -> None:
    import hashlib

    from coda.policy.checkpoint import FORMAT, FORMAT_VERSION, MAGIC, read_checkpoint
    from coda.policy.errors import CheckpointError

    def write(payload: dict, name: str) -> Path:
        buf = io.BytesIO()
        torch.save(payload, buf)
        data = buf.getvalue()
        p = tmp_path / name
        p.write_bytes(MAGIC + hashlib.sha256(data).digest() + data)
        return p

    base = {"format": FORMAT, "version": FORMAT_VERSION, "architecture": {}, "config": {}, "text_model_id": "x",
            "state_dict": {"w": torch.zeros(2)}, "meta": {}}
    for field in ("architecture", "text_model_id", "state_dict"):
        p = write({k: v for k, v in base.items() if k != field}, f"no_{field}.pt")
        with pytest.raises(CheckpointError, match=f"field '{field}' must be a .*, got missing"):
            read_checkpoint(p)
    p = write({**base, "state_dict": {"w": torch.tensor([1.0, math.nan])}}, "nan.pt")
    with pytest.raises(CheckpointError, match="non-finite or non-tensor weights: \\['w'\\]"):
        read_checkpoint(p)


def test_an_unwritable_output_and_a_render_size_of_zero(tmp_path: Path, scene) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = _one_line_error(["scenes", "make", "pick_place", "sft", "--n", "1", "--no-check",
                            "--out", str(blocker / "x.jsonl")])
    assert str(blocker) in line, line
    f = tmp_path / "ok.jsonl"
    r = runner.invoke(app, ["scenes", "make", "pick_place", "sft", "--n", "1", "--no-check", "--out", str(f)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["scenes", "render", str(f), "--size", "0", "--out", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "--size" in r.output and not (tmp_path / "x.png").exists()
