"""The training loop: sample batches, step AdamW, update the target critic, log, checkpoint.

A non-finite loss or gradient stops training with a `TrainingError` naming the step and the batch
statistics. The check runs before the optimizer step, so the weights in memory are still the last good
ones: they are written to the checkpoint path before the error is raised. Metrics go to a JSONL file, one
line every `log_every` steps.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch import Tensor

from coda.policy.checkpoint import save_checkpoint
from coda.policy.config import PolicyConfig
from coda.policy.data import Episode
from coda.policy.errors import TrainingError
from coda.policy.policy import ChunkPolicy
from coda.policy.samples import ChunkDataset, TrainBatch
from coda.policy.text import TextEmbedder, text_encoder_for

UNFAMILIAR_VARIANTS = 8  # unfamiliar-word variants held per episode when `unfamiliar_rate` > 0


@dataclass
class TrainResult:
    """What a training run did."""

    steps: int
    metrics: dict[str, float]  # the last step's metrics
    wall_s: float
    samples_per_s: float  # BC samples (plus critic samples, if any) per second
    checkpoint: Path | None = None
    history: list[dict[str, float]] = field(default_factory=list)  # the logged lines


def _tensor_summary(name: str, t: Tensor) -> str | None:
    if not t.is_floating_point() or t.numel() == 0:
        return None
    bad = int((~torch.isfinite(t)).sum())
    finite = t[torch.isfinite(t)]
    mx = float(finite.abs().max()) if finite.numel() else float("nan")
    return f"{name}: {bad} non-finite of {t.numel()}, max|x| {mx:.3g}"


def batch_statistics(batch: TrainBatch) -> str:
    """One line: per field, how many values are non-finite and the largest finite magnitude.

    Fields with non-finite values are listed first; if there are none, all fields are shown.
    """
    items: list[tuple[str, Tensor]] = []
    for part_name, part in (("bc", batch.bc), ("critic", batch.critic)):
        if part is None:
            continue
        for fname, value in part._asdict().items():
            if isinstance(value, tuple):
                items += [(f"{part_name}.{fname}.{k}", v) for k, v in value._asdict().items()]
            elif value is not None:  # an optional field the batch does not carry
                items.append((f"{part_name}.{fname}", value))
    summaries = [(n, _tensor_summary(n, t)) for n, t in items]
    bad = [s for n, s in summaries if s and not s.split(": ")[1].startswith("0 ")]
    return "; ".join(bad if bad else [s for _, s in summaries if s])


def _cosine(steps: int, floor: float = 0.1) -> Callable[[int], float]:
    """Learning-rate factor: cosine from 1 to `floor` over `steps`."""
    return lambda i: floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(i, steps) / max(steps, 1)))


def _set_threads(n: int) -> None:
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def train_policy(
    policy: ChunkPolicy,
    data: ChunkDataset,
    *,
    steps: int | None = None,
    checkpoint: str | Path | None = None,
    metrics_path: str | Path | None = None,
    progress: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Train `policy` on `data` for `steps` (default `cfg.train_steps`) with the policy's config.

    Args:
        policy: the policy (its config sets batch size, lr, critic on/off, improvement, seed).
        data: chunked samples.
        steps: number of optimizer steps.
        checkpoint: file written every `checkpoint_every` steps, at the end, and on a non-finite loss.
        metrics_path: JSONL file (appended) with one line every `log_every` steps.
        progress: show a rich progress bar.
        meta: extra fields stored in the checkpoint.
    Returns:
        TrainResult.
    Raises:
        TrainingError: non-finite loss or gradient, naming the step and the batch statistics.
    """
    cfg = policy.cfg
    steps = cfg.train_steps if steps is None else steps
    _set_threads(cfg.torch_threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    groups = policy.gradient_groups()
    params = [q for g in groups.values() for q in g]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)  # fewer Python loops
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _cosine(steps) if cfg.lr_decay else lambda _: 1.0)
    ckpt = Path(checkpoint) if checkpoint is not None else None
    log = open(metrics_path, "a") if metrics_path is not None else None  # noqa: SIM115 - closed in finally
    history: list[dict[str, float]] = []
    meta_base = {"dataset_bc_samples": data.n_bc, "dataset_episodes": data.n_episodes, **dict(meta or {})}
    per_step = cfg.batch_size * (2 if cfg.train_critic else 1)
    metrics: dict[str, float] = {}
    policy.train()
    policy.train_rng = gen  # what the loss samples (AWR's policy chunks) follows the batches' seed
    t0 = time.perf_counter()
    if cfg.improvement == "awr" and cfg.critic_warmup:
        history += _warm_critic(policy, data, gen, cfg.critic_warmup, log)
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"), TimeRemainingColumn())
    try:
        with Progress(*columns, disable=not progress, transient=True) as bar:
            task = bar.add_task("train", total=steps, info="")
            for step in range(1, steps + 1):
                batch = data.sample(cfg.batch_size, gen, critic=cfg.train_critic, paraphrase_rate=cfg.paraphrase_rate,
                                    token_dropout=cfg.token_dropout, unfamiliar_rate=cfg.unfamiliar_rate)
                metrics = _optimizer_step(policy, batch, opt, sched, groups, ckpt=ckpt, step=step, meta=meta_base)
                if step % cfg.log_every == 0 or step == steps:
                    elapsed = time.perf_counter() - t0
                    _log({"step": step, **metrics, "elapsed_s": elapsed, "samples_per_s": step * per_step / elapsed},
                         history, log)
                    bar.update(task, info=f"loss {metrics['loss']:.4f}")
                if ckpt is not None and (step % cfg.checkpoint_every == 0 or step == steps):
                    save_checkpoint(policy, ckpt, {**meta_base, "step": step})
                bar.advance(task)
    finally:
        if log is not None:
            log.close()
        policy.train_rng = None
        policy.eval()
    wall = time.perf_counter() - t0
    return TrainResult(steps, metrics, wall, steps * per_step / max(wall, 1e-9), ckpt, history)


