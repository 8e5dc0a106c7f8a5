"""LIBERO / LIBERO-PRO as a simulator backend (`coda.sim.backends.SimBackend`), declared under the
entry-point group `coda.sim_backends` as `libero`. Importing this module imports neither LIBERO nor MuJoCo.

- scenes: `LiberoScenario` (a suite, a task and an initial state or a placement seed, plus BDDL edits);
- `make_env`: a `LiberoEnv` (7-D OSC_POSE actions); `target_env`: a `LiberoRoundEnv` (5-D targets);
- `expert`: the scripted expert in targets, replanned after every snapshot (`RelabellingExpert`);
- `check`: it loads, settles, and the scripted expert solves it (`coda.sim.libero.validity`);
- `predicates`: `LiberoPredicates` of the episode (table top from its first state, the BDDL goal pair);
- factors: BDDL edits relative to the task's official BDDL, transplanted or undone
  (`coda.sim.libero.factors`);
- splits: a family is a base suite; its training scenes are its tasks with placements sampled from their
  BDDL regions (never an official initial state), and its evaluation splits are the official protocol's
  scenes of the base suite and its LIBERO-PRO variants (`SPLIT_SUITES`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from coda.sim.config import SimConfig
from coda.sim.libero.scenario import LiberoScenario

SPLIT_SUITES = {"sft": "", "position": "_swap", "instruction": "_lan", "task": "_task"}  # eval split -> suite suffix


class LiberoBackend:
    """The LIBERO simulator behind CoDA's backend contract (see the module docstring)."""

    name = "libero"
    eval_splits: tuple[str, ...] = tuple(SPLIT_SUITES)
    max_level = 1  # a mode program's widest level: every task of the suites it failed on

    def scenario_from_dict(self, data: dict[str, Any]) -> LiberoScenario:
        return LiberoScenario.from_dict(data)

    def build_split(self, family: str, name: str, split: str, n: int, seed: int,
                    check_many: Callable[[Sequence[Any]], Sequence[tuple[bool, str, Any]]] | None = None,
                    ) -> tuple[list[Any], list[tuple[Any, str]]]:
        """`name` "train": `n` scenes round robin over the family's tasks, placements sampled with seeds drawn
        from `seed`; an evaluation split: the suite's official initial states, round robin over its tasks.
        Neither is checked (`check_many` is not used): official scenes and sampled placements load by
        construction, and a generated scene is checked where it is generated."""
        from coda.sim.libero import suites as S

        if name == "train":
            n_tasks = len(S.list_tasks(family))
            seeds = np.random.default_rng(seed).integers(2**31, size=n)
            return [LiberoScenario(family, i % n_tasks, init_state=None, seed=int(seeds[i])) for i in range(n)], []
        if split not in SPLIT_SUITES:
            raise ValueError(f"LIBERO evaluation split {split!r} is not one of {list(SPLIT_SUITES)}")
        suite = family + SPLIT_SUITES[split]
        n_tasks = len(S.list_tasks(suite))
        return [LiberoScenario(suite, i % n_tasks, init_state=i // n_tasks) for i in range(n)], []

    def make_env(self, config: SimConfig, spec: Any = None, **kwargs: Any) -> Any:
        from coda.sim.libero.env import LiberoEnv

        return LiberoEnv(spec, config, **kwargs)

    def target_env(self, config: SimConfig) -> Any:
        from coda.sim.libero.targets import LiberoRoundEnv

        return LiberoRoundEnv(config)

    def expert(self, spec: Any, env: Any, config: SimConfig) -> Any:
        from coda.sim.libero.targets import RelabellingExpert

        return RelabellingExpert(env)

    def rollout_expert(self, env: Any, spec: Any, max_steps: int | None = None) -> Any:
        from coda.sim.libero.experts import rollout_expert

        return rollout_expert(env, spec, max_steps, record_states=True)

    def check(self, spec: Any, env: Any = None) -> tuple[bool, str, Any]:
        """Checked in `env` (a `target_env`), or in a `LiberoEnv` made for this check and closed after it."""
        from coda.sim.libero.validity import check_scenario

        if env is not None:
            v = check_scenario(getattr(env, "env", env), spec)
            return v.valid, v.reason, None
        own = self.make_env(SimConfig(backend=self.name))
        try:
            v = check_scenario(own, spec)
        finally:
            own.close()
        return v.valid, v.reason, None

    def predicates(self, spec: Any, first_state: Any = None) -> Any:
        """The episode's `LiberoPredicates`: the table top from its first state, the BDDL goal pair of `spec`.

        Raises:
            LiberoError: no first state (LIBERO's predicates depend on the episode), or a goal that is not one
                `in` / `on`.
        """
        from coda.sim.libero.errors import LiberoError
        from coda.sim.libero.predicates import libero_predicates

        if first_state is None:
            raise LiberoError("LIBERO's predicates depend on the episode: pass its first state")
        return libero_predicates(first_state, spec)


    def wordings(self, spec: Any, n: int) -> tuple[str, ...]:
        """None: a LIBERO task's instruction is its BDDL `(:language)` and is not paraphrased in training."""
        return ()

    def goal_labels(self, spec: Any) -> tuple[tuple[int, ...], float]:
        """None: grounding is not supervised on LIBERO (its goals are BDDL predicates over fixtures and regions)."""
        return (), float("nan")

    def factor_edits(self, factors: Sequence[Any], spec: Any, tier: str = "train") -> list[Any]:
        """BDDL edits of the first few factors (`coda.sim.libero.factors.factor_edits`)."""
        from coda.sim.libero.factors import factor_edits

        return factor_edits(factors, spec, tier)

    def same_task(self, spec: Any, base: Any) -> bool:
        """Another scenario of the same suite and task."""
        from coda.sim.libero.factors import same_task

        return same_task(spec, base)

    def mode_tokens(self, factors: Sequence[Any], spec: Any, where: str = "factors") -> tuple[str, ...]:
        """The roles of the objects moved (`position:target|other|swap`), `instruction`, `task`
        (`coda.sim.libero.factors.mode_tokens`)."""
        from coda.sim.libero.factors import mode_tokens

        return mode_tokens(factors, spec, where)

    def check_token(self, token: str, where: str = "token") -> None:
        from coda.sim.libero.factors import check_token

        check_token(token, where)

    def entity_roles(self, spec: Any) -> dict[str, str]:
        """The BDDL goal pair as `target` / `destination` (`coda.sim.libero.factors.entity_roles`)."""
        from coda.sim.libero.factors import entity_roles

        return entity_roles(spec)

    def mode_program(self, mode: str, examples: Sequence[Any], *, level: int, parent: dict[str, Any] | None,
                     seed: int, count: int, name: str, reason: str, rediagnose: bool = False) -> dict[str, Any]:
        """BDDL edits of the mode's factors on the tasks it failed on, then every task of their suites
        (`coda.sim.libero.factors.mode_program`)."""
        from coda.sim.libero.factors import mode_program

        return mode_program(mode, examples, level=level, parent=parent, seed=seed, count=count, name=name,
                            reason=reason, rediagnose=rediagnose)


BACKEND = LiberoBackend()

__all__ = ["BACKEND", "SPLIT_SUITES", "LiberoBackend"]
