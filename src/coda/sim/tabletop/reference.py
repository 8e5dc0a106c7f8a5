"""Small seeded reference scenes for the backend's own checks and benchmarks.

These are not the benchmark's scene distribution (that is `coda.scene.generators`); they are sensible
random scenes of each family, used to measure the experts and the simulator speed independently of it.
`reference_scene(family, rng)` is a pure function of the generator's state.
"""

from __future__ import annotations

import math

import numpy as np

from coda.errors import CodaError
from coda.scene import geometry as G
from coda.scene.language import describe
from coda.scene.spec import (
    FAMILIES,
    PALETTE,
    ContainerSpec,
    DrawerSpec,
    GoalPredicate,
    ObjectSpec,
    RegionSpec,
    ScenarioSpec,
)

GAP = 0.045  # free space kept between footprints (the open fingers need room), m
REACH = 0.22  # objects are placed within |x|, |y| <= REACH, m


class PlacementError(CodaError, RuntimeError):
    """Random placement failed after many tries."""


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _colors(rng: np.random.Generator, k: int, exclude: tuple[str, ...] = ()) -> list[str]:
    pool = [c for c in PALETTE if c not in exclude]
    return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]


def _graspable(rng: np.random.Generator, name: str, color: str, shape: str | None = None) -> ObjectSpec:
    shape = shape or str(rng.choice(["box", "box", "cylinder", "sphere"]))
    r = _u(rng, 0.016, 0.028)
    if shape == "box":
        size = (r, _u(rng, 0.016, 0.028), _u(rng, 0.016, 0.035))
    elif shape == "cylinder":
        size = (r, r, _u(rng, 0.018, 0.04))
    else:
        size = (r, r, r)
    return ObjectSpec(name=name, shape=shape, size=size, color=color, pos=(0.0, 0.0), yaw=_u(rng, -math.pi, math.pi),  # type: ignore[arg-type]
                      mass=_u(rng, 0.05, 0.3))


def _place(rng: np.random.Generator, fp_radius: float, occupied: list[tuple[float, float, float]],
           lo: tuple[float, float] = (-REACH, -REACH), hi: tuple[float, float] = (REACH, REACH), what: str = "entity") -> tuple[float, float]:
    for _ in range(500):
        x, y = _u(rng, lo[0], hi[0]), _u(rng, lo[1], hi[1])
        if all(math.hypot(x - ox, y - oy) >= fp_radius + orad + GAP for ox, oy, orad in occupied):
            occupied.append((x, y, fp_radius))
            return x, y
    raise PlacementError(f"cannot place {what} (radius {fp_radius:.3f} m) after 500 tries")


def _with_pos(o: ObjectSpec, xy: tuple[float, float]) -> ObjectSpec:
    return o.model_copy(update={"pos": xy})


def _distractors(rng: np.random.Generator, k: int, used: list[str], occupied: list[tuple[float, float, float]], start: int) -> list[ObjectSpec]:
    out = []
    for j, c in enumerate(_colors(rng, k, tuple(used))):
        o = _graspable(rng, f"obj{start + j}", c)
        out.append(_with_pos(o, _place(rng, G.footprint(o).radius(), occupied, what=o.name)))
    return out


