"""Base class for configuration sections: strict, frozen, documented field by field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A configuration section. Unknown keys are errors; values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
