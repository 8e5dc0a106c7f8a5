"""Field checks applied to a record before it is written, so bad values fail with the field named.

The database would catch some of these, but differently per backend (SQLite stores a string in an integer
column and turns NaN into NULL; PostgreSQL rejects both with a multi-line error), so they are checked here
once, the same way for both.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String

from coda.memory.errors import InvalidRecordError
from coda.memory.models import Base


def _plain(value: Any) -> Any:
    # numpy scalars (np.bool_, np.float32, ...) come straight out of simulators: store their Python value.
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_record(record: Base) -> None:
    """Check every column value of `record` against its declared type; normalise numpy scalars in place.

    Raises:
        InvalidRecordError: `episode field 'success' = 'yes': expected a bool`, and the like.
    """
    kind = record.__kind__
    for col in record.__table__.columns:
        value = _plain(getattr(record, col.key))
        if value is not getattr(record, col.key):
            setattr(record, col.key, value)
        if value is None and col.default is not None and (col.default.is_scalar or col.default.is_callable):
            # Apply Python-side defaults now, so the natural-key lookup and the checks see the stored value.
            value = col.default.arg if col.default.is_scalar else col.default.arg(None)
            setattr(record, col.key, value)
        if value is None:
            has_default = col.default is not None or col.server_default is not None
            if not col.nullable and not has_default and not (col.primary_key and col.autoincrement):
                raise InvalidRecordError(f"{kind} field '{col.key}' is missing")
            continue
        problem = _type_problem(col.type, value)
        if problem:
            raise InvalidRecordError(f"{kind} field '{col.key}' = {_shown(value)}: {problem}")


def _type_problem(col_type: Any, value: Any) -> str | None:
    impl = getattr(col_type, "impl", col_type)  # TypeDecorator -> the type it stores as
    if isinstance(impl, Boolean):
        return None if isinstance(value, bool) else "expected a bool"
    if isinstance(impl, Integer):
        return None if isinstance(value, int) and not isinstance(value, bool) else "expected an integer"
    if isinstance(impl, Float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "expected a number"
        return None if math.isfinite(value) else "expected a finite number"
    if isinstance(impl, String):  # Text is a String
        if not isinstance(value, str):
            return "expected a string"
        if impl.length is not None and len(value) > impl.length:
            return f"longer than {impl.length} characters"
        return None
    if isinstance(impl, DateTime):
        if not isinstance(value, dt.datetime) or value.tzinfo is None:
            return "expected a timezone-aware datetime"
        return None
    if isinstance(impl, JSON):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            return f"not storable as JSON ({e})"
        return None
    return None
