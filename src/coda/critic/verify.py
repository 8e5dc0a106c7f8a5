"""Verification: a diagnosis is accepted only after checks that do not trust the critic.

`Verifier.check(diagnosis, episode, policy_success=..., base_scenes=...) -> Verdict` runs three checks:

(a) **consistency** — the diagnosis agrees with the simulator's predicates over the episode's trace: the
    episode failed; the claimed stage was reached (and not far exceeded); the failure mode's evidence is in
    the trace (missed_grasp: the jaws shut next to the target and it was never grasped; wrong_object:
    another object was grasped and is implicated; slip: the target left closed jaws; premature_release /
    imprecise_placement: the target was released far from / near the destination; wrong_target: it rests
    in another entity; knocked_over: an object tipped; collision: the fingers touched a non-goal entity or
    moved one; no_progress: the target was hardly advanced — a push target moved but not near its goal, a
    target held but not carried over the destination; detour: the gripper travelled far;
    drawer_not_operated: a drawer goal is unmet); the entity the mode is about is implicated (the target
    for every mode about its progress, no_progress and detour included).
(b) **counterfactual** — `VerifierFlow`'s (`coda.critic.verdict`), over the tabletop's factor vocabulary
    (`coda.sim.tabletop.factors`). For each implicated factor, two single-factor tests with the current
    policy: *sufficiency*: K base scenes of the same family that the policy solves, each with only that
    factor applied by scene operators (`factor_ops`: an `instruction` factor rewords the instruction, a
    `task` factor asks for another goal in the same layout), must fail at a rate at least `margin` above the base
    scenes' own failure rate (re-measured); *necessity* (`counterfactual_undo`): the failed scene itself,
    with only that factor put back as the training distribution has it (`undo_factor`: the entity back in
    its training region, the canonical instruction, the distractors removed, nominal physics...), must be
    solved in at least a `margin` share of up to K variants. Sufficiency alone cannot tell factors apart
    for a policy that fails under any change of an axis (a narrowly trained policy fails wherever *any*
    object moves, so a guessed position factor reproduces a failure); necessity asks whether this factor
    caused *this* failure. A factor is verified when every test that could run passed (at least one ran);
    verified factors are the diagnosis's *verified factors*, and the check passes if at least one exists.
(c) **potential** — the diagnosis's stage plan compiles (Text2potential) on the scene, and along scripted
    expert demonstrations of the same scene Φ rises (Spearman rank correlation with time ≥
    `min_rank_corr`) and peaks, at 1, at success.

A verdict is accepted when every required check passed; a check that could not run (no policy given, no
expert demo of the scene) counts as not passed. Rejected diagnoses keep their verdict with the reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from coda.critic.base import EpisodeRecord
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import Diagnosis
from coda.critic.privileged import DETOUR_PATH, IMPRECISE_DIST, MIN_GRASP_STEPS
from coda.critic.trace import MOVED, TraceFacts, trace_facts
from coda.critic.verdict import (
    CHECKS,
    VERDICT_SCHEMA_VERSION,
    CheckName,
    CheckResult,
    FactorTrial,
    Verdict,
    VerifierFlow,
    VerifyError,
    verify_seed,
)
from coda.scene.spec import ScenarioSpec
from coda.shaping.config import ShapingConfig
from coda.shaping.text2potential import PlanRejected, StagedPotential, spearman_with_time, try_parse_plan
from coda.sim.backends import SimBackend, sim_backend
from coda.sim.config import SimConfig

PolicySuccess = Callable[[ScenarioSpec], bool]


# ---- (a) consistency ---------------------------------------------------------------------------------


def _stage_index(kind: str, kinds: tuple[str, ...]) -> int | None:
    if kind == "none":
        return 0
    return kinds.index(kind) + 1 if kind in kinds else None


def _mode_evidence(d: Diagnosis, f: TraceFacts) -> str | None:
    """None if the trace shows the failure mode's evidence, else what is missing."""
    mode, t, dest, W = d.failure_mode, f.target, f.destination, f.words
    objects = {o.name for o in f.spec.objects}
    if f.drawer is not None:
        a, b, lo, hi = f.drawer_fractions or (0.0, 0.0, 0.0, 0.0)
        if mode == "missed_grasp":
            if f.grasped.get(f.drawer, 0):
                return f"{W(f.drawer)} was grasped for {f.grasped[f.drawer]} steps"
            return None if f.drawer in f.closed_near else f"the jaws never shut at the handle of {W(f.drawer)}"
        if mode == "drawer_not_operated":
            return None
        if mode == "knocked_over":
            return None if f.tilted else "no object tipped over"
        if mode in ("no_progress", "detour", "collision"):
            return _generic(mode, f)
        return f"'{mode}' does not apply to a drawer goal"
    assert t is not None and dest is not None
    held = f.grasped.get(t, 0)
    others = [n for n, c in f.grasped.items() if n in objects and n not in (t, dest) and c >= MIN_GRASP_STEPS]
    pushed = [n for n, m in f.moved.items() if n not in (t, dest) and m >= MOVED and n in f.touched]
    if mode == "missed_grasp":
        if held:
            return f"the target {W(t)} was grasped for {held} steps"
        return None if t in f.closed_near else f"the jaws never shut next to the target {W(t)}"
    if mode == "wrong_object":
        wrong = others or (pushed if f.spec.goal[0].name == "at_region" else [])
        if not wrong:
            return "no object other than the target was grasped or pushed"
        return None if set(wrong) & set(d.objects) else f"the object(s) it went for, {wrong}, are not implicated"
    if mode == "slip_during_transport":
        return None if any(not r.commanded for r in f.releases) else "the target never left closed jaws"
    if mode == "premature_release":
        far = [r for r in f.releases if r.commanded and not r.over_destination and r.dist > IMPRECISE_DIST]
        return None if far else f"the target was never released more than {IMPRECISE_DIST} m from the destination"
    if mode == "imprecise_placement":
        near = [r for r in f.releases if r.over_destination or r.dist <= IMPRECISE_DIST]
        held_over = f.max_stage >= len(f.stage_kinds) - 1
        pushed_near = f.spec.goal[0].name == "at_region" and (f.end_dist or 1.0) <= IMPRECISE_DIST
        return None if near or held_over or pushed_near else "the target was never released or pushed near the destination"
    if mode == "wrong_target":
        if f.rests_in is not None and f.rests_in != dest:
            return None
        return "the target does not rest in, on or at another entity at the end"
    if mode == "knocked_over":
        return None if f.tilted else "no object tipped over"
    if mode in ("no_progress", "detour", "collision"):
        return _generic(mode, f)
    if mode == "drawer_not_operated":
        return "the goal is not a drawer goal"
    return None  # "other" makes no claim a predicate can test


