"""Secrets never leave the process, and no stored text is unbounded.

`redact` replaces API keys, `Bearer` tokens, `key=value` credentials and URL passwords with `[REDACTED]`;
every value handed to `register_secret` (the critic's API key) is removed wherever
it appears, whatever surrounds it. `bounded` and `one_line` cut text to a stated length, `short_repr` shows
a value of any size in an error message. The memory applies
both to every record it writes, the critic to every reason and note, the run to its config file.
"""

from __future__ import annotations

import re
import reprlib
import threading
from typing import Any

MASK = "[REDACTED]"
_MIN_SECRET = 8  # shorter values would mask ordinary words

_lock = threading.Lock()
_secrets: set[str] = set()

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), rf"\1 {MASK}"),
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"), MASK),
    (re.compile(r"(?i)\b((?:x-)?api[_-]?key|authorization|password|passwd|secret|access[_-]?token)"
                r"([\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])[^\s\"',;&}]+"), rf"\1\2{MASK}"),
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/:@]{0,256}:)(?!\[REDACTED\])[^\s/@]{1,512}@"), rf"\1{MASK}@"),
)


_URL_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/:@]{0,256}:)([^\s/@]{1,512})@")


def register_secret(value: str | None) -> None:
    """Remember a secret value: `redact` removes it from any text from now on."""
    if value and len(value) >= _MIN_SECRET:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """`text` with registered secrets, bearer tokens, API keys, credentials and URL passwords masked."""
    if not text:
        return text
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for s in known:
        if s in text:
            text = text.replace(s, MASK)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redact_value(value: Any) -> Any:
    """`redact` applied to every string inside a JSON-like value (dicts, lists, tuples); keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    return value


def redact_bounded(text: str, limit: int) -> str:
    """`text` redacted and cut to at most `limit` characters (cut first, so the work is bounded too)."""
    return bounded(redact(text[: limit + 512]), limit)


def bounded(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    tail = f"... [{len(text) - limit} more characters]"
    if len(tail) * 2 > limit:
        return text[:limit]
    return text[: limit - len(tail)] + tail


def one_line(text: str, limit: int = 500) -> str:
    """`text` on one line (newlines become spaces), redacted and cut to `limit` characters."""
    return redact_bounded(" ".join(str(text)[: 2 * limit + 512].split()), limit)


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 80, 80, 6, 6, 3


def short_repr(value: Any) -> str:
    """A bounded one-line repr of a value shown in an error (however large or deep the value is)."""
    return " ".join(_REPR.repr(value).split())[:200]


def redact_url(url: str | None) -> str | None:
    """A database or endpoint URL with its password masked."""
    if not url:
        return url
    m = _URL_PASSWORD.match(url)
    if m and m.group(2) != MASK:
        return m.group(1) + MASK + "@" + url[m.end():]
    return url


def has_redacted_password(url: str | None) -> bool:
    """Whether `url` is one `redact_url` masked (it cannot connect as it is)."""
    m = _URL_PASSWORD.match(url or "")
    return bool(m and m.group(2) == MASK)
