"""Critic configuration (cheap)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from coda.config_base import Section

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CriticConfig(Section):
    name: str = "privileged"  # registered critic that diagnoses failures
    fallback: str | None = None  # registered critic used when `name` is unavailable (None = fail loudly)
    base_url: str | None = None  # OpenAI-compatible endpoint of the `vlm` critic (required by it), e.g. http://127.0.0.1:8000/v1
    model: str = "gpt-4o-mini"  # model name sent to the endpoint
    api_key_env: str | None = "OPENAI_API_KEY"  # name of the env variable holding the key (None = keyless server)
    timeout_s: float = Field(30.0, gt=0)  # per-request timeout (s)
    retries: int = Field(2, ge=0)  # retries on transient errors (timeouts, refused connections, HTTP 5xx/429)
    backoff_s: float = Field(1.0, ge=0)  # wait before the first retry (s); doubles on each further retry
    max_images: int = Field(4, ge=0)  # keyframes sent per diagnosis
    max_tokens: int = Field(1024, ge=64)  # answer length limit requested from the endpoint
    temperature: float = Field(0.0, ge=0, le=2)  # sampling temperature requested from the endpoint
    response_format: Literal["json_schema", "json_object", "text"] = "json_schema"  # structured output mode
    noise: float = Field(0.0, ge=0, le=1)  # fraction of diagnoses the `noisy` critic corrupts
    noise_seed: int = 0  # seed of the `noisy` critic's corruption draws
    noisy_base: str = "privileged"  # registered critic the `noisy` critic wraps
    counterfactual_k: int = Field(8, ge=1)  # base scenes per counterfactual check
    counterfactual_margin: float = Field(0.25, ge=0, le=1)  # failure-rate increase needed to verify a factor
    counterfactual_tier: Literal["train", "heldout"] = "train"  # vocabulary tier of instruction counterfactuals
    counterfactual_undo: bool = True  # also undo each factor in the failed scene: the policy must then succeed (necessity)
    stage_slack: int = Field(1, ge=0)  # stages a diagnosis's stage_reached may fall short of the trace's
    verify_demos: int = Field(2, ge=1)  # expert demonstrations the compiled potential is checked on
    demo_steps: int = Field(200, ge=10)  # step limit of those demonstrations

    @model_validator(mode="after")
    def _cross_field(self) -> "CriticConfig":
        if self.fallback is not None and self.fallback == self.name:
            raise ValueError(f"fallback ({self.fallback!r}) must differ from name ({self.name!r})")
        if self.noisy_base == "noisy":
            raise ValueError("noisy_base ('noisy') cannot wrap itself")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url ({self.base_url!r}) must start with http:// or https://")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            # The value is not echoed: it may be a key pasted by mistake.
            raise ValueError("api_key_env must be the NAME of an environment variable ([A-Za-z_][A-Za-z0-9_]*), not a key")
        return self
