"""What the round loop asks of a simulator backend (`SimConfig.backend`).

The phases of a run (`coda.engine.loop`, `coda.engine.round`, `coda.engine.strategies`) are the same for
every backend; everything that depends on what a scene *is* goes through a `RoundBackend`:

| method | what it gives the loop |
| --- | --- |
| `scenario_from_dict` | a stored scene record back as a scene (`spec_id`, `family`, `to_dict()`); the simulator's |
| `make_env` | an env acting in CoDA's 5-D targets (`reset_to`, `step`, `state`, `get_state`, `set_state`); the simulator's `target_env` |
| `expert` | the scripted expert of a scene, acting in targets (demos, corrective labels); the simulator's |
| `check`, `check_many` | validity of a generated scene: (valid, reason), the simulator's check; of many, in order |
| `round_episodes` | the train phase's demos and replays (`EpisodeJob`s) with Φ, in order |
| `phis` | Φ along an episode's states (the scene's canonical staged potential, or a mode's) |
| `build_split`, `eval_splits` | round 0: the training scenes and the fixed evaluation splits of a family; the simulator's |
| `explore_probes`, `explore_body`, `edit_body` | single-edit probe scenes, the body of a random-edit source, and of edits around given scenes |
| `held_apart` | scenes of a stored generation program run with another seed |
| `make_critic`, `make_verifier` | the critic and the verifier of the backend's episodes |
| `verify_many` | the verdicts of a round's diagnoses, in order |
| `plan_template`, `plan_phis` | CoDA's planner: a stage plan over the simulator's roles, Φ of a plan along an episode |

Parallel work: a backend runs its validity checks, train-phase episodes, demos and verification episodes on
`executor` (`coda.runtime.executor`, the run's: worker processes, or Ray actors) when it has more than one
worker. Its workers are a pool set up once (each with its own backend and env, `_init_worker`) and kept
until `close()`. The jobs are pure functions of their inputs (scenes, seeds, a checkpoint shipped by
content), and results come back in job order, so what the driver writes does not depend on the number of
workers or where they run. Close a backend (or use it as a context manager) to stop its workers.

`valid_scenes(backend, stream, n, max_tries)` draws candidates from a scene stream and checks them in
batches (`check_many`, which a backend may spread over worker processes) until `n` are valid; what it keeps
is what checking one candidate at a time would keep.

`backend_for(cfg)` returns the configured one: the simulator backend `cfg.sim.backend` is found in
`coda.sim.backends.BACKENDS` (its typed contract, `SimBackend`: scenes and splits, envs, expert, validity, predicates;
the tabletop is registered there, other simulators are declared by entry point), and the round backend over
it is the generic `RoundBackend` unless the backend declares a round-loop extension under the entry-point
group `coda.backends` — this package declares `libero`, LIBERO / LIBERO-PRO
(`coda.engine.libero.LiberoBackend`: its generation, planner, critic and verifier). `round_env(sim)` is the
backend's `target_env`, the env worker processes make.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.registry import Registry

if TYPE_CHECKING:
    from pathlib import Path

    from coda.config import CodaConfig
    from coda.engine.context import RunContext
    from coda.sim.config import SimConfig


WORDINGS_PER_SCENE = 4  # train-tier paraphrases stored with each demonstration
GOAL_ROLES = 2  # roles a goal names: what is moved, where it goes (coda.policy.networks.ROLES)


class RoundBackend:
    """The round loop's side of a simulator backend, over its `SimBackend` (`self.sim`); a backend whose
    rounds differ subclasses it and overrides what differs."""
    measure_keyframes = 3  # keyframes kept per failed evaluation episode
    verify_base_split = "sft"  # the round-0 split whose scenes the counterfactual check edits

    def __init__(self, cfg: "CodaConfig", executor: Any = None) -> None:
        from coda.sim.backends import sim_backend

        self.cfg = cfg
        self.sim = sim_backend(cfg.sim.backend)  # the simulator's side of the contract
        self._executor = executor  # None: one made from `cfg.runtime` when first needed, closed with this backend
        self._own_executor = executor is None
        self._pool: Any = None
        self.worker_jobs = 0  # jobs sent to the workers so far

    @property
    def name(self) -> str:
        """The simulator backend's name."""
        return self.sim.name

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The evaluation splits of every family (the simulator's)."""
        return tuple(self.sim.eval_splits)

    @property
    def workers(self) -> int:
        """Workers the backend's parallel jobs run on (`runtime.workers`, or the given executor's)."""
        return self._executor.workers if self._executor is not None else max(1, int(self.cfg.runtime.workers))

    @property
    def check_batch(self) -> int:
        """Scenes `check_many` checks at once to good effect: one per worker."""
        return self.workers

    @property
    def executor(self) -> Any:
        """Where the backend's parallel jobs run (the run's executor, or one of `runtime`'s own)."""
        if self._executor is None:
            from coda.runtime.executor import make_executor

            self._executor = make_executor(self.cfg.runtime)
        return self._executor

    def _on_workers(self, fn: Callable[[Any], Any], jobs: list[Any]) -> Iterator[Any]:
        """`fn(job)` of each job on the backend's worker pool (each worker with its own backend and env,
        started once), results in job order."""
        if self._pool is None:
            from coda.policy.text import text_cache_path

            self._pool = self.executor.pool(_init_worker, (type(self), self.cfg.model_dump(mode="json"),
                                                           text_cache_path()), _close_worker)
        self.worker_jobs += len(jobs)
        return self._pool.map(fn, jobs)

    def __enter__(self) -> "RoundBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scenes -------------------------------------------------------------------------------------

    def scenario_from_dict(self, data: dict[str, Any]) -> Any:
        return self.sim.scenario_from_dict(data)

    def check(self, spec: Any) -> tuple[bool, str]:
        ok, reason, _ = self.check_in(None, spec)
        return ok, reason

    def check_in(self, env: Any, spec: Any) -> tuple[bool, str, Any]:
        """(valid, reason, details) of a scene, checked in a worker's `env` where the simulator needs one."""
        return self.sim.check(spec, env)

    def check_many(self, specs: Sequence[Any]) -> list[tuple[bool, str]]:
        """`check` of each scene, in order (across the workers when there are several)."""
        return [(ok, reason) for ok, reason, _ in self._check_details(specs)]

    def _check_details(self, specs: Sequence[Any]) -> list[tuple[bool, str, Any]]:
        if self.workers <= 1 or len(specs) <= 1:
            return [self.check_in(None, s) for s in specs]
        return list(self._on_workers(_check_job, list(specs)))

    def round_episodes(self, jobs: Sequence["EpisodeJob"], accepted: set[str] = frozenset()) -> list[Any]:
        """The train phase's episodes (`EpisodeJob`), in order, each with Φ attached (None where the expert
        failed an `expert` job); across the workers when there are several."""
        return list(self._episodes(jobs, accepted))

    def _episodes(self, jobs: Sequence["EpisodeJob"], accepted: set[str] = frozenset()) -> Iterator[Any]:
        if self.workers <= 1 or len(jobs) <= 1:
            env = self.make_env()
            try:
                for job in jobs:
                    yield run_episode_job(self, env, job, accepted)
            finally:
                env.close()
            return
        yield from self._on_workers(_episode_job, [(job, set(accepted)) for job in jobs])

    def close(self) -> None:
        """Stop the backend's workers (and its own executor, if it made one)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._own_executor and self._executor is not None:
            self._executor.close()
            self._executor = None

    def build_split(self, family: str, name: str, split: str, n: int, seed: int) -> tuple[list[Any], list[tuple[Any, str]]]:
        """(valid scenes, [(rejected scene, reason)]) of one split (`name` "train" is the SFT training set)."""
        return self.sim.build_split(family, name, split, n, seed,
                                    check_many=self._check_details if self.workers > 1 else None)

    def explore_body(self, families: Sequence[str], count: int, n_edits: int, seed: int) -> dict[str, Any]:
        """A generation body of random edits of training-distribution scenes."""
        return {"kind": "dr", "families": list(families), "n_edits": n_edits, "count": count, "seed": seed}

    def edit_body(self, parents: Sequence[Any], n_edits: int, seed: int, count: int) -> dict[str, Any]:
        """A generation body of `n_edits` random edits around each of `parents` in turn (the scene language's
        mutations)."""
        return {"kind": "mutate", "parents": [p.to_dict() for p in parents], "n_edits": n_edits, "seed": seed,
                "count": count}

    def explore_probes(self, ctx: "RunContext", r: int, n: int) -> list[Any]:
        """`n` valid single-edit variations of training-distribution scenes (see `coda.engine.round.explore_probes`)."""
        from coda.engine.strategies import candidate_stream

        stream = candidate_stream(self.explore_body(ctx.families, 0, 1, ctx.seed_for("probe", r)))
        return valid_scenes(self, stream, n, 4 * n + 10, seen=set(), skip_invalid_repeats=True).valid

    def held_apart(self, body: dict[str, Any], seed: int, n: int) -> list[Any]:
        """Up to `n` valid scenes of a stored mode program body run with another `seed`."""
        from coda.engine.round import held_apart_scenes

        return held_apart_scenes(body["program"], seed, n, self)

    # -- simulation ---------------------------------------------------------------------------------

    @classmethod
    def round_env(cls, sim: "SimConfig") -> Any:
        """An env of this backend acting in 5-D targets (`sim` its settings); worker processes make theirs here."""
        from coda.sim.backends import sim_backend

        return sim_backend(sim.backend).target_env(sim)

    def make_env(self) -> Any:
        return self.round_env(self.cfg.sim)

    def expert(self, spec: Any, env: Any) -> Any:
        return self.sim.expert(spec, env, self.cfg.sim)

    def collect_demos(self, specs: Sequence[Any], out_dir: Any) -> Any:
        """Expert demos in `specs` (canonical Φ, wordings and goal labels attached) into the dataset directory
        `out_dir`, in `specs` order (across the workers when there are several); a CollectReport."""
        from pathlib import Path

        from rich.progress import track

        from coda.policy.data import CollectReport, DemoWriter

        specs = list(specs)
        report = CollectReport(path=Path(out_dir), attempted=len(specs), succeeded=0, written=0, steps=0)
        episodes = self._episodes([EpisodeJob("expert", s) for s in specs])
        with DemoWriter(out_dir) as writer:
            for spec, ep in zip(specs, track(episodes, total=len(specs), description="collecting demos",
                                             transient=True)):
                if ep is None:  # the expert failed this scene
                    report.failed_specs.append(spec.spec_id)
                    continue
                writer.add(ep)
                report.succeeded += 1
                report.written += 1
                report.steps += ep.length
        return report

    def wordings(self, spec: Any) -> tuple[str, ...]:
        """Other instructions for a scene's goal that training may show in place of its own (the simulator's
        `wordings`, `WORDINGS_PER_SCENE` of them)."""
        return tuple(self.sim.wordings(spec, WORDINGS_PER_SCENE))

    def goal_labels(self, spec: Any) -> tuple[tuple[int, ...], float]:
        """What the scene's goal is, for supervising grounding: the simulator's `goal_labels`, its rows cut or
        padded to `GOAL_ROLES` (-1 for a role the goal does not have; none where the simulator gives none)."""
        rows, value = self.sim.goal_labels(spec)
        args = list(rows)[:GOAL_ROLES]
        return (tuple(args + [-1] * (GOAL_ROLES - len(args))) if args else ()), value

    def phis(self, env: Any, spec: Any, states: Sequence[Any], program: dict[str, Any] | None = None,
             accepted: set[str] = frozenset()) -> list[float]:
        """Φ(s_t) along `states` of an episode in `spec`: the failure mode's accepted staged potential of
        `program` (a training program body) bound to the scene, else the scene's canonical plan."""
        from coda.engine.compile import CompileError, RoleStage, bind_potential
        from coda.shaping.text2potential import StagedPotential, canonical_plan, compile_plan

        pot: Any = None
        if program is not None and program.get("potential_template") and program["mode"] in accepted:
            try:
                template = [RoleStage.model_validate(s) for s in program["potential_template"]]
                pot = StagedPotential(bind_potential(template, spec, self.sim.entity_roles(spec)), spec)
            except CompileError:
                pot = None  # the mode's stages do not fit this scene: the canonical plan does
        pot = pot or compile_plan(canonical_plan(spec), spec)
        return [float(x) for x in pot.phis(states)]

    # -- critic -------------------------------------------------------------------------------------

    def make_critic(self) -> Any:
        """The configured critic, `privileged` meaning the one that reads this simulator's state traces."""
        from coda.critic.base import make_critic

        return make_critic(self.cfg.critic, backend=self.name)

    def make_verifier(self, env: Any, seed: int) -> Any:
        """The verifier of this simulator's episodes (`coda.critic.base.make_verifier`), its demos in `env`."""
        from coda.critic.base import make_verifier

        return make_verifier(self.cfg.critic, self.cfg.shaping, sim=self.sim, env=env, seed=seed)

    def verify_many(self, env: Any, checkpoint: Any, seed: int, jobs: Sequence[tuple[Any, Any]],
                    base_scenes: Sequence[Any]) -> list[Any]:
        """The Verdict of each (diagnosis, EpisodeRecord) in `jobs`, in order: one verifier (`make_verifier`
        with `seed`) checks them against the policy of `checkpoint`, acting in `env`."""
        if self.workers > 1 and len(jobs) > 1:  # a diagnosis per job; each worker keeps its verifier and policy
            shipped, base = self.executor.ship(checkpoint), list(base_scenes)
            return list(self._on_workers(_verify_job, [(shipped, seed, d, ep, base) for d, ep in jobs]))
        verifier = self.make_verifier(env, seed)
        success = self.policy_success(checkpoint, env)
        try:
            return [verifier.check(d, ep, policy_success=success, base_scenes=base_scenes) for d, ep in jobs]
        finally:
            success.close()

    def policy_success(self, checkpoint: Any, env: Any) -> "PolicySuccess":
        """The verifier's question "does the policy of `checkpoint` solve this scene?", asked in `env` (and
        `runtime.rollout_batch` envs like it, rolled out together)."""
        return PolicySuccess(checkpoint, env, self.cfg.runtime.rollout_batch, self.make_env)

    # -- stage plans of failure modes (CoDA's planner, `coda.engine.curriculum.plan_modes`) -------------

    def plan_template(self, plan: str, spec: Any) -> Any:
        """A diagnosis's stage plan compiled on its scene and rewritten over roles, so that it carries to
        other scenes: (StageProgram, tuple[RoleStage, ...]), or the PlanRejected saying why it does not compile."""
        from coda.engine.compile import plan_template

        return plan_template(plan, spec, self.sim.entity_roles(spec))

    def plan_phis(self, env: Any, spec: Any, plan: str, states: Sequence[Any]) -> list[float]:
        """Φ along `states` of a diagnosis's stage plan (the scene's canonical plan where it does not compile)."""
        from coda.shaping.text2potential import PlanRejected, StagedPotential, canonical_plan, try_parse_plan

        prog = try_parse_plan(plan, spec)
        if isinstance(prog, PlanRejected):
            prog = try_parse_plan(canonical_plan(spec), spec)
        if isinstance(prog, PlanRejected):
            return []
        return [float(x) for x in StagedPotential(prog, spec).phis(states)]


