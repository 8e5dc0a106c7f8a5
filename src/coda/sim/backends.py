"""Simulator backends by name (`SimConfig.backend`): what the engine needs from a simulator, as one typed
contract (`SimBackend`), and the registry that finds them.

A backend is an object with:

| member | what it gives |
| --- | --- |
| `name` | its name in the registry (`SimConfig.backend`) |
| `scenario_from_dict` | a stored scene record back as a scene (`spec_id`, `family`, `to_dict()`) |
| `eval_splits`, `build_split` | the evaluation splits of a family, and the scenes of one (or of its training set) |
| `make_env` | the simulator's own env of a scene (gymnasium-shaped) |
| `target_env` | an env acting in CoDA's 5-D targets (`reset_to`, `step`, `state`, `get_state`, `set_state`): what rounds, workers and policies step |
| `expert` | the scripted expert of a scene acting in targets in a `target_env` (`reset`, `act`) |
| `rollout_expert` | one expert episode in a `make_env` env (its `states` and `success`) |
| `check` | validity of a scene: (valid, reason, details), in a given `target_env` or one of its own |
| `predicates` | the predicate functions a scene's staged potentials bind to (Text2potential's stages) |
| `wordings`, `goal_labels` | other instructions for a scene's goal (paraphrase training), and the scene rows its goal names with its number (grounding labels) |
| `factor_edits`, `same_task` | the factor vocabulary: a diagnosis's implicated factors as the simulator's scene edits (`FactorEdit`: applied to another scene of the same task, undone in the failed one), the verifier's single-factor tests |
| `mode_tokens`, `check_token` | verified factors as the tokens of a failure mode's key (`kind[@role][:value]`), which carry over between scenes |
| `mode_program`, `max_level` | a failure mode's generation program: the body of a candidate stream that reproduces its factors at a level (0: exactly them, up to `max_level`: wider) |
| `entity_roles` | each entity's role in a scene (what the goal moves, where it goes, ...): how a staged potential compiled on one scene carries to another |

`scenario_record(data)` reads any backend's stored scene back as a scene of its backend (the record's
`backend` field, which other backends' `to_dict` writes; the default backend's without one).

`tabletop` is registered here; other backends are declared by their package under the entry-point group
`coda.sim_backends` (this package declares `libero = "coda.sim.libero.backend:BACKEND"`), so a new simulator
is added without editing this module or the engine. Importing it does not import MuJoCo or any simulator: a
backend imports its simulator when it is first asked for an env, an expert, a check or its predicates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from coda.registry import Registry
from coda.scene.splits import SPLITS
from coda.sim.config import SimConfig

if TYPE_CHECKING:
    import numpy as np

    from coda.scene.factors import SceneFactor
    from coda.scene.spec import ScenarioSpec

CheckMany = Callable[[Sequence[Any]], Sequence[tuple[bool, str, Any]]]  # scenes -> (valid, reason, details) each


@dataclass(frozen=True)
class FactorEdit:
    """Implicated factors of a failed scene, tested as one, as the simulator's scene edits: the two
    single-factor tests of the verifier's counterfactual check (`coda.critic.verdict.VerifierFlow`).

    `apply(base, rng)` is another scene of the same task with the factor applied alone (sufficiency);
    `undo(rng)` is the failed scene with the factor put back as training has it (necessity), the failed
    scene itself when the factor already is. Both raise a `CodaError` (`FactorError`, or the scene's own
    error) when the edit does not fit the scene; `rng` draws whatever placement the edit leaves open.
    """

    indices: tuple[int, ...]  # the diagnosis's factors it tests (two: a swapped pair, tested as one swap)
    apply: Callable[[Any, "np.random.Generator"], Any] | None  # None: the factor cannot be applied elsewhere
    undo: Callable[["np.random.Generator"], Any]
    ops: tuple[dict[str, Any], ...] = ()  # what `apply` does, for the verdict ({"op": ..., "args": {...}})
    error: str = ""  # why `apply` is None
    swapped_with: str | None = None  # a single factor's entity trades places with this one (for the record)
    undo_variants: int | None = None  # distinct undone scenes worth drawing (None: the verifier's k)


@runtime_checkable
class SimBackend(Protocol):
    """What the engine, the critic and the shaping need from a simulator (see the module docstring)."""

    name: str
    eval_splits: tuple[str, ...]  # the evaluation splits of every family, in-distribution first
    max_level: int  # the widest level of a failure mode's generation program (`mode_program`)

    def scenario_from_dict(self, data: dict[str, Any]) -> Any:
        """A stored scene record (`to_dict()`) back as a scene."""
        ...

    def build_split(self, family: str, name: str, split: str, n: int, seed: int,
                    check_many: CheckMany | None = None) -> tuple[list[Any], list[tuple[Any, str]]]:
        """(valid scenes, [(rejected scene, reason)]) of one split of `family` (`name` "train": the SFT
        training set, drawn like `split`), `n` of them from `seed`; `check_many` checks a batch of candidates
        (e.g. across worker processes) in place of one `check` at a time."""
        ...

    def make_env(self, config: SimConfig, spec: Any = None, **kwargs: Any) -> Any:
        """The simulator's own env (reset to `spec` where given)."""
        ...

    def target_env(self, config: SimConfig) -> Any:
        """An env acting in CoDA's 5-D targets."""
        ...

    def expert(self, spec: Any, env: Any, config: SimConfig) -> Any:
        """The scripted expert of `spec` acting in targets in `env` (a `target_env`)."""
        ...

    def rollout_expert(self, env: Any, spec: Any, max_steps: int | None = None) -> Any:
        """One expert episode of `spec` in `env` (a `make_env` env): an object with `states` and `success`."""
        ...

    def check(self, spec: Any, env: Any = None) -> tuple[bool, str, Any]:
        """(valid, reason, details) of a scene, checked in `env` (a `target_env`) or one of the backend's own."""
        ...

    def predicates(self, spec: Any, first_state: Any = None) -> Any:
        """The predicate functions (`grasped`, `inside`, ...) a staged potential over `spec` binds to;
        `first_state` is the episode's first state where a backend's predicates depend on the scene."""
        ...

    def wordings(self, spec: Any, n: int) -> tuple[str, ...]:
        """Up to `n` other instructions for the scene's goal that training may show in place of its own (none
        where the simulator's instructions are fixed)."""
        ...

    def goal_labels(self, spec: Any) -> tuple[tuple[int, ...], float]:
        """The observation rows of the entities the scene's goal names, in role order (what is moved, where
        it goes), and its number (e.g. a drawer's opening fraction; NaN for none); no rows where the
        simulator's goals are not entity pairs of the observation."""
        ...

    def factor_edits(self, factors: Sequence["SceneFactor"], spec: Any, tier: str = "train") -> list[FactorEdit]:
        """The implicated `factors` of the failed scene `spec` as edits, in the order of their first factor
        (`tier`: the wording tier an instruction factor draws from). A factor the backend cannot apply
        elsewhere gets an edit whose `apply` is None and `error` says why; a backend may test only the first
        few factors. Raises FactorError for a scene of another backend."""
        ...

    def same_task(self, spec: Any, base: Any) -> bool:
        """Whether `base` is another scene of `spec`'s task, one a factor of `spec` can be applied to."""
        ...

    def mode_tokens(self, factors: Sequence["SceneFactor"], spec: Any, where: str = "factors") -> tuple[str, ...]:
        """The failure-mode tokens (`kind[@role][:value]`, sorted, unique) of a diagnosis's verified `factors`
        in `spec`, the failed scene (None when unknown): what carries over to other scenes of the factor.
        Raises FactorError naming `where[j]` for a factor the backend cannot key."""
        ...

    def check_token(self, token: str, where: str = "token") -> None:
        """Raise FactorError (naming `where` and the token) when `token` is not one of the backend's."""
        ...

    def entity_roles(self, spec: Any) -> dict[str, str]:
        """Entity name → role in `spec` (`target`: what the goal moves, ...), in scene order: how a stage plan
        over one scene's entities carries to another's. Entities without a role are left out."""
        ...

    def mode_program(self, mode: str, examples: Sequence[Any], *, level: int, parent: dict[str, Any] | None,
                     seed: int, count: int, name: str, reason: str, rediagnose: bool = False) -> dict[str, Any]:
        """The generation body of a program that reproduces failure mode `mode`'s factors at `level` (0: exactly
        them; up to `max_level`, wider): around `examples`, the scenes it was diagnosed in, or as the next
        program after `parent` (its last program's body). The body has the `kind` its candidate stream reads
        and `mode_program` (level, parent: the parent's name, reason, rediagnose); `name` is its record key.
        Raises CompileError (`coda.scene.factors`) when the mode's factors cannot be made into scenes."""
        ...


