"""Training: BC overfits 10 real expert demonstrations; NaN stops with step info and keeps the last good
weights; metrics are logged; same seed and config give the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coda.policy.checkpoint import load_policy, read_checkpoint
from coda.policy.errors import TrainingError
from coda.policy.samples import ChunkDataset
from coda.policy.train import build_policy, train_policy
from policy_synthetic import expert_episodes, make_specs, tiny_cfg


@pytest.fixture(scope="module")
def tabletop_demos():
    """10 scripted-expert demonstrations of the pick_place sft split in the MuJoCo tabletop."""
    from coda.policy.data import run_expert_episode
    from coda.scene.splits import make_split
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for

    env = TabletopEnv()
    eps = [run_expert_episode(env, s, expert_for(s)) for s in make_split("pick_place", "sft", 10, seed=0)]
    env.close()
    assert all(e.success for e in eps)
    return eps


def test_bc_overfits_ten_expert_demos(tabletop_demos, hashing) -> None:
    data = ChunkDataset(tabletop_demos, hashing, chunk_len=8)
    cfg = tiny_cfg(hidden=32, chunk_len=8, n_action_steps=4, batch_size=64, lr=3e-3, bc_loss="mse")
    policy = build_policy(cfg, data, hashing)
    everything = data.bc_batch(torch.arange(data.n_bc))
    with torch.no_grad():
        before = policy(type(data.sample(1, torch.Generator()))(everything))[1]["bc"]
    train_policy(policy, data, steps=400)
    with torch.no_grad():
        after = policy(type(data.sample(1, torch.Generator()))(everything))[1]["bc"]
    assert before / after >= 10.0, f"BC loss fell only {before / after:.1f}x ({before:.3f} -> {after:.4f})"


class _PoisonAt:
    """The dataset, except that the batch of call `step` carries a NaN target."""

    def __init__(self, data: ChunkDataset, step: int) -> None:
        self.data, self.step, self.calls = data, step, 0

    def __getattr__(self, name: str):
        return getattr(self.data, name)

    def sample(self, *args, **kw):
        batch = self.data.sample(*args, **kw)
        self.calls += 1
        if self.calls == self.step:
            batch.bc.chunk[0, 0, 0] = float("nan")
        return batch


def test_nan_stops_training_and_keeps_last_good_checkpoint(tmp_path: Path, hashing) -> None:
    data = ChunkDataset(expert_episodes(make_specs(6, seed=11)), hashing, chunk_len=4)
    cfg = tiny_cfg(checkpoint_every=3, lr_decay=False)  # a constant lr makes a 6-step run the same prefix
    ckpt = tmp_path / "policy.pt"
    policy = build_policy(cfg, data, hashing)
    with pytest.raises(TrainingError) as e:
        train_policy(policy, _PoisonAt(data, 7), steps=20, checkpoint=ckpt)  # type: ignore[arg-type]
    msg = str(e.value)
    assert "training stopped at step 7: loss is nan" in msg
    assert "bc.chunk: 1 non-finite of 320" in msg and "last good weights (step 6)" in msg and str(ckpt) in msg
    assert "\n" not in msg
    assert read_checkpoint(ckpt)["meta"]["step"] == 6
    # the kept weights are exactly those of a clean 6-step run with the same seed
    clean = build_policy(cfg, data, hashing)
    train_policy(clean, data, steps=6)
    kept = load_policy(ckpt).state_dict()
    assert all(torch.equal(kept[k], v) for k, v in clean.state_dict().items())


def test_metrics_jsonl_and_determinism(tmp_path: Path, hashing) -> None:
    data = ChunkDataset(expert_episodes(make_specs(6, seed=12)), hashing, chunk_len=4)
    cfg = tiny_cfg(train_critic=True, improvement="awr", log_every=2, critic_warmup=4)
    a = build_policy(cfg, data, hashing)
    result = train_policy(a, data, steps=6, metrics_path=tmp_path / "m.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    # the critic is warmed first (critic-only steps), then the actor reads its advantages
    assert [x.get("warmup_step") for x in lines[:2]] == [2, 4] and {"q_loss", "v_loss"} <= lines[0].keys()
    assert [x["step"] for x in lines[2:]] == [2, 4, 6]
    assert {"loss", "bc", "q_loss", "v_loss", "awr_ess", "awr_clip_frac", "lr", "samples_per_s"} <= lines[2].keys()
    assert 0 < lines[2]["awr_ess"] <= 1 and 0 <= lines[2]["awr_clip_frac"] <= 1
    assert result.steps == 6 and result.samples_per_s > 0
    b = build_policy(cfg, data, hashing)
    train_policy(b, data, steps=6)
    assert all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())


def test_fine_tuning_starts_from_the_checkpoint_and_keeps_its_stats(tmp_path: Path, hashing) -> None:
    from coda.policy.checkpoint import load_policy
    from coda.policy.data import DemoWriter
    from coda.policy.errors import CheckpointError
    from coda.policy.train import train_sft

    for name, seed in (("a", 13), ("b", 14)):
        with DemoWriter(tmp_path / name) as w:
            for ep in expert_episodes(make_specs(4, seed=seed, region=(-0.2, 0.0) if name == "a" else (0.0, 0.2))):
                w.add(ep)
    cfg = tiny_cfg()
    base, _ = train_sft([tmp_path / "a"], cfg, tmp_path / "a.pt", steps=3, text=hashing)
    tuned, result = train_sft([tmp_path / "b"], cfg, tmp_path / "b.pt", steps=2, text=hashing, init_from=tmp_path / "a.pt")
    # normalisation comes from the base checkpoint, not from the new (shifted) data
    assert torch.equal(tuned.stats.object_mean, base.stats.object_mean)
    fresh, _ = train_sft([tmp_path / "b"], cfg, tmp_path / "c.pt", steps=1, text=hashing)
    assert not torch.equal(fresh.stats.object_mean, base.stats.object_mean)
    assert load_policy(tmp_path / "b.pt").state_dict().keys() == base.state_dict().keys()
    with pytest.raises(CheckpointError, match="another architecture"):
        train_sft([tmp_path / "b"], tiny_cfg(hidden=32), tmp_path / "d.pt", steps=1, text=hashing, init_from=tmp_path / "a.pt")


def test_a_tight_spread_does_not_slow_behaviour_cloning(hashing) -> None:
    """The spread head's NLL gradient grows without bound as its fit tightens; clipped apart from the actor's,
    it cannot scale the BC step: the actor's weights after a step are the same whatever the spread's state."""
    data = ChunkDataset(expert_episodes(make_specs(6, seed=13)), hashing, chunk_len=4)
    cfg = tiny_cfg(log_every=1)
    torch.manual_seed(0)
    loose = build_policy(cfg, data, hashing)
    tight = build_policy(cfg, data, hashing)
    tight.load_state_dict(loose.state_dict())
    with torch.no_grad():  # a spread fitted far tighter than the data's errors: its NLL gradient is huge
        tight.actor.log_std.weight.zero_()
        tight.actor.log_std.bias.fill_(-5.0)
    r_loose = train_policy(loose, data, steps=1)
    r_tight = train_policy(tight, data, steps=1)
    assert r_tight.history[0]["spread_grad_norm"] > 100 * r_loose.history[0]["grad_norm"]
    spread = {f"actor.log_std.{k}" for k in ("weight", "bias")}
    actor = {k for k in loose.state_dict() if k.startswith(("encoder.", "actor.")) and k not in spread}
    assert all(torch.equal(loose.state_dict()[k], tight.state_dict()[k]) for k in actor)