_WORKER: dict[str, Any] = {}  # a backend worker's backend and env (and its verifier, per checkpoint and seed)


def _init_worker(backend_cls: type[RoundBackend], cfg: dict[str, Any], text_cache: Path | None = None) -> None:
    from coda.config import CodaConfig
    from coda.policy.text import worker_text_cache
    from coda.runtime.executor import LocalExecutor

    worker_text_cache(text_cache)  # the verifier's policy reads the same words the driver's did

    backend = backend_cls(CodaConfig.model_validate(cfg), LocalExecutor(1))  # a worker runs its jobs itself
    _WORKER.clear()
    _WORKER["backend"], _WORKER["env"] = backend, backend.make_env()


def _close_worker() -> None:
    """Close the env and verifier of a worker that ran in the driver's own process."""
    success = _WORKER.pop("success", None)
    if success is not None:
        success.close()
    env = _WORKER.pop("env", None)
    if env is not None:
        env.close()
    backend = _WORKER.pop("backend", None)
    if backend is not None:
        backend.close()
    _WORKER.clear()


def _check_job(spec: Any) -> tuple[bool, str, Any]:
    return _WORKER["backend"].check_in(_WORKER["env"], spec)


def _episode_job(job: tuple["EpisodeJob", set[str]]) -> Any:
    return run_episode_job(_WORKER["backend"], _WORKER["env"], job[0], job[1])


