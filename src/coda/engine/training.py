"""A round's training step: fine-tune the previous policy on every demo collected so far.

`finetune` is what the train phase of every strategy calls (`coda.engine.round.phase_train_round`), and what
`bench/learnability.py` measures. Data: the round-0 demos are the `replay` source, demos in generated scenes
the `expert` source, relabelled failures the `corrective` source; behaviour-cloning batches draw from them
with the engine's data weights (`engine.replay_weight`, `expert_weight`, `corrective_weight`), so the new
data takes a fixed share of every batch while the old data is rehearsed against forgetting. Unlabelled
rollouts give the chunk critic samples only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coda.config import CodaConfig
    from coda.policy.train import TrainResult


# policy settings a round takes from its own configuration rather than the checkpoint's, because the SFT
# step of round 0 reads them only when it trains a critic or weights by advantages (see `engine.fork`)
CRITIC_FIELDS = ("expectile", "polyak")
AWR_FIELDS = ("awr_beta", "awr_max_weight", "awr_baseline", "awr_samples", "critic_warmup")


def round_overrides(cfg: "CodaConfig") -> dict[str, Any]:
    """Policy config changes a round's training makes on top of the checkpoint's: the improvement loss, the
    critic it needs and the run's settings for both (the SFT checkpoint never used them, and a run started
    from another run's round 0 carries that run's), and the fine-tuning learning rate."""
    e, p = cfg.engine, cfg.policy
    out: dict[str, Any] = {"lr": p.lr * e.finetune_lr_scale}
    if e.improvement == "awr":
        out |= {"train_critic": True, "improvement": "awr", **{k: getattr(p, k) for k in AWR_FIELDS}}
    if e.value_guided_samples:
        out |= {"train_critic": True, "value_guided_samples": e.value_guided_samples}
    if out.get("train_critic"):
        out |= {k: getattr(p, k) for k in CRITIC_FIELDS}
    return out


def source_weights(cfg: "CodaConfig") -> dict[str, float]:
    """BC sampling weight per data source."""
    e = cfg.engine
    return {"replay": e.replay_weight, "expert": e.expert_weight, "corrective": e.corrective_weight}


def finetune(
    prev_checkpoint: Path,
    demo_dirs: Sequence[Path],
    new_demos: Path | Sequence[Path],
    cfg: "CodaConfig",
    checkpoint: Path,
    *,
    shaping_weight: float = 0.0,
    metrics_path: Path | None = None,
    progress: bool = False,
) -> tuple["TrainResult", dict[str, int], dict[str, float]]:
    """Fine-tune `prev_checkpoint` for `policy.finetune_steps` on `demo_dirs` (the first is the round-0
    `replay` source) plus `new_demos`, into `checkpoint`; with `engine.retrain`, train a fresh policy of the
    same configuration for `policy.train_steps` on the same data instead.

    Returns:
        (the training result, BC samples per source, each source's share of the BC batches).
    """
    from coda.policy.checkpoint import load_policy
    from coda.policy.policy import ChunkPolicy
    from coda.policy.train import load_chunk_dataset, train_policy

    new = [Path(new_demos)] if isinstance(new_demos, (str, Path)) else [Path(d) for d in new_demos]
    policy = load_policy(prev_checkpoint, overrides=round_overrides(cfg))
    weights = source_weights(cfg)

    def source_of(i: int, ep: Any) -> str:  # unlabelled rollouts give critic samples only, whatever their source
        return "corrective" if ep.corrective else ("replay" if i == 0 else "expert")

    data = load_chunk_dataset([*demo_dirs, *new], policy.cfg, policy.text, shaping_weight=shaping_weight,
                              source_of=source_of, source_weights=weights,
                              max_oversample=cfg.engine.max_oversample,
                              natural_prior=cfg.engine.layout_prior in ("natural", "replay"),
                              prior_sources=("replay",) if cfg.engine.layout_prior == "replay" else None)
    steps = cfg.policy.finetune_steps
    if cfg.engine.retrain:  # a fresh network, normalised for all the data so far
        fresh = policy.cfg.model_copy(update={"lr": cfg.policy.lr})
        policy = ChunkPolicy(fresh, data.dims, data.stats(fresh.frame), policy.text)
        steps = cfg.policy.train_steps
    policy.remember_goals(*data.goal_memory())  # the round's new instructions join what the policy knows
    result = train_policy(policy, data, steps=steps, checkpoint=checkpoint, progress=progress,
                          metrics_path=metrics_path)
    assert data.bc_shares is not None  # source weights were given
    return result, {k: data.bc_source.count(k) for k in weights}, data.bc_shares
