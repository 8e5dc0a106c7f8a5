"""Verification of LIBERO diagnoses: a diagnosis is trusted only after checks in the simulator.

`LiberoVerifier.check(diagnosis, episode, policy_success=..., base_scenes=...) -> Verdict` runs three
checks in the order every backend's verifier follows (`coda.critic.verdict.VerifierFlow`; the `Verdict`,
`CheckResult` and `FactorTrial` records are `coda.critic.verdict`'s):

(a) **consistency** — the diagnosis agrees with `libero_trace_facts` over the episode's `LiberoState`
    trace: the episode failed; the claimed stage was reached and is at most `stage_slack` stages short of
    the furthest one; the implicated objects are entities of the scene; the failure mode's evidence is in
    the trace (as in `coda.critic.verify.check_consistency`); the target is implicated by every mode about
    its progress.
(b) **counterfactual** — `VerifierFlow`'s, the one every backend's verifier runs, over LIBERO's factor
    vocabulary (`coda.sim.libero.factors.factor_edits`, at most 3 factors): *sufficiency*, up to
    `counterfactual_k` base scenes of the same suite and task that the policy solves, each with only that
    factor transplanted (`transplant_factor`), fail in at least a margin share above their own failure
    rate; *necessity*, the failed scenario with only that factor undone (`undo_factor`: back as the
    official BDDL has it) is solved in at least a `counterfactual_margin` share of up to
    `counterfactual_k` placements. A diagnosis that blames no scene factor cannot be tested this way and
    fails.
(c) **potential** — the diagnosis's stage plan compiles through Text2potential on the scenario
    (`coda.critic.libero.libero_plan_potential`: its phrases resolved to the scene's entities, LIBERO's
    predicates under its stages); its Φ is finite and in [0, 1] along the failed episode, and along scripted
    expert demonstrations of the scenario it ends at 1 and rises (Spearman rank correlation with time ≥
    `ShapingConfig.min_rank_corr`). A plan that does not compile, or whose Φ does not rise, fails.

Cost: every policy outcome is memoised by `spec_id` for the verifier's life (per policy). Per diagnosis the
factor tests run at most 2·k episodes per factor (k undone placements, k transplanted bases, 3 factors at
most); base scenes are scanned once, at most 3·k of them, and their outcomes are reused by later diagnoses. A check's
`episodes` detail counts the policy outcomes it read (memoised or not), so a verdict is the same whichever
diagnoses the verifier checked before (`LiberoBackend.verify_many` spreads them over processes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from coda.critic.base import EpisodeRecord
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import Diagnosis
from coda.critic.libero import LiberoTraceFacts, libero_entities, libero_trace_facts, try_libero_plan
from coda.critic.privileged import DETOUR_PATH, IMPRECISE_DIST
from coda.critic.trace import MOVED
from coda.critic.verdict import CHECKS, CheckResult, VerifierFlow, VerifyError, verify_seed
from coda.errors import first_line
from coda.shaping.config import ShapingConfig
from coda.shaping.text2potential import PlanRejected, StagedPotential, spearman_with_time
from coda.sim.backends import SimBackend, sim_backend
from coda.sim.libero.errors import LiberoError
from coda.sim.libero.predicates import libero_predicates
from coda.sim.libero.scenario import LiberoScenario

LiberoPolicySuccess = Callable[[LiberoScenario], bool]


# ---- (a) consistency ---------------------------------------------------------------------------------


def _mode_evidence(d: Diagnosis, f: LiberoTraceFacts) -> str | None:
    """None if the trace shows the failure mode's evidence, else what is missing."""
    mode, t, dest, W = d.failure_mode, f.target, f.destination, f.words
    held = f.grasped.get(t, 0)
    if mode == "missed_grasp":
        if held:
            return f"the target {W(t)} was grasped for {held} states"
        return None if t in f.closed_near else f"the jaws never shut next to the target {W(t)}"
    if mode == "wrong_object":
        if not f.other_grasped:
            return "no object other than the target was grasped"
        return None if set(f.other_grasped) & set(d.objects) else (
            f"the object(s) it went for, {list(f.other_grasped)}, are not implicated")
    if mode == "slip_during_transport":
        return None if any(not r.commanded for r in f.releases) else "the target never left shut jaws"
    if mode == "premature_release":
        far = [r for r in f.releases if r.commanded and not r.over_destination and r.dist > IMPRECISE_DIST]
        return None if far else f"the target was never released more than {IMPRECISE_DIST} m from the destination"
    if mode == "imprecise_placement":
        near = [r for r in f.releases if r.over_destination or r.dist <= IMPRECISE_DIST]
        held_over = held > 0 and f.max_stage >= len(f.stage_kinds) - 1
        return None if near or held_over else "the target was never released or held near the destination"
    if mode == "wrong_target":
        if f.rests_in is not None and f.rests_in not in (dest, f.rested_in):
            return None if f.rests_in in d.objects else f"the entity it rests in/on, {W(f.rests_in)}, is not implicated"
        return "the target does not rest in or on another entity at the end"
    if mode == "knocked_over":
        return None if f.tilted else "no object tipped over"
    if mode == "collision":
        bumped = f.touched - {t, dest}
        pushed = [n for n, m in f.moved.items() if n not in (t, dest) and m >= MOVED and not f.grasped.get(n, 0)]
        return None if bumped or pushed or f.tilted else "the fingers touched and moved nothing outside the goal"
    if mode == "detour":
        need = 0.75 * DETOUR_PATH
        return None if f.gripper_path >= need else f"the gripper travelled {f.gripper_path:.2f} m (< {need:.2f} m)"
    if mode == "no_progress":
        if f.releases and (f.target_lifted or f.target_displacement >= 2 * MOVED):
            return f"the target {W(t)} was carried {f.target_displacement:.2f} m and let go"
        if held and f.max_stage >= len(f.stage_kinds) - 1:
            return f"the target {W(t)} was held over the destination"
        return None
    if mode == "drawer_not_operated":
        return "the goal is not a drawer goal"
    return None  # "other" makes no claim a predicate can test