def _verify_job(job: tuple[Any, int, Any, Any, list[Any]]) -> Any:
    """One diagnosis' verdict in a worker: its verifier (per seed) and the policy (per checkpoint) are kept for
    the worker's next diagnoses, as one process keeps them for all of a round's. The verifier seeds its
    counterfactual edits per episode, so a verdict does not depend on which worker checks it."""
    from coda.runtime.executor import local_file

    shipped, seed, diagnosis, episode, base_scenes = job
    backend, env = _WORKER["backend"], _WORKER["env"]
    checkpoint = local_file(shipped)
    if _WORKER.get("verifier_key") != (str(checkpoint), seed):
        if _WORKER.get("success") is not None:
            _WORKER["success"].close()
        _WORKER["verifier_key"] = (str(checkpoint), seed)
        _WORKER["verifier"] = backend.make_verifier(env, seed)
        _WORKER["success"] = backend.policy_success(checkpoint, env)
    return _WORKER["verifier"].check(diagnosis, episode, policy_success=_WORKER["success"], base_scenes=base_scenes)


def round_env(sim: "SimConfig") -> Any:
    """An env of `sim.backend` acting in 5-D targets, as rollouts, demos and replays use it."""
    return round_backend_class(sim.backend).round_env(sim)


# Round-loop extensions by simulator backend name: a backend whose rounds need more than the generic
# `RoundBackend` over its `SimBackend` declares a subclass under the entry-point group "coda.backends" (e.g.
# `libero = "coda.engine.libero:LiberoBackend"` in pyproject.toml). Backends are found in the simulator
# registry (`coda.sim.backends.BACKENDS`); one without an extension runs on the generic round backend.
BACKENDS: Registry[type[RoundBackend]] = Registry("round backend", entry_points="coda.backends")


