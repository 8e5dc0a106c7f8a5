"""One co-evolution round, top to bottom:

    evaluate → diagnose → verify → compile → generate → train → measure

Every phase is a function of the run context and the previous phases' outputs; each commits its records with
its phase marker in one transaction (`memory.phase`), and on resume a committed phase is *read back* from
memory instead of re-run. Strategies (coda, the baselines) differ only in the callables they pass: which probe
scenes to roll out, whether a critic diagnoses failures, and how the generation budget is spent
(`coda.engine.strategies`); `run_round` below runs the phases in order. Training and measurement are the same for every strategy, so a comparison is
at equal generation budget, equal expert-demo budget and equal training steps.

Episode traces are not stored: the simulator is deterministic, so a stored action sequence re-creates every
state of an episode exactly (`replay_states`).

A bad critic answer or a bad generated scene never stops a round: a critic that raises, times out or answers
off-schema leaves a rejected Diagnosis record with the reason, and a scene that fails the validity checks is
stored as an invalid Scenario with the check's reason.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda.engine.context import RunContext
from coda.engine.loop import phase_measure_splits, progress_bar
from coda.engine.rollout import Rollout, evaluate_checkpoint
from coda.engine.strategies import Evidence, Strategy, StrategyError, candidate_stream
from coda.errors import first_line
from coda.scene.spec import ScenarioSpec


@dataclass
class ProbeEpisode:
    """A probe rollout as later phases need it: its memory id, scene, outcome and actions."""

    episode_id: int
    spec: ScenarioSpec
    success: bool
    actions: np.ndarray  # (T, 5)
    keyframes: dict[int, bytes] = field(default_factory=dict)  # step -> PNG (failed episodes only)


@dataclass
class GeneratedScenes:
    """What the generate phase produced: valid scenes, each with the program (key) that made it."""

    scenes: list[ScenarioSpec]
    program_keys: list[str]
    shortfall: int = 0  # scenes short of the budget after the fill source too (0 unless the simulator refuses all)


# ---- the round -----------------------------------------------------------------------------------------

def explore_probes(ctx: RunContext, r: int, n: int) -> list[ScenarioSpec]:
    """`n` valid single-factor variations of training-distribution scenes: one random edit each, so a failure
    has one candidate cause the critic and the counterfactual check can find. Scenes the expert cannot solve
    are skipped: a policy failure there says nothing about the policy."""
    return ctx.backend.explore_probes(ctx, r, n)


def rescore_probes(ctx: RunContext, r: int, sources: Sequence[str], n: int) -> list[ScenarioSpec]:
    """Up to `n` of the scenes round r − 1 generated from `sources` (the levels a UED strategy curated:
    PLR's replays, ACCEL's mutations), in generation order, so the policy plays them again and their level
    scores are refreshed (PLR) or measured for the first time (ACCEL's children) before the next draw."""
    if r <= 1 or not sources or n <= 0:
        return []
    manifest = next((t.body for t in ctx.memory.list("training_program", run_id=ctx.run_id, round_idx=r - 1)
                     if t.key == f"expert_demos_r{r - 1}"), None)
    if manifest is None:
        return []
    ids = [s["scenario_id"] for s in manifest["scenes"] if s["program"] in sources][:n]
    return [ctx.backend.scenario_from_dict(ctx.memory.get("scenario", i).spec) for i in ids]


def run_round(ctx: RunContext, r: int, strategy: Strategy, checkpoint: Path,
              splits: dict[str, dict[str, list[ScenarioSpec]]], demo_dirs: Sequence[Path]
              ) -> tuple[Path, Path, dict[str, dict[str, float]]]:
    """One round: evaluate → diagnose → verify → compile → generate → train → measure.

    Returns:
        (new checkpoint, this round's demo directory, success per family and split).
    """
    from coda.engine.curriculum import rediagnosis_probes

    cfg, backend = ctx.cfg, ctx.backend
    n_probe = cfg.engine.probe_scenes

    def draw_probes() -> list[ScenarioSpec]:
        if strategy.uses_critic:
            again = rediagnosis_probes(ctx, r, max(1, n_probe // 2))
        else:
            again = rescore_probes(ctx, r, strategy.rescore, n_probe // 2)
        return [*again, *explore_probes(ctx, r, n_probe - len(again))]

    probes = phase_evaluate(ctx, r, checkpoint, draw_probes)
    verdicts: dict[int, Any] = {}
    diagnoses: dict[int, Any] = {}
    if strategy.uses_critic:
        env = backend.make_env()
        try:
            diagnoses = phase_diagnose(ctx, r, probes, backend.make_critic(), env, cfg.engine.max_diagnoses)
            base = [s for f in ctx.families for s in splits[f].get(backend.verify_base_split, [])]
            verdicts = phase_verify(ctx, r, probes, diagnoses, checkpoint, env, base)
        finally:
            env.close()
    sources, fill = phase_compile(ctx, r, strategy, probes, diagnoses, verdicts)
    generated = phase_generate(ctx, r, sources, fill)
    new_ckpt = phase_train_round(ctx, r, checkpoint, generated, probes, demo_dirs,
                                 shaping_weight=cfg.shaping.weight if strategy.shaped else 0.0)
    due = cfg.engine.measure_every_round or r == cfg.engine.rounds or r in cfg.engine.measure_rounds
    measured = splits if due else {f: {} for f in splits}
    table = phase_measure(ctx, r, checkpoint, new_ckpt, measured)
    return new_ckpt, ctx.run_dir / "demos" / f"round_{r:03d}", table


# ---- the phases ----------------------------------------------------------------------------------------

def replay_states(env: Any, spec: ScenarioSpec, actions: np.ndarray) -> list[Any]:
    """Re-create an episode's state trace by replaying its actions (the physics is deterministic)."""
    env.reset_to(spec)
    states = [env.state()]
    for a in actions:
        env.step(a)
        states.append(env.state())
    return states


# ---- evaluate ---------------------------------------------------------------------------------------

def phase_evaluate(ctx: RunContext, r: int, checkpoint: Path,
                   probes: Sequence[ScenarioSpec] | Callable[[], Sequence[ScenarioSpec]]) -> list[ProbeEpisode]:
    """Roll the current policy out on the round's probe scenes; episodes and their actions to memory.

    `probes` may be a function that draws them: it is called only when the phase runs, so a resumed round
    whose evaluation is committed reads its probes back from memory without drawing and checking them again.
    """
    from coda.memory import ArtifactStore, Episode, Scenario

    mem = ctx.memory
    store = ArtifactStore(ctx.run_dir)
    if ctx.pending(r, "evaluate"):
        probes = list(probes()) if callable(probes) else probes
        with progress_bar(ctx.console) as bar:
            task = bar.add_task(f"round {r} · evaluate", total=len(probes))
            rollouts = evaluate_checkpoint(checkpoint, probes, ctx.cfg.sim, workers=ctx.cfg.runtime.workers,
                                           batch=ctx.cfg.runtime.rollout_batch, executor=ctx.executor,
                                           keyframes=ctx.cfg.critic.max_images, record_states=False,
                                           on_done=lambda i, _: bar.advance(task))
        arts = []
        for i, ro in enumerate(rollouts):
            a = {"actions": store.put_arrays(f"episodes/round_{r:03d}/probe_{i:05d}.npz",
                                             actions=ro.actions).to_dict()}
            a.update(_keyframe_refs(ctx, r, i, ro))
            arts.append(a)
        with ctx.commit(r, "evaluate") as tx:
            for i, (spec, ro, art) in enumerate(zip(probes, rollouts, arts)):
                sc = tx.add(Scenario.from_spec(spec, split="probe"), exist_ok=True)
                tx.add(Episode(scenario_id=sc.id, policy="policy", seed=i, success=ro.success,
                               episode_return=ro.episode_return, length=ro.length, artifacts=art,
                               info={"family": spec.family, "kind": "probe", "error": ro.error}))
    out = []
    for e in mem.list("episode", run_id=ctx.run_id, round_idx=r):
        if e.phase != "evaluate":
            continue
        spec = ctx.backend.scenario_from_dict(mem.get("scenario", e.scenario_id).spec)
        actions = np.load(store.path(e.artifacts["actions"]))["actions"]
        frames = {int(k.removeprefix("keyframe_t")): store.read_bytes(ref)
                  for k, ref in sorted(e.artifacts.items()) if k.startswith("keyframe_t")}
        out.append(ProbeEpisode(e.id, spec, e.success, actions, frames))
    return sorted(out, key=lambda p: p.episode_id)


def _keyframe_refs(ctx: RunContext, r: int, i: int, ro: Rollout) -> dict[str, Any]:
    from coda.engine.loop import _episode_artifacts

    return _episode_artifacts(ctx, r, "evaluate", i, ro)


# ---- diagnose -----------------------------------------------------------------------------------------

def phase_diagnose(ctx: RunContext, r: int, probes: Sequence[ProbeEpisode], critic: Any, env: Any,
                   limit: int) -> dict[int, Any]:
    """The critic diagnoses up to `limit` failed probe episodes; accepted and rejected answers both kept.

    Returns:
        {episode id: Diagnosis | DiagnosisRejected}.
    """
    from coda.critic.diagnosis import Diagnosis
    from coda.memory import Diagnosis as DiagnosisRecord

    mem = ctx.memory
    failed = [p for p in probes if not p.success][:limit]
    if ctx.pending(r, "diagnose"):
        rows = []
        for p in failed:
            res = diagnose_safely(critic, episode_record(env, p))
            ok = isinstance(res, Diagnosis)
            rows.append(DiagnosisRecord(episode_id=p.episode_id, critic=str(critic.name),
                                        data=res.model_dump(mode="json"),
                                        raw=None if ok else res.raw_text, accepted=ok,
                                        reason=None if ok else res.reason))
        with ctx.commit(r, "diagnose") as tx:
            tx.add_all(rows)
    return {d.episode_id: _critic_result(d.data) for d in mem.list("diagnosis", run_id=ctx.run_id, round_idx=r)}


def diagnose_safely(critic: Any, episode: Any) -> Any:
    """The critic's result for one episode, never an exception: an unavailable or failing critic (whatever it
    raises), an answer of the wrong type or about another episode all become a DiagnosisRejected with the
    reason (and are recorded). Only an interrupt (KeyboardInterrupt, SystemExit) passes through.
    """
    from coda.critic.base import CriticUnavailable
    from coda.critic.diagnosis import Diagnosis, DiagnosisRejected

    name = str(getattr(critic, "name", type(critic).__name__))

    def rejected(reason: str, raw: str = "") -> DiagnosisRejected:
        return DiagnosisRejected(critic=name, episode_id=episode.episode_id, reason=reason, raw_text=raw[:20_000])

    try:
        res = critic.diagnose(episode)
    except CriticUnavailable as e:
        return rejected(f"critic unavailable: {first_line(e)}")
    except Exception as e:  # noqa: BLE001 - a critic is foreign code: any failure is a recorded rejection
        return rejected(f"critic failed: {type(e).__name__}: {first_line(e)}")
    if not isinstance(res, (Diagnosis, DiagnosisRejected)):
        return rejected(f"critic returned a {type(res).__name__}, not a Diagnosis or DiagnosisRejected", repr(res)[:20_000])
    if res.episode_id is None:
        return res.model_copy(update={"episode_id": episode.episode_id})
    if res.episode_id != episode.episode_id:
        return rejected(f"diagnosis field 'episode_id' = {res.episode_id!r} but episode {episode.episode_id!r} "
                        "was diagnosed", res.model_dump_json())
    return res


def _critic_result(data: dict[str, Any]) -> Any:
    from coda.critic.diagnosis import Diagnosis, DiagnosisRejected

    return Diagnosis.model_validate(data) if data.get("record") == "diagnosis" else DiagnosisRejected.model_validate(data)


def episode_record(env: Any, p: ProbeEpisode) -> Any:
    """What a critic sees of a probe episode (its state trace re-created by replay)."""
    from coda.critic.base import EpisodeRecord

    states = replay_states(env, p.spec, p.actions)
    return EpisodeRecord(episode_id=str(p.episode_id), spec=p.spec, success=p.success, steps=len(p.actions),
                         keyframes=tuple(p.keyframes.values()), keyframe_steps=tuple(p.keyframes),
                         states=tuple(states), outcome="success" if p.success else "timeout")


# ---- verify -------------------------------------------------------------------------------------------

def phase_verify(ctx: RunContext, r: int, probes: Sequence[ProbeEpisode], diagnoses: dict[int, Any],
                 checkpoint: Path, env: Any, base_scenes: Sequence[ScenarioSpec]) -> dict[int, Any]:
    """Verify each diagnosis against the simulator (consistency, single-factor counterfactuals, potential),
    through `backend.verify_many` (which may spread the diagnoses over worker processes).

    Returns:
        {episode id: Verdict} for every diagnosis (rejected ones included, with reasons).
    """
    from coda.critic.verify import Verdict
    from coda.memory import Verdict as VerdictRecord

    mem = ctx.memory
    if ctx.pending(r, "verify"):
        by_id = {p.episode_id: p for p in probes}
        drecs = {d.episode_id: d for d in mem.list("diagnosis", run_id=ctx.run_id, round_idx=r)}
        eids = sorted(diagnoses)
        verdicts = ctx.backend.verify_many(env, checkpoint, ctx.seed_for("verify", r),
                                           [(diagnoses[e], episode_record(env, by_id[e])) for e in eids], base_scenes)
        rows = [VerdictRecord(diagnosis_id=drecs[eid].id, checks=v.model_dump(mode="json"), passed=v.accepted,
                              reason="; ".join(v.reasons) or None) for eid, v in zip(eids, verdicts)]
        with ctx.commit(r, "verify") as tx:
            tx.add_all(rows)
    ep_of = {d.id: d.episode_id for d in mem.list("diagnosis", run_id=ctx.run_id, round_idx=r)}
    return {ep_of[v.diagnosis_id]: Verdict.model_validate(v.checks)
            for v in mem.list("verdict", run_id=ctx.run_id, round_idx=r)}


# ---- compile ------------------------------------------------------------------------------------------

FILL_KEY = "fill"


def phase_compile(ctx: RunContext, r: int, strategy: Strategy, probes: Sequence[ProbeEpisode],
                  diagnoses: dict[int, Any], verdicts: dict[int, Any]
                  ) -> tuple[list[tuple[str, Iterator[ScenarioSpec], int]], tuple[str, Iterator[ScenarioSpec]]]:
    """Turn this round's evidence into generation sources (key, stream, count) and the fill stream.

    Stored (and read back on resume): a GenerationProgram per source (with its failure mode and parent), the
    `fill` program, failure modes first seen this round, a TrainingProgram per failure mode plus the round's
    `corrective_r<R>` program (probe episodes the expert relabels), and a Potential per mode whose staged
    potential was compiled this round.

    Raises:
        StrategyError: the planner's counts do not sum to the budget, or a source has no count.
    """
    from coda.memory import FailureMode, GenerationProgram, Potential, TrainingProgram

    mem = ctx.memory
    budget = ctx.cfg.engine.generation_budget
    if ctx.pending(r, "compile"):
        assert strategy.plan is not None
        ev = Evidence(ctx, r, probes, diagnoses, verdicts, budget, ctx.seed_for("generate", r))
        plan = strategy.plan(ev)
        keys = [k for k, _ in plan.sources]
        if len(set(keys)) != len(keys) or FILL_KEY in keys:
            raise StrategyError(f"strategy '{strategy.name}' planned source keys {keys}; they must be distinct "
                                f"and not '{FILL_KEY}'")
        counts = [b.get("count") for _, b in plan.sources]
        if any(not isinstance(c, int) or c < 0 for c in counts) or sum(counts) != budget:  # type: ignore[arg-type]
            raise StrategyError(f"strategy '{strategy.name}' planned source counts {counts}; they must be "
                                f"non-negative integers summing to the generation budget ({budget})")
        known = {m.key: m.id for m in mem.list("failure_mode", run_id=ctx.run_id)}
        from coda.engine.curriculum import program_ids

        prog_ids = program_ids(mem.list("generation_program", run_id=ctx.run_id))
        fill = ev.dr_body(0, tag="fill")
        with ctx.commit(r, "compile") as tx:
            for key, info in sorted(plan.modes.items()):
                if key in known:  # seen again: its last round moves on
                    tx.list(FailureMode, run_id=ctx.run_id, key=key)[0].last_round = r
                else:
                    known[key] = tx.add(FailureMode(key=key, description=info["description"] or key,
                                                    embedding=info["embedding"], last_round=r)).id
            for key, body in [*plan.sources, (FILL_KEY, fill)]:
                mode = body.get("mode")
                parent = (body.get("mode_program") or {}).get("parent")
                tx.add(GenerationProgram(key=key, body=body, failure_mode_id=known.get(mode) if mode else None,
                                         parent_id=prog_ids.get(parent) if parent else None))
            for key, body in plan.training:
                tx.add(TrainingProgram(key=key, body=body, failure_mode_id=known[body["mode"]]))
            tx.add(TrainingProgram(key=f"corrective_r{r}", body={"kind": "corrective", "episodes": plan.corrective}))
            for p in plan.potentials:
                tx.add(Potential(failure_mode_id=known[p["mode"]], stage_program=p["stage_program"],
                                 accepted=p["accepted"], reason=p["reason"]))
    progs = mem.list("generation_program", run_id=ctx.run_id, round_idx=r)
    sources = [(p.key, candidate_stream(p.body), int(p.body["count"])) for p in progs if p.key != FILL_KEY]
    fill_rec = next(p for p in progs if p.key == FILL_KEY)
    return sources, (FILL_KEY, candidate_stream(fill_rec.body))


# ---- generate -----------------------------------------------------------------------------------------

def phase_generate(ctx: RunContext, r: int, sources: Sequence[tuple[str, Any, int]],
                   fill: tuple[str, Any]) -> GeneratedScenes:
    """Draw from each (program key, candidate stream, count) until `count` valid scenes; invalid ones kept.

    A candidate stream yields ScenarioSpecs; each is checked in the simulator (builds, settles, the expert
    solves it), in batches the backend may spread over worker processes (`valid_scenes`). A source that
    runs dry (its stream ends or raises, or `4 count + 10` candidates were drawn) leaves its missing scenes
    to the `fill` stream, so the phase produces exactly the budget (the sum of the counts) unless even the
    fill stream fails `20 n + 50` times. Every candidate checked is stored as a Scenario record (invalid
    ones with the check's reason); the valid scenes, in order and with their source, are stored as the
    round's `expert_demos_r<R>` TrainingProgram — the list the train phase reads (a scene may already be in
    memory from this round, e.g. a probe replayed by PLR).
    """
    from coda.engine.backend import valid_scenes
    from coda.memory import Scenario, TrainingProgram

    mem = ctx.memory
    key = f"expert_demos_r{r}"
    if ctx.pending(r, "generate"):
        progs = {p.key: p.id for p in mem.list("generation_program", run_id=ctx.run_id, round_idx=r)}
        rows: list[Any] = []
        chosen: list[tuple[str, str]] = []  # (spec_id, source key) of valid scenes, in order
        seen: set[str] = set()
        notes: dict[str, str] = {}
        total = sum(n for _, _, n in sources)

        def draw(src: str, stream: Any, n: int, max_tries: int, bar: Any, task: Any) -> int:
            drawn = valid_scenes(ctx.backend, stream, n, max_tries, seen=seen)
            got = 0
            for spec, ok, reason in drawn.checked:
                rows.append(Scenario.from_spec(spec, split=f"generated:{src}", valid=ok,
                                               invalid_reason=None if ok else reason, program_id=progs.get(src)))
                if ok:
                    chosen.append((spec.spec_id, src))
                    got += 1
                    bar.advance(task)
            if drawn.stopped:
                notes[src] = drawn.stopped
            elif got < n:
                notes[src] = f"{got}/{n} valid after {drawn.tries} candidates"
            return got

        with progress_bar(ctx.console) as bar:
            task = bar.add_task(f"round {r} · generate", total=total)
            short = sum(n - draw(k, stream, n, 4 * n + 10, bar, task) for k, stream, n in sources)
            if short:
                short -= draw(fill[0], fill[1], short, 20 * short + 50, bar, task)
        with ctx.commit(r, "generate") as tx:
            ids = {row.spec_id: tx.add(row, exist_ok=True).id for row in rows}
            tx.add(TrainingProgram(key=key, body={
                "kind": "expert_demos", "budget": total, "shortfall": short, "notes": notes,
                "scenes": [{"scenario_id": ids[sid], "program": src} for sid, src in chosen]}))
    manifest = next(t for t in mem.list("training_program", run_id=ctx.run_id, round_idx=r) if t.key == key)
    scenes = [ctx.backend.scenario_from_dict(mem.get("scenario", s["scenario_id"]).spec) for s in manifest.body["scenes"]]
    return GeneratedScenes(scenes, [s["program"] for s in manifest.body["scenes"]], int(manifest.body["shortfall"]))


# ---- train --------------------------------------------------------------------------------------------

def phase_train_round(ctx: RunContext, r: int, prev_checkpoint: Path, generated: GeneratedScenes,
                      probes: Sequence[ProbeEpisode], demo_dirs: Sequence[Path], *, shaping_weight: float) -> Path:
    """Expert demos in the generated scenes + corrective demos from failure states, then fine-tuning.

    What the policy trains on comes from this round's training programs: a failure mode's program
    (`train:<generation program key>`) gives its corrective demos (failed probe episodes relabelled by the
    expert from their `start_step` on) and its staged potential, bound to each of its generated scenes; the
    round's `corrective_r<R>` program lists further episodes to relabel from the start. Scenes without an
    accepted mode potential carry the canonical stage plan's Φ. The policy is fine-tuned from the previous
    checkpoint on every demo collected so far (SFT included, so earlier skills are rehearsed); the chunk critic
    learns from targets shaped with weight `shaping_weight` (0 = the sparse task reward alone).

    Expert labels are budgeted: corrective episodes and expert demos together are at most
    `engine.demo_budget` per round, corrective ones first, so a strategy with corrective data labels no more
    than one without (with `corrective_weight` 0 none are labelled). Behaviour-cloning batches draw from
    three sources with the engine's data weights:
    `replay` (the SFT demos of round 0), `expert` (demos in generated scenes, every round so far) and
    `corrective` (relabelled failures, every round so far).

    When the round trains the chunk critic (`engine.improvement = "awr"` or `engine.value_guided_samples > 0`),
    the round's probe rollouts are replayed into the data as unlabelled episodes: the critic learns from the
    policy's own successes and failures, behaviour cloning never imitates them, and no label is spent.
    """
    from coda.memory import Checkpoint, TrainingProgram
    from coda.memory.artifacts import sha256_file

    ckpt = ctx.path("checkpoints", f"round_{r:03d}.pt")
    final = ctx.run_dir / "demos" / f"round_{r:03d}"
    if not ctx.pending(r, "train"):
        return ckpt
    programs = {t.key: t.body for t in ctx.memory.list("training_program", run_id=ctx.run_id, round_idx=r)}
    mode_tp = {b["generation_program"]: b for k, b in programs.items() if k.startswith("train:")}
    by_id = {p.episode_id: p for p in probes}
    corrective = [(by_id[int(c["episode_id"])], int(c["start_step"]), b) for b in mode_tp.values() for c in b["corrective"]]
    corrective += [(by_id[i], 0, None) for i in programs.get(f"corrective_r{r}", {}).get("episodes", [])]
    labels = ctx.cfg.engine.demo_budget
    corrective = corrective[:labels] if ctx.cfg.engine.corrective_weight > 0 else []
    n_expert = min(len(generated.scenes), labels - len(corrective))
    accepted = _accepted_potentials(ctx, r)
    value_guided = ctx.cfg.engine.value_guided_samples
    critic = bool(value_guided) or ctx.cfg.engine.improvement == "awr"  # a chunk critic is trained this round
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    jobs = _round_jobs(ctx, generated, mode_tp, n_expert, corrective, probes if critic else [])
    n_demo = _write_round_demos(ctx, jobs, accepted, tmp, final)
    import torch

    from coda.engine.training import finetune, source_weights

    torch.manual_seed(ctx.seed_for("train", r))  # a fresh critic head starts the same on a resumed run
    weights = source_weights(ctx.cfg)
    result, bc_samples, shares = finetune(prev_checkpoint, demo_dirs, final, ctx.cfg, ckpt,
                                          shaping_weight=shaping_weight, progress=True,
                                          metrics_path=ctx.path("metrics", f"train_round_{r:03d}.jsonl"))
    bc_shares = {k: round(v, 4) for k, v in shares.items()}  # each source's share of the BC batches
    digest, _ = sha256_file(ckpt)
    with ctx.commit(r, "train") as tx:
        tx.add(TrainingProgram(key=f"round_{r}", body={
            "kind": "round_training", "demos": ctx.rel(final), "expert_demos": n_demo, "corrective": len(corrective),
            "rollouts": len(probes) if critic else 0, "mode_programs": sorted(f"train:{k}" for k in mode_tp), "shaping_weight": shaping_weight,
            "steps": result.steps, "datasets": [ctx.rel(d) for d in demo_dirs] + [ctx.rel(final)],
            "source_weights": weights, "bc_samples": bc_samples, "bc_shares": bc_shares,
            "weights": {k: b["weights"] for k, b in sorted(mode_tp.items())}, "awr": awr_summary(result.history)}))
        tx.add(Checkpoint(path=ctx.rel(ckpt), sha256=digest,
                          metrics={"final_loss": float(result.metrics.get("loss", float("nan"))),
                                   "samples_per_s": result.samples_per_s}))
    return ckpt


def _round_jobs(ctx: RunContext, generated: GeneratedScenes, mode_tp: Mapping[str, dict[str, Any]], n_expert: int,
                corrective: Sequence[tuple[ProbeEpisode, int, dict[str, Any] | None]],
                rollouts: Sequence[ProbeEpisode]) -> list[Any]:
    """The round's episode jobs in order: expert demos in the first `n_expert` generated scenes (with their mode's
    training program), corrective relabellings from their start steps, then `rollouts` replayed unlabelled."""
    from coda.engine.backend import EpisodeJob

    jobs = [EpisodeJob("expert", spec, mode_tp.get(key))
            for spec, key in list(zip(generated.scenes, generated.program_keys))[:n_expert]]
    jobs += [EpisodeJob("corrective", p.spec, body, p.actions, start, label_every=ctx.cfg.policy.n_action_steps,
                        label_len=ctx.cfg.policy.chunk_len) for p, start, body in corrective]
    if rollouts:  # the critic learns from the policy's own outcomes too; no labels are spent
        jobs += [EpisodeJob("replay", p.spec, None, p.actions) for p in rollouts]
    return jobs


def _write_round_demos(ctx: RunContext, jobs: Sequence[Any], accepted: set[str], tmp: Path, final: Path) -> int:
    """Run the jobs and write their episodes to `tmp`, then move it to `final`; returns the expert demos made."""
    from coda.policy.data import DemoWriter

    episodes = ctx.backend.round_episodes(jobs, accepted)  # in job order, Φ attached; None where the expert failed
    n_demo = sum(ep is not None for job, ep in zip(jobs, episodes) if job.kind == "expert")
    with DemoWriter(tmp) as writer:
        for ep in episodes:
            if ep is not None:
                writer.add(ep)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return n_demo


def awr_summary(history: Sequence[dict[str, float]]) -> dict[str, float] | None:
    """Mean share of samples at the AWR weight clip and mean effective sample size over a training run's
    logged steps (None when the run did not weight by advantages)."""
    lines = [h for h in history if "awr_ess" in h]
    if not lines:
        return None
    return {k: float(np.mean([h[k] for h in lines])) for k in ("awr_clip_frac", "awr_ess")}


def _accepted_potentials(ctx: RunContext, r: int) -> set[str]:
    """Failure modes (keys) whose latest Potential record up to round r was accepted."""
    keys = {m.id: m.key for m in ctx.memory.list("failure_mode", run_id=ctx.run_id)}
    latest: dict[str, bool] = {}
    for p in ctx.memory.list("potential", run_id=ctx.run_id):
        if p.round <= r:
            latest[keys[p.failure_mode_id]] = p.accepted
    return {k for k, ok in latest.items() if ok}


def held_apart_scenes(program: dict[str, Any], seed: int, n: int, backend: Any) -> list[ScenarioSpec]:
    """Up to `n` valid scenes of a stored scene program run with another `seed`, so never trained on. Scenes
    the program cannot build or `backend` refuses (`valid_scenes`) are skipped; at most 3 n + 5 are tried."""
    from coda.engine.backend import valid_scenes
    from coda.scene.programs import ProgramError, load_program, make_scene

    held_apart = load_program(program).model_copy(update={"seed": seed})
    tries = 3 * n + 5

    def candidates() -> Any:
        for i in range(tries):
            try:
                yield make_scene(held_apart, i)
            except ProgramError:
                continue

    return valid_scenes(backend, candidates(), n, tries).valid


# ---- measure ------------------------------------------------------------------------------------------

def phase_measure(ctx: RunContext, r: int, prev_checkpoint: Path, checkpoint: Path,
                  splits: dict[str, dict[str, list[ScenarioSpec]]]) -> dict[str, dict[str, float]]:
    """Success of the new policy on every evaluation split, and learning progress per failure mode: the
    previous and the new policy on held-apart probe scenes of each mode program of this round (same program,
    another seed), stored as LearningProgress records with the mode's share of the budget."""

    def progress_records() -> list[Any]:
        from coda.memory import LearningProgress as ProgressRecord

        k = ctx.cfg.engine.mode_probes
        budget = ctx.cfg.engine.generation_budget
        measured = []  # (program, its held-apart probes); every mode is rolled out in one batch per checkpoint
        for prog in ctx.memory.list("generation_program", run_id=ctx.run_id, round_idx=r):
            if not prog.body.get("mode_program") or prog.failure_mode_id is None:
                continue
            probes = ctx.backend.held_apart(prog.body, ctx.seed_for("held_apart", r, prog.key), k)
            if probes:
                measured.append((prog, probes))
        if not measured:
            return []
        flat = [s for _, probes in measured for s in probes]
        before, after = (evaluate_checkpoint(c, flat, ctx.cfg.sim, workers=ctx.cfg.runtime.workers,
                                             batch=ctx.cfg.runtime.rollout_batch, executor=ctx.executor,
                                             record_states=False)
                         for c in (prev_checkpoint, checkpoint))
        rows, i = [], 0
        for prog, probes in measured:
            j = i + len(probes)
            rows.append(ProgressRecord(failure_mode_id=prog.failure_mode_id,
                                       before=float(np.mean([x.success for x in before[i:j]])),
                                       after=float(np.mean([x.success for x in after[i:j]])),
                                       budget_share=int(prog.body["count"]) / budget))
            i = j
        return rows

    return phase_measure_splits(ctx, r, checkpoint, splits, extra_records=progress_records)


__all__ = ["FILL_KEY", "GeneratedScenes", "ProbeEpisode", "diagnose_safely", "explore_probes",
           "held_apart_scenes", "phase_compile", "phase_diagnose", "phase_evaluate", "phase_generate", "phase_measure",
           "phase_train_round", "phase_verify", "replay_states", "rescore_probes", "run_round"]
