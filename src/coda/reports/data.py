"""What `report.html` shows, read from a run's memory alone: typed tables, nothing rendered yet.

`load_report_data(memory, run_id)` reads every record of the run in one snapshot (so a report built while a
run is still writing is consistent) and derives the tables the report draws:

- success of the policy per family, evaluation split and round (episodes of phase "measure", info.kind "eval");
- success on the round's probe scenes (phase "evaluate");
- critic diagnoses per round and failure-mode class, split by what verification decided;
- failure modes (clustered, verified), their learning progress and budget share per round;
- the generation budget per round and source (failure-mode program, exploration, baseline source);
- generation programs with their lineage (parent → child, level) and the scenes each made, valid or not;
- diagnosed probe failures with their keyframes, diagnosis and verdict.

Malformed stored JSON (a diagnosis or verdict from an older schema) is shown as such, never raised.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

GENERATED_PREFIX = "generated:"


@dataclass(frozen=True)
class Rate:
    """Successes out of episodes, with a 95% Wilson score interval."""

    k: int
    n: int

    @property
    def rate(self) -> float:
        """k / n (NaN when there are no episodes)."""
        return self.k / self.n if self.n else math.nan

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """The Wilson score interval of the rate (NaN, NaN when there are no episodes)."""
        if not self.n:
            return math.nan, math.nan
        p, n = self.k / self.n, self.n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class FailureModeRow:
    """A clustered failure mode and its learning progress per round."""

    id: int
    key: str
    description: str
    first_round: int
    last_round: int
    progress: dict[int, tuple[float, float, float]]  # round -> (before, after, budget share)


@dataclass(frozen=True)
class ProgramRow:
    """A generation program, its lineage and the scenes it made."""

    id: int
    round: int
    key: str  # the record's key, unique within the round
    kind: str  # body kind: program, dr, mutate, replay
    count: int  # scenes budgeted
    mode: str | None  # failure-mode key it was compiled for
    level: int | None  # variation width of a mode program
    program_key: str | None  # the mode program's own key (what children name as parent)
    parent_id: int | None
    reason: str
    valid: int = 0
    invalid: int = 0


@dataclass(frozen=True)
class SceneRow:
    """A scene made by a generation program (valid or not)."""

    id: int
    round: int
    program_key: str
    family: str
    instruction: str
    spec: dict[str, Any]
    valid: bool
    invalid_reason: str | None


@dataclass(frozen=True)
class FailureCard:
    """A failed probe episode with its keyframes, the critic's diagnosis and the verifier's verdict."""

    episode_id: int
    round: int
    family: str
    instruction: str
    keyframes: list[tuple[str, dict[str, Any]]]  # (name, artifact reference) in step order
    critic: str
    accepted_by_critic: bool  # the answer parsed as a Diagnosis
    diagnosis: dict[str, Any]  # Diagnosis or DiagnosisRejected as JSON ({} if none stored)
    reject_reason: str | None  # why the critic's answer was rejected
    verdict: dict[str, Any] | None  # Verdict as JSON, None when not verified
    verdict_passed: bool | None
    verdict_reason: str | None
    mode_key: str | None = None  # failure-mode key of a verified diagnosis (failure mode + verified factors)


@dataclass(frozen=True)
class EvalFailure:
    """A failed evaluation episode with keyframes (no diagnosis: evaluation splits are not diagnosed)."""

    episode_id: int
    round: int
    family: str
    split: str
    instruction: str
    keyframes: list[tuple[str, dict[str, Any]]]


@dataclass
class ReportData:
    """Everything the report shows, derived from one snapshot of the run's records."""

    run_id: str
    strategy: str
    seed: int
    status: str
    created: str
    config: dict[str, Any]
    counts: dict[str, int]
    rounds: list[int]  # rounds with at least one committed phase
    phases: dict[int, list[str]]  # round -> committed phases in commit order
    success: dict[str, dict[str, dict[int, Rate]]]  # family -> split -> round -> Rate
    probe_success: dict[int, Rate]  # round -> probe success
    diagnosis_counts: dict[int, dict[str, dict[str, int]]]  # round -> critic mode -> outcome -> count
    mode_counts: dict[str, dict[int, int]]  # failure-mode key -> round -> verified diagnoses with that key
    failure_modes: list[FailureModeRow]
    budget: dict[int, dict[str, int]]  # round -> source label -> scenes budgeted
    programs: list[ProgramRow]
    generated: list[SceneRow]
    cards: list[FailureCard]
    eval_failures: list[EvalFailure]
    checkpoints: list[tuple[int, str, dict[str, Any]]]  # (round, path, metrics)
    training_programs: list[tuple[int, str, dict[str, Any]]]  # (round, key, body)
    notes: list[str] = field(default_factory=list)  # things the report could not read, in words

    @property
    def families(self) -> list[str]:
        """Families with evaluation episodes, else the configured ones."""
        return sorted(self.success) or list(self.config.get("scene", {}).get("families", []))

    def program_by_id(self) -> dict[int, ProgramRow]:
        """Programs by record id."""
        return {p.id: p for p in self.programs}


