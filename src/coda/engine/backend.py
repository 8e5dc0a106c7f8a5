"""What the round loop asks of a simulator backend (`SimConfig.backend`).

The phases of a run (`coda.engine.loop`, `coda.engine.round`, `coda.engine.strategies`) are the same for
every backend; everything that depends on what a scene *is* goes through a `RoundBackend`:

| method | what it gives the loop |
| --- | --- |
| `scenario_from_dict` | a stored scene record back as a scene (`spec_id`, `family`, `to_dict()`) |
| `make_env` | an env acting in CoDA's 5-D targets (`reset_to`, `step`, `state`, `get_state`, `set_state`) |
| `expert` | the scripted expert of a scene, acting in targets (demos, corrective labels) |
| `check` | validity of a generated scene: (valid, reason) |
| `phis` | Φ along an episode's states (the scene's canonical staged potential, or a mode's) |
| `build_split` | round 0: the training scenes and the fixed evaluation splits of a family |
| `explore_probes`, `explore_body` | single-edit probe scenes, and the body of a random-edit source |
| `held_apart` | scenes of a stored generation program run with another seed |
| `make_critic`, `make_verifier` | the critic and the verifier of the backend's episodes |
| `planner` | the planner of a strategy on this backend (CoDA's failure-mode compiler differs per backend) |

`backend_for(cfg)` returns the configured one; `tabletop` is CoDA's own simulator, `libero` is LIBERO /
LIBERO-PRO (`coda.sim.libero.rounds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.registry import Registry

if TYPE_CHECKING:
    from coda.config import CodaConfig
    from coda.engine.context import RunContext
    from coda.sim.config import SimConfig


class RoundBackend:
    """The tabletop backend; other backends subclass it and override what differs."""

    name = "tabletop"
    eval_splits: tuple[str, ...] = ("sft", "position", "instruction", "task", "object", "distractor", "physics")
    measure_keyframes = 3  # keyframes kept per failed evaluation episode
    verify_base_split = "sft"  # the round-0 split whose scenes the counterfactual check edits

    def __init__(self, cfg: "CodaConfig") -> None:
        self.cfg = cfg

    # -- scenes -------------------------------------------------------------------------------------

    def scenario_from_dict(self, data: dict[str, Any]) -> Any:
        from coda.scene.spec import ScenarioSpec

        return ScenarioSpec.from_dict(data)

    def check(self, spec: Any) -> tuple[bool, str]:
        from coda.scene.splits import sim_check

        ok, reason, _ = sim_check(spec)
        return ok, reason

    def build_split(self, family: str, name: str, split: str, n: int, seed: int) -> tuple[list[Any], list[tuple[Any, str]]]:
        """(valid scenes, [(rejected scene, reason)]) of one split (`name` "train" is the SFT training set)."""
        from coda.scene.splits import build_split

        res = build_split(family, split, n, seed, workers=self.cfg.runtime.workers)
        return list(res.valid), [(r.spec, r.reason) for r in res.rejected]

    def explore_body(self, families: Sequence[str], count: int, n_edits: int, seed: int) -> dict[str, Any]:
        """A generation body of random edits of training-distribution scenes."""
        return {"kind": "dr", "families": list(families), "n_edits": n_edits, "count": count, "seed": seed}

    def explore_probes(self, ctx: "RunContext", r: int, n: int) -> list[Any]:
        """`n` valid single-edit variations of training-distribution scenes (see `strategies.explore_probes`)."""
        from coda.engine.strategies import candidate_stream

        stream = candidate_stream(self.explore_body(ctx.families, 0, 1, ctx.seed_for("probe", r)))
        out: list[Any] = []
        for _ in range(4 * n + 10):
            if len(out) >= n:
                break
            spec = next(stream)
            if spec.spec_id not in {s.spec_id for s in out} and self.check(spec)[0]:
                out.append(spec)
        return out

    def held_apart(self, body: dict[str, Any], seed: int, n: int) -> list[Any]:
        """Up to `n` valid scenes of a stored mode program body run with another `seed`."""
        from coda.engine.round import held_apart_scenes

        return held_apart_scenes(body["program"], seed, n)

    # -- simulation ---------------------------------------------------------------------------------

    def make_env(self) -> Any:
        return round_env(self.cfg.sim)

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
                                 potential_fn=phi)
        finally:
            env.close()

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

    def planner(self, strategy: str, default: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return default


def round_env(sim: "SimConfig") -> Any:
    """An env of `sim.backend` acting in 5-D targets, as rollouts, demos and replays use it."""
    if sim.backend == "libero":
        from coda.sim.libero.rounds import LiberoRoundEnv

        return LiberoRoundEnv(sim)
    from coda.sim.tabletop.env import TabletopEnv

    return TabletopEnv(config=sim)


BACKENDS: Registry[Callable[["CodaConfig"], RoundBackend]] = Registry("round backend")
BACKENDS.register("tabletop", RoundBackend)


def _libero(cfg: "CodaConfig") -> RoundBackend:
    from coda.sim.libero.rounds import LiberoBackend

    return LiberoBackend(cfg)


BACKENDS.register("libero", _libero)


def backend_for(cfg: "CodaConfig") -> RoundBackend:
    """The round backend of `cfg.sim.backend` (RegistryError naming the known ones otherwise)."""
    return BACKENDS.get(cfg.sim.backend)(cfg)


__all__ = ["BACKENDS", "RoundBackend", "backend_for", "round_env"]
