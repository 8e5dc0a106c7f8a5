"""No secret is stored: the memory redacts every text and JSON column it writes and bounds stored reasons;
a memory URL's password stays out of config.yaml, the runs table and the report, and resume asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda.config import build_config
from coda.engine.context import RunDirError
from coda.memory import Diagnosis, Episode, Scenario, open_memory
from coda.memory.models import REASON_LEN
from coda.redact import MASK, bounded, one_line, redact, redact_url, register_secret

KEY = "sk-proj-9c2e7a41f05b8d36"


def test_redact_masks_keys_tokens_credentials_and_url_passwords() -> None:
    register_secret("zq8-unusual-token-value")
    cases = {
        f"Authorization: Bearer {KEY}": KEY,
        "proxy said: zq8-unusual-token-value was refused": "zq8-unusual-token-value",
        '{"api_key": "abc123def456"}': "abc123def456",
        "postgresql+psycopg://coda:hunter2-pw@db:5432/coda": "hunter2-pw",
        "x-api-key=Q1w2E3r4T5": "Q1w2E3r4T5",
        "password: letmein99": "letmein99",
    }
    for text, secret in cases.items():
        out = redact(text)
        assert secret not in out and MASK in out, out
    assert redact("max_tokens=1024, stage 2 of 5, http://127.0.0.1:8000/v1") == "max_tokens=1024, stage 2 of 5, http://127.0.0.1:8000/v1"
    assert redact_url("postgresql://u:pw@h/db") == f"postgresql://u:{MASK}@h/db"
    assert bounded("x" * 50, 20) == "x" * 20 and bounded("x" * 500, 100).endswith("... [400 more characters]")
    assert len(bounded("x" * 500, 100)) == 100
    assert one_line("a\nb\n\nc") == "a b c"


def test_memory_redacts_every_text_and_json_column_and_bounds_reasons(backend) -> None:
    with backend.open() as mem:
        mem.create_run("r", config={"critic": {"note": f"Bearer {KEY}"}}, seed=0, strategy="coda")
        with mem.phase("r", 1, "diagnose") as tx:
            from coda.scene.splits import build_split
            from coda.sim.tabletop.validity import sim_check

            spec = build_split("pick_place", "sft", 1, seed=0, check=sim_check).valid[0]
            sc = tx.add(Scenario.from_spec(spec, split="probe"))
            ep = tx.add(Episode(scenario_id=sc.id, policy="policy", seed=0, success=False, episode_return=0.0,
                                length=1, info={"error": f"echo {KEY}"}))
            tx.add(Diagnosis(episode_id=ep.id, critic="vlm", data=None, raw=f"key {KEY} " * 10_000, accepted=False,
                             reason=f"HTTP 401 (invalid key {KEY}) " + "y" * 10_000))
    with backend.open(readonly=True) as mem:
        (d,) = mem.list("diagnosis", run_id="r")
        assert KEY not in d.reason and KEY not in d.raw and len(d.reason) <= REASON_LEN and len(d.raw) <= 20_000
        (e,) = mem.list("episode", run_id="r")
        assert KEY not in str(e.info)
        assert KEY not in str(mem.get_run("r").config)


@pytest.mark.postgres
def test_a_memory_url_password_is_kept_out_of_the_run_and_resume_asks_for_it(pg_server, tmp_path: Path) -> None:
    from coda.engine.loop import resume_run, start_run

    schema_url = pg_server.new_database()
    password = "pg-secret-Hx71q"
    url = schema_url.replace("://coda@", f"://coda:{password}@") if "://coda@" in schema_url else None
    assert url is not None and password in url, schema_url
    cfg = build_config("tiny", overrides=[f"memory.url={url}"])
    run_dir = tmp_path / "pw-run"
    start_run(cfg, run_dir).close()
    assert password not in (run_dir / "config.yaml").read_text()
    with open_memory(run_dir, url, readonly=True) as mem:
        assert password not in str(mem.get_run("pw-run").config) and password not in repr(mem)
    with pytest.raises(RunDirError, match="password masked.*--memory URL"):
        resume_run(run_dir)
    with pytest.raises(RunDirError, match="is not the memory of run"):
        resume_run(run_dir, url.replace("/coda_test", "/other"))
    again = resume_run(run_dir, url)
    assert again.memory.get_run("pw-run") is not None
    again.memory.close()
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and password.encode() in p.read_bytes()]
    assert not leaked, leaked
