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
- **CoDA's planner** — the one planner of every backend (`coda.engine.curriculum.plan_modes`): verified
  diagnoses cluster into failure modes keyed by the failure mode and LIBERO's tokens of the verified factors
  (`SimBackend.mode_tokens`: the roles of the moved objects, `missed_grasp|position:target`, the target and
  another object together `position:swap`, as `swap_regions` makes them; `instruction`; `task`); the budget
  is split by learning progress; a mode's program (`SimBackend.mode_program`, `coda.sim.libero.factors`)
  applies the BDDL edit of its factors to the tasks it failed on (level 0) and, once solved there, to every
  task of those suites (level 1), back to level 0 when stuck.
- **Text2potential** — each mode's training program carries the staged potential its verified diagnoses'
  stage plans compile to, over roles (`plan_template`: the BDDL goal pair as `target` / `destination`,
  `coda.engine.libero_potentials`), and a Potential record is stored for it; a mode not diagnosed this
  round keeps its last one. Demos in a mode's scenes carry Φ of that potential when it was accepted (the
  diagnosis's plan passed the verifier's potential check), every other scene Φ of its goal's canonical
  stage program. Corrective labels start a few steps before Φ of the diagnosis's plan last rose along the
  failed probe (`plan_phis`).
- **training** — expert demos in the generated scenes and corrective labels of failed probes, both from
  the scripted expert acting in 5-D targets.
- **baselines** — every one plans as on the tabletop, with this backend's scenes and edits: `dr` random
  scenes of the `libero` kind, `dagger` those and relabelled failed probes, `replay` one random BDDL edit
  around each failed probe (`edit_body`), `plr` replays scored probe scenes from its level buffer, `accel` edits
  the highest-scoring ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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

    # -- stage plans of failure modes ------------------------------------------------------------------

    def plan_template(self, plan: str, spec: Any) -> Any:
        """The stage plan over the scenario's entities, its goal pair rewritten as `target` / `destination`
        (`coda.engine.libero_potentials.plan_template`)."""
        from coda.engine.libero_potentials import plan_template

        return plan_template(plan, spec)

    def plan_phis(self, env: Any, spec: Any, plan: str, states: Sequence[Any]) -> list[float]:
        """Φ of the stage plan over LIBERO's predicates (the goal's canonical stage program where it does not
        compile)."""
        from coda.engine.libero_potentials import plan_phis

        return plan_phis(plan, spec, states)


__all__ = ["EXPLORE_EDITS", "LiberoBackend", "base_suite", "libero_stream"]
