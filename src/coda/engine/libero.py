"""LIBERO as a backend of the round loop (`coda.engine.backend.RoundBackend`).

A run with `sim.backend = "libero"` and `scene.families = [base suites]` (e.g. `libero_spatial`,
`libero_object`) goes through the same phases as a tabletop run:

- **round 0** — the SFT training scenes are every task of each family with placements sampled from its
  BDDL regions (`init_state=None`, seeded), never an official initial state. The evaluation splits are the
  official protocol's scenes: `sft` the base suite, `position` its `_swap`, `instruction` its `_lan` and
  `task` its `_task` LIBERO-PRO variant, on the first official initial states of every task (round robin
  over tasks). PRO suites are only evaluated: no generation source reads them.
- **probes and generation** — generation bodies of kind `libero` (`libero_stream`): seeded BDDL edits
  (`coda.sim.libero.operators`) of base-suite tasks, either random single edits (exploration, the fill
  source) or a failure mode's own edits on its tasks. Validity is `coda.sim.libero.validity`: it loads,
  settles, and the scripted expert solves it.
- **critic and verifier** — the critic layer's for LIBERO (`coda.critic.base.make_critic` with
  `backend="libero"`, `make_verifier`): `coda.critic.libero.LiberoPrivilegedCritic` (unless another critic is
  configured) and `coda.critic.libero_verify.LiberoVerifier`: counterfactuals undo a blamed BDDL edit in the
  failed scene, and transplant it into solved base scenes.
- **CoDA's planner** (`plan_libero_modes`) — verified diagnoses group into failure modes keyed by the
  failure mode and the verified factors' roles (`missed_grasp|position:target`; the target and another
  object verified together are `position:swap`, as `swap_regions` makes them); the budget is split by
  learning progress (`coda.engine.progress.allocate_budget`); each mode's program applies the edit of its
  factors to the tasks it failed on (level 0) and then to every task of those suites (level 1).
- **Text2potential** — each mode's training program carries the staged potential its verified diagnoses'
  stage plans compile to, over roles (`coda.engine.libero_potentials`), and a Potential record is stored for
  it; a mode not diagnosed this round keeps its last one. Demos in a mode's scenes carry Φ of that potential
  when it was accepted (the diagnosis's plan passed the verifier's potential check), every other scene Φ of
  its goal's canonical stage program.
- **training** — expert demos in the generated scenes and corrective labels of failed probes, both from
  the scripted expert acting in 5-D targets.
- **baselines** — every one plans as on the tabletop, with this backend's scenes and edits: `dr` random
  scenes of the `libero` kind, `dagger` those and relabelled failed probes, `replay` one random BDDL edit
  around each failed probe (`edit_body`), `plr` replays scored probe scenes from its level buffer, `accel` edits
  the highest-scoring ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.critic.libero import libero_potential
from coda.engine.backend import RoundBackend
from coda.sim.libero.scenario import LiberoScenario, base_suite
from coda.sim.libero.targets import LiberoRoundEnv, RelabellingExpert

if TYPE_CHECKING:
    from coda.config import CodaConfig
    from coda.engine.context import RunContext

# Single edits a probe or an exploration scene makes (operator, arguments).
EXPLORE_EDITS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("shift_region", {"object": "target"}),
    ("widen_region", {"object": "target"}),
    ("swap_regions", {"a": "target", "b": "other"}),
    ("paraphrase", {}),
    ("change_task", {}),
)
# The edit that reproduces a verified factor, by factor token (kind and role).
FACTOR_EDITS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "position:target": (("shift_region", {"object": "target"}),),
    "position:other": (("swap_regions", {"a": "target", "b": "other"}),),
    "position:swap": (("swap_regions", {"a": "target", "b": "other"}),),
    "instruction": (("paraphrase", {}),),
    "task": (("change_task", {}),),
}
MAX_TRIES = 20  # consecutive edits a stream may fail to apply before it ends


# ---- generation --------------------------------------------------------------------------------------


def libero_stream(body: dict[str, Any]) -> Iterator[LiberoScenario]:
    """Candidate scenes of a `libero` generation body.

    Body fields: `tasks` ([[suite, task_id], ...], default: every task of `families`), `edits`
    ([[operator, args], ...] applied in order; absent: `n_edits` random edits from `EXPLORE_EDITS`),
    `seed`. Each scene starts from a task's official BDDL with placements sampled from its regions, or, with
    `parents` (scenario dicts), from those scenes in turn (`replay`'s edits around failed probes); an edit
    that does not fit skips to the next draw, and `MAX_TRIES` failures in a row end the stream.
    """
    from coda.sim.libero import suites as S
    from coda.sim.libero.errors import LiberoError
    from coda.sim.libero.operators import derive

    rng = np.random.default_rng(int(body.get("seed", 0)))
    tasks = [(str(s), int(t)) for s, t in body.get("tasks") or
             [(f, t) for f in body.get("families", ()) for t in range(len(S.list_tasks(f)))]]
    fixed = [(str(op), dict(args)) for op, args in body["edits"]] if body.get("edits") else None
    n_edits = int(body.get("n_edits", 1))
    parents = [LiberoScenario.from_dict(d) for d in body.get("parents") or []]
    failed = drawn = 0
    while failed < MAX_TRIES:
        if parents:
            base, drawn = parents[drawn % len(parents)], drawn + 1
        else:
            suite, task = tasks[int(rng.integers(len(tasks)))]
            base = LiberoScenario(suite, task, init_state=None, seed=int(rng.integers(2**31)))
        ops = fixed or [EXPLORE_EDITS[int(i)] for i in rng.choice(len(EXPLORE_EDITS), size=n_edits, replace=False)]
        try:
            spec = derive(rng, base, [(op, dict(args)) for op, args in ops])
        except LiberoError:  # the edit does not fit this task (e.g. its object sits in a region without ranges)
            failed += 1
            continue
        failed = 0
        yield spec


def _demo_part(job: tuple[dict[str, Any], list[dict[str, Any]]]) -> tuple[list[Any], list[str]]:
    """One worker's share of `LiberoBackend.collect_demos`: its scenes' solved expert demos (with Φ) and the
    ids of those the expert failed."""
    import shutil
    import tempfile
    from pathlib import Path

    from coda.policy.data import DemoDataset, collect_demos
    from coda.sim.config import SimConfig

    sim, scenes = job
    env = LiberoRoundEnv(SimConfig.model_validate(sim))
    part = Path(tempfile.mkdtemp(prefix="coda-libero-demos-"))
    try:
        def phi(spec: Any, states: Sequence[Any]) -> np.ndarray:
            return np.asarray(libero_potential(states[0], spec).phis(states), np.float32)

        report = collect_demos(env, [LiberoScenario.from_dict(s) for s in scenes], lambda _s: RelabellingExpert(env),
                               part / "demos", progress=False, potential_fn=phi)
        return list(DemoDataset(part / "demos").episodes()), list(report.failed_specs)
    finally:
        env.close()
        shutil.rmtree(part, ignore_errors=True)


# ---- the backend ---------------------------------------------------------------------------------------


class LiberoBackend(RoundBackend):
    """LIBERO / LIBERO-PRO behind the round loop (see the module docstring)."""

    measure_keyframes = 0  # the privileged critic reads states; camera frames cost 60-90 ms each on llvmpipe
    verify_base_split = "train"  # counterfactual base scenes: training scenes, never evaluation ones

    def __init__(self, cfg: "CodaConfig", executor: Any = None) -> None:
        from coda.sim.libero.errors import LiberoError
        from coda.sim.libero.scenario import BASE_SUITES

        bad = [f for f in cfg.scene.families if f not in BASE_SUITES]
        if bad:
            raise LiberoError(f"scene.families = {list(cfg.scene.families)}: {bad} are not LIBERO base suites; "
                              f"with sim.backend = 'libero' use some of {list(BASE_SUITES)}")
        super().__init__(cfg, executor)
        self._check_env: Any = None

    def check_in(self, env: Any, spec: Any) -> tuple[bool, str, Any]:
        """A scene's validity (it loads, settles, and the expert solves it), checked in a worker's round env,
        or in the driver's one check env (kept: a LIBERO env takes seconds to make)."""
        if env is None:
            if self._check_env is None:
                self._check_env = self.sim.target_env(self.cfg.sim)
            env = self._check_env
        return self.sim.check(spec, env)

    def policy_success(self, checkpoint: Any, env: Any) -> Any:
        """The verifier's question, asked one rollout at a time: a LIBERO env holds a whole robosuite scene,
        and a verifier's trial is a handful of scenes."""
        from coda.engine.backend import PolicySuccess

        return PolicySuccess(checkpoint, env)

    def close(self) -> None:
        """Stop the worker processes and close the check env."""
        super().close()
        if self._check_env is not None:
            self._check_env.close()
            self._check_env = None

    def explore_body(self, families: Sequence[str], count: int, n_edits: int, seed: int) -> dict[str, Any]:
        return {"kind": "libero", "families": list(families), "n_edits": min(int(n_edits), 1), "count": count,
                "seed": seed}

    def edit_body(self, parents: Sequence[Any], n_edits: int, seed: int, count: int) -> dict[str, Any]:
        """Random BDDL edits (`EXPLORE_EDITS`, one per scene) around each of `parents` in turn."""
        return {"kind": "libero", "parents": [p.to_dict() for p in parents], "n_edits": min(int(n_edits), 1),
                "seed": seed, "count": count}

    def held_apart(self, body: dict[str, Any], seed: int, n: int) -> list[Any]:
        from coda.engine.backend import valid_scenes

        return valid_scenes(self, libero_stream({**body, "seed": seed}), n, 3 * n + 5).valid

    def collect_demos(self, specs: Sequence[Any], out_dir: Any) -> Any:
        """Expert demos with their Φ, by task across the backend's workers (each its share of the tasks, in
        one env), written in `specs` order."""
        from pathlib import Path

        from coda.policy.data import CollectReport, DemoWriter

        workers = max(1, min(self.workers, len(specs)))
        order = sorted(range(len(specs)), key=lambda i: (specs[i].suite, specs[i].task_id, i))
        parts = [[specs[i] for i in order[k::workers]] for k in range(workers)]  # tasks spread over workers
        jobs = [(self.cfg.sim.model_dump(mode="json"), [s.to_dict() for s in part]) for part in parts]
        results = list(self.executor.map(_demo_part, jobs)) if workers > 1 else [_demo_part(jobs[0])]
        episodes = {ep.spec_id: ep for eps, _ in results for ep in eps}
        report = CollectReport(path=Path(out_dir), attempted=len(specs), succeeded=0, written=0, steps=0,
                               failed_specs=[f for _, failed in results for f in failed])
        with DemoWriter(out_dir) as writer:
            for spec in specs:
                ep = episodes.get(spec.spec_id)
                if ep is not None:
                    writer.add(ep)
                    report.succeeded += 1
                    report.written += 1
                    report.steps += ep.length
        return report

    def phis(self, env: Any, spec: Any, states: Sequence[Any], program: dict[str, Any] | None = None,
             accepted: set[str] = frozenset()) -> list[float]:
        """Φ along `states`: the accepted potential of `program`'s failure mode bound to the scene
        (`coda.engine.libero_potentials.mode_phis`), else the canonical stage program of the scene's goal
        (`coda.critic.libero.libero_potential`)."""
        from coda.engine.libero_potentials import mode_phis

        phis = mode_phis(program, accepted, spec, states)
        return phis if phis is not None else [float(x) for x in libero_potential(states[0], spec).phis(states)]

    def planner(self, strategy: str, default: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """CoDA's failure-mode planner is LIBERO's own (`plan_libero_modes`); every baseline plans as on the
        tabletop, its scenes and edits coming from this backend (`explore_body`, `edit_body`)."""
        if strategy in ("coda", "coda-sparse"):
            return plan_libero_modes
        return default


# ---- CoDA's planner on LIBERO --------------------------------------------------------------------------


def factor_token(factor: Any, spec: LiberoScenario) -> str | None:
    """The role of a verified factor: `position:target`, `position:other`, `instruction`, `task`."""
    from coda.sim.libero import suites as S

    if factor.kind == "position":
        goal = S.bddl_goal(spec.bddl_text())
        target = str(goal[0][1]) if goal and len(goal[0]) >= 2 else None
        return "position:target" if factor.entity == target else "position:other"
    if factor.kind in ("instruction", "task"):
        return str(factor.kind)
    return None


def mode_shares(active: dict[str, list[Any]], budget: int, cfg: Any, rng: np.random.Generator) -> dict[str, int]:
    """The budget split over modes by learning progress (`allocate_budget`, at most `engine.max_modes` of
    them when set); with more of them than `1 / engine.exploration_floor`, each is guaranteed an equal share
    of the modes' part instead."""
    from coda.engine.progress import allocate_budget

    unsolved = sum(1 for v in active.values() if not (v and v[-1].after >= cfg.solved_threshold))
    if cfg.max_modes:
        unsolved = min(unsolved, cfg.max_modes)
    floor = min(cfg.exploration_floor, 1.0 / unsolved) if unsolved else cfg.exploration_floor
    return allocate_budget(active, budget, floor, cfg.explore_share, cfg.solved_threshold, rng, max_modes=cfg.max_modes)


def mode_key_of(failure_mode: str, tokens: Iterable[str]) -> str:
    """A LIBERO failure mode's key: the failure mode and its factors' roles, e.g. `missed_grasp|position:swap`."""
    return f"{failure_mode}|{'+'.join(sorted(set(tokens)))}"


def plan_libero_modes(ev: Any) -> Any:
    """CoDA's plan of one round on LIBERO (see the module docstring)."""
    from coda.engine.libero_potentials import mode_potential
    from coda.engine.strategies import Plan

    ctx: RunContext = ev.ctx
    r, budget, cfg, mem = ev.round, ev.budget, ctx.cfg.engine, ctx.memory
    probes = {p.episode_id: p for p in ev.probes}
    members, descriptions = _libero_modes(ev, probes)
    records = {m.key: m for m in mem.list("failure_mode", run_id=ctx.run_id)}
    last: dict[str, dict[str, Any]] = {}
    for rec in mem.list("generation_program", run_id=ctx.run_id):
        if rec.body.get("mode_program"):
            last[rec.body["mode"]] = rec.body
    carried = _last_potentials(ctx)
    active = _mode_history(ctx, records, {*members, *last})
    rng = np.random.default_rng(ev.seed)
    shares = mode_shares(active, budget, cfg, rng)
    embed = _embedder(ctx)
    plan = Plan(sources=[], modes={k: {"description": descriptions[k], "embedding": embed(descriptions[k])}
                                   for k in members if k not in records})
    explore = shares.pop("explore", 0)
    corrective_left = ctx.cfg.engine.demo_budget // 4
    env: Any = None
    try:
        for key, count in sorted(shares.items()):
            if count <= 0:
                continue
            _, _, token_text = key.partition("|")
            edits = [e for t in token_text.split("+") for e in FACTOR_EDITS.get(t, ())]
            if not edits:
                explore += count
                continue
            prev = last.get(key)
            seen = {(probes[e].spec.suite, probes[e].spec.task_id) for e in members.get(key, [])}
            level, tasks = _mode_tasks(seen, prev)
            prog_key = f"mode{len(plan.sources)}_r{r}"
            plan.sources.append((prog_key, {
                "kind": "libero", "tasks": [list(t) for t in tasks], "edits": [[op, args] for op, args in edits],
                "seed": ctx.seed_for("program", r, key), "count": count, "mode": key,
                "mode_description": descriptions.get(key) or (records[key].description if key in records else key),
                "mode_program": {"level": level, "parent": (prev or {}).get("program_key"), "rediagnose": False},
                "program_key": prog_key}))
            potential_fields, potential = mode_potential(
                members.get(key, []), ev.diagnoses, ev.verdicts, {e: probes[e].spec for e in members.get(key, [])})
            if potential is not None:
                plan.potentials.append({"mode": key, **potential})
            elif not members.get(key) and key in carried:  # not diagnosed this round: its last potential
                potential_fields = carried[key]
            chosen = members.get(key, [])[:corrective_left]
            corrective_left -= len(chosen)
            if chosen and env is None:
                env = ctx.backend.make_env()
            plan.training.append((f"train:{prog_key}", {
                "kind": "mode_training", "mode": key, "generation_program": prog_key, "expert_demos": count,
                "corrective": [_corrective_demo(ctx, env, probes[eid]) for eid in chosen],
                **potential_fields,
                "weights": {"expert": cfg.expert_weight, "corrective": cfg.corrective_weight,
                            "replay": cfg.replay_weight}}))
    finally:
        if env is not None:
            env.close()
    if explore:
        plan.sources.append(("explore", ev.dr_body(explore, n_edits=1)))
    return plan


def _libero_modes(ev: Any, probes: dict[int, Any]) -> tuple[dict[str, list[int]], dict[str, str]]:
    """The round's accepted diagnoses grouped by mode key (episode ids per key) and each mode's description."""
    from coda.critic.diagnosis import Diagnosis

    members: dict[str, list[int]] = {}
    descriptions: dict[str, str] = {}
    for eid in sorted(ev.verdicts):
        d, v = ev.diagnoses.get(eid), ev.verdicts[eid]
        if not isinstance(d, Diagnosis) or not v.accepted:
            continue
        tokens = {t for f in v.verified_factors if (t := factor_token(f, probes[eid].spec)) is not None}
        if {"position:target", "position:other"} <= tokens:  # the target traded places with another object
            tokens = (tokens - {"position:target", "position:other"}) | {"position:swap"}
        if not tokens:
            continue
        key = mode_key_of(d.failure_mode, tokens)
        members.setdefault(key, []).append(eid)
        descriptions.setdefault(key, f"{d.failure_mode} when {', '.join(sorted(set(tokens)))} changes: {d.explanation}"[:400])
    return members, descriptions


def _mode_history(ctx: "RunContext", records: dict[str, Any], keys: set[str]) -> dict[str, list[Any]]:
    """Learning progress of each mode in `keys` over the run's rounds so far, in round order."""
    from coda.engine.progress import LearningProgress

    key_of = {m.id: m.key for m in records.values()}
    history: dict[str, list[LearningProgress]] = {k: [] for k in keys}
    for lp in ctx.memory.list("progress", run_id=ctx.run_id):
        k = key_of[lp.failure_mode_id]
        if k in history:
            history[k].append(LearningProgress(mode=k, round=lp.round, before=lp.before, after=lp.after, n=1))
    return {k: sorted(v, key=lambda lp: lp.round) for k, v in history.items()}


def _last_potentials(ctx: "RunContext") -> dict[str, dict[str, Any]]:
    """Each mode's potential fields of its latest training program that has one, marked as carried over."""
    out: dict[str, dict[str, Any]] = {}
    for t in sorted(ctx.memory.list("training_program", run_id=ctx.run_id), key=lambda t: t.round):
        b = t.body
        if b.get("kind") == "mode_training" and b.get("potential") is not None:
            out[b["mode"]] = {**{k: b[k] for k in ("potential", "potential_template", "potential_plan",
                                                   "potential_episode", "plans_compiled")},
                              "potential_votes": 0, "potential_reason": f"carried over from round {t.round}"}
    return out


def _mode_tasks(seen: set[tuple[str, int]], prev: dict[str, Any] | None) -> tuple[int, list[tuple[str, int]]]:
    """A mode program's level and (suite, task) pairs: at level 0 the tasks its failures were seen on (and its
    previous program's), from level 1 on every task of those suites."""
    level = 0 if prev is None else min(1, int(prev["mode_program"]["level"]) + 1)
    tasks = sorted(seen | {tuple(t) for t in (prev or {}).get("tasks", [])})  # type: ignore[misc]
    if level >= 1:  # the mode's edits on every task of its suites
        from coda.sim.libero import suites as S

        suites = sorted({s for s, _ in tasks})
        tasks = [(s, t) for s in suites for t in range(len(S.list_tasks(s)))]
    return level, tasks


def _corrective_demo(ctx: "RunContext", env: Any, probe: Any) -> dict[str, Any]:
    """A failed probe episode to relabel, from the step where Φ of its scene last rose."""
    from coda.engine.compile import corrective_start
    from coda.engine.round import replay_states

    phi = ctx.backend.phis(env, probe.spec, replay_states(env, probe.spec, probe.actions))
    return {"episode_id": probe.episode_id, "start_step": corrective_start(phi)}


def _embedder(ctx: "RunContext") -> Callable[[str], list[float]]:
    from coda.policy.text import text_encoder_for

    enc = text_encoder_for(ctx.cfg.policy.text_model)

    def embed(text: str) -> list[float]:
        v = np.asarray(enc.encode([text]), np.float32).reshape(-1)
        return [float(x) for x in v / max(float(np.linalg.norm(v)), 1e-9)]

    return embed


__all__ = ["EXPLORE_EDITS", "FACTOR_EDITS", "LiberoBackend",
           "base_suite", "factor_token", "mode_shares", "libero_stream", "plan_libero_modes"]
