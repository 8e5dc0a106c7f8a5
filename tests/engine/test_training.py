"""A round's training step (`coda.engine.training.finetune`): on data the policy already solves it leaves
success where it was, with behaviour cloning and with advantage weighting from a warmed critic; the data
sources get the engine's weights; `engine.retrain` trains a fresh network instead."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coda.config import build_config
from coda.engine.backend import RoundBackend
from coda.engine.rollout import evaluate_checkpoint
from coda.engine.training import finetune, round_overrides
from coda.policy.checkpoint import read_checkpoint
from coda.policy.train import train_sft
from coda.scene.splits import build_split
from coda.sim.tabletop.validity import sim_check

SETTINGS = ["policy.text_model=hashing", "policy.torch_threads=1", "policy.hidden=32", "policy.layers=1",
            "policy.heads=2", "policy.batch_size=64", "policy.lr=0.003", "policy.train_steps=700",
            "policy.finetune_steps=300", "sim.max_steps=100"]


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, list, Path, Path, Path]:
    """An SFT policy that solves its four training scenes, their demos, and a second set of demos of them."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("round")
    cfg = build_config("tiny", overrides=SETTINGS)
    scenes = build_split("pick_place", "sft", 4, seed=0, check=sim_check).valid
    backend = RoundBackend(cfg)
    backend.collect_demos(scenes, root / "demos")
    backend.collect_demos(scenes, root / "again")
    torch.manual_seed(0)
    train_sft([root / "demos"], cfg.policy, root / "sft.pt")
    return cfg, scenes, root / "demos", root / "again", root / "sft.pt"


def _solved(ckpt: Path, scenes: list, cfg: object) -> int:
    return sum(r.success for r in evaluate_checkpoint(ckpt, scenes, cfg.sim, record_states=False))  # type: ignore[attr-defined]


@pytest.mark.parametrize("improvement", ["bc", "awr"])
def test_a_round_on_data_the_policy_solves_leaves_its_success_unchanged(solved, tmp_path: Path, improvement: str) -> None:
    cfg, scenes, demos, again, sft = solved
    before = _solved(sft, scenes, cfg)
    assert before >= 3, f"the SFT policy solves only {before} of its 4 training scenes"
    cfg = build_config("tiny", overrides=SETTINGS + [f"engine.improvement={improvement}", "policy.critic_warmup=100"])
    result, per_source, _ = finetune(sft, [demos], again, cfg, tmp_path / "round.pt")
    assert per_source["replay"] > 0 and per_source["expert"] > 0 and per_source["corrective"] == 0
    assert result.steps == cfg.policy.finetune_steps
    if improvement == "awr":  # advantages were read only after the critic's warm-up, and the weights are sane
        assert any("warmup_step" in h for h in result.history)
        ess = [h["awr_ess"] for h in result.history if "awr_ess" in h]
        assert ess and min(ess) > 0.5
    after = _solved(tmp_path / "round.pt", scenes, cfg)
    assert after >= before - 1, f"{improvement}: a round on solved data took success from {before}/4 to {after}/4"


def test_round_overrides_and_retrain(solved, tmp_path: Path) -> None:
    cfg, scenes, demos, again, sft = solved
    awr = build_config("tiny", overrides=SETTINGS + ["engine.improvement=awr", "engine.finetune_lr_scale=0.5",
                                                     "policy.awr_beta=0.7", "policy.awr_baseline=policy"])
    p = awr.policy
    assert round_overrides(awr) == {"lr": 0.0015, "train_critic": True, "improvement": "awr", "awr_beta": 0.7,
                                    "awr_max_weight": p.awr_max_weight, "awr_baseline": "policy",
                                    "awr_samples": p.awr_samples, "critic_warmup": p.critic_warmup,
                                    "expectile": p.expectile, "polyak": p.polyak}
    assert round_overrides(build_config("tiny", overrides=SETTINGS + ["engine.improvement=bc"])) == {"lr": p.lr}
    guided = build_config("tiny", overrides=SETTINGS + ["engine.improvement=bc", "engine.value_guided_samples=4",
                                                        "policy.expectile=0.6"])
    assert round_overrides(guided) == {"lr": p.lr, "train_critic": True, "value_guided_samples": 4,
                                       "expectile": 0.6, "polyak": p.polyak}  # the critic it trains, as configured
    retrain = build_config("tiny", overrides=SETTINGS + ["engine.improvement=bc", "engine.retrain=true"])
    result, _, _ = finetune(sft, [demos], again, retrain, tmp_path / "fresh.pt")
    assert result.steps == retrain.policy.train_steps  # a fresh network gets the SFT step budget
    assert read_checkpoint(tmp_path / "fresh.pt")["config"]["lr"] == retrain.policy.lr