def round_backend_class(name: str) -> type[RoundBackend]:
    """The round backend class of the simulator backend `name`: its extension where one is declared, else
    the generic `RoundBackend`. Raises RegistryError naming the simulator backends when `name` is none."""
    from coda.sim.backends import sim_backend

    sim_backend(name)  # the simulator registry names the backends that exist
    return BACKENDS.get(name) if name in BACKENDS else RoundBackend


class PolicySuccess:
    """scene -> did the policy of `checkpoint` succeed in it, acting in `env` (memoised per scene: the
    rollout is deterministic). `prefetch(scenes)` rolls the ones not yet run out together, `batch` at a
    time (`rollout_batch`, extra envs made like `env` as needed), so the verifier's later questions about
    them cost nothing; the answers are those one rollout at a time gives."""

    def __init__(self, checkpoint: Any, env: Any, batch: int = 1, make_env: Callable[[], Any] | None = None) -> None:
        from coda.policy.checkpoint import load_policy

        self.policy = load_policy(checkpoint)
        self.policy.eval()
        self.env, self.batch, self.make_env = env, max(1, batch), make_env
        self.cache: dict[str, bool] = {}
        self._extra: list[Any] = []

    def __call__(self, spec: Any) -> bool:
        if spec.spec_id not in self.cache:
            self.prefetch([spec])
        return self.cache[spec.spec_id]

    def prefetch(self, specs: Sequence[Any]) -> None:
        import torch

        from coda.engine.rollout import rollout_batch

        todo = list({s.spec_id: s for s in specs if s.spec_id not in self.cache}.values())
        if not todo:
            return
        want = min(self.batch, len(todo)) - 1
        while self.make_env is not None and len(self._extra) < want:
            self._extra.append(self.make_env())
        with torch.no_grad():
            for spec, r in zip(todo, rollout_batch([self.env, *self._extra[:want]], self.policy, todo,
                                                    record_states=False)):
                self.cache[spec.spec_id] = r.success

    def close(self) -> None:
        """Close the envs this object made (not the one it was given)."""
        for env in self._extra:
            env.close()
        self._extra.clear()