_ABOUT_TARGET = ("missed_grasp", "slip_during_transport", "premature_release", "imprecise_placement",
                 "wrong_target", "no_progress", "detour")


def check_libero_consistency(d: Diagnosis, f: LiberoTraceFacts, stage_slack: int = 1) -> CheckResult:
    """Check (a): the diagnosis against the trace's facts (see the module docstring)."""
    details: dict[str, Any] = {"max_stage": f.max_stage, "stage_reached": f.stage_reached}

    def failed(why: str) -> CheckResult:
        return CheckResult(name="consistency", status="failed", reason=why, details=details)

    if f.success:
        return failed("the episode succeeded")
    kinds = f.stage_kinds
    claimed = 0 if d.stage_reached == "none" else (kinds.index(d.stage_reached) + 1 if d.stage_reached in kinds else None)
    if claimed is None:
        return failed(f"stage_reached '{d.stage_reached}' is not a stage of this task ({', '.join(kinds)})")
    if claimed > f.max_stage:
        return failed(f"stage_reached '{d.stage_reached}' was never reached (furthest: '{f.stage_reached}')")
    if claimed < f.max_stage - stage_slack:
        return failed(f"stage_reached '{d.stage_reached}' falls {f.max_stage - claimed} stages short of '{f.stage_reached}'")
    for i, o in enumerate(d.objects):
        if o not in f.texts:
            return failed(f"objects.{i} = {o!r} is not an entity of the scene (have {sorted(f.texts)})")
    problem = _mode_evidence(d, f)
    if problem is None and d.failure_mode in _ABOUT_TARGET and f.target not in d.objects:
        problem = f"it is about the target {f.words(f.target)}, which the diagnosis does not implicate"
    if problem:
        return failed(f"{d.failure_mode}: {problem}")
    return CheckResult(name="consistency", status="passed", reason=f"the trace shows {d.failure_mode}", details=details)


# ---- the verifier ------------------------------------------------------------------------------------