class TabletopBackend:
    """CoDA's own MuJoCo tabletop (`coda.sim.tabletop`): its env already acts in 5-D targets."""

    name = "tabletop"
    eval_splits: tuple[str, ...] = SPLITS
    max_level = 6  # coda.sim.tabletop.programs.MAX_LEVEL

    def build_split(self, family: str, name: str, split: str, n: int, seed: int,
                    check_many: CheckMany | None = None) -> tuple[list[Any], list[tuple[Any, str]]]:
        """The scene language's split generator (`coda.scene.splits.build_split`), every scene checked."""
        from coda.scene.splits import build_split

        res = build_split(family, split, n, seed, check=self.check, check_many=check_many)
        return list(res.valid), [(r.spec, r.reason) for r in res.rejected]

    def scenario_from_dict(self, data: dict[str, Any]) -> "ScenarioSpec":
        from coda.scene.spec import ScenarioSpec

        return ScenarioSpec.from_dict(data)

    def make_env(self, config: SimConfig, spec: Any = None, **kwargs: Any) -> Any:
        from coda.sim.tabletop.env import TabletopEnv

        return TabletopEnv(spec, config, **kwargs)

    def target_env(self, config: SimConfig) -> Any:
        return self.make_env(config)

    def expert(self, spec: Any, env: Any, config: SimConfig) -> Any:
        from coda.sim.tabletop.experts import expert_for

        return expert_for(spec, config.expert_chunk)

    def rollout_expert(self, env: Any, spec: Any, max_steps: int | None = None) -> Any:
        from coda.sim.tabletop.experts import rollout_expert

        return rollout_expert(env, spec, max_steps=max_steps)

    def check(self, spec: Any, env: Any = None) -> tuple[bool, str, Any]:
        """The tabletop's check builds its own model (`env` is not needed)."""
        from coda.sim.tabletop.validity import sim_check

        return sim_check(spec)

    def predicates(self, spec: Any, first_state: Any = None) -> Any:
        from coda.sim.tabletop import predicates

        return predicates

    def wordings(self, spec: Any, n: int) -> tuple[str, ...]:
        """Train-tier paraphrases of the goal (`coda.scene.language.wordings`)."""
        from coda.scene.language import wordings

        return tuple(wordings(spec, n))

    def goal_labels(self, spec: Any) -> tuple[tuple[int, ...], float]:
        """Rows in the observation's entity order (objects, containers, drawers, regions) of the first goal
        conjunct's arguments, and its value."""
        from coda.scene.spec import entity_kinds

        rows = {name: i for i, name in enumerate(entity_kinds(spec))}  # the observation's entity order
        g = spec.goal[0]
        return tuple(rows[a] for a in g.args), float("nan") if g.value is None else float(g.value)

    def factor_edits(self, factors: Sequence["SceneFactor"], spec: Any, tier: str = "train") -> list[FactorEdit]:
        """Scene-operator edits (`coda.sim.tabletop.factors.factor_edits`): entities by role, so they carry to
        other scenes of the family; two position factors that swap training regions are one swap."""
        from coda.sim.tabletop.factors import factor_edits

        return factor_edits(factors, spec, tier)

    def same_task(self, spec: Any, base: Any) -> bool:
        """A tabletop task is its family: a base scene of the same family (the failed scene itself too, which
        the policy does not solve, so it is never a base)."""
        return getattr(base, "family", None) == spec.family

    def mode_tokens(self, factors: Sequence["SceneFactor"], spec: Any, where: str = "factors") -> tuple[str, ...]:
        """Tokens by role, region, attribute or physics direction (`coda.sim.tabletop.tokens`)."""
        from coda.sim.tabletop.tokens import mode_tokens

        return mode_tokens(factors, spec, where)

    def check_token(self, token: str, where: str = "token") -> None:
        from coda.sim.tabletop.tokens import check_token

        check_token(token, where)

    def entity_roles(self, spec: Any) -> dict[str, str]:
        """Every entity's role: target, goal, alt or other (`coda.sim.tabletop.factors.role_of`)."""
        from coda.scene.spec import entity_kinds
        from coda.sim.tabletop.factors import role_of

        return {n: role_of(n, spec) for n in entity_kinds(spec)}

    def mode_program(self, mode: str, examples: Sequence[Any], *, level: int, parent: dict[str, Any] | None,
                     seed: int, count: int, name: str, reason: str, rediagnose: bool = False) -> dict[str, Any]:
        """A scene program in the family's training distribution that applies the mode's factors, widened by
        level (`coda.sim.tabletop.programs`); named by mode, family, level and seed, not by `name`."""
        from coda.sim.tabletop.programs import mode_body

        return mode_body(mode, examples, level=level, parent=parent, seed=seed, count=count, reason=reason,
                         rediagnose=rediagnose)


BACKENDS: Registry[SimBackend] = Registry("sim backend", entry_points="coda.sim_backends")
BACKENDS.register("tabletop", TabletopBackend())


def sim_backend(name: str | None = None) -> SimBackend:
    """The backend registered as `name` (default: `SimConfig`'s default backend).

    Raises RegistryError naming the available backends when the backend is not registered.
    """
    return BACKENDS.get(name or SimConfig().backend)


def scenario_record(data: dict[str, Any]) -> Any:
    """A stored scene record back as a scene of its backend: the record's `backend` field where it has one
    (other backends' `to_dict` writes it), else the default backend's.

    Raises RegistryError for an unknown backend, and the backend's own error for a bad record.
    """
    name = data.get("backend") if isinstance(data, dict) else None
    return sim_backend(str(name) if name else None).scenario_from_dict(data)


def make_env(config: SimConfig | None = None, spec: Any = None, **kwargs: Any) -> Any:
    """The simulator's own env of the backend `config.backend` (default config: the default backend)."""
    cfg = config or SimConfig()
    return sim_backend(cfg.backend).make_env(cfg, spec, **kwargs)


__all__ = ["BACKENDS", "FactorEdit", "SimBackend", "TabletopBackend", "make_env", "scenario_record", "sim_backend"]
