"""Text2potential in LIBERO rounds: a failure mode's staged potential from its diagnoses' stage plans.

The privileged LIBERO critic writes each diagnosis's stage plan in words ("1. reach the alphabet soup 2. grasp
the alphabet soup ... 5. place the alphabet soup in the basket"). `plan_template` parses a verified
diagnosis's plan against its scenario's entities (`coda.critic.libero.libero_entities`) and rewrites the
stages over roles — `target` (the object the BDDL goal moves), `destination` (what it goes in / on), any
other entity by its name; CoDA's planner (`coda.engine.compile.compile_training_program`, through
`LiberoBackend.plan_template`) keeps the template most of a mode's plans compile to (ties: the earliest
diagnosis), as on the tabletop. `plan_phis` gives Φ of a plan along a failed episode, where corrective
labels start. The template travels in the mode's training program; `LiberoBackend.phis` binds it to each generated scene
(`bind_libero_template`) and evaluates it over LIBERO's predicates, falling back on the goal's canonical stage
program when the mode's potential was not accepted or does not fit the scene. A mode's potential is accepted
when the verdict of the diagnosis it came from passed the potential check (the plan compiles on the failed
scenario and its Φ rises to 1 along expert demos of it, `coda.critic.libero_verify`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coda.critic.libero import libero_entities, libero_potential, try_libero_plan
from coda.engine.compile import CompileError, RoleStage
from coda.shaping.program import ProgramError, Stage, StageProgram
from coda.shaping.text2potential import PlanRejected, StagedPotential, try_parse_plan
from coda.sim.libero import suites as S
from coda.sim.libero.errors import LiberoError
from coda.sim.libero.predicates import goal_pair, libero_predicates
from coda.sim.libero.scenario import LiberoScenario
from coda.sim.libero.suites import bddl_regions

GOAL_ROLES = ("target", "destination")  # roles of the BDDL goal pair, in its order


def _goal_names(scenario: LiberoScenario, names: Sequence[str]) -> dict[str, str]:
    text = scenario.bddl_text()
    return dict(zip(GOAL_ROLES, goal_pair(S.bddl_goal(text), bddl_regions(text), names)))


def libero_role_template(program: StageProgram, scenario: LiberoScenario) -> tuple[RoleStage, ...]:
    """A stage program's stages with the goal pair's entities replaced by their roles (`target`,
    `destination`); other entities keep their names. Raises LiberoError for a goal that is not one in / on."""
    role_of = {n: r for r, n in _goal_names(scenario, tuple(libero_entities(scenario).kinds)).items()}
    return tuple(RoleStage(kind=s.kind, roles=tuple(role_of.get(a, a) for a in s.args), value=s.value)
                 for s in program.stages)


def bind_libero_template(template: Sequence[RoleStage], scenario: LiberoScenario, first: Any) -> StagedPotential:
    """A role template bound to a scenario's entities, as a staged potential over LIBERO's predicates with the
    table top read from `first` (the episode's initial state).

    Raises:
        CompileError: an entity of the template is not in the scene, or a stage does not fit its kind.
        LiberoError: the scenario's goal is not one `in` / `on` predicate.
    """
    names = tuple(first.names)
    goal = _goal_names(scenario, names)
    kinds = dict(libero_entities(scenario, first).kinds)
    stages = []
    for i, st in enumerate(template):
        args = tuple(goal.get(r, r) for r in st.roles)
        missing = [a for a in args if a not in kinds]
        if missing:
            raise CompileError(f"potential_template[{i}]: '{missing[0]}' is not an entity of {scenario.spec_id}")
        stages.append(Stage(kind=st.kind, args=args, value=st.value))  # type: ignore[arg-type]
    try:
        program = StageProgram(stages=tuple(stages)).check_kinds(kinds)
    except ProgramError as e:
        raise CompileError(f"potential_template does not fit scene {scenario.spec_id}: {e}") from None
    return StagedPotential(program, None, libero_predicates(first, scenario), kinds=kinds)


def mode_phis(program: Mapping[str, Any] | None, accepted: set[str], scenario: LiberoScenario,
              states: Sequence[Any]) -> list[float] | None:
    """Φ along `states` under the mode potential of a training program body (None when it has none, it was
    not accepted, or it does not fit this scene)."""
    if program is None or not program.get("potential_template") or program.get("mode") not in accepted:
        return None
    try:
        template = [RoleStage.model_validate(s) for s in program["potential_template"]]
        return [float(x) for x in bind_libero_template(template, scenario, states[0]).phis(states)]
    except (CompileError, LiberoError):
        return None


def plan_template(plan: str, scenario: LiberoScenario) -> tuple[StageProgram, tuple[RoleStage, ...]] | PlanRejected:
    """A diagnosis's stage plan compiled over the scenario's entities, with its role template
    (`libero_role_template`); PlanRejected when it does not compile or the goal is not one `in` / `on`."""
    try:
        prog = try_parse_plan(plan, libero_entities(scenario))
        return prog if isinstance(prog, PlanRejected) else (prog, libero_role_template(prog, scenario))
    except LiberoError as e:
        return PlanRejected(text=plan, reason=str(e))


def plan_phis(plan: str, scenario: LiberoScenario, states: Sequence[Any]) -> list[float]:
    """Φ along `states` of a stage plan over LIBERO's predicates (the table top read from the first state);
    the goal's canonical stage program (`coda.critic.libero.libero_potential`) where the plan does not compile."""
    if not states:
        return []
    pot = try_libero_plan(plan, states[0], scenario)
    if isinstance(pot, PlanRejected):
        pot = libero_potential(states[0], scenario)
    return [float(x) for x in pot.phis(states)]

__all__ = ["GOAL_ROLES", "bind_libero_template", "libero_role_template", "mode_phis", "plan_phis", "plan_template"]
