"""Critic precision on real policy failures, before and after verification.

A small SFT policy (one action-chunk policy for all families, plain behaviour cloning on expert demos of
each family's `sft` split, seed 0) is rolled out on valid scenes of every OOD split (seed 1). Each failed
episode's state trace is re-created by replaying its actions (`coda.engine.round.replay_states`), and the
critics diagnose it:

- ``privileged`` — the state-trace critic (`coda.critic.privileged`);
- ``noisy`` — the same critic with 30% of its diagnoses corrupted (`coda.critic.noisy`, seeded; its
  `corruptions` log says which ones);
- ``privileged_blind`` — the privileged critic on a copy of the scene with the
  provenance factors removed, so it must name factors from the failure mode alone.

Every diagnosis then goes through `Verifier.check` with all three checks (consistency with the trace's
predicates, single-factor counterfactuals run with the same policy on `sft` base scenes of seed 2, and
the compiled potential along expert demos).

Ground truth, per failed episode
--------------------------------
factor
    Causal: the OOD scene's `provenance.factors` (the single factor its split changed; two tags when a
    layout was swapped) *if that edit caused the failure*, else none. Every OOD scene is its split's paired
    `sft` scene plus one edit (`coda.scene.splits.paired_base`); the edit caused the failure when the same
    policy solves the paired scene. A policy that also fails without the edit fails for a reason no scene
    factor names, and any factor a diagnosis gives for it is wrong. (The tags alone — "provenance" truth,
    also written — count such a failure's split factor as right; the verifier's necessity test makes the
    same kind of intervention, but in the failed scene, with the factor re-sampled from the training
    distribution rather than the exact paired scene.) A diagnosis's factor matches when it names the factor the scene operators would vary: same
    kind (``position:X`` and ``robot_start`` -> position, ``instruction`` (reworded) -> instruction,
    ``task`` (another goal in the same layout) -> task, ``object:X:attr`` -> object_attribute,
    ``distractor``, ``physics:p``), the same entity where the edit targets one (position,
    object_attribute), the same attribute / physical parameter, and the value ``robot_start`` for a moved
    start pose. Which distractor is named, the region a position factor gives, and the target a task
    factor names, are not scored: the counterfactual and generation programs do not depend on them.
mode
    `reference_mode(facts)`: a decision procedure over the simulator's trace facts (`trace_facts`) that
    follows the target's furthest progress — where it rests at the end, else how the grasped target was
    let go, else (never grasped) what the policy did instead. It reads the same trace facts with the same
    thresholds as the privileged critic and coincides with the privileged decision list except in the
    priority of co-occurring events (a tipped object or a bumped entity counts only when the target made
    no progress; a pushed-but-short target is a detour or no progress, not a collision; a drawer that
    moved is not knocked over). The privileged critic's mode precision therefore measures consistency
    between two orderings of the same predicates, not accuracy against an independent label; the
    informative numbers are the noisy critic's before / after and the factor precision. The number of
    episodes on which the two procedures disagree is written to ``meta``.
object
    The goal's target entity (the drawer for drawer goals), plus the entity the reference mode is about
    when that is another one: the grasped or pushed non-target (wrong_object), the objects that tipped
    (knocked_over), the entities the fingers ran into (collision). A diagnosis's object matches when its
    first implicated object is one of them.

The privileged critic reads the scene's provenance factors (see `coda.critic.privileged`), so its factor
precision measures how often its mode filter keeps the ground-truth factor; `privileged_blind` shows the
factor precision without that access.

Scores (per critic)
-------------------
``before`` — precision over all diagnosed failures; ``after`` — precision among diagnoses the verifier
accepted (null when none was); ``correct_rejected_fraction`` — fraction of fully correct diagnoses (mode,
object and factor all match) the verifier rejected. ``provenance_truth`` repeats the three with the
provenance tags as factor truth. Also written: ``n_accepted``, ``n_correct``,
``verified_factor_precision`` (first verified factor of accepted diagnoses), ``rejected_by`` (failed
check counts) and, for ``noisy``, the share of corrupted diagnoses rejected, per corruption kind.

Writes `bench/results/critic.json` (or `--out`):

    {critic: {"n", "before": {mode_precision, object_precision, factor_precision}, "after": {...},
              "correct_rejected_fraction", ...},
     "meta": {sizes, seeds, failures per family and split, timings, machine}}

The policy (demos and checkpoint) is cached under `bench/.cache/critic/<key>/` (git-ignored); the key
hashes the families, demo count, policy config and split version, so `--fast` and the default share it.

Usage:
    python bench/critic.py            # 7 scenes per family and OOD split (~120 failures), k = 4
    python bench/critic.py --fast     # a few minutes once the policy is cached: 1 scene per split, k = 2
    python bench/critic.py --critics privileged noisy --dump episodes.jsonl   # every diagnosis and verdict
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from coda.critic.diagnosis import CriticResult, Diagnosis, SceneFactor  # noqa: E402
from coda.critic.privileged import DETOUR_PATH, IMPRECISE_DIST, MIN_GRASP_STEPS  # noqa: E402
from coda.critic.trace import MOVED, TraceFacts  # noqa: E402
from coda.scene.spec import FAMILIES, ScenarioSpec  # noqa: E402

OUT = Path(__file__).parent / "results" / "critic.json"
CACHE = Path(__file__).parent / ".cache" / "critic"
TRAIN_SEED, EVAL_SEED, BASE_SEED = 0, 1, 2  # demos, OOD rollouts, counterfactual base scenes
NOISE, NOISE_SEED, VERIFY_SEED = 0.3, 0, 0
CRITIC_NAMES = ("privileged", "noisy", "privileged_blind")
DRAWER_MOVED = 0.05  # a drawer whose opening fraction spanned less than this did not move
FIELDS = ("mode", "object", "factor")


@dataclass(frozen=True)
class Sizes:
    """How much the bench does."""

    demos_per_family: int = 50  # sft scenes (seed 0) the scripted expert demonstrates, per family
    train_steps: int = 1500  # behaviour-cloning steps of the policy
    scenes_per_split: int = 7  # OOD scenes (seed 1) per family and split the policy is rolled out on
    base_per_family: int = 12  # sft scenes (seed 2) offered to the counterfactual check, per family
    counterfactual_k: int = 4  # solved base scenes per counterfactual trial


FULL = Sizes()
FAST = Sizes(scenes_per_split=1, base_per_family=6, counterfactual_k=2)


# ---- ground truth (pure) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TrueFactor:
    """A ground-truth scene factor: what the scene operators varied."""

    kind: str  # SceneFactor kind: position, instruction, task, object_attribute, distractor, physics
    entity: str | None = None  # the entity the edit targets (position, object_attribute)
    key: str | None = None  # attribute (object_attribute), parameter (physics), "robot_start" (position)


@dataclass(frozen=True)
class Truth:
    """Ground truth of one failed episode."""

    mode: str
    objects: frozenset[str]
    factors: tuple[TrueFactor, ...]  # causal: the split's factors when its edit caused the failure, else ()
    tagged: tuple[TrueFactor, ...] = ()  # the scene's provenance factors
    causal: bool | None = None  # the policy solves the paired sft scene (None: not measured)


def true_factors(tags: Sequence[str]) -> tuple[TrueFactor, ...]:
    """The ground-truth factors of a scene from its provenance tags (unknown tags are skipped)."""
    out: list[TrueFactor] = []
    for tag in tags:
        head, *rest = tag.split(":")
        if head == "position" and len(rest) == 1:
            out.append(TrueFactor("position", rest[0]))
        elif head == "robot_start":
            out.append(TrueFactor("position", None, "robot_start"))
        elif head in ("instruction", "task"):
            out.append(TrueFactor(head))
        elif head == "object" and len(rest) == 2:
            out.append(TrueFactor("object_attribute", rest[0], _attr(rest[1])))
        elif head == "distractor":
            out.append(TrueFactor("distractor"))
        elif head == "physics" and len(rest) == 1:
            out.append(TrueFactor("physics", None, rest[0]))
    return tuple(dict.fromkeys(out))


def _attr(word: str) -> str:
    w = word.strip().lower()
    return "color" if w == "colour" else w


def factor_matches(f: SceneFactor, t: TrueFactor) -> bool:
    """Whether a diagnosed factor names the ground-truth factor (see the module docstring)."""
    if f.kind != t.kind:
        return False
    if t.key == "robot_start":
        return f.value == "robot_start"
    if t.entity is not None and f.entity != t.entity:
        return False
    name = f.value.partition("=")[0]
    if t.kind == "object_attribute":
        return _attr(name) == t.key
    if t.kind == "physics":
        return name.strip().lower().removesuffix("_scale") == t.key
    return True


def reference_mode(f: TraceFacts) -> str:
    """The ground-truth failure mode of a failed episode, from its trace facts (module docstring)."""
    if f.drawer is not None:
        a, b, lo, hi = f.drawer_fractions or (0.0, 0.0, 0.0, 0.0)
        still = hi - lo < DRAWER_MOVED
        if still and f.grasped.get(f.drawer, 0) == 0 and f.drawer in f.closed_near:
            return "missed_grasp"
        if still and f.tilted:
            return "knocked_over"
        return "drawer_not_operated"
    t, dest = f.target, f.destination
    assert t is not None and dest is not None
    if f.rests_in is not None and f.rests_in != dest:
        return "wrong_target"
    wandered = "detour" if f.gripper_path >= DETOUR_PATH else "no_progress"
    if f.grasped.get(t, 0) >= 1 and f.spec.goal[0].name in ("in", "on"):
        if f.releases:
            r = f.releases[-1]
            if not r.commanded and not r.over_destination:
                return "slip_during_transport"
            return "imprecise_placement" if r.over_destination or r.dist <= IMPRECISE_DIST else "premature_release"
        return "imprecise_placement" if f.max_stage >= len(f.stage_kinds) - 1 else wandered
    if f.spec.goal[0].name == "at_region" and f.moved.get(t, 0.0) >= MOVED:
        return "imprecise_placement" if (f.end_dist or 1.0) <= IMPRECISE_DIST else wandered
    if wrong_objects(f):
        return "wrong_object"
    if t in f.closed_near:
        return "missed_grasp"
    if f.tilted:
        return "knocked_over"
    if f.touched - {t, dest}:
        return "collision"
    return wandered


def wrong_objects(f: TraceFacts) -> list[str]:
    """Non-target objects the policy grasped on purpose (push goals: pushed), most handled first."""
    t, dest = f.target, f.destination
    names = {o.name for o in f.spec.objects}
    held = sorted((n for n, c in f.grasped.items() if n in names and n not in (t, dest) and c >= MIN_GRASP_STEPS),
                  key=lambda n: -f.grasped[n])
    if held or f.spec.goal[0].name != "at_region":
        return held
    return [n for n, d in f.moved.items() if n not in (t, dest) and d >= MOVED and n in f.touched]


def true_objects(f: TraceFacts, mode: str) -> frozenset[str]:
    """The target (or drawer), plus the entity the reference mode is about when that is another one."""
    main = f.target or f.drawer
    extra: set[str] = set()
    if mode == "wrong_object":
        extra = set(wrong_objects(f))
    elif mode == "knocked_over":
        extra = set(f.tilted)
    elif mode == "collision":
        extra = set(f.touched) - {f.target, f.destination, f.drawer, None}  # type: ignore[arg-type]
    return frozenset({main, *extra} - {None})  # type: ignore[arg-type]


def ground_truth(f: TraceFacts, paired_solved: bool | None = None) -> Truth:
    """Ground truth of a failed episode from its trace facts, its scene's provenance and whether the policy
    solves the paired sft scene (None: provenance alone)."""
    mode = reference_mode(f)
    tagged = true_factors(f.spec.provenance.factors)
    return Truth(mode, true_objects(f, mode), tagged if paired_solved is not False else (), tagged, paired_solved)


@dataclass(frozen=True)
class Marks:
    """Which fields of a diagnosis match the ground truth."""

    mode: bool
    object: bool
    factor: bool
    factor_tagged: bool = False  # against the provenance tags

    @property
    def correct(self) -> bool:
        """All three match."""
        return self.mode and self.object and self.factor


def score(d: CriticResult, truth: Truth) -> Marks:
    """Mode, first implicated object and first implicated factor against the ground truth.

    A critic answer that was rejected (DiagnosisRejected) matches nothing.
    """
    if not isinstance(d, Diagnosis):
        return Marks(False, False, False)
    obj = bool(d.objects) and d.objects[0] in truth.objects
    fac = bool(d.factors) and any(factor_matches(d.factors[0], t) for t in truth.factors)
    tagged = bool(d.factors) and any(factor_matches(d.factors[0], t) for t in truth.tagged)
    return Marks(d.failure_mode == truth.mode, obj, fac, tagged)


@dataclass
class Row:
    """One critic's diagnosis of one episode, scored and verified."""

    episode_id: str
    marks: Marks
    accepted: bool
    failed_checks: tuple[str, ...] = ()  # "check:status" of each check that did not pass
    verified_factor: bool | None = None  # first verified factor matches (None: nothing verified)
    corruption: str | None = None  # noisy critic: the corruption kind applied, if any
    caused: bool | None = None  # the split's edit caused the failure (truth.causal)