def _generic(mode: str, f: TraceFacts) -> str | None:
    main = f.target or f.drawer or ""
    if mode == "collision":
        bumped = f.touched - {f.target, f.destination, f.drawer}
        moved = [n for n, m in f.moved.items() if n != f.target and m >= MOVED and f.grasped.get(n, 0) == 0]
        return None if bumped or moved or f.tilted else "the fingers touched and moved nothing outside the goal"
    if mode == "detour":
        need = 0.75 * DETOUR_PATH
        return None if f.gripper_path >= need else f"the gripper travelled {f.gripper_path:.2f} m (< {need:.2f} m)"
    # no_progress: the task was hardly advanced
    if f.drawer is not None:
        a, b, lo, hi = f.drawer_fractions or (0.0, 0.0, 0.0, 0.0)
        return None if hi - lo < 0.1 else f"the drawer moved over {hi - lo:.2f} of its travel"
    if f.spec.goal[0].name == "at_region":  # pushing the target elsewhere is no progress; near the goal it is
        if f.end_dist is not None and f.end_dist <= IMPRECISE_DIST:
            return f"the target {f.words(main)} ends {f.end_dist:.3f} m from the destination"
        return None
    if f.releases and (main in f.lifted or f.moved.get(main, 0.0) >= 2 * MOVED):
        return f"the target {f.words(main)} was carried {f.moved.get(main, 0.0):.2f} m and let go"
    if f.grasped.get(main, 0) and f.max_stage >= len(f.stage_kinds) - 1:
        return f"the target {f.words(main)} was held over the destination"
    return None


