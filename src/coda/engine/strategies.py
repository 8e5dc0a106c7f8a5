"""Strategies: how a round spends its generation budget. Everything else in a round is shared.

| strategy      | probes                   | critic + verify | generation budget goes to                              | shaping |
| ------------- | ------------------------ | --------------- | ------------------------------------------------------ | ------- |
| `coda`        | explore + mode probes    | yes             | compiled programs per verified failure mode, by LP     | Φ       |
| `coda-sparse` | explore + mode probes    | yes             | the same                                               | none    |
| `replay`      | explore                  | no              | random mutations around failed probe scenes            | none    |
| `accel`       | explore                  | no              | mutations of the highest-scoring scenes in a PLR buffer | none    |
| `plr`         | explore                  | no              | replay of buffer scenes by score and staleness         | none    |
| `dr`          | explore                  | no              | uniform domain randomisation over all operators        | none    |
| `sft`         | –                        | –               | no rounds                                              | –       |

Every generation source is stored as a GenerationProgram record whose body alone re-creates its candidate
stream (`candidate_stream`), so a resumed run regenerates exactly the same scenes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.engine.context import RunContext
from coda.engine.round import (
    ProbeEpisode,
    phase_diagnose,
    phase_evaluate,
    phase_generate,
    phase_measure,
    phase_train_round,
    phase_verify,
)
from coda.errors import CodaError
from coda.registry import Registry
from coda.scene.spec import ScenarioSpec


class StrategyError(CodaError):
    """A strategy was misconfigured or asked for something it cannot do."""


@dataclass(frozen=True)
class Strategy:
    name: str
    uses_critic: bool  # diagnose + verify failed probes
    shaped: bool  # chunk critic learns from potential-shaped targets
    generation: str  # how the budget is spent: "modes", "replay", "accel", "plr", "dr"


STRATEGIES: Registry[Strategy] = Registry("strategy")
for _s in (Strategy("coda", True, True, "modes"), Strategy("coda-sparse", True, False, "modes"),
           Strategy("replay", False, False, "replay"), Strategy("accel", False, False, "accel"),
           Strategy("plr", False, False, "plr"), Strategy("dr", False, False, "dr"),
           Strategy("sft", False, False, "none")):
    STRATEGIES.register(_s.name, _s)


def make_strategy(ctx: RunContext) -> Strategy:
    """The configured strategy. Raises RegistryError listing the available ones."""
    return STRATEGIES.get(ctx.cfg.engine.strategy)


# ---- candidate streams (a program body → scenes) -----------------------------------------------------

def candidate_stream(body: dict[str, Any]) -> Iterator[ScenarioSpec]:
    """The (endless or finite) stream of candidate scenes a stored generation body describes."""
    from coda.engine.mutate import dr_scene, mutate

    kind = body["kind"]
    rng = np.random.default_rng(body.get("seed", 0))
    if kind == "dr":
        families = body["families"]
        while True:
            yield dr_scene(rng, families[int(rng.integers(len(families)))], int(body["n_edits"]))
    elif kind == "mutate":
        parents = [ScenarioSpec.from_dict(p) for p in body["parents"]]
        i = 0
        while True:
            try:
                yield mutate(rng, parents[i % len(parents)], int(body["n_edits"]))
            except CodaError:  # an edit that does not fit this parent; the next parent is tried
                pass
            i += 1
    elif kind == "replay":
        yield from (ScenarioSpec.from_dict(p) for p in body["scenes"])
    elif kind == "program":
        from coda.scene.programs import iter_program, load_program

        yield from iter_program(load_program(body["program"]))
    else:
        raise StrategyError(f"generation body kind {kind!r} is unknown (dr, mutate, replay, program)")


def explore_probes(ctx: RunContext, r: int, n: int) -> list[ScenarioSpec]:
    """Single-factor variations of training-distribution scenes: one random edit each, so a failure has one
    candidate cause the critic and the counterfactual check can find."""
    body = {"kind": "dr", "families": list(ctx.families), "n_edits": 1, "seed": ctx.seed_for("probe", r)}
    stream = candidate_stream(body)
    return [next(stream) for _ in range(n)]


# ---- the round -----------------------------------------------------------------------------------------

def run_round(ctx: RunContext, r: int, strategy: Strategy, checkpoint: Path,
              splits: dict[str, dict[str, list[ScenarioSpec]]], demo_dirs: Sequence[Path]
              ) -> tuple[Path, Path, dict[str, dict[str, float]]]:
    """One round: evaluate → diagnose → verify → compile → generate → train → measure.

    Returns:
        (new checkpoint, this round's demo directory, success per family and split).
    """
    from coda.sim.tabletop.env import TabletopEnv

    cfg = ctx.cfg
    probes = phase_evaluate(ctx, r, checkpoint, explore_probes(ctx, r, cfg.engine.probe_scenes))
    verdicts: dict[int, Any] = {}
    diagnoses: dict[int, Any] = {}
    if strategy.uses_critic:
        from coda.critic.base import make_critic

        env = TabletopEnv(config=cfg.sim)
        try:
            diagnoses = phase_diagnose(ctx, r, probes, make_critic(cfg.critic), env, cfg.engine.max_diagnoses)
            base = [s for f in ctx.families for s in splits[f].get("sft", [])]
            verdicts = phase_verify(ctx, r, probes, diagnoses, checkpoint, env, base)
        finally:
            env.close()
    sources, corrective = phase_compile(ctx, r, strategy, probes, diagnoses, verdicts)
    generated = phase_generate(ctx, r, sources)
    potentials = scene_potentials([*generated.scenes, *(p.spec for p in corrective)])
    new_ckpt = phase_train_round(ctx, r, checkpoint, generated.scenes, corrective, potentials, demo_dirs,
                                 shaping_weight=cfg.shaping.weight if strategy.shaped else 0.0)
    table = phase_measure(ctx, r, checkpoint, new_ckpt, splits)
    return new_ckpt, ctx.run_dir / "demos" / f"round_{r:03d}", table


def scene_potentials(specs: Sequence[ScenarioSpec]) -> dict[str, Any]:
    """Text2potential on each scene's canonical stage plan: spec_id -> StagedPotential."""
    from coda.shaping.text2potential import canonical_plan, compile_plan

    return {s.spec_id: compile_plan(canonical_plan(s), s) for s in specs}


# ---- compile ------------------------------------------------------------------------------------------

def phase_compile(ctx: RunContext, r: int, strategy: Strategy, probes: Sequence[ProbeEpisode],
                  diagnoses: dict[int, Any], verdicts: dict[int, Any]
                  ) -> tuple[list[tuple[str, Any, int]], list[ProbeEpisode]]:
    """Turn this round's evidence into generation sources (key, stream, count) and corrective episodes.

    The sources' bodies are stored as GenerationProgram records (with the failure mode and parent), the
    corrective episodes as a TrainingProgram; on resume both are read back.
    """
    from coda.memory import GenerationProgram, TrainingProgram

    mem = ctx.memory
    budget = ctx.cfg.engine.generation_budget
    if not mem.phase_done(ctx.run_id, r, "compile"):
        bodies, corrective_ids = _plan(ctx, r, strategy, probes, diagnoses, verdicts, budget)
        assert sum(b["count"] for _, b in bodies) == budget, "sources must spend exactly the budget"
        from coda.memory import FailureMode

        known = {m.key: m.id for m in mem.list("failure_mode", run_id=ctx.run_id)}
        prog_ids = {p.body["mode_program"]["key"]: p.id for p in mem.list("generation_program", run_id=ctx.run_id)
                    if p.body.get("mode_program")}
        with mem.phase(ctx.run_id, r, "compile") as tx:
            for key, body in bodies:
                mode = body.get("mode")
                if mode is not None and mode not in known:
                    known[mode] = tx.add(FailureMode(key=mode, description=body["mode_description"] or mode,
                                                     embedding=body["mode_embedding"], last_round=r)).id
                parent = (body.get("mode_program") or {}).get("parent")
                tx.add(GenerationProgram(key=key, body=body, failure_mode_id=known.get(mode) if mode else None,
                                         parent_id=prog_ids.get(parent) if parent else None))
            tx.add(TrainingProgram(key=f"corrective_r{r}", body={"kind": "corrective", "episodes": corrective_ids}))
    sources = [(p.key, candidate_stream(p.body), int(p.body["count"]))
               for p in mem.list("generation_program", run_id=ctx.run_id, round_idx=r)]
    tp = next(t for t in mem.list("training_program", run_id=ctx.run_id, round_idx=r)
              if t.key == f"corrective_r{r}")
    by_id = {p.episode_id: p for p in probes}
    return sources, [by_id[i] for i in tp.body["episodes"]]


def _plan(ctx: RunContext, r: int, strategy: Strategy, probes: Sequence[ProbeEpisode],
          diagnoses: dict[int, Any], verdicts: dict[int, Any], budget: int
          ) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
    seed = ctx.seed_for("generate", r)
    dr = {"kind": "dr", "families": list(ctx.families), "n_edits": 2, "seed": seed}
    failed = [p for p in probes if not p.success]
    if strategy.generation == "dr":
        return [("dr", {**dr, "count": budget})], []
    if strategy.generation == "replay":
        if not failed:
            return [("dr", {**dr, "count": budget})], []
        parents = [p.spec.model_dump(mode="json") for p in failed]
        return [("replay", {"kind": "mutate", "parents": parents, "n_edits": 1, "seed": seed, "count": budget})], []
    if strategy.generation in ("plr", "accel"):
        return _plan_ued(ctx, r, strategy, budget, seed, dr), []
    if strategy.generation == "modes":
        return _plan_modes(ctx, r, probes, diagnoses, verdicts, budget, seed, dr)
    raise StrategyError(f"strategy '{strategy.name}' runs no rounds")


def _plan_ued(ctx: RunContext, r: int, strategy: Strategy, budget: int, seed: int,
              dr: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """PLR / ACCEL over a level buffer rebuilt from every probe so far (scores: failure = regret proxy)."""
    from coda.engine.ued import ACCELSampler, LevelBuffer, PLRSampler

    sampler = PLRSampler(capacity=max(4 * budget, 16))
    buf = LevelBuffer.empty(sampler.capacity)
    for rr in range(1, r + 1):
        eps = [e for e in ctx.memory.list("episode", run_id=ctx.run_id, round_idx=rr) if e.phase == "evaluate"]
        specs = [ScenarioSpec.from_dict(ctx.memory.get("scenario", e.scenario_id).spec) for e in eps]
        buf = sampler.insert(buf, specs, np.array([0.0 if e.success else 1.0 for e in eps]))
    rng = np.random.default_rng(seed)
    if strategy.generation == "plr":
        n_replay = sum(sampler.decide(buf, rng) == "replay" for _ in range(budget))
        buf, idx = sampler.sample_replay(buf, rng, n_replay) if n_replay else (buf, np.zeros(0, int))
        out = []
        if n_replay:
            out.append(("plr_replay", {"kind": "replay", "count": n_replay,
                                       "scenes": [buf.scenes[i].model_dump(mode="json") for i in idx]}))
        if budget - n_replay:
            out.append(("plr_new", {**dr, "count": budget - n_replay}))
        return out
    parents = ACCELSampler(capacity=sampler.capacity).select_parents(buf, rng, max(1, budget // 4))
    return [("accel", {"kind": "mutate", "n_edits": 1, "seed": seed, "count": budget,
                       "parents": [buf.scenes[i].model_dump(mode="json") for i in parents]})]


def _plan_modes(ctx: RunContext, r: int, probes: Sequence[ProbeEpisode], diagnoses: dict[int, Any],
                verdicts: dict[int, Any], budget: int, seed: int, dr: dict[str, Any]
                ) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
    """CoDA: verified diagnoses → failure modes → programs; the budget follows learning progress.

    A mode seen before gets a child of its last program (harder when solved, easier when stuck); a new
    mode gets a level-0 program around exactly its verified factors. A mode whose factors cannot be
    compiled gives its share to exploration.
    """
    from coda.critic.diagnosis import Diagnosis
    from coda.engine.compile import CompileError, ModeProgram, child_program, compile_generation_program
    from coda.engine.modes import Mode, cluster
    from coda.engine.progress import LearningProgress, allocate_budget, mode_status
    from coda.policy.text import text_encoder_for

    cfg, mem = ctx.cfg.engine, ctx.memory
    pairs = [(e, diagnoses[e], verdicts[e]) for e in sorted(verdicts) if isinstance(diagnoses.get(e), Diagnosis)]
    records = {m.key: m for m in mem.list("failure_mode", run_id=ctx.run_id)}
    existing = [Mode.from_record(m) for m in records.values()]
    scenes = {str(p.episode_id): p.spec for p in probes}
    assign = cluster([d for _, d, _ in pairs], [v for _, _, v in pairs], existing, text_encoder_for("minilm"),
                     scenes=scenes, threshold=cfg.mode_merge_threshold)
    modes = {**{m.key: m for m in existing}, **assign.modes}
    examples: dict[str, list[ScenarioSpec]] = {}
    for (eid, _, _), key in zip(pairs, assign.mode_of):
        if key is not None:
            examples.setdefault(key, []).append(scenes[str(eid)])
    history: dict[str, list[LearningProgress]] = {k: [] for k in modes}
    last_program: dict[str, Any] = {}
    for rec in mem.list("generation_program", run_id=ctx.run_id):
        if rec.body.get("mode_program"):
            last_program[rec.body["mode"]] = ModeProgram.from_body(rec.body["mode_program"])
    key_of = {m.id: m.key for m in records.values()}
    for lp in mem.list("progress", run_id=ctx.run_id):
        history[key_of[lp.failure_mode_id]].append(
            LearningProgress(mode=key_of[lp.failure_mode_id], round=lp.round, before=lp.before, after=lp.after, n=1))
    # Modes neither seen this round nor ever compiled have nothing to generate from.
    active = {k: sorted(v, key=lambda lp: lp.round) for k, v in history.items() if k in examples or k in last_program}
    rng = np.random.default_rng(seed)
    shares = allocate_budget(active, budget, cfg.exploration_floor, cfg.explore_share, cfg.solved_threshold, rng)
    bodies: list[tuple[str, dict[str, Any]]] = []
    explore = shares.pop("explore", 0)
    for key, count in sorted(shares.items()):
        if count <= 0:
            continue
        try:
            if key in last_program:
                status = mode_status(active[key], solved_threshold=cfg.solved_threshold,
                                     stuck_rounds=cfg.stuck_rounds, min_progress=cfg.min_progress)
                mp = child_program(last_program[key], status, seed=ctx.seed_for("program", r, key),
                                   budget=count, max_level=cfg.max_level)
            else:
                family = examples[key][0].family
                mp = compile_generation_program(modes[key], examples[key], family, ctx.seed_for("program", r, key),
                                                count, level=0, reason=f"new failure mode in round {r}")
        except CompileError:
            explore += count  # the budget is not lost: it probes new variations instead
            continue
        bodies.append((f"mode{len(bodies)}_r{r}", {"kind": "program", "program": mp.program.model_dump(mode="json"),
                                                  "mode_program": mp.body(), "mode": key, "count": count,
                                                  "mode_description": modes[key].description,
                                                  "mode_embedding": modes[key].record_fields()["embedding"]}))
    if explore:
        bodies.append(("explore", {**dr, "count": explore}))
    accepted = [e for e, _, v in pairs if v.accepted]
    n_corr = min(len(accepted), ctx.cfg.engine.demo_budget // 4)
    return bodies, accepted[:n_corr]