def reference_scene(family: str, rng: np.random.Generator, distractors: tuple[int, int] = (1, 3)) -> ScenarioSpec:
    """A random scene of `family` with `distractors` (min, max) extra graspable objects.

    Raises CodaError for an unknown family, PlacementError if placement fails.
    """
    if family not in FAMILIES:
        raise CodaError(f"unknown family '{family}'. Available: {list(FAMILIES)}")
    occupied: list[tuple[float, float, float]] = []
    k = int(rng.integers(distractors[0], distractors[1] + 1))
    if family == "pick_place":
        c_col, o_col = _colors(rng, 2)
        kind = str(rng.choice(["tray", "bowl"]))
        half = _u(rng, 0.06, 0.085)
        cont = ContainerSpec(name="container0", kind=kind, size=(half, half if kind == "bowl" else _u(rng, 0.06, 0.085), _u(rng, 0.012, 0.025)),  # type: ignore[arg-type]
                             color=c_col, pos=(0.0, 0.0), yaw=_u(rng, -0.5, 0.5) if kind == "tray" else 0.0)
        cont = cont.model_copy(update={"pos": _place(rng, G.footprint(cont).radius(), occupied, what="container0")})
        obj = _graspable(rng, "obj0", o_col)
        obj = _with_pos(obj, _place(rng, G.footprint(obj).radius(), occupied, what="obj0"))
        objs = [obj, *_distractors(rng, k, [c_col, o_col], occupied, 1)]
        return ScenarioSpec(family="pick_place", objects=tuple(objs), containers=(cont,),
                            instruction=f"put the {describe(obj)} in the {c_col} {kind}",
                            goal=(GoalPredicate(name="in", args=("obj0", "container0")),), seed=int(rng.integers(2**31)))
    if family == "stack":
        t_col, b_col = _colors(rng, 2)
        base = ObjectSpec(name="obj1", shape="box", size=(_u(rng, 0.028, 0.04), _u(rng, 0.028, 0.04), _u(rng, 0.015, 0.03)),
                          color=b_col, pos=(0.0, 0.0), yaw=_u(rng, -math.pi, math.pi), mass=_u(rng, 0.2, 0.5))
        base = _with_pos(base, _place(rng, G.footprint(base).radius(), occupied, what="obj1"))
        top = _graspable(rng, "obj0", t_col, "box")
        top = _with_pos(top, _place(rng, G.footprint(top).radius(), occupied, what="obj0"))
        objs = [top, base, *_distractors(rng, k, [t_col, b_col], occupied, 2)]
        return ScenarioSpec(family="stack", objects=tuple(objs), instruction=f"stack the {describe(top)} on the {describe(base)}",
                            goal=(GoalPredicate(name="on", args=("obj0", "obj1")),), seed=int(rng.integers(2**31)))
    if family == "push":
        o_col, r_col = _colors(rng, 2)
        shape = str(rng.choice(["box", "box", "cylinder"]))
        w = _u(rng, 0.05, 0.065)
        size = (w, _u(rng, 0.05, 0.065) if shape == "box" else w, _u(rng, 0.02, 0.04))
        big = ObjectSpec(name="obj0", shape=shape, size=size, color=o_col, pos=(0.0, 0.0), yaw=_u(rng, -0.4, 0.4) if shape == "box" else 0.0,  # type: ignore[arg-type]
                         mass=_u(rng, 0.1, 0.4))
        for _ in range(200):
            trial: list[tuple[float, float, float]] = list(occupied)
            op = _place(rng, G.footprint(big).radius(), trial, (-0.15, -0.17), (0.15, 0.17), "obj0")
            ang, dist = _u(rng, -math.pi, math.pi), _u(rng, 0.12, 0.2)
            rc = (op[0] + dist * math.cos(ang), op[1] + dist * math.sin(ang))
            pre = (op[0] - (G.footprint(big).radius() + 0.05) * math.cos(ang), op[1] - (G.footprint(big).radius() + 0.05) * math.sin(ang))
            if max(abs(rc[0]), abs(rc[1])) <= 0.22 and max(abs(pre[0]), abs(pre[1])) <= 0.28:
                occupied[:] = trial
                break
        else:
            raise PlacementError("cannot place a reachable push layout after 200 tries")
        rh = _u(rng, 0.05, 0.07)
        region = RegionSpec(name="region0", center=rc, half=(rh, rh), color=r_col)
        occupied.append((rc[0], rc[1], rh * 1.2))
        big = _with_pos(big, op)
        # the push corridor stays free: keep distractors off the segment object -> region
        for t in np.linspace(0.0, 1.0, 5):
            occupied.append((op[0] + t * (rc[0] - op[0]), op[1] + t * (rc[1] - op[1]), 0.07))
        objs = [big, *_distractors(rng, k, [o_col, r_col], occupied, 1)]
        return ScenarioSpec(family="push", objects=tuple(objs), regions=(region,), instruction=f"push the {describe(big)} into the {r_col} region",
                            goal=(GoalPredicate(name="at_region", args=("obj0", "region0")),), seed=int(rng.integers(2**31)))
    (d_col,) = _colors(rng, 1)
    travel = _u(rng, 0.12, 0.18)
    frac0 = float(rng.choice([0.0, _u(rng, 0.0, 1.0)]))
    value = 1.0 - frac0 if abs(1.0 - 2 * frac0) >= 0.3 else (0.9 if frac0 < 0.5 else 0.1)
    drawer = DrawerSpec(name="drawer0", color=d_col, pos=(_u(rng, 0.14, 0.2), _u(rng, -0.12, 0.12)), yaw=_u(rng, -0.3, 0.3),
                        travel=travel, fraction=frac0)
    fp = G.footprint(drawer)
    for t in np.linspace(-1.0, 1.0, 5):  # circles along the cabinet-and-open-drawer footprint
        dx, dy = G.rotate(fp.yaw, t * (fp.hx - fp.hy / 2), 0.0)
        occupied.append((fp.cx + dx, fp.cy + dy, fp.hy))
    objs = _distractors(rng, k, [d_col], occupied, 0)
    verb = "open" if value > frac0 else "close"
    return ScenarioSpec(family="drawer", objects=tuple(objs), drawers=(drawer,), instruction=f"{verb} the {d_col} drawer",
                        goal=(GoalPredicate(name="drawer_fraction", args=("drawer0",), value=round(value, 3), tol=0.1),),
                        seed=int(rng.integers(2**31)))