# Outcomes of a diagnosis, in the order the report stacks them.
DIAGNOSIS_OUTCOMES = ("verified", "rejected by verifier", "not verified", "malformed answer")


@dataclass(frozen=True)
class SplitChange:
    """Success on one evaluation split at the first and the last measured round, per family and pooled."""

    split: str
    first: Rate  # all families pooled
    last: Rate
    per_family: dict[str, tuple[Rate, Rate]]

    @property
    def outside(self) -> int:
        """+1 (-1) when the last round's interval lies wholly above (below) the first's, else 0."""
        (a_lo, a_hi), (b_lo, b_hi) = self.first.interval(), self.last.interval()
        return 1 if b_lo > a_hi else (-1 if b_hi < a_lo else 0)


def success_change(data: "ReportData") -> tuple[int, int, list[SplitChange]]:
    """(first round, last round, one SplitChange per split in report order) over the rounds with evaluation
    episodes; (0, 0, []) when nothing was measured."""
    rounds = sorted({r for sp in data.success.values() for rs in sp.values() for r in rs})
    if not rounds:
        return 0, 0, []
    first, last = rounds[0], rounds[-1]
    splits = sorted({s for sp in data.success.values() for s in sp}, key=split_order)
    out = []
    for split in splits:
        per: dict[str, tuple[Rate, Rate]] = {}
        for family in sorted(data.success):
            rs = data.success[family].get(split, {})
            per[family] = (rs.get(first, Rate(0, 0)), rs.get(last, Rate(0, 0)))
        pooled = [Rate(sum(v[i].k for v in per.values()), sum(v[i].n for v in per.values())) for i in (0, 1)]
        out.append(SplitChange(split, pooled[0], pooled[1], per))
    return first, last, out


def split_order(split: str) -> tuple[int, str]:
    """Sort key: sft first, then the OOD splits alphabetically."""
    return (split != "sft", split)


def program_label(p: ProgramRow) -> str:
    """A program's source label in budget tables: its failure mode, else its kind/key."""
    return p.mode if p.mode else p.key


