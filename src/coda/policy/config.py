"""Policy configuration (cheap: no torch import).

The defaults are the size the SFT benchmark (`bench/sft.py`) reports: a 2-layer, 64-wide set transformer
trained 1500 steps of 128 samples at lr 1e-3 fits the narrow `sft` splits and trains in minutes per family
on two CPU cores. Presets (`tiny`, `quick`, `full`) may override them. Fields that change the
network's shape or what its inputs mean (`chunk_len`, `hidden`, `layers`, `heads`, `grounding`, `frame`, `text_model`)
form the architecture signature
stored in checkpoints; the others only change training or inference.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coda.config_base import Section


class PolicyConfig(Section):
    """The action-chunk policy: architecture, training, policy improvement and inference.

    `chunk_len` (H) defaults to 8 control steps = 0.4 s at 20 Hz: long enough to commit to one motion
    phase (fewer mode switches with a multimodal expert, fewer compounding errors), short enough that the
    relative deltas stay small and the critic's n-step chunk targets keep a low variance.
    """

    chunk_len: int = Field(8, ge=1)  # actions per predicted chunk (H)
    hidden: int = Field(64, ge=4)  # transformer width
    layers: int = Field(2, ge=1)  # transformer layers
    heads: int = Field(4, ge=1)  # attention heads
    text_model: Literal["minilm", "hashing"] = "minilm"  # sentence embedder (hashing = offline test stand-in)
    grounding: Literal["tokens", "sentence"] = "tokens"  # entity <- instruction: word-piece cross-attention, or the raw sentence cosine
    frame: Literal["gripper", "task"] = "task"  # chunks along the world's axes from the gripper, or in the goal's frame (origin the moved entity, x towards its destination)
    token_dropout: float = Field(0.15, ge=0, lt=1)  # share of instruction word pieces hidden from the grounding in training
    read_motion: bool = False  # read the last grip command and gripper velocity (off: BC cannot copy its own motion)
    grounding_weight: float = Field(0.1, ge=0)  # weight of the grounding losses: role pointers vs the goal's entities, goal value (demos record both)
    paraphrase_rate: float = Field(0.5, ge=0, le=1)  # share of BC samples trained with another stored wording of their instruction
    unfamiliar_rate: float = Field(0.5, ge=0, le=1)  # share of BC samples whose instruction has some words swapped for everyday words no scene uses
    lr: float = Field(1e-3, gt=0)  # AdamW learning rate
    lr_decay: bool = True  # cosine-decay the learning rate to 10% over each training run
    weight_decay: float = Field(1e-4, ge=0)  # AdamW weight decay
    grad_clip: float = Field(1.0, gt=0)  # gradient-norm clip, for the actor, its spread head and the critic each
    batch_size: int = Field(128, ge=1)  # training batch size
    train_steps: int = Field(1500, ge=1)  # SFT training steps
    finetune_steps: int = Field(500, ge=1)  # training steps per engine round
    bc_loss: Literal["l1", "mse"] = "l1"  # chunk regression loss on normalised relative actions
    gamma: float = Field(0.99, gt=0, le=1)  # per-step discount
    improvement: Literal["bc", "awr"] = "bc"  # policy improvement from chunk values (bc = plain SFT)
    train_critic: bool = False  # learn Q(s, chunk) and V(s) alongside the actor
    expectile: float = Field(0.7, gt=0, lt=1)  # V(s) regresses this expectile of Q(s, a) (0.5 = mean)
    polyak: float = Field(0.005, gt=0, le=1)  # target-network update rate per step
    awr_beta: float = Field(2.0, gt=0)  # AWR temperature: weight = exp(batch-normalised advantage / beta); 2 keeps ~0.8 of a batch effective
    critic_warmup: int = Field(300, ge=0)  # critic-only steps on a run's data before AWR reads its advantages
    awr_max_weight: float = Field(20.0, gt=0)  # AWR weights are clipped to this
    awr_baseline: Literal["value", "policy"] = "value"  # AWR advantage: Q(s, a) - V(s), or Q(s, a) - mean Q(s, a') over chunks a' sampled from the policy
    awr_samples: int = Field(4, ge=1)  # chunks sampled from the policy per state for the "policy" baseline
    value_guided_samples: int = Field(0, ge=0)  # candidates sampled for value-guided selection (0 = off)
    sample_temperature: float = Field(1.0, gt=0)  # std scale when sampling candidate chunks
    n_action_steps: int = Field(4, ge=1)  # actions executed from each chunk before re-planning
    ground_once: bool = True  # frame "task": an episode acts on the entities its instruction named at its first chunk (off: pointers re-read every chunk, and one unsure of an unfamiliar word flips as the gripper moves)
    value_once: bool = True  # an episode acts on the goal's number (how far to open a drawer) read at its first chunk (off: re-read every chunk, and a reading unsure of an unfamiliar wording drifts with the scene, e.g. to "halfway" as the drawer passes half open)
    temporal_ensemble: float | None = Field(None, ge=0)  # ACT weight exp(-k*age); None = queue of chunks
    seed: int = 0  # seed for batch sampling, initialisation and candidate sampling
    log_every: int = Field(50, ge=1)  # steps between JSONL metric lines
    checkpoint_every: int = Field(500, ge=1)  # steps between checkpoints (the last good one is kept)
    torch_threads: int = Field(2, ge=1)  # CPU threads torch may use

    @model_validator(mode="after")
    def _consistent(self) -> "PolicyConfig":
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
        if self.n_action_steps > self.chunk_len:
            raise ValueError(f"n_action_steps ({self.n_action_steps}) must not exceed chunk_len ({self.chunk_len})")
        if self.frame == "task" and self.grounding != "tokens":
            raise ValueError(f"frame 'task' needs grounding 'tokens' (its role pointers set the frame), not '{self.grounding}'")
        if self.improvement == "awr" and not self.train_critic:
            raise ValueError("improvement 'awr' needs train_critic = true (advantages come from the critic)")
        if self.value_guided_samples and not self.train_critic:
            raise ValueError(
                f"value_guided_samples ({self.value_guided_samples}) needs train_critic = true"
            )
        if self.value_guided_samples and self.temporal_ensemble is not None:
            raise ValueError("value_guided_samples and temporal_ensemble cannot be combined")
        return self
