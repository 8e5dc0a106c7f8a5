"""Round-loop configuration (cheap)."""

from __future__ import annotations

from pydantic import Field

from coda.config_base import Section


class EngineConfig(Section):
    strategy: str = "coda"  # registered strategy: coda, coda-sparse, replay, accel, plr, dr, sft
    rounds: int = Field(5, ge=0)  # co-evolution rounds after SFT
    generation_budget: int = Field(64, ge=1)  # new scenes generated per round
    demo_budget: int = Field(64, ge=0)  # expert demonstrations per round
    probe_scenes: int = Field(32, ge=1)  # probe scenes rolled out per round
    exploration_floor: float = Field(0.1, ge=0, le=1)  # minimum budget share per active failure mode
    explore_share: float = Field(0.25, ge=0, le=1)  # budget share for new random variations (coda strategies)
    max_diagnoses: int = Field(8, ge=0)  # failed probe episodes diagnosed and verified per round
    seed: int = 0  # master seed of the run