def load_report_data(memory: Any, run_id: str, *, max_eval_failures: int = 4) -> ReportData:
    """Read a run's records from memory and derive the report's tables.

    Args:
        memory: a `coda.memory.Memory` (read-only is enough).
        run_id: the run's name.
        max_eval_failures: failed evaluation episodes with keyframes kept per round.

    Returns:
        ReportData.

    Raises:
        RecordNotFoundError: no run named `run_id` in that memory.
    """
    with memory.snapshot() as v:
        run = v.get_run(run_id)
        rec = {k: v.list(k, run_id) for k in ("scenario", "episode", "diagnosis", "verdict", "failure_mode",
                                              "generation_program", "training_program", "progress",
                                              "checkpoint")}
        counts = v.counts(run_id)
        phases = v.completed_phases(run_id)
    notes: list[str] = []
    scenarios = {s.id: s for s in rec["scenario"]}
    by_round: dict[int, list[str]] = {}
    for r, ph in phases:
        by_round.setdefault(r, []).append(ph)
    success, probe, eval_failures = _episode_tables(rec["episode"], scenarios, max_eval_failures)
    diag_counts, mode_counts, cards = _diagnosis_tables(rec, scenarios, notes, _sim_of(run.config or {}, notes))
    progs, generated, budget = _program_tables(rec["generation_program"], rec["scenario"])
    fm_progress: dict[int, dict[int, tuple[float, float, float]]] = {}
    for lp in rec["progress"]:
        fm_progress.setdefault(lp.failure_mode_id, {})[lp.round] = (lp.before, lp.after, lp.budget_share)
    modes = [FailureModeRow(m.id, m.key, m.description, m.round, m.last_round, fm_progress.get(m.id, {}))
             for m in sorted(rec["failure_mode"], key=lambda m: (m.round, m.id))]

    return ReportData(
        run_id=run.id, strategy=run.strategy, seed=run.seed, status=run.status,
        created=run.created.isoformat(timespec="seconds") if run.created else "", config=run.config or {},
        counts=counts, rounds=sorted(by_round), phases=by_round,
        success={f: {s: {r: Rate(*c) for r, c in sorted(rs.items())} for s, rs in sp.items()}
                 for f, sp in success.items()},
        probe_success={r: Rate(*c) for r, c in sorted(probe.items())},
        diagnosis_counts=diag_counts, mode_counts=mode_counts, failure_modes=modes, budget=budget, programs=progs, generated=generated,
        cards=cards, eval_failures=eval_failures,
        checkpoints=[(c.round, c.path, dict(c.metrics or {})) for c in sorted(rec["checkpoint"], key=lambda c: c.id)],
        training_programs=[(t.round, t.key, dict(t.body or {}))
                           for t in sorted(rec["training_program"], key=lambda t: (t.round, t.id))],
        notes=notes,
    )


def _episode_tables(episodes: Sequence[Any], scenarios: dict[int, Any], max_eval_failures: int) -> tuple[
        dict[str, dict[str, dict[int, list[int]]]], dict[int, list[int]], list[EvalFailure]]:
    """Evaluation success counts (family -> split -> round -> [successes, episodes]), probe success counts
    (round -> [successes, episodes]) and the failed evaluation episodes with keyframes kept per round."""
    success: dict[str, dict[str, dict[int, list[int]]]] = {}
    probe: dict[int, list[int]] = {}
    failed_evals: dict[int, dict[str, list[EvalFailure]]] = {}  # round -> split -> failures with keyframes
    for e in sorted(episodes, key=lambda e: e.id):
        kind = e.info.get("kind")
        if e.phase == "measure" and kind == "eval" and e.policy == "policy":
            family = str(e.info.get("family", scenarios[e.scenario_id].family if e.scenario_id in scenarios else "?"))
            split = str(e.info.get("split", "?"))
            c = success.setdefault(family, {}).setdefault(split, {}).setdefault(e.round, [0, 0])
            c[0] += int(e.success)
            c[1] += 1
            frames = _keyframes(e.artifacts)
            if not e.success and frames:
                failed_evals.setdefault(e.round, {}).setdefault(split, []).append(
                    EvalFailure(e.id, e.round, family, split, _instruction(scenarios, e.scenario_id), frames))
        elif e.phase == "evaluate" and kind == "probe":
            c = probe.setdefault(e.round, [0, 0])
            c[0] += int(e.success)
            c[1] += 1
    eval_failures = [f for r in sorted(failed_evals)
                     for f in round_robin([failed_evals[r][k] for k in sorted(failed_evals[r], key=split_order)],
                                          max_eval_failures)]
    return success, probe, eval_failures


