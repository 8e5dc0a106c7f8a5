"""Policy configuration (cheap: no torch import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coda.config_base import Section


class PolicyConfig(Section):
    chunk_len: int = Field(8, ge=1)  # actions per predicted chunk (H)
    hidden: int = Field(128, ge=4)  # transformer width
    layers: int = Field(3, ge=1)  # transformer layers
    heads: int = Field(4, ge=1)  # attention heads
    lr: float = Field(3e-4, gt=0)  # Adam learning rate
    batch_size: int = Field(256, ge=1)  # training batch size
    train_steps: int = Field(3000, ge=1)  # SFT training steps
    finetune_steps: int = Field(1000, ge=1)  # training steps per engine round
    gamma: float = Field(0.99, gt=0, le=1)  # per-step discount
    improvement: Literal["bc", "awr"] = "bc"  # policy improvement from chunk values (bc = plain SFT)
    value_guided_samples: int = Field(0, ge=0)  # candidates sampled for value-guided selection (0 = off)
    torch_threads: int = Field(2, ge=1)  # CPU threads torch may use

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "PolicyConfig":
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
        return self
