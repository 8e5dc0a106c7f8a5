"""`coda memory ls | show | sql` through typer's CliRunner, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coda.cli.memory import app
from coda.memory import Episode, Scenario

runner = CliRunner()


def populate(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.open() as mem:
        mem.create_run("run-a", config={"engine": {"rounds": 1}}, seed=5, strategy="coda")
        with mem.phase("run-a", 0, "evaluate") as tx:
            for i, ok in enumerate((True, False, False)):
                sc = tx.add(Scenario(spec_id=f"s{i}", spec={"i": i}, family="push", split="probe"))
                tx.add(Episode(scenario_id=sc.id, policy="policy", success=ok, episode_return=float(ok), length=10 + i))
        with mem.phase("run-a", 0, "diagnose"):
            pass


def cli(backend, *args: str):  # type: ignore[no-untyped-def]
    extra = ["--memory", backend.url] if backend.url else []
    return runner.invoke(app, [*args, *extra])


def state(backend) -> tuple:  # type: ignore[no-untyped-def]
    """Everything a write could change: counts per kind, plus the SQLite file's bytes."""
    with backend.open(readonly=True) as mem:
        counts = (len(mem.runs()), mem.counts("run-a"))
    db = backend.run_dir / "memory.sqlite"
    return counts, hashlib.sha256(db.read_bytes()).hexdigest() if backend.url is None else None


def test_ls_and_show(backend) -> None:  # type: ignore[no-untyped-def]
    populate(backend)
    res = cli(backend, "ls", str(backend.run_dir))
    assert res.exit_code == 0, res.output
    assert "run-a" in res.output and "evaluate, diagnose" in res.output
    assert "coda" in res.output and "episode" in res.output
    counts = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in res.output.splitlines()
              if line.count("│") == 3}
    assert counts["episode"] == "3" and counts["scenario"] == "3" and counts["phase"] == "2" and counts["verdict"] == "0"
    res = cli(backend, "show", str(backend.run_dir), "episode", "2")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    assert rec["id"] == 2 and rec["success"] is False and rec["length"] == 11 and rec["run_id"] == "run-a"
    res = cli(backend, "show", str(backend.run_dir), "run", "run-a")
    assert json.loads(res.output)["config"] == {"engine": {"rounds": 1}}
    for args, message in [
        (("show", str(backend.run_dir), "episodes", "1"), "Unknown record kind 'episodes'. Available: ["),
        (("show", str(backend.run_dir), "episode", "99"), "no episode with id 99"),
        (("show", str(backend.run_dir), "episode", "x1"), "episode id 'x1' is invalid: expected an integer"),
        (("ls", str(backend.run_dir), "--run", "ghost"), "no run 'ghost'"),
    ]:
        res = cli(backend, *args)
        assert res.exit_code == 2 and message in res.output, res.output
        assert res.output.strip().count("\n") == 0  # one line