def _sim_of(config: dict[str, Any], notes: list[str]) -> Any:
    """The run's simulator backend (its mode tokens key the verified diagnoses), None when not installed."""
    from coda.errors import CodaError
    from coda.sim.backends import sim_backend

    name = (config.get("sim") or {}).get("backend") or None
    try:
        return sim_backend(name)
    except (CodaError, KeyError, ImportError) as e:
        notes.append(f"sim backend {name!r} is not available here ({str(e)[:120]}): diagnoses are not keyed by mode")
        return None


def _diagnosis_tables(rec: dict[str, list[Any]], scenarios: dict[int, Any], notes: list[str], sim: Any) -> tuple[
        dict[int, dict[str, dict[str, int]]], dict[str, dict[int, int]], list[FailureCard]]:
    """Diagnosis counts (round -> failure mode -> outcome -> n), verified diagnoses per mode key and round, and
    a card per diagnosis; a diagnosis whose episode is missing is counted and noted in `notes`, without a card."""
    verdict_of = {vd.diagnosis_id: vd for vd in rec["verdict"]}
    episodes = {e.id: e for e in rec["episode"]}
    diag_counts: dict[int, dict[str, dict[str, int]]] = {}
    mode_counts: dict[str, dict[int, int]] = {}
    cards: list[FailureCard] = []
    for d in sorted(rec["diagnosis"], key=lambda d: (d.round, d.id)):
        data = d.data if isinstance(d.data, dict) else {}
        vd = verdict_of.get(d.id)
        vjson = vd.checks if vd is not None and isinstance(vd.checks, dict) else None
        mode = str(data.get("failure_mode") or "unparsed") if d.accepted else "unparsed"
        if not d.accepted:
            outcome = "malformed answer"
        elif vd is None:
            outcome = "not verified"
        else:
            outcome = "verified" if vd.passed else "rejected by verifier"
        slot = diag_counts.setdefault(d.round, {}).setdefault(mode, dict.fromkeys(DIAGNOSIS_OUTCOMES, 0))
        slot[outcome] += 1
        ep = episodes.get(d.episode_id)
        if ep is None:
            notes.append(f"diagnosis {d.id} names episode {d.episode_id}, which is not in memory")
            continue
        key = _mode_key(data, vjson, scenarios.get(ep.scenario_id), sim) if vd is not None and vd.passed and sim else None
        if key is not None:
            per_round = mode_counts.setdefault(key, {})
            per_round[d.round] = per_round.get(d.round, 0) + 1
        cards.append(FailureCard(
            mode_key=key, episode_id=ep.id, round=d.round, family=scenarios[ep.scenario_id].family if ep.scenario_id in scenarios
            else str(ep.info.get("family", "?")), instruction=_instruction(scenarios, ep.scenario_id),
            keyframes=_keyframes(ep.artifacts), critic=d.critic, accepted_by_critic=d.accepted, diagnosis=data,
            reject_reason=d.reason, verdict=vjson, verdict_passed=None if vd is None else vd.passed,
            verdict_reason=None if vd is None else vd.reason))
    return diag_counts, mode_counts, cards


def _program_tables(programs: Sequence[Any], scenarios: Sequence[Any]) -> tuple[
        list[ProgramRow], list[SceneRow], dict[int, dict[str, int]]]:
    """Generation programs with the valid and invalid scenes each made, the generated scenes, and the budget
    per round and source label."""
    progs = [_program_row(p) for p in sorted(programs, key=lambda p: (p.round, p.id))]
    made: dict[int, list[int]] = {}
    generated: list[SceneRow] = []
    prog_key = {p.id: p.key for p in progs}
    for s in sorted(scenarios, key=lambda s: (s.round, s.id)):
        if not (s.split or "").startswith(GENERATED_PREFIX):
            continue
        key = str(s.split)[len(GENERATED_PREFIX):]
        generated.append(SceneRow(s.id, s.round, prog_key.get(s.program_id or -1, key), s.family,
                                  str(s.spec.get("instruction", "")), s.spec, s.valid, s.invalid_reason))
        if s.program_id is not None:
            c = made.setdefault(s.program_id, [0, 0])
            c[0 if s.valid else 1] += 1
    progs = [_with_counts(p, made.get(p.id, [0, 0])) for p in progs]
    budget: dict[int, dict[str, int]] = {}
    for p in progs:
        label = program_label(p)
        budget.setdefault(p.round, {})[label] = budget.get(p.round, {}).get(label, 0) + p.count
    return progs, generated, budget