def _warm_critic(policy: ChunkPolicy, data: ChunkDataset, gen: torch.Generator, steps: int, log: Any) -> list[dict[str, float]]:
    """Critic-only steps (its own AdamW, constant lr, Polyak target updated) before the actor reads the
    advantages: a critic that starts untrained would weight the actor's samples by noise."""
    cfg = policy.cfg
    params = list(policy.critic.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
    lines: list[dict[str, float]] = []
    for step in range(1, steps + 1):
        loss, metrics = policy.critic_loss(data.critic_batch(torch.randint(data.n_critic, (cfg.batch_size,), generator=gen)))
        if not math.isfinite(float(loss.detach())):
            raise TrainingError(f"critic warm-up stopped at step {step}: loss is {float(loss.detach())}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        policy.update_target()
        if step % cfg.log_every == 0 or step == steps:
            _log({"warmup_step": step, **metrics}, lines, log)
    return lines


def _log(line: dict[str, float], lines: list[dict[str, float]], log: Any) -> None:
    """Keep a metrics line and append it to the open JSONL file `log`, if any."""
    lines.append(line)
    if log is not None:
        log.write(json.dumps(line) + "\n")
        log.flush()


def _optimizer_step(policy: ChunkPolicy, batch: TrainBatch, opt: torch.optim.Optimizer,
                    sched: torch.optim.lr_scheduler.LRScheduler, groups: Mapping[str, list[Tensor]], *,
                    ckpt: Path | None, step: int, meta: Mapping[str, Any]) -> dict[str, float]:
    """One AdamW step on `batch` (gradients clipped per group, the target critic updated when trained); returns
    the loss's metrics plus gradient norms and learning rate. A non-finite loss or gradient norm at `step` stops
    training before the optimizer steps (`_stop`: the last good weights go to `ckpt` with `meta`)."""
    cfg = policy.cfg
    loss, metrics = policy(batch)
    loss_value = float(loss.detach())
    if not math.isfinite(loss_value):
        _stop(policy, ckpt, step, f"loss is {loss_value}", metrics, batch, meta)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norms = {k: float(torch.nn.utils.clip_grad_norm_(g, cfg.grad_clip)) for k, g in groups.items()}
    for k, norm in norms.items():
        if not math.isfinite(norm):
            _stop(policy, ckpt, step, f"{k} gradient norm is {norm}", metrics, batch, meta)
    opt.step()
    sched.step()
    if cfg.train_critic:
        policy.update_target()
    metrics["grad_norm"] = norms["actor"]
    metrics |= {f"{k}_grad_norm": v for k, v in norms.items() if k != "actor"}
    metrics["lr"] = sched.get_last_lr()[0]
    return metrics


def _stop(
    policy: ChunkPolicy,
    ckpt: Path | None,
    step: int,
    what: str,
    metrics: Mapping[str, float],
    batch: TrainBatch,
    meta: Mapping[str, Any],
) -> None:
    kept = ""
    finite = all(bool(torch.isfinite(p).all()) for p in policy.state_dict().values())
    if ckpt is not None and finite:
        # the optimizer has not stepped on this batch: the weights in memory are the last good ones
        save_checkpoint(policy, ckpt, {**meta, "step": step - 1, "stopped": f"{what} at step {step}"})
        kept = f"; last good weights (step {step - 1}) kept in '{ckpt}'"
    elif not finite:
        kept = "; the weights are non-finite already, so no checkpoint was written"
    parts = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
    raise TrainingError(f"training stopped at step {step}: {what} ({parts}); batch: {batch_statistics(batch)}{kept}")


def build_policy(cfg: PolicyConfig, data: ChunkDataset, text: TextEmbedder | None = None) -> ChunkPolicy:
    """A fresh policy sized and normalised for `data`."""
    text = text if text is not None else text_encoder_for(cfg.text_model)
    policy = ChunkPolicy(cfg, data.dims, data.stats(cfg.frame), text)
    policy.remember_goals(*data.goal_memory())
    return policy


def load_chunk_dataset(
    demo_dirs: Iterable[str | Path],
    cfg: PolicyConfig,
    text: TextEmbedder | None = None,
    shaping_weight: float = 1.0,
    *,
    source_of: Callable[[int, Episode], str] | None = None,
    source_weights: Mapping[str, float] | None = None,
    max_oversample: float | None = None,
    natural_prior: bool = False,
    prior_sources: Sequence[str] | None = None,
) -> ChunkDataset:
    """Read one or more demo directories into a ChunkDataset for `cfg` (chunk length, discount).

    Args:
        source_of: (index of the episode's directory in `demo_dirs`, episode) -> source name, for data weights.
        source_weights: BC sampling weight per source name (see `coda.policy.samples`).
        max_oversample: cap on a source's share relative to uniform sampling (see `coda.policy.samples`).
        natural_prior: the pointers' layout prior learns from the data as collected, not as `source_weights` draw
            it (see `coda.policy.samples`); `prior_sources`: only from these sources' samples.
    """
    from coda.policy.data import DemoDataset

    text = text if text is not None else text_encoder_for(cfg.text_model)
    variants = UNFAMILIAR_VARIANTS if cfg.unfamiliar_rate > 0 else 0
    if source_of is None:
        episodes: Iterable[Episode] = (ep for d in demo_dirs for ep in DemoDataset(d).episodes())
        return ChunkDataset(episodes, text, cfg.chunk_len, cfg.gamma, shaping_weight, source_weights=source_weights,
                            max_oversample=max_oversample, unfamiliar_variants=variants)
    items = [(i, ep) for i, d in enumerate(demo_dirs) for ep in DemoDataset(d).episodes()]
    return ChunkDataset((ep for _, ep in items), text, cfg.chunk_len, cfg.gamma, shaping_weight,
                        sources=[source_of(i, ep) for i, ep in items], source_weights=source_weights,
                        max_oversample=max_oversample, unfamiliar_variants=variants, natural_prior=natural_prior,
                        prior_sources=prior_sources)


def train_sft(
    demo_dirs: Iterable[str | Path],
    cfg: PolicyConfig,
    checkpoint: str | Path,
    *,
    steps: int | None = None,
    metrics_path: str | Path | None = None,
    progress: bool = False,
    text: TextEmbedder | None = None,
    init_from: str | Path | None = None,
    shaping_weight: float = 1.0,
) -> tuple[ChunkPolicy, TrainResult]:
    """Train on demonstration directories into `checkpoint`.

    With the default config this is plain behaviour cloning (the `sft` setting); `cfg.train_critic` and
    `cfg.improvement = "awr"` add the chunk critic and advantage weighting on the same data.

    Args:
        demo_dirs: dataset directories (demonstrations and corrective episodes).
        cfg: policy config (architecture, optimiser, losses).
        checkpoint: output file.
        steps: optimizer steps (default `cfg.train_steps`).
        metrics_path: JSONL metrics file.
        progress: rich progress bar.
        text: sentence embedder (default: `cfg.text_model`).
        init_from: fine-tune this checkpoint instead of starting fresh; its weights AND its normalisation
            statistics are kept, so inputs mean the same to the network before and after.
        shaping_weight: scale of the potentials stored with the episodes.
    Raises:
        DatasetError, CheckpointError (architecture of `init_from` differs from `cfg`), TrainingError.
    """
    from coda.policy.checkpoint import load_into

    dirs = [Path(d) for d in demo_dirs]
    data = load_chunk_dataset(dirs, cfg, text, shaping_weight)
    policy = build_policy(cfg, data, text)
    if init_from is not None:
        load_into(policy, init_from)
    result = train_policy(
        policy, data, steps=steps, checkpoint=checkpoint, metrics_path=metrics_path, progress=progress,
        meta={"demos": [str(d) for d in dirs], "init_from": str(init_from) if init_from else None},
    )
    return policy, result