def test_sql_reads_with_bound_parameters(backend) -> None:  # type: ignore[no-untyped-def]
    populate(backend)
    q = "SELECT id, length FROM episodes WHERE run_id = :run AND length >= :min ORDER BY id"
    res = cli(backend, "sql", str(backend.run_dir), q, "--param", "run=run-a", "-p", "min=11", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [{"id": 2, "length": 11}, {"id": 3, "length": 12}]
    res = cli(backend, "sql", str(backend.run_dir), "SELECT count(*) AS n FROM scenarios;", "--max-rows", "1")
    assert res.exit_code == 0 and "│ 3 │" in res.output, res.output
    before = state(backend)
    for injected in ("x' OR '1'='1", "'; DROP TABLE runs; --", "run-a' --"):
        res = cli(backend, "sql", str(backend.run_dir), "SELECT id FROM runs WHERE id = :rid", "-p", f"rid={injected}",
                  "--json")
        assert res.exit_code == 0 and json.loads(res.output) == [], res.output  # the value is only a value
    assert state(backend) == before


WRITES = [
    ("INSERT INTO runs (id, created, config, seed, strategy, status) VALUES ('x', '2026-01-01', '{}', 0, 's', 'r')",
     [], "a 'INSERT' statement is refused"),
    ("DELETE FROM episodes WHERE id = :i", ["i=1"], "a 'DELETE' statement is refused"),
    ("update episodes set success = true", [], "a 'UPDATE' statement is refused"),
    ("SELECT 1; DROP TABLE episodes", [], "one statement at a time"),
    ("SELECT 1; COMMIT; DELETE FROM runs", [], "one statement at a time"),
    ("/* harmless */ DELETE FROM episodes", [], "a 'DELETE' statement is refused"),
    # Passes the statement check; the database itself must refuse it (SQLite: mode=ro + query_only;
    # PostgreSQL: READ ONLY transaction). SQLite has no DELETE inside a CTE (skipped there), only after one.
    ("WITH gone AS (DELETE FROM episodes RETURNING id) SELECT count(*) FROM gone", [], "the database refused"),
    ("WITH t AS (SELECT 1) DELETE FROM episodes", [], "the database refused"),
]


def test_sql_refuses_writes_and_leaves_the_database_unchanged(backend) -> None:  # type: ignore[no-untyped-def]
    populate(backend)
    before = state(backend)
    for query, params, message in WRITES:
        if "RETURNING" in query and backend.name == "sqlite":
            continue
        args = [a for p in params for a in ("--param", p)]
        res = cli(backend, "sql", str(backend.run_dir), query, *args)
        assert res.exit_code == 2 and message in res.output, (query, res.output)
        assert res.output.strip().count("\n") == 0
        assert state(backend) == before, query


@pytest.mark.parametrize(
    ("query", "params", "message"),
    [
        ("SELECT :a", [], "parameter ':a' has no value; pass --param a=VALUE"),
        ("SELECT 1", ["a=1"], "--param 'a' is not used by the statement"),
        ("SELECT :a", ["a"], "--param 'a' must look like name=value"),
        ("SELECT :a", ["a=1", "a=2"], "--param 'a' is given twice"),
        ("SELECT :a", ["a:int=x"], "--param 'a' = 'x' is not a valid int"),
        ("SELECT nope FROM runs", [], "query failed:"),
        ("   ", [], "the SQL statement is empty"),
    ],
)
def test_sql_bad_input_is_one_line(tmp_path: Path, query: str, params: list[str], message: str) -> None:
    from coda.memory import open_memory

    open_memory(tmp_path).close()
    args = [a for p in params for a in ("--param", p)]
    res = runner.invoke(app, ["sql", str(tmp_path), query, *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert res.output.strip().count("\n") == 0


def test_typed_parameters_and_missing_run_directory(tmp_path: Path) -> None:
    from coda.memory import open_memory

    open_memory(tmp_path / "run").close()
    res = runner.invoke(app, ["sql", str(tmp_path / "run"), "SELECT :a AS a, :b AS b, :c AS c, :d AS d", "--json",
                              "-p", "a=007", "-p", "b=7", "-p", "c:str=7", "-p", "d=0.5"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [{"a": "007", "b": 7, "c": "7", "d": 0.5}]
    res = runner.invoke(app, ["ls", str(tmp_path / "absent")])
    assert res.exit_code == 2 and "run directory" in res.output and "does not exist" in res.output
    assert not (tmp_path / "absent").exists()  # inspecting never creates anything
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["ls", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "no memory database at" in res.output
    assert list((tmp_path / "empty").iterdir()) == []


def test_mounted_as_a_sub_command(tmp_path: Path) -> None:
    """The way the main `coda` command mounts the group: `coda memory ls RUN_DIR`."""
    import typer

    from coda.memory import open_memory

    main = typer.Typer()
    main.add_typer(app, name="memory")
    with open_memory(tmp_path) as mem:
        mem.create_run("mounted", config={}, seed=1, strategy="coda")
    res = runner.invoke(main, ["memory", "ls", str(tmp_path)])
    assert res.exit_code == 0 and "mounted" in res.output, res.output
    res = runner.invoke(main, ["memory", "show", str(tmp_path), "run", "ghost"])
    assert res.exit_code == 2 and "error: no run 'ghost'" in res.output