def _central(d: Diagnosis, f: TraceFacts) -> str | None:
    """The entity a mode is about must be implicated."""
    main = f.drawer or f.target
    about_main = ("missed_grasp", "slip_during_transport", "premature_release", "imprecise_placement",
                  "wrong_target", "drawer_not_operated", "no_progress", "detour")
    if d.failure_mode in about_main and main not in d.objects:
        return f"'{d.failure_mode}' is about {f.words(main or '')}, which the diagnosis does not implicate"
    return None


def check_consistency(d: Diagnosis, f: TraceFacts, stage_slack: int = 1) -> CheckResult:
    """Check (a): the diagnosis against the trace's predicates (see the module docstring)."""
    details: dict[str, Any] = {"max_stage": f.max_stage, "stage_reached": f.stage_reached}
    if f.success:
        return CheckResult(name="consistency", status="failed", reason="the episode succeeded", details=details)
    claimed = _stage_index(d.stage_reached, f.stage_kinds)
    if claimed is None:
        why = f"stage_reached '{d.stage_reached}' is not a stage of this task ({', '.join(f.stage_kinds)})"
        return CheckResult(name="consistency", status="failed", reason=why, details=details)
    if claimed > f.max_stage:
        why = f"stage_reached '{d.stage_reached}' was never reached (furthest: '{f.stage_reached}')"
        return CheckResult(name="consistency", status="failed", reason=why, details=details)
    if claimed < f.max_stage - stage_slack:
        why = f"stage_reached '{d.stage_reached}' falls {f.max_stage - claimed} stages short of '{f.stage_reached}'"
        return CheckResult(name="consistency", status="failed", reason=why, details=details)
    for problem in (_mode_evidence(d, f), _central(d, f)):
        if problem:
            return CheckResult(name="consistency", status="failed", reason=f"{d.failure_mode}: {problem}", details=details)
    return CheckResult(name="consistency", status="passed", reason=f"the trace shows {d.failure_mode}", details=details)


# ---- (b) counterfactual ------------------------------------------------------------------------------


# ---- the verifier ------------------------------------------------------------------------------------


