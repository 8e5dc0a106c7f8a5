"""Every record kind written through a phase and read back identical, on SQLite and on PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest

from coda.errors import CodaError, RegistryError
from coda.memory import (
    Checkpoint,
    Diagnosis,
    DuplicateRecordError,
    Episode,
    FailureMode,
    GenerationProgram,
    InvalidRecordError,
    LearningProgress,
    PhaseCommittedError,
    PhaseMarker,
    Potential,
    RecordNotFoundError,
    Run,
    Scenario,
    TrainingProgram,
    Verdict,
)
from coda.memory.store import KINDS
from coda.scene.spec import ContainerSpec, GoalPredicate, ObjectSpec, ScenarioSpec

RUN = "run-a"


def small_spec(x: float = 0.1) -> ScenarioSpec:
    return ScenarioSpec(
        family="pick_place",
        objects=(ObjectSpec(name="obj0", shape="box", size=(0.02, 0.02, 0.02), color="red", pos=(x, 0.0)),),
        containers=(ContainerSpec(name="tray", kind="tray", size=(0.08, 0.08, 0.02), color="gray", pos=(0.0, 0.15)),),
        instruction="put the red box in the tray",
        goal=(GoalPredicate(name="in", args=("obj0", "tray")),),
        seed=7,
    )


def write_all_kinds(mem) -> dict[str, list]:  # type: ignore[no-untyped-def]
    """Write at least one record of every kind over two rounds; returns what `add` returned, by kind."""
    out: dict[str, list] = {k: [] for k in KINDS}
    out["run"].append(mem.create_run(RUN, config={"engine": {"rounds": 2}, "lr": 3e-4}, seed=3, strategy="coda"))
    spec = small_spec()
    art = mem.artifacts.put_bytes("traces/r0/ep0.bin", b"\x00state trace\xff")
    with mem.phase(RUN, 0, "evaluate") as tx:
        ck = tx.add(Checkpoint(path="checkpoints/sft.pt", sha256="ab" * 32, metrics={"bc_loss": 0.125, "steps": 20}))
        sc = tx.add(Scenario.from_spec(spec, split="probe"))
        bad = tx.add(Scenario.from_spec(small_spec(0.2), split="probe", valid=False, invalid_reason="unreachable"))
        ep = tx.add(
            Episode(
                scenario_id=sc.id, policy="policy", checkpoint_id=ck.id, seed=11, success=False,
                episode_return=-1.25, length=80, stage_reached="grasp(obj0)",
                artifacts={"trace": art.to_dict()}, info={"phi": [0.0, 0.2, 0.4], "note": "ünïcode"},
            )
        )
        ep2 = tx.add(Episode(scenario_id=sc.id, policy="expert", success=True, episode_return=1.0, length=42))
        out["checkpoint"].append(ck)
        out["scenario"] += [sc, bad]
        out["episode"] += [ep, ep2]
    with mem.phase(RUN, 0, "diagnose") as tx:
        d1 = tx.add(Diagnosis(episode_id=ep.id, critic="privileged", data={"mode": "far_left", "stage": "reach"},
                              raw='{"mode": "far_left"}', accepted=True))
        d2 = tx.add(Diagnosis(episode_id=ep.id, critic="openai", data=None, raw="I think it failed — «vite»?",
                              accepted=False, reason="answer is not JSON"))
        out["diagnosis"] += [d1, d2]
    with mem.phase(RUN, 0, "verify") as tx:
        out["verdict"].append(
            tx.add(Verdict(diagnosis_id=d1.id, checks={"predicates": True, "counterfactual": {"rate": 0.75}}, passed=True))
        )
    with mem.phase(RUN, 0, "compile") as tx:
        fm = tx.add(FailureMode(key="position:far_left", description="target far left",
                                embedding=[0.1, -1e-300, 1 / 3, 2.5e10], last_round=0))
        tx.get(Diagnosis, d1.id).failure_mode_id = fm.id  # clustering links the diagnosis to its mode
        g1 = tx.add(GenerationProgram(key="far_left/0", body={"base": "pick_place", "ops": [["move", "far_left"]],
                                                              "seed": 5, "budget": 4}, failure_mode_id=fm.id))
        g2 = tx.add(GenerationProgram(key="far_left/1", body={"base": "pick_place", "ops": []}, parent_id=g1.id))
        tp = tx.add(TrainingProgram(key="far_left", body={"demos": 4, "weights": {"bc": 1.0}}, failure_mode_id=fm.id))
        pot = tx.add(Potential(failure_mode_id=fm.id, stage_program={"stages": ["reach(obj0)", "grasp(obj0)"]}))
        out["failure_mode"].append(fm)
        out["generation_program"] += [g1, g2]
        out["training_program"].append(tp)
        out["potential"].append(pot)
    with mem.phase(RUN, 0, "measure") as tx:
        out["progress"].append(tx.add(LearningProgress(failure_mode_id=fm.id, before=0.25, after=0.5, budget_share=0.4)))
    with mem.phase(RUN, 1, "compile") as tx:
        tx.get(FailureMode, fm.id).last_round = 1  # seen again in round 1
        sc1 = tx.add(Scenario.from_spec(spec, split="probe", program_id=g1.id))  # same scene, new round: a new row
        out["scenario"].append(sc1)
    out["phase"] = mem.list(PhaseMarker, RUN)
    return out


def test_every_record_kind_round_trips(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.open() as mem:
        written = write_all_kinds(mem)
    assert set(written) == set(KINDS.names())
    with backend.open() as mem:  # a fresh connection: nothing comes from a session cache
        for kind, records in written.items():
            assert records, kind
            for rec in records:
                back = mem.get(kind, rec.id)
                want = rec.to_dict()
                got = back.to_dict()
                if kind == "failure_mode":
                    want["last_round"] = 1
                if kind == "diagnosis" and rec.critic == "privileged":
                    want["failure_mode_id"] = written["failure_mode"][0].id
                assert got == want, kind
                assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}, kind
        sc = mem.get(Scenario, written["scenario"][0].id)
        assert ScenarioSpec.from_dict(sc.spec) == small_spec()
        assert sc.spec_id == small_spec().spec_id
        run = mem.get_run(RUN)
        assert run.created.tzinfo is not None and abs(run.created - dt.datetime.now(dt.timezone.utc)).total_seconds() < 60
        ep = mem.get(Episode, written["episode"][0].id)
        mem.artifacts.verify(ep.artifacts["trace"])
        assert mem.get(FailureMode, written["failure_mode"][0].id).first_round == 0


def test_reads_by_kind_run_round_and_counts(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.open() as mem:
        write_all_kinds(mem)
        mem.create_run("run-b", config={}, seed=0, strategy="dr")
        with mem.phase("run-b", 0, "evaluate") as tx:
            tx.add(Scenario.from_spec(small_spec(), split="sft"))
        assert mem.completed_phases(RUN) == [(0, "evaluate"), (0, "diagnose"), (0, "verify"), (0, "compile"),
                                             (0, "measure"), (1, "compile")]
        assert mem.phase_done(RUN, 0, "verify") and not mem.phase_done(RUN, 1, "verify")
        counts = mem.counts(RUN)
        assert counts == {"phase": 6, "failure_mode": 1, "generation_program": 2, "training_program": 1,
                          "scenario": 3, "checkpoint": 1, "episode": 2, "diagnosis": 2, "verdict": 1,
                          "potential": 1, "progress": 1}
        assert mem.counts(RUN, round_idx=1) == {**{k: 0 for k in counts}, "phase": 1, "scenario": 1}
        assert mem.counts("run-b")["scenario"] == 1
        assert [s.round for s in mem.list("scenario", RUN)] == [0, 0, 1]
        assert len(mem.list(Scenario, RUN, 0)) == 2 and len(mem.list(Scenario)) == 4
        assert [s.valid for s in mem.list(Scenario, RUN, valid=False)] == [False]
        assert [e.policy for e in mem.list(Episode, RUN, success=True)] == ["expert"]
        assert [e.policy for e in mem.list(Episode, RUN, checkpoint_id=None)] == ["expert"]
        assert mem.count(Diagnosis, RUN, accepted=False) == 1
        assert [r.id for r in mem.runs()] == [RUN, "run-b"]
        with mem.snapshot() as view:
            assert view.count("episode", RUN) == len(view.list("episode", RUN)) == 2
        with pytest.raises(RegistryError, match=r"Unknown record kind 'episodes'. Available: \["):
            mem.list("episodes")
        with pytest.raises(CodaError, match="episode has no field 'sucess'"):
            mem.list(Episode, RUN, sucess=True)
        with pytest.raises(RecordNotFoundError, match="no episode with id 999"):
            mem.get("episode", 999)
        with pytest.raises(RecordNotFoundError, match=r"no run 'nope' .*runs: \['run-a', 'run-b'\]"):
            mem.counts("nope")


def test_phase_is_all_or_nothing_and_cannot_be_replayed(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.open() as mem:
        mem.create_run(RUN, config={}, seed=0, strategy="coda")
        with pytest.raises(RuntimeError, match="simulator crashed"):
            with mem.phase(RUN, 0, "evaluate") as tx:
                for x in (0.0, 0.05, 0.1):
                    tx.add(Scenario.from_spec(small_spec(x)))
                assert tx.count(Scenario, RUN) == 3  # the transaction sees its own writes
                assert mem.count(Scenario, RUN) == 0  # nobody else does
                raise RuntimeError("simulator crashed")
        assert mem.count(Scenario, RUN) == 0 and not mem.phase_done(RUN, 0, "evaluate")
        with mem.phase(RUN, 0, "evaluate") as tx:
            tx.add(Scenario.from_spec(small_spec()))
        with pytest.raises(PhaseCommittedError, match="phase 'evaluate' of round 0 of run 'run-a' already committed"):
            with mem.phase(RUN, 0, "evaluate") as tx:
                pass
        with pytest.raises(RecordNotFoundError, match="no run 'ghost'"):
            with mem.phase("ghost", 0, "evaluate"):
                pass
        assert mem.count(Scenario, RUN) == 1 and mem.count(PhaseMarker, RUN) == 1


def test_duplicates_and_bad_fields_fail_with_the_field_named(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.open() as mem:
        mem.create_run(RUN, config={}, seed=0, strategy="coda")
        mem.create_run("other", config={}, seed=0, strategy="coda")
        with pytest.raises(DuplicateRecordError, match="run 'run-a' already exists"):
            mem.create_run(RUN, config={}, seed=0, strategy="coda")
        assert mem.create_run(RUN, config={"x": 1}, seed=9, strategy="dr", exist_ok=True).seed == 0
        with mem.phase("other", 0, "evaluate") as tx:
            foreign = tx.add(Scenario.from_spec(small_spec()))
        with mem.phase(RUN, 0, "evaluate") as tx:
            sc = tx.add(Scenario.from_spec(small_spec()))
            assert tx.add(Scenario.from_spec(small_spec()), exist_ok=True).id == sc.id
            with pytest.raises(DuplicateRecordError, match=r"scenario with \{'run_id': 'run-a', 'round': 0, 'spec_id'"):
                tx.add(Scenario.from_spec(small_spec()))
            ep = dict(scenario_id=sc.id, policy="p", success=True, episode_return=1.0, length=3)
            bad = [
                ({"success": "yes"}, "episode field 'success' = 'yes': expected a bool"),
                ({"episode_return": float("nan")}, "episode field 'episode_return' = nan: expected a finite number"),
                ({"length": 3.5}, "episode field 'length' = 3.5: expected an integer"),
                ({"length": None}, "episode field 'length' is missing"),
                ({"scenario_id": 999}, "episode field 'scenario_id' = 999: no scenario with that id"),
                ({"scenario_id": foreign.id}, "belongs to run 'other', not 'run-a'"),
                ({"info": {"a": {1, 2}}}, "episode field 'info' = .*not storable as JSON"),
                ({"policy": "p" * 200}, "episode field 'policy' = .*longer than 128 characters"),
                ({"round": 4}, "episode field 'round' = 4 but this phase writes round 0"),
            ]
            for change, message in bad:
                with pytest.raises(InvalidRecordError, match=message):
                    tx.add(Episode(**{**ep, **change}))
            with pytest.raises(InvalidRecordError, match="cannot add a Run in a phase"):
                tx.add(Run(id="x", config={}, seed=0, strategy="s"))
            import numpy as np

            e = tx.add(Episode(**{**ep, "success": np.bool_(True), "episode_return": np.float32(0.5), "length": np.int64(4)}))
            assert (type(e.success), type(e.episode_return), type(e.length)) == (bool, float, int)
        assert mem.count(Episode, RUN) == 1
        for args, message in [
            (("bad id!", 0, "evaluate"), "run id 'bad id!' is invalid"),
            ((RUN, -1, "evaluate"), "round -1 is invalid"),
            ((RUN, 0, "Evaluate now"), "phase name 'Evaluate now' is invalid"),
        ]:
            with pytest.raises(InvalidRecordError, match=message):
                with mem.phase(*args):
                    pass
