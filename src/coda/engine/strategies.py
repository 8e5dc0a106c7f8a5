"""Strategies: how a round spends its generation budget. Everything else in a round is shared.

| strategy      | probes                    | critic + verify | generation budget goes to                               | shaping |
| ------------- | ------------------------- | --------------- | ------------------------------------------------------- | ------- |
| `coda`        | explore + re-diagnosis    | yes             | compiled programs per verified failure mode, by LP      | Φ       |
| `coda-sparse` | explore + re-diagnosis    | yes             | the same                                                | none    |
| `replay`      | explore                   | no              | random mutations around failed probe scenes             | none    |
| `accel`       | explore + last mutations  | no              | mutations of the highest-scoring scenes in a PLR buffer | none    |
| `plr`         | explore + last replays    | no              | replay of buffer scenes by score and staleness          | none    |
| `dr`          | explore                   | no              | uniform domain randomisation over all operators         | none    |
| `dagger`      | explore                   | no              | domain randomisation; its failed probes relabelled      | none    |
| `sft`         | –                         | –               | no rounds                                               | –       |

Every closed-loop strategy fine-tunes by behaviour cloning by default (`engine.improvement = "bc"`): the
actor never reads the chunk critic, and `coda` and `coda-sparse` fine-tune identical policies from identical
data. Shaping reaches the actor with `engine.improvement = "awr"` (advantage-weighted regression, the critic
trained on the round's demos and its own probe rollouts; `coda`'s critic learns from shaped targets, the
others' from the sparse task reward) or with value-guided selection (`engine.value_guided_samples`). At the
headline's sizes both cost success against BC (README, headline section), so neither is the default.

The round that runs them reads top to bottom in `coda.engine.round.run_round`. A strategy is data plus
one callable, its *planner*: `(Evidence) -> Plan`, from the round's probe episodes,
diagnoses and verdicts to generation sources whose counts sum to the budget (and, for CoDA, per-mode training
programs and potentials). Register new ones in `STRATEGIES`; the round loop does not change.

Every generation source is stored as a GenerationProgram record whose body alone re-creates its candidate
stream (`candidate_stream`, kinds registered in `STREAMS`), so a resumed run regenerates exactly the same
scenes. Each round also stores a `fill` source (domain randomisation): the generate phase draws from it when
another source runs dry, so every strategy produces exactly its budget of valid scenes.

Level scores of the UED baselines (`plr`, `accel`) come from the probe episodes: `failure` of the policy's
outcome (`coda.engine.ued.Score`). Their probes start with the scenes they curated last round (PLR's replays,
ACCEL's mutations; `rescore_probes`), so a replayed level's score is refreshed by the policy that trained on it
and a mutated level is scored before it can be chosen as a parent. An episode the simulator cut short has no score (NaN); non-finite scores
are dropped before they reach the level buffer, and the body of each PLR/ACCEL program stores the buffer it
sampled from (scene ids and scores), so replayed scenes can be checked against it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.engine.context import RunContext
from coda.errors import CodaError
from coda.registry import Registry
from coda.scene.spec import ScenarioSpec

if TYPE_CHECKING:
    from coda.engine.round import ProbeEpisode


class StrategyError(CodaError):
    """A strategy was misconfigured or asked for something it cannot do."""


@dataclass(frozen=True)
class Evidence:
    """What a planner sees of the round so far."""

    ctx: RunContext
    round: int
    probes: Sequence[ProbeEpisode]
    diagnoses: dict[int, Any]  # episode id -> Diagnosis | DiagnosisRejected
    verdicts: dict[int, Any]  # episode id -> Verdict
    budget: int  # scenes to generate
    seed: int  # the round's generation seed

    def dr_body(self, count: int, n_edits: int = 2, tag: str = "generate") -> dict[str, Any]:
        """A domain-randomisation source over the run's families (the backend's random edits)."""
        return self.ctx.backend.explore_body(self.ctx.families, count, n_edits, self.ctx.seed_for(tag, self.round))


@dataclass
class Plan:
    """A planner's answer. Source counts sum to the budget.

    Attributes:
        sources: (key, generation body with "kind" and "count") per generation source.
        corrective: probe episode ids the expert relabels for training (strategies without training programs).
        training: (key, TrainingProgramBody JSON) per failure-mode training program (CoDA).
        potentials: one dict per failure mode whose potential was compiled this round:
            {"mode", "stage_program", "accepted", "reason"} (written as Potential records).
        modes: new failure modes: key -> {"description", "embedding"}.
    """

    sources: list[tuple[str, dict[str, Any]]]
    corrective: list[int] = field(default_factory=list)
    training: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    potentials: list[dict[str, Any]] = field(default_factory=list)
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)


Planner = Callable[[Evidence], Plan]


@dataclass(frozen=True)
class Strategy:
    """A named way of running rounds: whether a critic diagnoses failures, whether training is shaped by Φ,
    and the planner that spends the generation budget."""

    name: str
    uses_critic: bool  # diagnose + verify failed probes
    shaped: bool  # chunk critic learns from potential-shaped targets
    plan: Planner | None  # None: the strategy runs no rounds (sft)
    rescore: tuple[str, ...] = ()  # sources whose scenes of the last round are probed again (re-scored) first

    @property
    def runs_rounds(self) -> bool:
        return self.plan is not None


STRATEGIES: Registry[Strategy] = Registry("strategy")


def make_strategy(ctx: RunContext) -> Strategy:
    """The configured strategy. Raises RegistryError listing the available ones."""
    return STRATEGIES.get(ctx.cfg.engine.strategy)


# ---- candidate streams (a program body → scenes) -----------------------------------------------------

StreamFactory = Callable[[dict[str, Any]], Iterator[ScenarioSpec]]
# Body kinds of other backends are declared by entry point (group "coda.streams": `libero`, LIBERO's BDDL edits).
STREAMS: Registry[StreamFactory] = Registry("generation body kind", entry_points="coda.streams")
MAX_UNBUILDABLE = 20  # consecutive scenes a program may fail to build before its stream ends


def candidate_stream(body: dict[str, Any]) -> Iterator[ScenarioSpec]:
    """The (endless or finite) stream of candidate scenes a stored generation body describes.

    Raises:
        RegistryError: unknown body kind (lists the known ones).
    """
    return STREAMS.get(str(body.get("kind")))(body)


def _dr_stream(body: dict[str, Any]) -> Iterator[ScenarioSpec]:
    from coda.engine.mutate import dr_scene

    rng = np.random.default_rng(body.get("seed", 0))
    families = body["families"]
    while True:
        yield dr_scene(rng, families[int(rng.integers(len(families)))], int(body["n_edits"]))


def _mutate_stream(body: dict[str, Any]) -> Iterator[ScenarioSpec]:
    from coda.engine.mutate import mutate

    rng = np.random.default_rng(body.get("seed", 0))
    parents = [ScenarioSpec.from_dict(p) for p in body["parents"]]
    for i in range(len(parents) * 50):  # bounded: a parent no edit fits cannot stall the phase
        try:
            yield mutate(rng, parents[i % len(parents)], int(body["n_edits"]))
        except CodaError:  # an edit that does not fit this parent; the next parent is tried
            continue


def _scenes_stream(body: dict[str, Any]) -> Iterator[Any]:
    from coda.sim.backends import scenario_record

    yield from (scenario_record(p) for p in body["scenes"])  # any backend's stored scenes


def _program_stream(body: dict[str, Any]) -> Iterator[ScenarioSpec]:
    from coda.scene.programs import ProgramError, load_program, make_scene

    program = load_program(body["program"])
    i, failed = 0, 0
    while failed < MAX_UNBUILDABLE:
        try:
            spec = make_scene(program, i)
        except ProgramError:  # this index cannot be built; the program's next scene is tried
            failed += 1
        else:
            failed = 0
            yield spec
        i += 1


for _kind, _factory in (("dr", _dr_stream), ("mutate", _mutate_stream), ("scenes", _scenes_stream),
                        ("program", _program_stream)):
    STREAMS.register(_kind, _factory)


# ---- planners of the baselines -------------------------------------------------------------------------

def plan_dr(ev: Evidence) -> Plan:
    """Domain randomisation: the whole budget on random scenes (two random edits of a training scene)."""
    return Plan([("dr", ev.dr_body(ev.budget))])


def plan_replay(ev: Evidence) -> Plan:
    """Closed loop without a critic: one random edit (the backend's) around each failed probe scene in turn
    (random scenes if none failed)."""
    failed = [p.spec for p in ev.probes if not p.success]
    if not failed:
        return Plan([("dr", ev.dr_body(ev.budget))])
    return Plan([("replay", ev.ctx.backend.edit_body(failed, 1, ev.seed, ev.budget))])


def corrective_budget(ctx: RunContext) -> int:
    """How many failed probe episodes a round may have the expert relabel: a quarter of the label budget
    (`engine.demo_budget`); the rest goes to expert demos in the generated scenes."""
    return ctx.cfg.engine.demo_budget // 4


def plan_dagger(ev: Evidence) -> Plan:
    """DAgger: domain-randomised scenes, and the expert relabels the policy's own failed probe episodes
    along the states the policy visited (from their first step). It relabels as many failures as CoDA may
    (`corrective_budget`), and the rest of the label budget goes to expert demos in the generated scenes, so
    both spend the same labels; what differs is which failures and scenes they pick."""
    failed = [p.episode_id for p in ev.probes if not p.success][: corrective_budget(ev.ctx)]
    return Plan([("dr", ev.dr_body(ev.budget))], corrective=failed)


def level_score(success: bool, error: str | None) -> float:
    """A probe episode's level score (`failure` of its outcome); NaN when the simulator cut it short."""
    from coda.engine.ued import SceneResults, Score

    return math.nan if error else Score.FAILURE.compute(SceneResults(successes=[float(success)]))


def level_buffer(ctx: RunContext, r: int, capacity: int, *, replayed: bool = False) -> tuple[Any, Any, int]:
    """The PLR level buffer of round r: every probe so far with its score, oldest round first.

    With `replayed`, PLR's replay draws of rounds 1 .. r − 1 are made again (`plr_draw`, same seeds on the same
    buffer, hence the same scenes), so the scenes replayed then carry the staleness they had.

    Returns:
        (sampler, buffer, number of episodes left out because their score was not finite).
    """
    from coda.engine.ued import PLRSampler

    sampler = PLRSampler(capacity=capacity)
    buf = sampler.initial_buffer()
    dropped = 0
    for rr in range(1, r + 1):
        eps = [e for e in ctx.memory.list("episode", run_id=ctx.run_id, round_idx=rr) if e.phase == "evaluate"]
        scores = [level_score(e.success, e.info.get("error")) for e in eps]
        keep = [(e, s) for e, s in zip(eps, scores) if math.isfinite(s)]  # NaN/inf never enter the buffer
        dropped += len(eps) - len(keep)
        specs = [ctx.backend.scenario_from_dict(ctx.memory.get("scenario", e.scenario_id).spec) for e, _ in keep]
        buf = sampler.insert(buf, specs, np.array([s for _, s in keep], dtype=np.float64))
        if replayed and rr < r:
            buf, _ = plr_draw(sampler, buf, np.random.default_rng(ctx.seed_for("generate", rr)),
                              ctx.cfg.engine.generation_budget)
    return sampler, buf, dropped


def plr_draw(sampler: Any, buf: Any, rng: np.random.Generator, budget: int) -> tuple[Any, np.ndarray]:
    """PLR's draw for one round: each of `budget` scenes is a replay with probability replay_prob; the replays
    are distinct buffer scenes drawn by score and staleness. Returns (buffer after the draw, drawn indices)."""
    n = min(len(buf), sum(sampler.decide(buf, rng) == "replay" for _ in range(budget)))
    return sampler.sample_replay(buf, rng, n, unique=True) if n else (buf, np.zeros(0, np.int64))


def _buffer_summary(buf: Any, dropped: int) -> dict[str, Any]:
    return {"buffer": [s.spec_id for s in buf.scenes], "scores": [float(x) for x in buf.scores],
            "dropped_scores": dropped}


def plan_plr(ev: Evidence) -> Plan:
    """PLR: each budget unit replays a buffer scene with probability replay_prob (distinct scenes, by score
    and staleness), the rest are fresh random scenes."""
    sampler, buf, dropped = level_buffer(ev.ctx, ev.round, max(4 * ev.budget, 16), replayed=True)
    drawn, idx = plr_draw(sampler, buf, np.random.default_rng(ev.seed), ev.budget)
    out: list[tuple[str, dict[str, Any]]] = []
    if len(idx):
        out.append(("plr_replay", {"kind": "scenes", "count": len(idx), **_buffer_summary(buf, dropped),
                                   "scenes": [drawn.scenes[i].to_dict() for i in idx]}))
    if ev.budget - len(idx):
        out.append(("plr_new", ev.dr_body(ev.budget - len(idx))))
    return Plan(out)


def plan_accel(ev: Evidence) -> Plan:
    """ACCEL: one random edit (the backend's) of the highest-scoring buffer scenes (random scenes while the
    buffer is empty)."""
    from coda.engine.ued import ACCELSampler

    sampler, buf, dropped = level_buffer(ev.ctx, ev.round, max(4 * ev.budget, 16))
    if not len(buf):
        return Plan([("dr", ev.dr_body(ev.budget))])
    rng = np.random.default_rng(ev.seed)
    parents = ACCELSampler(capacity=sampler.capacity).select_parents(buf, rng, max(1, ev.budget // 4))
    body = ev.ctx.backend.edit_body([buf.scenes[i] for i in parents], 1, ev.seed, ev.budget)
    return Plan([("accel", {**body, **_buffer_summary(buf, dropped)})])


def _plan_modes(ev: Evidence) -> Plan:
    from coda.engine.curriculum import plan_modes

    return plan_modes(ev)


for _s in (Strategy("coda", True, True, _plan_modes), Strategy("coda-sparse", True, False, _plan_modes),
           Strategy("replay", False, False, plan_replay), Strategy("accel", False, False, plan_accel, ("accel",)),
           Strategy("plr", False, False, plan_plr, ("plr_replay",)), Strategy("dr", False, False, plan_dr),
           Strategy("dagger", False, False, plan_dagger),
           Strategy("sft", False, False, None)):
    STRATEGIES.register(_s.name, _s)


__all__ = ["Evidence", "Plan", "Planner", "STRATEGIES", "STREAMS", "Strategy", "StrategyError", "candidate_stream", "corrective_budget", "level_buffer", "level_score", "make_strategy", "plr_draw"]