class Verifier(VerifierFlow):
    """Runs checks (a)-(c) on tabletop diagnoses (see the module docstring) in `VerifierFlow`'s order:
    `check(diagnosis, episode, policy_success=..., base_scenes=...) -> Verdict`.

    Args:
        cfg: critic config (counterfactual_k, counterfactual_margin, counterfactual_tier, stage_slack,
            verify_demos, demo_steps).
        shaping: shaping config (min_rank_corr for check c).
        require: the checks a verdict needs to pass.
        env_factory: builds the simulator env for expert demonstrations (default: `sim`'s, default settings).
        predicates: predicate module (default: `sim`'s for the scene).
        seed: seed of the counterfactual scene edits and demo perturbations.
        sim: the simulator backend whose expert makes the demonstrations (`coda.sim.backends`; default: the
            default backend).

    Raises:
        VerifyError: an unknown check name in `require`.
    """

    def __init__(
        self,
        cfg: CriticConfig | None = None,
        shaping: ShapingConfig | None = None,
        *,
        require: Sequence[str] = CHECKS,
        env_factory: Callable[[], Any] | None = None,
        predicates: Any = None,
        seed: int = 0,
        sim: SimBackend | None = None,
    ) -> None:
        bad = [r for r in require if r not in CHECKS]
        if bad:
            raise VerifyError(f"unknown check(s) {bad} in require. Available: {list(CHECKS)}")
        self.cfg = cfg or CriticConfig()
        self.shaping = shaping or ShapingConfig()
        self.require = tuple(require)
        self.env_factory = env_factory
        self.predicates = predicates
        self.seed = seed
        self.sim = sim or sim_backend()
        self._env: Any = None
        self._demos: dict[str, list[Any]] = {}

    # -- public ---------------------------------------------------------------------------------------

    def consistency_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (a) over the episode's state trace (`trace_facts`, `check_consistency`)."""
        if not episode.states:
            return CheckResult(name="consistency", status="not_run", reason="the episode has no state trace")
        P = self._predicates(episode.spec, episode.states[0])
        return check_consistency(d, trace_facts(episode.states, episode.spec, P), self.cfg.stage_slack)

    def potential_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (c) on the episode's scene (`check_potential`)."""
        return self.check_potential(d, episode.spec)

    def check_potential(self, d: Diagnosis, spec: ScenarioSpec) -> CheckResult:
        """Check (c): the stage plan compiles and its Φ rises along expert demos of the scene, peaking at success."""
        prog = try_parse_plan(d.stage_plan, spec)
        if isinstance(prog, PlanRejected):
            return CheckResult(name="potential", status="failed", reason=f"the stage plan does not compile: {prog.reason}")
        demos = self._expert_demos(spec)
        if not demos:
            return CheckResult(name="potential", status="not_run", reason="the scripted expert solves no demo of this scene")
        pot = StagedPotential(prog, spec, self._predicates(spec, demos[0][0]))
        corr = [spearman_with_time(pot.phis(states)) for states in demos]
        final = [pot.phi(states[-1]) for states in demos]
        peak = [float(pot.phis(states).max()) for states in demos]
        details: dict[str, Any] = {"demos": len(demos), "min_rank_corr": float(np.nanmin(corr)) if not all(np.isnan(corr)) else None,
                                   "final_phi": min(final), "program": prog.describe()}
        threshold = self.shaping.min_rank_corr
        if any(np.isnan(c) or c < threshold for c in corr):
            why = f"Φ does not rise along expert demos (rank correlation {min(corr):.2f} < {threshold})"
            return CheckResult(name="potential", status="failed", reason=why, details=details)
        if any(fv < 1.0 or fv < p for fv, p in zip(final, peak)):
            why = f"Φ does not peak at success (final {min(final):.2f}, peak {max(peak):.2f})"
            return CheckResult(name="potential", status="failed", reason=why, details=details)
        return CheckResult(name="potential", status="passed",
                           reason=f"Φ rises along {len(demos)} expert demo(s) and peaks at success", details=details)

    def close(self) -> None:
        """Close the demo environment, if one was made."""
        if self._env is not None and hasattr(self._env, "close"):
            self._env.close()
        self._env = None

    # -- helpers --------------------------------------------------------------------------------------

    def _predicates(self, spec: ScenarioSpec, first_state: Any) -> Any:
        """The predicates given at construction, else those of the verifier's simulator for this scene."""
        return self.predicates if self.predicates is not None else self.sim.predicates(spec, first_state)

    def _expert_demos(self, spec: ScenarioSpec) -> list[list[Any]]:
        """State traces of successful expert demos: the scene itself, then with perturbed start poses."""
        key = spec.spec_id
        if key in self._demos:
            return self._demos[key]
        from coda.scene.operators import derive

        if self._env is None:
            own = SimConfig(backend=self.sim.name)
            self._env = self.env_factory() if self.env_factory is not None else self.sim.make_env(own)
        rng = np.random.default_rng(verify_seed(self.seed, key))
        scenes = [spec] + [derive(rng, spec, [("move_robot_start", {})]) for _ in range(self.cfg.verify_demos - 1)]
        demos = []
        for s in scenes:
            ep = self.sim.rollout_expert(self._env, s, max_steps=self.cfg.demo_steps)
            if ep.success:
                demos.append(ep.states)
        self._demos[key] = demos
        return demos


__all__ = [
    "CHECKS",
    "VERDICT_SCHEMA_VERSION",
    "CheckName",
    "CheckResult",
    "FactorTrial",
    "PolicySuccess",
    "Verdict",
    "Verifier",
    "VerifyError",
    "check_consistency",
]
