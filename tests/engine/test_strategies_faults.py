"""Faults inside a round are recorded and the round goes on; bad level scores never reach a replay buffer.

- A critic that answers malformed JSON, one that is unavailable, and one that answers with the wrong type
  leave rejected Diagnosis records (with the reason) and rejected verdicts; the round still commits.
- A generation source that yields an invalid scene (interpenetrating objects) leaves it in memory as an
  invalid Scenario with the validity check's reason; the fill source makes up the budget.
- Level scores: a probe the simulator cut short scores NaN, and NaN/inf scores are dropped before the PLR
  level buffer; PLR's replayed scenes are scenes of that buffer.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402

from coda.critic.base import CRITICS, CriticUnavailable  # noqa: E402
from coda.critic.diagnosis import parse_diagnosis  # noqa: E402
from coda.engine.context import RunContext  # noqa: E402
from coda.engine.loop import run, start_run  # noqa: E402
from coda.engine.strategies import (  # noqa: E402
    STRATEGIES,
    Evidence,
    Plan,
    Strategy,
    level_buffer,
    level_score,
    plan_plr,
)
from coda.memory import Episode, Scenario, open_memory  # noqa: E402
from coda.scene.spec import ScenarioSpec  # noqa: E402


class FaultyCritic:
    """Malformed JSON, then unavailable, then an answer of the wrong type, in turn."""

    name = "faulty"

    def __init__(self) -> None:
        self.calls = 0

    def diagnose(self, episode: Any) -> Any:
        self.calls += 1
        if self.calls % 3 == 1:
            return parse_diagnosis('{"failure_mode": "missed_grasp", ', critic=self.name, episode_id=episode.episode_id)
        if self.calls % 3 == 2:
            raise CriticUnavailable("endpoint http://127.0.0.1:9/v1 refused the connection")
        return {"failure_mode": "missed_grasp"}


def _invalid_scene(spec: ScenarioSpec) -> ScenarioSpec:
    """`spec` with its last object moved onto another one: the validity check refuses it (interpenetration)."""
    objs = spec.objects
    return spec.replace(objects=(*objs[:-1], objs[-1].model_copy(update={"pos": objs[0].pos})))


def test_faulty_critic_and_invalid_scene_are_recorded_and_the_round_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with E.open_run(E.round0()) as mem:
        train = [ScenarioSpec.from_dict(s.spec) for s in mem.list("scenario", run_id="round0") if s.split == "train"]
    bad = _invalid_scene(train[0])

    def plan(ev: Evidence) -> Plan:  # the invalid scene first, then a valid one; the fill source does the rest
        scenes = [bad.model_dump(mode="json"), train[1].model_dump(mode="json")]
        return Plan([("given", {"kind": "scenes", "scenes": scenes, "count": ev.budget})])

    monkeypatch.setitem(CRITICS._items, "faulty", lambda cfg: FaultyCritic())
    monkeypatch.setitem(STRATEGIES._items, "faulty-test", Strategy("faulty-test", True, True, plan))
    cfg = E.config("faulty-test", extra=("critic.name=faulty", "engine.max_diagnoses=3"))
    path = tmp_path / "faulty"
    run(start_run(cfg, path, from_round0=E.round0()))
    with E.open_run(path) as mem:
        rid = path.name
        assert [p for r, p in mem.completed_phases(rid) if r == 1] == [
            "evaluate", "diagnose", "verify", "compile", "generate", "train", "measure"]
        diagnoses = mem.list("diagnosis", run_id=rid)
        assert len(diagnoses) == 3 and not any(d.accepted for d in diagnoses)
        assert diagnoses[0].reason.startswith("malformed JSON") and diagnoses[0].raw.startswith('{"failure_mode"')
        assert diagnoses[1].reason == "critic unavailable: endpoint http://127.0.0.1:9/v1 refused the connection"
        assert diagnoses[2].reason == "critic returned a dict, not a Diagnosis or DiagnosisRejected"
        verdicts = mem.list("verdict", run_id=rid)
        assert [v.diagnosis_id for v in verdicts] == [d.id for d in diagnoses] and not any(v.passed for v in verdicts)
        assert all("the critic's answer was rejected" in v.reason for v in verdicts)
        invalid = [s for s in mem.list("scenario", run_id=rid, round_idx=1) if s.phase == "generate" and not s.valid]
        assert [s.spec_id for s in invalid][:1] == [bad.spec_id]
        assert invalid[0].invalid_reason == "interpenetration" and invalid[0].split == "generated:given"
        manifest = next(t.body for t in mem.list("training_program", run_id=rid, round_idx=1) if t.key == "expert_demos_r1")
        sources = [s["program"] for s in manifest["scenes"]]
        assert len(sources) == cfg.engine.generation_budget and sources[0] == "given" and set(sources[1:]) == {"fill"}
        assert manifest["notes"]["given"] == "ran dry after 2 candidates"
        assert mem.get_run(rid).status == "done"


def _context(tmp_path: Path) -> RunContext:
    cfg = E.config("plr")
    mem = open_memory(tmp_path)
    mem.create_run("ued", config=cfg.model_dump(mode="json"), seed=0, strategy="plr")
    return RunContext(cfg=cfg, run_dir=tmp_path, run_id="ued", memory=mem, families=(E.FAMILY,))


def _probes(ctx: RunContext, r: int, specs: list[ScenarioSpec], outcomes: list[tuple[bool, str | None]]) -> None:
    with ctx.memory.phase(ctx.run_id, r, "evaluate") as tx:
        for i, (spec, (ok, err)) in enumerate(zip(specs, outcomes)):
            sc = tx.add(Scenario.from_spec(spec, split="probe"))
            tx.add(Episode(scenario_id=sc.id, policy="policy", seed=i, success=ok, episode_return=0.0, length=10,
                           info={"kind": "probe", "error": err}))


def test_non_finite_level_scores_never_enter_the_buffer_and_plr_replays_buffer_scenes(tmp_path: Path) -> None:
    from coda.engine.mutate import dr_scene

    ctx = _context(tmp_path)
    rng = np.random.default_rng(0)
    specs = [dr_scene(rng, E.FAMILY, 1) for _ in range(7)]
    outcomes = [(True, None), (False, None), (False, "mj_step: simulation unstable (QACC)"), (False, None), (True, None)]
    _probes(ctx, 1, specs[:5], outcomes)
    assert math.isnan(level_score(False, "unstable")) and level_score(False, None) == 1.0
    _, buf, dropped = level_buffer(ctx, 1, 16)
    assert dropped == 1
    assert [s.spec_id for s in buf.scenes] == [s.spec_id for k, s in enumerate(specs[:5]) if k != 2]
    assert np.all(np.isfinite(buf.scores)) and list(buf.scores) == [0.0, 1.0, 1.0, 0.0]
    budget = ctx.cfg.engine.generation_budget
    plan = plan_plr(Evidence(ctx, 1, [], {}, {}, budget=budget, seed=ctx.seed_for("generate", 1)))
    assert sum(b["count"] for _, b in plan.sources) == budget
    replay = dict(plan.sources)["plr_replay"]
    replayed = [ScenarioSpec.from_dict(s).spec_id for s in replay["scenes"]]
    assert replayed and len(set(replayed)) == len(replayed) <= len(buf)
    assert set(replayed) <= {s.spec_id for s in buf.scenes}
    assert specs[2].spec_id not in replayed + replay["buffer"]
    # round 2: the buffer remembers which scenes round 1 replayed (their staleness restarts then)
    _probes(ctx, 2, specs[5:], [(False, None), (True, None)])
    _, buf2, _ = level_buffer(ctx, 2, max(4 * budget, 16), replayed=True)
    assert buf2.tick == 3  # insert (round 1), replay draw (round 1), insert (round 2)
    sampled = {s.spec_id: int(t) for s, t in zip(buf2.scenes, buf2.last_sampled)}
    assert {k for k, t in sampled.items() if t == 2} == set(replayed)
    assert {k for k, t in sampled.items() if t == 3} == {specs[5].spec_id, specs[6].spec_id}
    ctx.memory.close()


def test_ued_probes_rescore_the_scenes_they_curated_last_round(tmp_path: Path) -> None:
    """PLR's next probes are last round's replays (so their scores are refreshed), then a replayed scene's
    new outcome replaces its old score in the buffer; sources not curated (fill) are never re-probed."""
    from coda.engine.mutate import dr_scene
    from coda.engine.round import rescore_probes
    from coda.engine.strategies import STRATEGIES
    from coda.memory import TrainingProgram

    ctx = _context(tmp_path)
    rng = np.random.default_rng(3)
    specs = [dr_scene(rng, E.FAMILY, 1) for _ in range(4)]
    _probes(ctx, 1, specs[:3], [(False, None)] * 3)  # all three failed: score 1
    with ctx.memory.phase(ctx.run_id, 1, "generate") as tx:
        ids = [tx.add(Scenario.from_spec(s, split="generated"), exist_ok=True).id for s in (specs[1], specs[3], specs[0])]
        tx.add(TrainingProgram(key="expert_demos_r1", body={"kind": "expert_demos", "scenes": [
            {"scenario_id": ids[0], "program": "plr_replay"}, {"scenario_id": ids[1], "program": "fill"},
            {"scenario_id": ids[2], "program": "plr_replay"}]}))
    assert STRATEGIES.get("plr").rescore == ("plr_replay",) and STRATEGIES.get("accel").rescore == ("accel",)
    again = rescore_probes(ctx, 2, ("plr_replay",), 8)
    assert [s.spec_id for s in again] == [specs[1].spec_id, specs[0].spec_id]
    assert [s.spec_id for s in rescore_probes(ctx, 2, ("plr_replay",), 1)] == [specs[1].spec_id]
    assert rescore_probes(ctx, 1, ("plr_replay",), 8) == [] and rescore_probes(ctx, 2, (), 8) == []
    _probes(ctx, 2, again, [(True, None), (False, None)])  # the policy now solves specs[1]
    _, buf, _ = level_buffer(ctx, 2, 16)
    score = {s.spec_id: float(x) for s, x in zip(buf.scenes, buf.scores)}
    assert len(buf) == 3 and score[specs[1].spec_id] == 0.0 and score[specs[0].spec_id] == 1.0
    ctx.memory.close()


def test_a_planner_that_misses_the_budget_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coda.engine.round import phase_compile
    from coda.engine.strategies import StrategyError

    ctx = _context(tmp_path)
    greedy = Strategy("greedy", False, False, lambda ev: Plan([("dr", ev.dr_body(ev.budget + 1))]))
    with pytest.raises(StrategyError, match=r"planned source counts \[5\]; .* generation budget \(4\)"):
        phase_compile(ctx, 1, greedy, [], {}, {})
    assert not ctx.memory.phase_done("ued", 1, "compile")
    ctx.memory.close()
