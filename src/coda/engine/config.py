"""Round-loop configuration (cheap)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coda.config_base import Section


class EngineConfig(Section):
    strategy: str = "coda"  # registered strategy: coda, coda-sparse, replay, accel, plr, dr, dagger, sft
    rounds: int = Field(5, ge=0)  # co-evolution rounds after SFT
    generation_budget: int = Field(64, ge=1)  # new scenes generated per round
    demo_budget: int = Field(64, ge=0)  # expert demonstrations per round
    probe_scenes: int = Field(32, ge=1)  # probe scenes rolled out per round
    exploration_floor: float = Field(0.1, ge=0, le=1)  # minimum budget share per active failure mode
    max_modes: int = Field(0, ge=0)  # failure modes given scenes per round, chosen by learning progress (0: every active mode)
    explore_share: float = Field(0.25, ge=0, le=1)  # budget share for new random variations (coda strategies)
    max_diagnoses: int = Field(8, ge=0)  # failed probe episodes diagnosed and verified per round
    measure_every_round: bool = True  # roll out every evaluation split after each round (False: after the last only)
    measure_rounds: tuple[int, ...] = ()  # rounds after which the evaluation splits are rolled out anyway
    mode_probes: int = Field(4, ge=1)  # held-apart probe scenes per failure-mode program for learning progress
    seed: int = 0  # master seed of the run
    mode_merge_threshold: float = Field(0.8, ge=-1, le=1)  # explanation cosine that merges groups of one failure mode under different keys
    solved_threshold: float = Field(0.9, gt=0, le=1)  # probe success at which a failure mode is solved and retired
    stuck_rounds: int = Field(2, ge=1)  # rounds without progress after which a failure mode is stuck
    min_progress: float = Field(0.05, ge=0, le=1)  # success gain a round needs to count as progress
    max_level: int = Field(3, ge=0, le=6)  # widest variation level of a generation program
    expert_weight: float = Field(1.0, ge=0)  # data weight of expert demos in generated scenes
    corrective_weight: float = Field(1.0, ge=0)  # data weight of corrective demos from failure states (0: none are labelled)
    replay_weight: float = Field(1.0, ge=0)  # data weight of the SFT demos replayed against forgetting
    layout_prior: Literal["natural", "sampled", "replay"] = "natural"  # the pointers' layout prior (where targets usually are) learns the targets' frequencies in the demos as collected ("natural"), as the data weights draw them ("sampled": oversampled generated scenes, made to break that prior, flatten it), or in the round-0 demos alone ("replay": the training distribution, however many generated demos the rounds add)
    max_oversample: float | None = Field(4.0, ge=1)  # no data source fills more than this times its share of all BC samples (None: no cap)
    retrain: bool = False  # a round trains a fresh policy on every demo so far (policy.train_steps) instead of fine-tuning
    finetune_lr_scale: float = Field(1.0, gt=0, le=1)  # a round fine-tunes at this times policy.lr (smaller steps forget less)
    improvement: Literal["bc", "awr"] = "bc"  # rounds' actor loss: plain behaviour cloning, or advantage-weighted by the chunk critic (shaping reaches the actor)
    value_guided_samples: int = Field(0, ge=0)  # >0: round checkpoints pick the best of this many sampled chunks by Q
