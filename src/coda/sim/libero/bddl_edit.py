"""Edits of BDDL text (pure text in, text out): the basis of LIBERO generation operators.

Only the edited numbers or words change; everything else of the text is kept byte for byte.
"""

from __future__ import annotations

import re

from coda.sim.libero.errors import LiberoError

_NUM = r"-?\d+(?:\.\d*)?(?:[eE]-?\d+)?"


def _region_ranges(text: str, region: str) -> re.Match[str]:
    # (region_name (:target t) (:ranges ( (x0 y0 x1 y1) )) ...): the first rectangle of the region
    pattern = re.compile(
        r"\(\s*" + re.escape(region) + r"\s*\(\s*:target\s+[^\s()]+\s*\)\s*\(\s*:ranges\s*\(\s*\(\s*"
        rf"({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM})\s*\)",
        flags=re.IGNORECASE,
    )
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        found = sorted(set(re.findall(r"\(\s*([A-Za-z0-9_]+)\s*\(\s*:target", text)))
        raise LiberoError(
            f"region = {region!r} has {len(matches)} rectangles with (:ranges ...) in the BDDL text; "
            f"regions there: {found}"
        )
    return matches[0]


def region_ranges(text: str, region: str) -> tuple[float, float, float, float]:
    """The rectangle (x_min, y_min, x_max, y_max) of region `region` (its first range), in metres."""
    m = _region_ranges(text, region)
    return tuple(float(m.group(i)) for i in range(1, 5))  # type: ignore[return-value]


def set_region_ranges(text: str, region: str, ranges: tuple[float, float, float, float]) -> str:
    """BDDL text with region `region`'s rectangle replaced by `ranges` = (x_min, y_min, x_max, y_max).

    Raises LiberoError if the region is not found once or the rectangle is empty.
    """
    x0, y0, x1, y1 = (float(v) for v in ranges)
    if not (x0 <= x1 and y0 <= y1):
        raise LiberoError(f"ranges of region {region!r} = {ranges} must satisfy x_min <= x_max and y_min <= y_max")
    m = _region_ranges(text, region)
    last = m.start(1)
    out = text[:last]
    for i, v in enumerate((x0, y0, x1, y1), start=1):
        out += text[last : m.start(i)] + f"{v:.6g}"
        last = m.end(i)
    return out + text[last:]


def widen_region(text: str, region: str, margin: float) -> str:
    """BDDL text with region `region` grown by `margin` metres on every side (negative shrinks it).

    LIBERO's official regions are about twice an object's radius, so objects sit at their centres;
    widening lets seeded placement vary positions continuously.
    """
    x0, y0, x1, y1 = region_ranges(text, region)
    if x1 - x0 + 2 * margin < 0 or y1 - y0 + 2 * margin < 0:
        raise LiberoError(f"margin = {margin} would give region {region!r} a negative size ({x1 - x0:.3f} x {y1 - y0:.3f} m)")
    return set_region_ranges(text, region, (x0 - margin, y0 - margin, x1 + margin, y1 + margin))
