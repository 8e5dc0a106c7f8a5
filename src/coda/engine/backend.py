"""What the round loop asks of a simulator backend (`SimConfig.backend`).

The phases of a run (`coda.engine.loop`, `coda.engine.round`, `coda.engine.strategies`) are the same for
every backend; everything that depends on what a scene *is* goes through a `RoundBackend`:

| method | what it gives the loop |
| --- | --- |
| `scenario_from_dict` | a stored scene record back as a scene (`spec_id`, `family`, `to_dict()`) |
| `make_env` | an env acting in CoDA's 5-D targets (`reset_to`, `step`, `state`, `get_state`, `set_state`) |
| `expert` | the scripted expert of a scene, acting in targets (demos, corrective labels) |
| `check`, `check_many` | validity of a generated scene: (valid, reason); of many, in order |
| `round_episodes` | the train phase's demos and replays (`EpisodeJob`s) with Φ, in order |
| `phis` | Φ along an episode's states (the scene's canonical staged potential, or a mode's) |
| `build_split` | round 0: the training scenes and the fixed evaluation splits of a family |
| `explore_probes`, `explore_body` | single-edit probe scenes, and the body of a random-edit source |
| `held_apart` | scenes of a stored generation program run with another seed |
| `make_critic`, `make_verifier` | the critic and the verifier of the backend's episodes |
| `verify_many` | the verdicts of a round's diagnoses, in order |
| `planner` | the planner of a strategy on this backend (CoDA's failure-mode compiler differs per backend) |

`valid_scenes(backend, stream, n, max_tries)` draws candidates from a scene stream and checks them in
batches (`check_many`, which a backend may spread over worker processes) until `n` are valid; what it keeps
is what checking one candidate at a time would keep.

`backend_for(cfg)` returns the configured one from `BACKENDS`: `tabletop` (CoDA's own simulator) is
registered here; any other is declared by its package under the entry-point group `coda.backends` — this
package declares `libero`, LIBERO / LIBERO-PRO (`coda.engine.libero.LiberoBackend`) — and imported when a
run asks for it. `round_env(sim)` is the configured backend's `round_env`, the env worker processes make.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.registry import Registry

if TYPE_CHECKING:
    from coda.config import CodaConfig
    from coda.engine.context import RunContext
    from coda.sim.config import SimConfig


WORDINGS_PER_SCENE = 4  # train-tier paraphrases stored with each demonstration
GOAL_ROLES = 2  # roles a goal names: what is moved, where it goes (coda.policy.networks.ROLES)


class RoundBackend:
    """The tabletop backend; other backends subclass it and override what differs."""

    name = "tabletop"
    eval_splits: tuple[str, ...] = ("sft", "position", "instruction", "task", "object", "distractor", "physics")
    measure_keyframes = 3  # keyframes kept per failed evaluation episode
    verify_base_split = "sft"  # the round-0 split whose scenes the counterfactual check edits
    check_batch = 1  # scenes `check_many` checks at once to good effect (more when it uses worker processes)

    def __init__(self, cfg: "CodaConfig") -> None:
        self.cfg = cfg

    # -- scenes -------------------------------------------------------------------------------------

    def scenario_from_dict(self, data: dict[str, Any]) -> Any:
        from coda.scene.spec import ScenarioSpec

        return ScenarioSpec.from_dict(data)

    def check(self, spec: Any) -> tuple[bool, str]:
        from coda.sim.tabletop.validity import sim_check

        ok, reason, _ = sim_check(spec)
        return ok, reason

    def check_many(self, specs: Sequence[Any]) -> list[tuple[bool, str]]:
        """`check` of each scene, in order."""
        return [self.check(s) for s in specs]

    def round_episodes(self, jobs: Sequence["EpisodeJob"], accepted: set[str] = frozenset()) -> list[Any]:
        """The train phase's episodes (`EpisodeJob`), in order, each with Φ attached (None where the expert
        failed an `expert` job)."""
        env = self.make_env()
        try:
            return [run_episode_job(self, env, job, accepted) for job in jobs]
        finally:
            env.close()

    def close(self) -> None:
        """Release what the backend holds (worker processes, environments)."""

    def build_split(self, family: str, name: str, split: str, n: int, seed: int) -> tuple[list[Any], list[tuple[Any, str]]]:
        """(valid scenes, [(rejected scene, reason)]) of one split (`name` "train" is the SFT training set)."""
        from coda.scene.splits import build_split
        from coda.sim.tabletop.validity import sim_check

        res = build_split(family, split, n, seed, check=sim_check, workers=self.cfg.runtime.workers)
        return list(res.valid), [(r.spec, r.reason) for r in res.rejected]

    def explore_body(self, families: Sequence[str], count: int, n_edits: int, seed: int) -> dict[str, Any]:
        """A generation body of random edits of training-distribution scenes."""
        return {"kind": "dr", "families": list(families), "n_edits": n_edits, "count": count, "seed": seed}

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
        from coda.sim.tabletop.env import TabletopEnv

        return TabletopEnv(config=sim)

    def make_env(self) -> Any:
        return self.round_env(self.cfg.sim)

    def expert(self, spec: Any, env: Any) -> Any:
        from coda.sim.tabletop.experts import expert_for

        return expert_for(spec, self.cfg.sim.expert_chunk)

    def collect_demos(self, specs: Sequence[Any], out_dir: Any) -> Any:
        """Expert demos in `specs` (canonical Φ attached) into the dataset directory `out_dir`; a DemoReport."""
        from coda.policy.data import collect_demos

        env = self.make_env()
        try:
            def phi(spec: Any, states: Sequence[Any]) -> np.ndarray:
                return np.asarray(self.phis(env, spec, states), np.float32)

            return collect_demos(env, list(specs), lambda s: self.expert(s, env), out_dir, progress=True,
                                 potential_fn=phi, wordings_fn=self.wordings,
                                 goal_fn=self.goal_labels)
        finally:
            env.close()

    def wordings(self, spec: Any) -> tuple[str, ...]:
        """Other instructions for a scene's goal that training may show in place of its own (`train` tier)."""
        from coda.scene.language import wordings

        return wordings(spec, WORDINGS_PER_SCENE)

    def goal_labels(self, spec: Any) -> tuple[tuple[int, ...], float]:
        """What the scene's goal is, for supervising grounding: the observation rows of the entities its first
        conjunct names in role order (moved, destination; -1 for a role it does not have) and its number (a
        drawer's opening fraction; NaN for none)."""
        rows = {e.name: i for i, e in enumerate((*spec.objects, *spec.containers, *spec.drawers, *spec.regions))}
        g = spec.goal[0]
        args = [rows[a] for a in g.args][:GOAL_ROLES]
        return tuple(args + [-1] * (GOAL_ROLES - len(args))), float("nan") if g.value is None else float(g.value)

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
                pot = StagedPotential(bind_potential(template, spec), spec)
            except CompileError:
                pot = None  # the mode's stages do not fit this scene: the canonical plan does
        pot = pot or compile_plan(canonical_plan(spec), spec)
        return [float(x) for x in pot.phis(states)]

    # -- critic -------------------------------------------------------------------------------------

    def make_critic(self) -> Any:
        from coda.critic.base import make_critic

        return make_critic(self.cfg.critic)

    def make_verifier(self, env: Any, seed: int) -> Any:
        from coda.critic.verify import Verifier

        return Verifier(self.cfg.critic, self.cfg.shaping, env_factory=lambda: env, seed=seed)

    def verify_many(self, env: Any, checkpoint: Any, seed: int, jobs: Sequence[tuple[Any, Any]],
                    base_scenes: Sequence[Any]) -> list[Any]:
        """The Verdict of each (diagnosis, EpisodeRecord) in `jobs`, in order: one verifier (`make_verifier`
        with `seed`) checks them against the policy of `checkpoint`, acting in `env`."""
        verifier = self.make_verifier(env, seed)
        success = PolicySuccess(checkpoint, env, self.cfg.runtime.rollout_batch, self.make_env)
        try:
            return [verifier.check(d, ep, policy_success=success, base_scenes=base_scenes) for d, ep in jobs]
        finally:
            success.close()

    def planner(self, strategy: str, default: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return default


def round_env(sim: "SimConfig") -> Any:
    """An env of `sim.backend` acting in 5-D targets, as rollouts, demos and replays use it."""
    return BACKENDS.get(sim.backend).round_env(sim)


# Round backends by `sim.backend`: the tabletop here, others declared by entry point (group "coda.backends",
# e.g. `libero = "coda.engine.libero:LiberoBackend"` in pyproject.toml), so adding one edits no engine code.
BACKENDS: Registry[type[RoundBackend]] = Registry("round backend", entry_points="coda.backends")
BACKENDS.register("tabletop", RoundBackend)


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
    from coda.engine.round import _first_line
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
                out.stopped = f"stopped after {out.tries} candidates: {_first_line(e)}"
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


def backend_for(cfg: "CodaConfig") -> RoundBackend:
    """The round backend of `cfg.sim.backend` (RegistryError naming the known ones otherwise)."""
    return BACKENDS.get(cfg.sim.backend)(cfg)


__all__ = ["BACKENDS", "Drawn", "EpisodeJob", "PolicySuccess", "RoundBackend", "backend_for", "round_env",
           "run_episode_job", "valid_scenes"]