@dataclass(frozen=True)
class EpisodeJob:
    """One episode of a round's training data: `expert` (a demo in a generated scene, kept if solved),
    `corrective` (a failed probe replayed, expert labels from `start` on) or `replay` (a probe replayed
    without labels, for the critic)."""

    kind: str
    spec: Any
    program: dict[str, Any] | None = None  # the mode's training program body, for Φ
    actions: np.ndarray | None = None  # the probe's actions (corrective, replay)
    start: int = 0  # first step whose expert label is kept (corrective)
    label_every: int = 1
    label_len: int | None = None


def run_episode_job(backend: RoundBackend, env: Any, job: EpisodeJob, accepted: set[str] = frozenset()) -> Any:
    """Run one `EpisodeJob` in `env` and attach Φ along its states (`backend.phis`)."""
    import dataclasses

    from coda.policy.data import corrective_episode, replayed_episode, run_expert_episode

    states: list[Any] = []  # the states the episode's observations came from, for Φ
    if job.kind == "expert":
        ep = run_expert_episode(env, job.spec, backend.expert(job.spec, env), states=states)
        if not ep.success:
            return None
    elif job.kind == "corrective":  # states read after each label's snapshot is restored: the replay's own
        ep = corrective_episode(env, job.spec, job.actions, backend.expert(job.spec, env),
                                label_every=job.label_every, label_len=job.label_len, states=states)
        ep.label_chunks = [c if t >= job.start else None for t, c in enumerate(ep.label_chunks or [])]
    elif job.kind == "replay":
        ep = replayed_episode(env, job.spec, job.actions, states=states)
    else:
        raise ValueError(f"episode job kind = {job.kind!r}; expected 'expert', 'corrective' or 'replay'")
    phis = backend.phis(env, job.spec, states, job.program, accepted)
    rows, value = backend.goal_labels(job.spec)
    return dataclasses.replace(ep, potentials=np.asarray(phis, np.float32), wordings=backend.wordings(job.spec),
                               goal_rows=rows, goal_value=value)


