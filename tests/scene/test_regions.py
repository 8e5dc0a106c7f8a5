"""Named regions, footprints and the placement sampler."""

from __future__ import annotations

import numpy as np
import pytest

from coda.scene.regions import REGIONS, Footprint, PlacementError, RegionError, footprint, grid_region_of, place, region
from coda.scene.spec import ObjectSpec


def _cube(name: str = "obj0", half: float = 0.02) -> ObjectSpec:
    return ObjectSpec(name=name, shape="box", size=(half, half, half), color="red", pos=(0.0, 0.0))


def test_placement_lands_inside_region_and_clear_of_others() -> None:
    rng = np.random.default_rng(0)
    occupied = [footprint(_cube("a").model_copy(update={"pos": (0.12, 0.12)}))]
    for _ in range(50):
        x, y = place(rng, "obj0", "far_left", _cube(), occupied, clearance=0.03)
        assert REGIONS["far_left"].contains(x, y)
        assert not footprint(_cube(), (x, y)).conflicts(occupied[0], 0.03)


def test_placement_is_a_function_of_the_rng_state() -> None:
    a = [place(np.random.default_rng(3), "obj0", "table", _cube(), []) for _ in range(2)]
    assert a[0] == a[1]
    assert place(np.random.default_rng(4), "obj0", "table", _cube(), []) != a[0]


def test_impossible_region_raises_named_placement_error() -> None:
    blocker = Footprint(0.16, 0.16, 0.1, 0.1)  # covers the whole far_left region
    with pytest.raises(PlacementError) as e:
        place(np.random.default_rng(0), "obj0", "far_left", _cube(), [blocker], max_tries=500)
    assert str(e.value) == "cannot place 'obj0' in region 'far_left' after 500 tries"


def test_unknown_region_lists_the_regions() -> None:
    with pytest.raises(RegionError) as e:
        region("moon")
    assert "Unknown region 'moon'" in str(e.value) and "far_left" in str(e.value)


def test_grid_words_and_regions_agree() -> None:
    for name in ("near_left", "far_right", "center", "far", "left"):
        cx, cy = REGIONS[name].center
        assert grid_region_of(cx, cy) == name


def test_rotated_footprints_conflict_only_when_close() -> None:
    a = Footprint(0.0, 0.0, 0.05, 0.01, yaw=0.0)
    b = Footprint(0.0, 0.035, 0.05, 0.01, yaw=np.pi / 4)  # the rotated bar reaches down into a
    assert a.conflicts(b)
    assert not a.conflicts(Footprint(0.0, 0.2, 0.05, 0.01, yaw=np.pi / 4), 0.03)
    assert a.conflicts(Footprint(0.0, 0.035, 0.05, 0.01), clearance=0.02)
    assert not a.conflicts(Footprint(0.0, 0.035, 0.05, 0.01), clearance=0.0)