def round_robin(groups: Sequence[Sequence[T]], n: int) -> list[T]:
    """Up to n items taken in turn from each group (first of each, then second of each, ...)."""
    out: list[T] = []
    for i in range(max((len(g) for g in groups), default=0)):
        for g in groups:
            if i < len(g) and len(out) < n:
                out.append(g[i])
    return out


def _mode_key(diagnosis: dict[str, Any], verdict: dict[str, Any] | None, scenario: Any, sim: Any) -> str | None:
    """The mode key the engine files a verified diagnosis under (before merging near-identical explanations),
    from the simulator's mode tokens; None when the stored JSON no longer parses."""
    from pydantic import ValidationError

    from coda.critic.diagnosis import Diagnosis
    from coda.critic.verify import Verdict
    from coda.engine.modes import diagnosis_key
    from coda.errors import CodaError

    try:
        spec = sim.scenario_from_dict(scenario.spec) if scenario is not None else None
        return diagnosis_key(Diagnosis.model_validate(diagnosis), Verdict.model_validate(verdict or {}), spec, sim)
    except (CodaError, ValidationError, ValueError, KeyError, TypeError):
        return None


def _keyframes(artifacts: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """Keyframe references (`keyframe_tNNN`) in step order."""
    return sorted((k, ref) for k, ref in (artifacts or {}).items()
                  if k.startswith("keyframe") and isinstance(ref, dict) and "path" in ref)


def _instruction(scenarios: dict[int, Any], scenario_id: int) -> str:
    s = scenarios.get(scenario_id)
    return str(s.spec.get("instruction", "")) if s is not None else ""


def _program_row(p: Any) -> ProgramRow:
    body = p.body if isinstance(p.body, dict) else {}
    mp = body.get("mode_program") if isinstance(body.get("mode_program"), dict) else {}
    level = mp.get("level")
    return ProgramRow(
        id=p.id, round=p.round, key=p.key, kind=str(body.get("kind", "?")), count=int(body.get("count", 0) or 0),
        mode=body.get("mode"), level=int(level) if isinstance(level, int) else None, program_key=mp.get("key"),
        parent_id=p.parent_id, reason=str(mp.get("reason", "")))


def _with_counts(p: ProgramRow, c: list[int]) -> ProgramRow:
    from dataclasses import replace

    return replace(p, valid=c[0], invalid=c[1])


def lineage(programs: Iterable[ProgramRow]) -> list[list[ProgramRow]]:
    """Program lineages: each chain from a program without a (known) parent to its last descendant.

    A program with several children opens one chain per child, so every program appears in at least one
    chain; chains are ordered by their root's round and id.
    """
    progs = list(programs)
    ids = {p.id for p in progs}
    children: dict[int, list[ProgramRow]] = {}
    for p in progs:
        if p.parent_id is not None and p.parent_id in ids:
            children.setdefault(p.parent_id, []).append(p)
    chains: list[list[ProgramRow]] = []

    def walk(chain: list[ProgramRow]) -> None:
        kids = sorted(children.get(chain[-1].id, []), key=lambda c: (c.round, c.id))
        if not kids:
            chains.append(chain)
        for k in kids:
            if k not in chain:  # a malformed cycle is cut, not followed
                walk([*chain, k])
            else:
                chains.append(chain)

    for root in sorted((p for p in progs if p.parent_id is None or p.parent_id not in ids),
                       key=lambda p: (p.round, p.id)):
        walk([root])
    return chains


__all__ = ["DIAGNOSIS_OUTCOMES", "EvalFailure", "FailureCard", "FailureModeRow", "ProgramRow", "Rate",
           "ReportData", "SceneRow", "lineage", "load_report_data", "program_label", "round_robin", "split_order"]