@dataclass
class Drawn:
    """What `valid_scenes` drew: the checked candidates in stream order, up to the n-th valid one."""

    checked: list[tuple[Any, bool, str]] = field(default_factory=list)  # (scene, valid, reason)
    tries: int = 0  # candidates drawn from the stream, repeats included
    stopped: str = ""  # why the stream ended before n were valid ("" when it did not)

    @property
    def valid(self) -> list[Any]:
        return [spec for spec, ok, _ in self.checked if ok]


def valid_scenes(backend: RoundBackend, stream: Iterator[Any], n: int, max_tries: int, *,
                 seen: set[str] | None = None, skip_invalid_repeats: bool = False, batch: int | None = None) -> Drawn:
    """The first `n` valid scenes of `stream` (at most `max_tries` candidates drawn), checked in batches.

    Each batch holds as many new candidates as are still wanted (at least `batch`, default the backend's
    `check_batch`), checked together by `backend.check_many`; results are read in stream order and
    reading stops at the n-th valid one, so the outcome (checked candidates, `seen`, tries) is the one a
    check per candidate would give, whatever the batch size. A candidate whose `spec_id` is in `seen` is
    skipped (and counted as a try); drawn candidates join `seen`. With `skip_invalid_repeats`, only valid
    scenes count as seen (a repeat of an invalid candidate is checked again, as the probe draw always did).
    A stream raising `StopIteration` or a `CodaError` ends the draw, with the reason in `stopped`.
    """
    from coda.errors import first_line
    from coda.errors import CodaError

    seen = set() if seen is None else seen
    batch = max(1, int(batch if batch is not None else backend.check_batch))
    out, got = Drawn(), 0
    while got < n and out.tries < max_tries and not out.stopped:
        pending: list[tuple[Any, int]] = []  # (candidate, tries when drawn)
        drawn_ids: set[str] = set()
        while len(pending) < max(n - got, batch) and out.tries < max_tries:
            try:
                spec = next(stream)
            except StopIteration:
                out.stopped = f"ran dry after {out.tries} candidates"
                break
            except CodaError as e:
                out.stopped = f"stopped after {out.tries} candidates: {first_line(e)}"
                break
            out.tries += 1
            if spec.spec_id in seen or spec.spec_id in drawn_ids:
                pending.append((None, out.tries))  # a repeat: a try, not a check
                continue
            drawn_ids.add(spec.spec_id)
            pending.append((spec, out.tries))
        fresh = [spec for spec, _ in pending if spec is not None]
        results = iter(backend.check_many(fresh) if fresh else [])
        for spec, tries in pending:
            if spec is None:
                continue
            ok, reason = next(results)
            if not skip_invalid_repeats or ok:
                seen.add(spec.spec_id)
            out.checked.append((spec, ok, reason))
            got += int(ok)
            if got >= n:  # what follows was drawn ahead: give it back as never drawn
                out.tries, out.stopped = tries, ""
                break
    return out


def backend_for(cfg: "CodaConfig", executor: Any = None) -> RoundBackend:
    """The round backend of `cfg.sim.backend` (RegistryError naming the known ones otherwise), running its
    parallel jobs on `executor` (default: one of `cfg.runtime`'s own)."""
    return round_backend_class(cfg.sim.backend)(cfg, executor)


__all__ = ["BACKENDS", "Drawn", "EpisodeJob", "PolicySuccess", "RoundBackend", "backend_for", "round_backend_class", "round_env",
           "run_episode_job", "valid_scenes"]