class LiberoVerifier(VerifierFlow):
    """Runs checks (a)-(c) on diagnoses of LIBERO episodes (see the module docstring).

    Args:
        cfg: critic config (counterfactual_k, counterfactual_margin, counterfactual_undo, stage_slack,
            verify_demos).
        seed: seed of the undone / transplanted scenarios' placements.
        shaping: shaping config (min_rank_corr for check c).
        require: the checks a verdict needs to pass.
        env_factory: builds the `LiberoEnv` for expert demonstrations (default: a new `LiberoEnv`, closed by
            `close()`; an env from the factory is left to its owner).
        sim: the backend whose factor vocabulary the counterfactual check uses (default: `libero`).

    Raises:
        VerifyError: an unknown check name in `require`.
    """

    def __init__(self, cfg: CriticConfig | None = None, *, seed: int = 0, shaping: ShapingConfig | None = None,
                 require: Sequence[str] = CHECKS, env_factory: Callable[[], Any] | None = None,
                 sim: SimBackend | None = None) -> None:
        bad = [r for r in require if r not in CHECKS]
        if bad:
            raise VerifyError(f"unknown check(s) {bad} in require. Available: {list(CHECKS)}")
        self.cfg = cfg or CriticConfig()
        self.seed = seed
        self.shaping = shaping or ShapingConfig()
        self.require = tuple(require)
        self.env_factory = env_factory
        self.sim = sim or sim_backend("libero")
        self._env: Any = None
        self._own_env = False
        self._demos: dict[str, list[list[Any]]] = {}
        self._facts_of: tuple[EpisodeRecord, tuple[LiberoTraceFacts | None, str]] | None = None  # the last read

    # -- public ---------------------------------------------------------------------------------------

    def _facts(self, episode: EpisodeRecord) -> tuple[LiberoTraceFacts | None, str]:
        """The episode's trace facts, or None and why they cannot be read (read once for checks a and c)."""
        if self._facts_of is not None and self._facts_of[0] is episode:
            return self._facts_of[1]
        self._facts_of = (episode, self._read_facts(episode))
        return self._facts_of[1]

    def _read_facts(self, episode: EpisodeRecord) -> tuple[LiberoTraceFacts | None, str]:
        if not isinstance(episode.spec, LiberoScenario):
            return None, f"the episode's spec is a {type(episode.spec).__name__}, not a LiberoScenario"
        if not episode.states:
            return None, "the episode has no state trace"
        try:
            return libero_trace_facts(episode.states, episode.spec), ""
        except LiberoError as e:
            return None, f"cannot read the trace: {first_line(e)}"

    def consistency_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (a) over the episode's `LiberoState` trace (`check_libero_consistency`)."""
        facts, why = self._facts(episode)
        if facts is None:
            return CheckResult(name="consistency", status="not_run", reason=why)
        return check_libero_consistency(d, facts, self.cfg.stage_slack)

    def potential_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (c) on the episode's scenario and trace (`check_potential`)."""
        facts, why = self._facts(episode)
        if facts is None:
            return CheckResult(name="potential", status="not_run", reason=why)
        return self.check_potential(d, episode.states, episode.spec)  # type: ignore[arg-type]

    def check_potential(self, d: Diagnosis, states: Sequence[Any], spec: LiberoScenario) -> CheckResult:
        """Check (c): the diagnosis's stage plan compiles on the scenario, its Φ is in [0, 1] along the failed
        episode (`states`), and it rises to 1 along expert demos of the scenario."""
        pot = try_libero_plan(d.stage_plan, states[0], spec)
        if isinstance(pot, PlanRejected):
            return CheckResult(name="potential", status="failed", reason=f"the stage plan does not compile: {pot.reason}")
        phi = pot.phis(states)
        details: dict[str, Any] = {"program": pot.program.describe(),
                                   "episode_phi_max": float(np.max(phi)) if np.all(np.isfinite(phi)) else None}
        if not np.all(np.isfinite(phi)) or phi.min() < 0.0 or phi.max() > 1.0:
            why = f"Φ along the failed episode leaves [0, 1] or is not finite (min {np.min(phi)}, max {np.max(phi)})"
            return CheckResult(name="potential", status="failed", reason=why, details=details)
        try:
            demos = self._expert_demos(spec)
        except LiberoError as e:
            return CheckResult(name="potential", status="not_run", reason=f"no expert demo: {first_line(e)}",
                               details=details)
        if not demos:
            return CheckResult(name="potential", status="not_run",
                               reason="the scripted expert solves no demo of this scenario", details=details)
        kinds = dict(libero_entities(spec).kinds)  # the plan is parsed once; each demo gives its table top
        phis = [StagedPotential(pot.program, None, libero_predicates(demo[0], spec), kinds=kinds).phis(demo)
                for demo in demos]
        corr = [spearman_with_time(p) for p in phis]
        final = [float(p[-1]) for p in phis]
        threshold = self.shaping.min_rank_corr
        details.update(demos=len(demos), final_phi=min(final),
                       min_rank_corr=None if any(np.isnan(corr)) else float(min(corr)))
        if any(np.isnan(c) or c < threshold for c in corr):
            why = f"Φ does not rise along expert demos (rank correlation {min(corr):.2f} < {threshold})"
            return CheckResult(name="potential", status="failed", reason=why, details=details)
        if min(final) < 1.0:
            why = f"Φ does not reach 1 at the expert's success (final {min(final):.2f})"
            return CheckResult(name="potential", status="failed", reason=why, details=details)
        return CheckResult(name="potential", status="passed",
                           reason=f"Φ rises to 1 along {len(demos)} expert demo(s)", details=details)

    def close(self) -> None:
        """Close the demo environment, if the verifier made it."""
        if self._env is not None and self._own_env:
            self._env.close()
        self._env = None

    # -- helpers --------------------------------------------------------------------------------------

    def _expert_demos(self, spec: LiberoScenario) -> list[list[Any]]:
        """State traces of successful expert demos: the scenario, then placements with other seeds (cached)."""
        key = spec.spec_id
        if key in self._demos:
            return self._demos[key]
        from dataclasses import replace

        from coda.sim.libero.experts import expert_for

        if self._env is None:
            if self.env_factory is not None:
                self._env = self.env_factory()
            else:
                from coda.sim.libero.env import LiberoEnv

                self._env, self._own_env = LiberoEnv(), True
        env = self._env
        n = max(self.cfg.verify_demos - 1, 0)
        extra = [int(s) for s in np.random.default_rng(verify_seed(self.seed, key)).integers(2**31, size=n)]
        scenes = [spec] + [replace(spec, init_state=None, seed=s) for s in extra]
        demos = []
        for s in scenes:
            env.reset_to(s)
            expert, states = expert_for(env), [env.state()]
            while not states[-1].success and env.steps < env.max_steps:
                env.step(expert.act(states[-1]))
                states.append(env.state())
            if states[-1].success:
                demos.append(states)
        self._demos[key] = demos
        return demos


__all__ = ["LiberoPolicySuccess", "LiberoVerifier", "check_libero_consistency"]
