"""CoDA's compile step on accepted verdicts, through generation and training (the `tiny` SFT policy solves no
base scene, so a real counterfactual check cannot pass in the end-to-end runs; here a scripted critic writes
diagnoses and the verdicts are given as accepted).

Given two failed probes diagnosed `missed_grasp` with the target's position `far_left` verified:
- compile stores one failure mode, a level-0 generation program over its factor, a training program with the
  corrective demos (starting where `corrective_start` says along Φ of the episode) and the voted staged
  potential, and a Potential record accepted by the verdict's potential check;
- generate makes the budget of scenes with the target in far_left;
- train relabels the corrective episodes from their start step only, and gives the generated scenes' demos Φ of
  the mode's potential bound to each scene;
- a program stuck at level 0 (`rediagnose`) makes the next round probe held-apart scenes of it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402

from coda.critic.base import CRITICS  # noqa: E402
from coda.critic.diagnosis import Diagnosis, SceneFactor  # noqa: E402
from coda.critic.verify import CheckResult, Verdict  # noqa: E402
from coda.engine.compile import RoleStage, bind_potential, corrective_start, load_training_program, next_level  # noqa: E402
from coda.engine.curriculum import rediagnosis_probes  # noqa: E402
from coda.engine.loop import start_run  # noqa: E402
from coda.engine.rollout import evaluate_checkpoint  # noqa: E402
from coda.engine.round import (  # noqa: E402
    explore_probes,
    held_apart_scenes,
    phase_compile,
    phase_diagnose,
    phase_evaluate,
    phase_generate,
    phase_measure,
    phase_train_round,
    phase_verify,
)
from coda.engine.strategies import STRATEGIES  # noqa: E402
from coda.memory import GenerationProgram  # noqa: E402
from coda.memory import Verdict as VerdictRecord  # noqa: E402
from coda.policy.data import DemoDataset  # noqa: E402
from coda.scene.regions import region  # noqa: E402
from coda.shaping.text2potential import StagedPotential, canonical_plan, compile_plan  # noqa: E402
from coda.sim.tabletop.env import TabletopEnv  # noqa: E402

MODE = "missed_grasp|position:far_left"


class ScriptedCritic:
    """Blames the target's position (far_left) for a missed grasp, with the scene's canonical stage plan."""

    name = "scripted"

    def diagnose(self, episode: Any) -> Diagnosis:
        spec = episode.spec
        target = spec.goal[0].args[0]
        return Diagnosis(failure_mode="missed_grasp", stage_reached="none", objects=(target,),
                         factors=(SceneFactor(kind="position", entity=target, value="far_left",
                                              detail="the target sits far left"),),
                         explanation="The gripper never closed on the target in the far left.",
                         stage_plan=canonical_plan(spec), critic=self.name, episode_id=episode.episode_id)


def _accept(d: Diagnosis) -> Verdict:
    checks = tuple(CheckResult(name=n, status="passed", reason="given") for n in ("consistency", "counterfactual", "potential"))
    return Verdict(episode_id=d.episode_id, critic=d.critic, failure_mode=d.failure_mode, accepted=True,
                   checks=checks, verified_factors=d.factors)


def test_accepted_diagnoses_compile_into_mode_programs_that_generation_and_training_follow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CRITICS._items, "scripted", lambda cfg: ScriptedCritic())
    cfg = E.config("coda", extra=("critic.name=scripted", "engine.probe_scenes=2", "engine.demo_budget=8",
                                  "engine.corrective_weight=0.25",
                                  "engine.improvement=awr"))  # rounds train the critic on their probes too
    ctx = start_run(cfg, tmp_path / "modes", from_round0=E.round0())
    from coda.engine.fork import copy_round0

    copy_round0(ctx, E.round0())
    ckpt = ctx.run_dir / "checkpoints" / "round_000.pt"
    probes = phase_evaluate(ctx, 1, ckpt, lambda: explore_probes(ctx, 1, 2))
    assert not any(p.success for p in probes)
    # committed: the probes come back from memory, none are drawn again
    again = phase_evaluate(ctx, 1, ckpt, lambda: pytest.fail("probes drawn for a committed evaluation"))
    assert [(p.episode_id, p.spec.spec_id) for p in again] == [(p.episode_id, p.spec.spec_id) for p in probes]
    env = TabletopEnv(config=cfg.sim)
    try:
        diagnoses = phase_diagnose(ctx, 1, probes, ScriptedCritic(), env, 2)
        with ctx.commit(1, "verify") as tx:
            for d in ctx.memory.list("diagnosis", run_id=ctx.run_id, round_idx=1):
                v = _accept(diagnoses[d.episode_id])
                tx.add(VerdictRecord(diagnosis_id=d.id, checks=v.model_dump(mode="json"), passed=True))
        verdicts = phase_verify(ctx, 1, probes, diagnoses, ckpt, env, [])
    finally:
        env.close()
    sources, fill = phase_compile(ctx, 1, STRATEGIES.get("coda"), probes, diagnoses, verdicts)

    mem = ctx.memory
    (mode,) = mem.list("failure_mode", run_id=ctx.run_id)
    assert mode.key == MODE and mode.last_round == 1
    progs = {p.key: p for p in mem.list("generation_program", run_id=ctx.run_id, round_idx=1)}
    mode_keys = [k for k in progs if progs[k].body.get("mode") == MODE]
    assert mode_keys == ["mode0_r1"] and progs["mode0_r1"].failure_mode_id == mode.id
    assert progs["mode0_r1"].body["mode_program"]["level"] == 0
    assert sum(n for _, _, n in sources) == cfg.engine.generation_budget
    (tp,) = [t for t in mem.list("training_program", run_id=ctx.run_id, round_idx=1) if t.key == "train:mode0_r1"]
    body = load_training_program(tp.body)
    assert body.mode == MODE and body.generation_program == "mode0_r1" and body.potential is not None
    assert body.potential_votes == 2 and tp.failure_mode_id == mode.id
    by_id = {p.episode_id: p for p in probes}
    env = TabletopEnv(config=cfg.sim)
    try:
        for c in body.corrective:  # correction starts a few steps before Φ of the plan last rose
            p = by_id[int(c.episode_id)]
            from coda.engine.round import replay_states

            phi = compile_plan(canonical_plan(p.spec), p.spec).phis(replay_states(env, p.spec, p.actions))
            assert c.start_step == corrective_start(list(phi))
    finally:
        env.close()
    assert [c.episode_id for c in body.corrective] == [str(p.episode_id) for p in probes][: cfg.engine.demo_budget // 4]
    (pot,) = mem.list("potential", run_id=ctx.run_id)
    assert pot.failure_mode_id == mode.id and pot.accepted and pot.stage_program == body.potential

    generated = phase_generate(ctx, 1, sources, fill)
    assert len(generated.scenes) == cfg.engine.generation_budget
    mode_scenes = [s for s, k in zip(generated.scenes, generated.program_keys) if k == "mode0_r1"]
    far_left = region("far_left")
    assert mode_scenes and all(far_left.contains(*s.object(s.goal[0].args[0]).pos) for s in mode_scenes)

    new_ckpt = phase_train_round(ctx, 1, ckpt, generated, probes, [ctx.run_dir / "demos" / "round_000"],
                                 shaping_weight=1.0)
    episodes = list(DemoDataset(ctx.run_dir / "demos" / "round_001").episodes())
    def labelled(e: Any) -> bool:
        return any(c is not None for c in e.label_chunks or [])

    corrective = [e for e in episodes if e.corrective and labelled(e)]
    rollouts = [e for e in episodes if e.corrective and not labelled(e)]  # the probes, for the critic (AWR)
    assert len(rollouts) == len(probes) and not any(e.success for e in rollouts)
    starts = sorted(c.start_step for c in body.corrective)
    assert sorted(next(t for t, lab in enumerate(e.label_chunks) if lab is not None) for e in corrective) == [
        -(-s // cfg.policy.n_action_steps) * cfg.policy.n_action_steps for s in starts]
    template = [RoleStage.model_validate(s) for s in tp.body["potential_template"]]
    env = TabletopEnv(config=cfg.sim)
    try:
        from coda.engine.round import replay_states

        for spec in mode_scenes:
            ep = next(e for e in episodes if e.spec_id == spec.spec_id and not e.corrective)
            roles = ctx.backend.sim.entity_roles(spec)
            want = StagedPotential(bind_potential(template, spec, roles), spec).phis(replay_states(env, spec, ep.actions))
            assert np.allclose(ep.potentials, want)
    finally:
        env.close()

    # learning progress of the mode: both checkpoints on held-apart scenes of its program (another seed)
    phase_measure(ctx, 1, ckpt, new_ckpt, {E.FAMILY: {}})
    (lp,) = mem.list("progress")
    held = held_apart_scenes(progs["mode0_r1"].body["program"], ctx.seed_for("held_apart", 1, "mode0_r1"),
                             cfg.engine.mode_probes, ctx.backend)
    assert held and not {s.spec_id for s in held} & {s.spec_id for s in generated.scenes}
    want = [np.mean([x.success for x in evaluate_checkpoint(c, held, cfg.sim, workers=1, record_states=False)])
            for c in (ckpt, new_ckpt)]
    assert (lp.failure_mode_id, lp.before, lp.after) == (mode.id, *want)
    assert lp.budget_share == progs["mode0_r1"].body["count"] / cfg.engine.generation_budget
    ctx.memory.close()


def test_a_mode_whose_program_cannot_be_made_explores_and_the_explore_source_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from coda.sim.tabletop import programs as C
    from coda.engine.curriculum import plan_modes
    from coda.engine.fork import copy_round0
    from coda.engine.round import ProbeEpisode
    from coda.engine.strategies import Evidence
    from coda.scene.splits import make_split

    cfg = E.config("coda")
    ctx = start_run(cfg, tmp_path / "uncompiled", from_round0=E.round0())
    copy_round0(ctx, E.round0())
    spec = make_split(E.FAMILY, "sft", 1, seed=4)[0]
    probe = ProbeEpisode(episode_id=7, spec=spec, success=False, actions=np.zeros((3, 5), np.float32))
    d = ScriptedCritic().diagnose(SimpleNamespace(spec=spec, episode_id="7"))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise C.CompileError(f"mode = {MODE!r}, level 0: pick_place scenes cannot carry it: no room")

    monkeypatch.setattr(C, "compile_generation_program", refuse)
    budget = cfg.engine.generation_budget
    plan = plan_modes(Evidence(ctx, 1, [probe], {7: d}, {7: _accept(d)}, budget, seed=3))
    assert not any(body.get("mode") for _, body in plan.sources) and not plan.training
    ((key, body),) = plan.sources
    (lost,) = body["uncompiled"]
    assert key == "explore" and body["count"] == budget
    assert lost["mode"] == MODE and 0 < lost["count"] <= budget and "cannot carry it: no room" in lost["error"]
    ctx.memory.close()


def test_a_program_stuck_at_level_0_is_probed_again_next_round(tmp_path: Path) -> None:
    from coda.sim.tabletop.programs import child_program, compile_generation_program
    from coda.engine.context import RunContext
    from coda.memory import open_memory

    cfg = E.config("coda")
    mem = open_memory(tmp_path)
    mem.create_run("stuck", config=cfg.model_dump(mode="json"), seed=0, strategy="coda")
    ctx = RunContext(cfg=cfg, run_dir=tmp_path, run_id="stuck", memory=mem, families=(E.FAMILY,))
    parent = compile_generation_program(MODE, (), E.FAMILY, seed=5, budget=4, level=0)
    child = child_program(parent, *next_level(parent.level, "stuck", 3))
    assert child.rediagnose and child.level == 0
    with mem.phase("stuck", 1, "compile") as tx:
        tx.add(GenerationProgram(key="mode0_r1", body={"kind": "program", "mode": MODE, "count": 4,
                                                      "program": child.program.model_dump(mode="json"),
                                                      "mode_program": child.body()}))
    assert rediagnosis_probes(ctx, 1, 2) == []  # nothing flagged before round 1
    again = rediagnosis_probes(ctx, 2, 2)
    assert len(again) == 2 and all(s.provenance.program == child.program.name for s in again)
    made = [s.spec_id for s in again]
    assert made == [s.spec_id for s in rediagnosis_probes(ctx, 2, 2)]  # seeded: a resumed run probes the same
    assert not set(made) & {s.spec_id for s in explore_probes(ctx, 2, 2)}
    mem.close()


def test_demo_potentials_are_those_of_the_states_the_expert_passed_through(tmp_path: Path) -> None:
    """Φ is taken from the states recorded while the expert ran (no second rollout); they are the states a
    replay of the episode's actions re-creates."""
    from coda.engine.backend import backend_for
    from coda.engine.round import replay_states

    cfg = E.config("sft", 0)
    backend = backend_for(cfg)
    scenes, _ = backend.build_split(E.FAMILY, "train", "sft", 2, seed=5)
    report = backend.collect_demos(scenes, tmp_path / "demos")
    assert report.written == 2
    env = backend.make_env()
    try:
        for spec, ep in zip(scenes, DemoDataset(tmp_path / "demos").episodes()):
            want = backend.phis(env, spec, replay_states(env, spec, ep.actions))
            assert len(ep.potentials) == ep.length + 1 and ep.potentials[-1] > ep.potentials[0]
            np.testing.assert_allclose(ep.potentials, want, atol=1e-6)
    finally:
        env.close()
