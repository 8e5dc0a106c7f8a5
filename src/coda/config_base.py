"""Base class for configuration sections: strict, frozen, documented field by field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # every integer setting fits a 64-bit signed integer (SQL, numpy, torch)


def _within_int64(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return INT_MIN <= value <= INT_MAX
    if isinstance(value, (list, tuple)):
        return all(_within_int64(v) for v in value)
    if isinstance(value, dict):
        return all(_within_int64(v) for v in value.values())
    return True


class Section(BaseModel):
    """A configuration section. Unknown keys are errors; values are validated on assignment; no number is
    NaN or infinite, and no integer is past 64 bits."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _int64(cls, v: Any) -> Any:
        if not _within_int64(v):
            raise ValueError(f"integers must lie in [{INT_MIN}, {INT_MAX}]")
        return v
