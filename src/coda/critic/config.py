"""Critic configuration (cheap)."""

from __future__ import annotations

from pydantic import Field

from coda.config_base import Section


class CriticConfig(Section):
    name: str = "privileged"  # registered critic that diagnoses failures
    base_url: str | None = None  # OpenAI-compatible endpoint for the `vlm` critic
    model: str = "gpt-4o-mini"  # model name sent to the endpoint
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable holding the key (never stored)
    timeout_s: float = Field(30.0, gt=0)  # per-request timeout (s)
    retries: int = Field(2, ge=0)  # retries with backoff on transient errors
    max_images: int = Field(4, ge=0)  # keyframes sent per diagnosis
    noise: float = Field(0.0, ge=0, le=1)  # corruption rate for the `noisy` critic
    counterfactual_k: int = Field(8, ge=1)  # base scenes per counterfactual check
    counterfactual_margin: float = Field(0.25, ge=0, le=1)  # failure-rate increase needed to verify a factor