def _rate(hits: Sequence[bool]) -> float | None:
    return float(sum(hits)) / len(hits) if hits else None


def precisions(rows: Sequence[Row]) -> dict[str, float | None]:
    """{mode,object,factor}_precision over `rows` (None when there are none)."""
    return {f"{k}_precision": _rate([getattr(r.marks, k) for r in rows]) for k in FIELDS}


def by_split(rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
    """Factor precision before / after verification per OOD split (episode ids are family/split/index)."""
    out: dict[str, dict[str, Any]] = {}
    for split in sorted({r.episode_id.split("/")[1] for r in rows}):
        mine = [r for r in rows if r.episode_id.split("/")[1] == split]
        acc = [r for r in mine if r.accepted]
        out[split] = {"n": len(mine), "n_accepted": len(acc), "factor_before": _rate([r.marks.factor for r in mine]),
                      "factor_after": _rate([r.marks.factor for r in acc]),
                      "n_caused": sum(bool(r.caused) for r in mine)}
    return out


def summarize(rows: Sequence[Row]) -> dict[str, Any]:
    """A critic's scores (see the module docstring)."""
    accepted = [r for r in rows if r.accepted]
    correct = [r for r in rows if r.marks.correct]
    out: dict[str, Any] = {
        "n": len(rows),
        "before": precisions(rows),
        "after": precisions(accepted),
        "correct_rejected_fraction": _rate([not r.accepted for r in correct]),
        "n_accepted": len(accepted),
        "n_correct": len(correct),
        "n_caused": sum(bool(r.caused) for r in rows),
        "provenance_truth": {
            "before": {"factor_precision": _rate([r.marks.factor_tagged for r in rows])},
            "after": {"factor_precision": _rate([r.marks.factor_tagged for r in accepted])},
            "correct_rejected_fraction": _rate([not r.accepted for r in rows
                                                if r.marks.mode and r.marks.object and r.marks.factor_tagged]),
        },
        "verified_factor_precision": _rate([bool(r.verified_factor) for r in accepted]),
        "rejected_by": dict(sorted(Counter(c for r in rows for c in r.failed_checks).items())),
        "by_split": by_split(rows),
    }
    corrupted = [r for r in rows if r.corruption]
    if corrupted:
        kinds = sorted({r.corruption for r in corrupted if r.corruption})
        out["corrupted"] = {
            "n": len(corrupted),
            "rejected_fraction": _rate([not r.accepted for r in corrupted]),
            "clean_rejected_fraction": _rate([not r.accepted for r in rows if not r.corruption]),
            "by_kind": {k: {"n": sum(r.corruption == k for r in corrupted),
                            "rejected_fraction": _rate([not r.accepted for r in corrupted if r.corruption == k])}
                        for k in kinds},
        }
    return out


# ---- the policy --------------------------------------------------------------------------------------


def progress_bar(console: Console) -> Progress:
    """The bench's progress bars."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


def _key(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def policy_keys(families: Sequence[str], sizes: Sizes, cfg: Any) -> tuple[str, str]:
    """Cache keys of the expert demos and of the SFT policy: what each depends on."""
    from coda.scene.splits import SPLITS_VERSION

    demos = _key({"families": list(families), "demos": sizes.demos_per_family, "seed": TRAIN_SEED,
                  "sim": cfg.sim.model_dump(mode="json"), "splits": SPLITS_VERSION})
    policy = cfg.policy.model_dump(mode="json", exclude={"torch_threads", "log_every", "checkpoint_every"})
    return demos, _key({"steps": sizes.train_steps, "policy": policy})


def sft_policy(families: Sequence[str], sizes: Sizes, cfg: Any, workers: int, console: Console) -> tuple[Path, dict[str, Any]]:
    """The cached SFT checkpoint, trained first if missing. Returns (checkpoint, what was done and how long)."""
    from coda.policy.data import collect_demos
    from coda.policy.train import train_sft
    from coda.scene.splits import build_split
    from coda.sim.tabletop.validity import sim_check
    from coda.sim.backends import make_env
    from coda.sim.tabletop.experts import expert_for

    demo_key, policy_key = policy_keys(families, sizes, cfg)
    work = CACHE / demo_key
    ckpt, done = work / f"policy-{policy_key}.pt", work / f"policy-{policy_key}.json"
    if done.exists() and ckpt.exists():
        info = json.loads(done.read_text())
        console.print(f"policy: cached {ckpt} ({info['demos']} demos, {info['steps']} steps)")
        return ckpt, {**info, "cached": True}
    t0 = time.perf_counter()
    dirs, demos, reused = [], 0, []
    env = make_env(cfg.sim)
    try:
        for family in families:
            d = work / "demos" / family
            if (d / "done.json").exists():
                written = json.loads((d / "done.json").read_text())["written"]
                reused.append(family)
            else:
                scenes = build_split(family, "sft", sizes.demos_per_family, TRAIN_SEED, workers=workers,
                                     check=sim_check).valid
                report = collect_demos(env, scenes, lambda s: expert_for(s, cfg.sim.expert_chunk), d, progress=True)
                written = report.written
                (d / "done.json").write_text(json.dumps({"written": written}) + "\n")
            dirs.append(d)
            demos += written
            console.print(f"policy: {family}: {written} expert demos")
    finally:
        env.close()
    demos_s = time.perf_counter() - t0
    import torch

    torch.manual_seed(cfg.policy.seed)
    t0 = time.perf_counter()
    _, result = train_sft(dirs, cfg.policy, ckpt, steps=sizes.train_steps,
                          metrics_path=work / f"train-{policy_key}.jsonl", progress=True)
    info = {"demos": demos, "steps": result.steps, "demos_s": demos_s, "train_s": time.perf_counter() - t0,
            "final_bc_loss": result.metrics.get("bc"), "demos_key": demo_key, "policy_key": policy_key,
            "demos_reused": reused}  # families whose demos an earlier run had already collected
    done.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    console.print(f"policy: trained {result.steps} steps on {demos} demos in {info['train_s']:.0f} s")
    return ckpt, {**info, "cached": False}


# ---- failures ----------------------------------------------------------------------------------------


@dataclass
class Failures:
    """Failed OOD episodes with their ground truth, and what it took to get them."""

    episodes: list[Any]  # EpisodeRecord, state trace from replay
    truths: dict[str, Truth]
    facts: dict[str, TraceFacts]
    rolled: dict[str, dict[str, int]] = field(default_factory=dict)  # family -> split -> episodes rolled out
    failed: dict[str, dict[str, int]] = field(default_factory=dict)  # family -> split -> failures kept
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count


def collect_failures(checkpoint: Path, families: Sequence[str], sizes: Sizes, cfg: Any, workers: int,
                     console: Console) -> Failures:
    """Roll the policy out on valid OOD scenes; keep failed episodes with traces re-created by replay."""
    from coda.critic.base import EpisodeRecord
    from coda.critic.trace import trace_facts
    from coda.engine.rollout import evaluate_checkpoint
    from coda.engine.round import replay_states
    from coda.scene.splits import OOD_SPLITS, build_split, paired_base
    from coda.sim.tabletop.validity import sim_check
    from coda.sim.backends import make_env

    jobs: list[tuple[str, str, int, ScenarioSpec]] = []
    with progress_bar(console) as bar:
        task = bar.add_task("OOD scenes", total=len(families) * len(OOD_SPLITS))
        for family in families:
            for split in OOD_SPLITS:
                specs = build_split(family, split, sizes.scenes_per_split, EVAL_SEED, workers=workers, check=sim_check).valid
                jobs += [(family, split, i, s) for i, s in enumerate(specs)]
                bar.advance(task)
        task = bar.add_task("policy rollouts", total=len(jobs))
        rollouts = evaluate_checkpoint(checkpoint, [j[3] for j in jobs], cfg.sim, workers=workers,
                                       record_states=False, on_done=lambda i, _: bar.advance(task))
    out = Failures([], {}, {})
    env = make_env(cfg.sim)
    try:
        with progress_bar(console) as bar:
            task = bar.add_task("replay failures", total=sum(not r.success for r in rollouts))
            for (family, split, i, spec), ro in zip(jobs, rollouts):
                out.rolled.setdefault(family, {}).setdefault(split, 0)
                out.rolled[family][split] += 1
                if ro.success:
                    continue
                bar.advance(task)
                if ro.error:
                    out.skipped["simulator error"] = out.skipped.get("simulator error", 0) + 1
                    continue
                states = replay_states(env, spec, ro.actions)
                facts = trace_facts(states, spec)
                if facts.success:  # the replay must re-create the failure; count it if it does not
                    out.skipped["replay succeeded"] = out.skipped.get("replay succeeded", 0) + 1
                    continue
                eid = f"{family}/{split}/{i:03d}"
                out.episodes.append(EpisodeRecord(episode_id=eid, spec=spec, success=False, steps=len(ro.actions),
                                                  states=tuple(states), outcome="timeout"))
                out.facts[eid] = facts
                out.failed.setdefault(family, {}).setdefault(split, 0)
                out.failed[family][split] += 1
    finally:
        env.close()
    # causal truth: does the same policy solve each failure's paired sft scene (the scene without the edit)?
    paired = [paired_base(ep.spec, EVAL_SEED) for ep in out.episodes]
    with progress_bar(console) as bar:
        task = bar.add_task("paired sft scenes", total=len(paired))
        solved = evaluate_checkpoint(checkpoint, paired, cfg.sim, workers=workers, record_states=False,
                                     on_done=lambda i, _: bar.advance(task))
    for ep, ro in zip(out.episodes, solved):
        out.truths[ep.episode_id] = ground_truth(out.facts[ep.episode_id], bool(ro.success))
    return out


# ---- critics and verification ------------------------------------------------------------------------


def make_bench_critic(name: str) -> Any:
    """The critic `name` of this bench (see the module docstring)."""
    from coda.critic.base import make_critic
    from coda.critic.config import CriticConfig

    if name == "noisy":
        return make_critic(CriticConfig(name="noisy", noise=NOISE, noise_seed=NOISE_SEED, noisy_base="privileged"))
    return make_critic(CriticConfig(name="privileged"), "privileged")


def blind(episode: Any) -> Any:
    """The episode with its scene's provenance factors removed."""
    spec = episode.spec
    return replace(episode, spec=spec.replace(provenance=spec.provenance.model_copy(update={"factors": ()})))


def run_critic(name: str, failures: Failures, verifier: Any, policy_success: Callable[[ScenarioSpec], bool],
               base: Sequence[ScenarioSpec], bar: Progress, dump: Any = None) -> list[Row]:
    """Diagnose, score and verify every failure with critic `name` (one JSON line per episode to `dump`)."""
    critic = make_bench_critic(name)
    rows: list[Row] = []
    task = bar.add_task(f"{name}: diagnose + verify", total=len(failures.episodes))
    for ep in failures.episodes:
        seen = blind(ep) if name == "privileged_blind" else ep
        d = critic.diagnose(seen)
        v = verifier.check(d, seen, policy_success=policy_success, base_scenes=base)
        truth = failures.truths[ep.episode_id]
        vf = v.verified_factors
        corruption = critic.corrupted(ep.episode_id) if hasattr(critic, "corrupted") else None
        rows.append(Row(
            episode_id=ep.episode_id, marks=score(d, truth), accepted=v.accepted,
            failed_checks=tuple(f"{c.name}:{c.status}" for c in v.checks if c.status != "passed") if v.checks
            else ("critic_answer:rejected",),
            verified_factor=any(factor_matches(vf[0], t) for t in truth.factors) if vf else None,
            corruption=corruption.kind if corruption else None, caused=truth.causal,
        ))
        if dump is not None:
            dump.write(json.dumps({
                "critic": name, "episode_id": ep.episode_id,
                "truth": {"mode": truth.mode, "objects": sorted(truth.objects), "causal": truth.causal,
                          "factors": [vars(t) for t in truth.factors], "tagged": [vars(t) for t in truth.tagged]},
                "marks": vars(rows[-1].marks), "diagnosis": d.model_dump(mode="json"), "verdict": v.model_dump(mode="json"),
            }, sort_keys=True) + "\n")
        bar.advance(task)
    return rows


def decision_list_agreement(failures: Failures) -> dict[str, Any]:
    """How often the reference procedure and the privileged critic's decision list name the same mode."""
    from coda.critic.privileged import classify

    pairs = Counter((failures.truths[e].mode, classify(f)[0]) for e, f in failures.facts.items())
    differ = {f"{a} -> {b}": c for (a, b), c in sorted(pairs.items()) if a != b}
    return {"episodes": sum(pairs.values()), "disagree": sum(differ.values()), "pairs": differ}


# ---- main --------------------------------------------------------------------------------------------


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def print_table(console: Console, results: dict[str, Any], title: str) -> None:
    """The scores as a rich table."""
    table = Table(title=title)
    for col in ("critic", "n", "accepted", "mode", "object", "factor", "mode ✓", "object ✓", "factor ✓",
                "correct rejected", "corrupted rejected"):
        table.add_column(col, justify="left" if col == "critic" else "right")
    for name, r in results.items():
        if name == "meta":
            continue
        b, a = r["before"], r["after"]
        cor = r.get("corrupted", {}).get("rejected_fraction")
        table.add_row(name, str(r["n"]), str(r["n_accepted"]),
                      *(_fmt(b[f"{k}_precision"]) for k in FIELDS), *(_fmt(a[f"{k}_precision"]) for k in FIELDS),
                      _fmt(r["correct_rejected_fraction"]), _fmt(cor))
    console.print(table)
    console.print("mode / object / factor: precision over all diagnoses; ✓: among diagnoses the verifier accepted")
    table = Table(title="Factor precision and correct diagnoses rejected, with the provenance tags as factor truth")
    for col in ("critic", "factor", "factor ✓", "correct rejected"):
        table.add_column(col, justify="left" if col == "critic" else "right")
    for name, r in results.items():
        if name != "meta":
            pt = r["provenance_truth"]
            table.add_row(name, _fmt(pt["before"]["factor_precision"]), _fmt(pt["after"]["factor_precision"]),
                          _fmt(pt["correct_rejected_fraction"]))
    console.print(table)
    critics = [k for k in results if k != "meta"]
    splits = sorted({sp for k in critics for sp in results[k]["by_split"]})
    table = Table(title="Factor precision per OOD split: before → after verification (accepted / n)")
    table.add_column("critic")
    for sp in splits:
        table.add_column(sp, justify="right")
    for k in critics:
        cells = []
        for sp in splits:
            c = results[k]["by_split"].get(sp)
            cells.append("—" if c is None else
                         f"{_fmt(c['factor_before'])} → {_fmt(c['factor_after'])} ({c['n_accepted']}/{c['n']}, "
                         f"{c['n_caused']} caused)")
        table.add_row(k, *cells)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="1 scene per family and split, k = 2: a few minutes")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--critics", nargs="+", default=list(CRITIC_NAMES), choices=list(CRITIC_NAMES))
    ap.add_argument("--scenes-per-split", type=int, default=None, help="OOD scenes per family and split")
    ap.add_argument("--k", type=int, default=None, help="solved base scenes per counterfactual trial")
    ap.add_argument("--workers", type=int, default=1, help="processes for validity checks and rollouts")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--dump", type=Path, default=None, help="also write every diagnosis, truth and verdict (JSONL)")
    args = ap.parse_args(argv)

    from coda.config import build_config

    console = Console() if sys.stdout.isatty() else Console(width=150)  # logs keep the whole table
    t_all = time.perf_counter()
    load_start = os.getloadavg()
    sizes = FAST if args.fast else FULL
    if args.scenes_per_split is not None:
        sizes = replace(sizes, scenes_per_split=args.scenes_per_split)
    if args.k is not None:
        sizes = replace(sizes, counterfactual_k=args.k, base_per_family=max(sizes.base_per_family, 3 * args.k))
    # One torch thread: with more, OpenMP threads spin against each other on a loaded 2-core machine.
    cfg = build_config("quick", overrides=[f"policy.train_steps={sizes.train_steps}", "policy.torch_threads=1",
                                           f"critic.counterfactual_k={sizes.counterfactual_k}"])
    import torch

    torch.set_num_threads(cfg.policy.torch_threads)
    timings: dict[str, float] = {}

    ckpt, policy_info = sft_policy(args.families, sizes, cfg, args.workers, console)
    t0 = time.perf_counter()
    failures = collect_failures(ckpt, args.families, sizes, cfg, args.workers, console)
    timings["failures_s"] = time.perf_counter() - t0
    n_rolled = sum(sum(v.values()) for v in failures.rolled.values())
    console.print(f"{len(failures.episodes)} failed episodes out of {n_rolled} OOD rollouts")

    from coda.critic.verify import Verifier
    from coda.engine.backend import PolicySuccess
    from coda.scene.splits import build_split
    from coda.sim.tabletop.validity import sim_check
    from coda.sim.backends import make_env

    t0 = time.perf_counter()
    base = [s for f in args.families
            for s in build_split(f, "sft", sizes.base_per_family, BASE_SEED, workers=args.workers, check=sim_check).valid]
    timings["base_scenes_s"] = time.perf_counter() - t0
    env = make_env(cfg.sim)
    dump = args.dump.open("w") if args.dump else None
    results: dict[str, Any] = {}
    try:
        policy_success = PolicySuccess(ckpt, env)  # one rollout at a time, memoised per scene
        verifier = Verifier(cfg.critic, cfg.shaping, env_factory=lambda: env, seed=VERIFY_SEED)
        with progress_bar(console) as bar:
            for name in args.critics:
                t0 = time.perf_counter()
                rows = run_critic(name, failures, verifier, policy_success, base, bar, dump)
                results[name] = summarize(rows)
                timings[f"{name}_s"] = time.perf_counter() - t0
        cache = policy_success.cache
        base_solved = {f: sum(cache.get(s.spec_id, False) for s in base if s.family == f) for f in args.families}
        base_tried = {f: sum(s.spec_id in cache for s in base if s.family == f) for f in args.families}
        policy_rollouts = len(cache)
    finally:
        env.close()
        if dump is not None:
            dump.close()

    wall = time.perf_counter() - t_all
    command = "python bench/critic.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    results["meta"] = {
        "command": command.strip(),
        "wall_s": wall,
        "timings_s": timings,
        "sizes": vars(sizes),
        "families": args.families,
        "seeds": {"demos": TRAIN_SEED, "ood": EVAL_SEED, "base": BASE_SEED, "noise": NOISE_SEED, "verify": VERIFY_SEED},
        "noise": NOISE,
        "policy": {**policy_info, "preset": "quick", "config": cfg.policy.model_dump(mode="json")},
        "ood_rolled": failures.rolled,
        "failures": failures.failed,
        "skipped": failures.skipped,
        "reference_modes": dict(sorted(Counter(t.mode for t in failures.truths.values()).items())),
        "caused_by_split_edit": {sp: {"failures": sum(e.split("/")[1] == sp for e in failures.truths),
                                      "paired_sft_solved": sum(e.split("/")[1] == sp and bool(t.causal)
                                                               for e, t in failures.truths.items())}
                                 for sp in sorted({e.split("/")[1] for e in failures.truths})},
        "reference_vs_privileged_decision_list": decision_list_agreement(failures),
        "base_scenes": {"offered": {f: sum(s.family == f for s in base) for f in args.families},
                        "tried": base_tried, "solved": base_solved},
        "verification_policy_rollouts": policy_rollouts,
        "checks": ["consistency", "counterfactual", "potential"],
        "note": ("privileged mode precision measures agreement between two orderings of the same trace predicates "
                 "(the reference procedure and the critic's decision list); the privileged critic also reads the "
                 "scene's provenance factors, which are the factor truth only where the split's edit caused the failure "
                 "(the policy solves the paired sft scene)"),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "cpus": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")

    title = f"Critic precision on {len(failures.episodes)} real policy failures ({'--fast' if args.fast else 'default'})"
    print_table(console, results, title)
    agree = results["meta"]["reference_vs_privileged_decision_list"]
    console.print(f"reference mode vs the privileged decision list: {agree['disagree']}/{agree['episodes']} differ "
                  "(privileged mode precision measures consistency, not accuracy)")
    console.print(f"wrote {args.out} · wall time {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
