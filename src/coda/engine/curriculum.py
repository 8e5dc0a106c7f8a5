"""CoDA's planner: verified diagnoses → failure modes → generation and training programs, by learning progress.

One planner for every simulator backend; what depends on what a scene is comes from the backend: the mode
tokens of verified factors (`SimBackend.mode_tokens`), a mode's generation body at a level
(`SimBackend.mode_program`), a stage plan over its roles (`RoundBackend.plan_template`, `entity_roles`) and Φ
of a plan along an episode (`RoundBackend.plan_phis`).

1. The round's accepted verdicts are clustered into failure modes (`coda.engine.modes.cluster`, with the run's
   sentence embedder `policy.text_model` and the backend's mode tokens).
2. The budget is split over the active modes by learning progress (`coda.engine.progress.mode_shares`);
   solved modes retire, the `explore` share probes new random variations; with `engine.max_modes`, only
   that many modes get scenes in a round (never-measured ones first, then by |progress|).
3. Each mode with a share gets a generation program: at level 0 around exactly its verified factors when
   new, else the next of its lineage (`coda.engine.compile.next_level`: wider when solved, narrower when
   stuck, the same level when progressing, up to the backend's and `engine.max_level`). A mode whose
   factors cannot be compiled gives its share to exploration; the `explore` source's body lists those
   modes, their counts and the reason (`uncompiled`).
4. Each such mode also gets a training program (`compile_training_program`): expert demos in its generated
   scenes, corrective demos from its failed episodes starting a few steps before Φ of the diagnosis's plan
   last rose (`corrective_start`), its staged potential (the role template most of its plans compile to, or
   the mode's last one when none does this round) and the data weights. A freshly compiled potential is
   stored as a Potential record, accepted when the verdict of the diagnosis it came from passed the
   potential check.
5. A program stuck at level 0 is flagged `rediagnose`: the next round probes held-apart scenes of it first
   (`rediagnosis_probes`), so their failures are diagnosed again and may reveal another cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from coda.engine.context import RunContext
from coda.engine.strategies import Evidence, Plan, corrective_budget
from coda.scene.spec import ScenarioSpec


def plan_modes(ev: Evidence) -> Plan:
    """The CoDA plan of one round (see the module docstring)."""
    from coda.critic.diagnosis import Diagnosis
    from coda.engine.compile import CompileError, next_level
    from coda.engine.modes import Mode, cluster
    from coda.engine.progress import LearningProgress, mode_shares, mode_status
    from coda.policy.text import text_encoder_for

    ctx, r, budget = ev.ctx, ev.round, ev.budget
    cfg, mem, backend = ctx.cfg.engine, ctx.memory, ctx.backend
    pairs = [(e, ev.diagnoses[e], ev.verdicts[e]) for e in sorted(ev.verdicts) if isinstance(ev.diagnoses.get(e), Diagnosis)]
    records = {m.key: m for m in mem.list("failure_mode", run_id=ctx.run_id)}
    existing = [Mode.from_record(m) for m in records.values()]
    scenes = {str(p.episode_id): p.spec for p in ev.probes}
    assign = cluster([d for _, d, _ in pairs], [v for _, _, v in pairs], existing,
                     text_encoder_for(ctx.cfg.policy.text_model), vocabulary=backend.sim, scenes=scenes,
                     threshold=cfg.mode_merge_threshold)
    modes = {**{m.key: m for m in existing}, **assign.modes}
    members: dict[str, list[int]] = {}  # mode key -> indices into pairs
    for i, key in enumerate(assign.mode_of):
        if key is not None:
            members.setdefault(key, []).append(i)
    history: dict[str, list[LearningProgress]] = {k: [] for k in modes}
    last_program: dict[str, dict[str, Any]] = {}  # mode key -> body of its last generation program
    for rec in mem.list("generation_program", run_id=ctx.run_id):
        if rec.body.get("mode_program"):
            last_program[rec.body["mode"]] = rec.body
    key_of = {m.id: m.key for m in records.values()}
    for lp in mem.list("progress", run_id=ctx.run_id):
        key = key_of[lp.failure_mode_id]
        history[key].append(LearningProgress(mode=key, round=lp.round, before=lp.before, after=lp.after, n=1))
    # Modes neither seen this round nor ever compiled have nothing to generate from.
    active = {k: sorted(v, key=lambda lp: lp.round) for k, v in history.items() if k in members or k in last_program}
    shares = mode_shares(active, budget, cfg, np.random.default_rng(ev.seed))
    plan = Plan(sources=[], modes={k: {"description": modes[k].description,
                                       "embedding": modes[k].record_fields()["embedding"]} for k in members})
    explore = shares.pop("explore", 0)
    uncompiled: list[dict[str, Any]] = []  # modes whose program could not be made: their share explores
    corrective_left = corrective_budget(ctx)
    max_level = min(cfg.max_level, backend.sim.max_level)
    training = _TrainingCompiler(ctx, ev, pairs)
    try:
        for key, count in sorted(shares.items()):
            if count <= 0:
                continue
            prog_key = f"mode{len(plan.sources)}_r{r}"
            parent = last_program.get(key)
            try:
                if parent is not None:
                    status = mode_status(active[key], solved_threshold=cfg.solved_threshold,
                                         stuck_rounds=cfg.stuck_rounds, min_progress=cfg.min_progress)
                    level, why, flag = next_level(int(parent["mode_program"]["level"]), status, max_level)
                else:
                    level, why, flag = 0, f"new failure mode in round {r}", False
                examples = [scenes[str(pairs[i][0])] for i in members.get(key, [])]
                body = backend.sim.mode_program(key, examples, level=level, parent=parent, seed=ctx.seed_for("program", r, key),
                                                count=count, name=prog_key, reason=why, rediagnose=flag)
            except CompileError as e:
                explore += count  # the budget is not lost: it probes new variations instead
                uncompiled.append({"mode": key, "count": count, "error": str(e).splitlines()[0][:300]})
                continue
            plan.sources.append((prog_key, {**body, "mode": key, "count": count, "mode_description": modes[key].description}))
            chosen = members.get(key, [])[:corrective_left]
            corrective_left -= len(chosen)
            body, potential = training.compile(key, chosen, prog_key, count)
            plan.training.append((f"train:{prog_key}", body))
            if potential is not None:
                plan.potentials.append(potential)
    finally:
        training.close()
    if explore:
        body = ev.dr_body(explore)
        if uncompiled:
            body["uncompiled"] = uncompiled  # stored with the source: which modes' shares it took, and why
        plan.sources.append(("explore", body))
    return plan


class _TrainingCompiler:
    """Training programs of the round's modes; replays failed episodes to find where correction starts."""

    def __init__(self, ctx: RunContext, ev: Evidence, pairs: Sequence[tuple[int, Any, Any]]) -> None:
        self.ctx, self.ev, self.pairs = ctx, ev, pairs
        self.probes = {p.episode_id: p for p in ev.probes}
        self._env: Any = None

    def close(self) -> None:
        if self._env is not None:
            self._env.close()

    def _phis(self, eid: int, plan_text: str) -> list[float]:
        """Φ of the diagnosis' stage plan (the canonical plan if it does not compile) along the failed episode."""
        from coda.engine.round import replay_states

        p = self.probes[eid]
        if self._env is None:
            self._env = self.ctx.backend.make_env()
        return self.ctx.backend.plan_phis(self._env, p.spec, plan_text, replay_states(self._env, p.spec, p.actions))

    def compile(self, mode: str, chosen: list[int], program_key: str, count: int
                ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(TrainingProgramBody JSON, Potential fields or None) of one mode."""
        from coda.engine.compile import CompileError, DataWeights, compile_training_program, corrective_start

        cfg = self.ctx.cfg.engine
        weights = DataWeights(expert=cfg.expert_weight, corrective=cfg.corrective_weight, replay=cfg.replay_weight)
        diags = [self.pairs[i][1] for i in chosen]
        verdict_of = {str(self.pairs[i][0]): self.pairs[i][2] for i in chosen}
        starts = {str(self.pairs[i][0]): corrective_start(self._phis(self.pairs[i][0], self.pairs[i][1].stage_plan))
                  for i in chosen}
        try:
            body = compile_training_program(mode, diags, program_key, scenes={str(p): s.spec for p, s in self.probes.items()},
                                            expert_demos=count, weights=weights, start_steps=starts,
                                            template_of=self.ctx.backend.plan_template)
        except CompileError:  # diagnoses that cannot be used (no episode): demos and the mode's last potential
            body = compile_training_program(mode, (), program_key, scenes={}, expert_demos=count, weights=weights,
                                            template_of=self.ctx.backend.plan_template)
        if body.get("potential") is None:
            return self._carry_potential(mode, body), None
        v = verdict_of.get(str(body["potential_episode"]))
        check = next((c for c in (v.checks if v is not None else ()) if c.name == "potential"), None)
        accepted = check is not None and check.status == "passed"
        reason = None if accepted else (check.reason if check is not None else "the potential check did not run")
        return body, {"mode": mode, "stage_program": body["potential"], "accepted": accepted, "reason": reason}

    def _carry_potential(self, mode: str, body: dict[str, Any]) -> dict[str, Any]:
        """A mode not diagnosed this round keeps the staged potential of its last training program."""
        ctx = self.ctx
        last = [t for t in ctx.memory.list("training_program", run_id=ctx.run_id)
                if t.body.get("mode") == mode and t.body.get("potential") is not None]
        if not last:
            return body
        prev = last[-1].body
        return {**body, **{k: prev[k] for k in ("potential", "potential_template", "potential_plan", "potential_episode")},
                "potential_votes": 0, "potential_reason": f"carried over from round {last[-1].round}"}


def rediagnosis_probes(ctx: RunContext, r: int, n: int) -> list[ScenarioSpec]:
    """Up to `n` valid held-apart scenes of the programs of round r − 1 flagged `rediagnose` (stuck at level 0),
    shared evenly, to be probed (and their failures diagnosed) first in round r."""
    flagged = [p for p in ctx.memory.list("generation_program", run_id=ctx.run_id, round_idx=r - 1)
               if (p.body.get("mode_program") or {}).get("rediagnose")] if r > 1 else []
    out: list[ScenarioSpec] = []
    for k, prog in enumerate(flagged):
        want = (n - len(out)) // (len(flagged) - k)  # an even share of what is left
        out += ctx.backend.held_apart(prog.body, ctx.seed_for("rediagnose", r, prog.key), want)
    return out


def program_ids(programs: Sequence[Any]) -> dict[str, int]:
    """Stored generation programs' ids by each name a `mode_program.parent` gives: the record key (LIBERO's
    planner) or the scene program's own name (a compiled mode program, `family/mode/tokens@L0s...`)."""
    ids = {p.key: p.id for p in programs}
    for p in programs:
        name = (p.body.get("program") or {}).get("name")
        if name:
            ids.setdefault(name, p.id)
    return ids


__all__ = ["plan_modes", "program_ids", "rediagnosis_probes"]
