from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from coda.cli import app

runner = CliRunner()


def test_help_lists_groups() -> None:
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    assert "doctor" in r.output


def test_config_show_applies_overrides() -> None:
    r = runner.invoke(app, ["config", "show", "--preset", "tiny", "--set", "policy.chunk_len=4"])
    assert r.exit_code == 0, r.output
    assert "chunk_len: 4" in r.output


def test_bad_config_is_one_line_error_and_nonzero(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("policy: {hiden: 3}\n")
    p = subprocess.run([sys.executable, "-m", "coda", "config", "show", "-c", str(f)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown key 'policy.hiden'" in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_doctor_reports_truthfully_on_this_machine(tmp_path: Path) -> None:
    from coda.doctor import check_memory, check_render

    render = {c.name: c for c in check_render()}
    assert render["headless rendering"].ok, render
    egl = render["render (egl)"]
    assert egl.ok and "red pixels" in egl.detail
    assert check_memory(None)[0].ok
    bad = check_memory("postgresql+psycopg://u:secret@127.0.0.1:1/x")[0]
    assert not bad.ok and "secret" not in bad.detail and "***" in bad.detail
