"""Does Text2potential shaping make the chunk critic better? The same critic trained with and without it,
on the same data from the same start, judged on held-out episodes.

For each family (seeds: SFT scenes 0, critic-training scenes 1, held-out scenes 2, never shared):

1. SFT: behaviour cloning on expert demos of the family's `sft` split (the sizes `bench/headline.py` fits
   its SFT policy with; demos carry the canonical stage plan's Φ, as the engine records them).
2. Rollouts: the SFT policy once in each of E valid scenes of every evaluation split (`sft`, `position`,
   `instruction`, `task`, `object`, `distractor`, `physics`), in two scene sets: critic training (seed 1)
   and held out (seed 2). Each episode is replayed (the simulator is deterministic) with Φ attached
   (`RoundBackend.round_episodes`, what a round's train phase uses); a failed held-out episode is replayed
   as a corrective episode, so every chunk-boundary state carries the expert's chunk from there
   (`coda.policy.data.corrective_episode`, label every `n_action_steps`, `chunk_len` steps long).
3. Critic only, twice: the SFT checkpoint loaded twice, its critic trained for `policy.critic_warmup`
   steps by `coda.policy.train._warm_critic` (the critic-only loop that runs before AWR; the actor is not in
   its optimiser, and the bench checks it did not move) on the SFT demos plus the critic-training
   replays, read by `load_chunk_dataset` as a round reads them, with `shaping_weight` 1.0 (`shaped`) and
   0.0 (`sparse`). Same data, same batches (the generator seeded with `policy.seed`), same initial critic.
4. Metrics at the held-out chunk-boundary states (t = 0, n_action_steps, 2 n_action_steps, ... < T):
   - `auc`: ROC AUC (Mann-Whitney U, ties count one half) of the critic's value estimate against the
     episode's eventual success. The value estimate is V(s) + w Φ(s): with Φ(terminal) = 0 the shaped
     critic learns V_w(s) = V(s) − w Φ(s) (`coda.policy.targets`), so adding w Φ(s) back gives its estimate
     of the task value; for the sparse critic (w = 0) it is V(s).
   - `auc_raw`: the same with V(s) alone for both critics.
   - `auc_start`: the value estimate at each episode's first state only (predicting the outcome from the start).
   - `sign_agreement`: over the states of failed held-out episodes, the fraction where
     Q(s, expert chunk) > Q(s, policy chunk) (min of the twin Q heads; the policy chunk is the chunk the
     policy executed from s, as the critic trains on it). Shaping shifts both Q values at s by the same
     −w Φ(s), so the comparison needs no correction.
   AUCs are computed per family (each family has its own critic) and averaged over the families whose
   held-out episodes have both outcomes (macro); `sign_agreement` pools the states of every family (micro).
   `meta.phi_auc`: the AUC of Φ(s) alone, the ranking the shaped critic's V + wΦ has to improve on.
   `paired`: shaped − sparse, with a 95% percentile interval of a paired bootstrap over held-out episodes
   (2000 resamples, seed 0, episodes resampled within their family, both critics on the same resample).

Writes `bench/results/critic_value.json` (`--fast`: `critic_value_fast.json`) and a markdown table beside it:

    {"shaped": {"auc", "auc_raw", "auc_start", "sign_agreement"}, "sparse": {...},
     "per_family": {family: {"shaped", "sparse", "n_episodes", "n_states", "success_rate"}},
     "paired": {"auc": {"diff", "ci95"}, "sign_agreement": {"diff", "ci95"}},
     "n": held-out episodes, "meta": {"sizes", "seeds", "command", "wall_seconds", "python", "cpus", ...}}

A metric that cannot be computed (a family whose held-out episodes all succeed or all fail) is null.

Usage:
    python bench/critic_value.py                      # 4 families, 100 SFT demos, 10 scenes per split and set,
                                                      # 600 critic steps (about 20-25 minutes, 1 worker, 2 cores)
    python bench/critic_value.py --fast               # pick_place, 30 demos, 3 scenes per split and set (~2.5 min)
    python bench/critic_value.py --families push --set policy.critic_warmup=2000
Scenes, demos, the SFT checkpoint and the replayed episodes are kept under --work: a stopped run continues
where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import scenes  # noqa: E402
from coda.config import build_config  # noqa: E402
from coda.scene.spec import FAMILIES  # noqa: E402
from coda.scene.splits import SPLITS  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SFT_SEED, CRITIC_SEED, HELD_OUT_SEED = 0, 1, 2  # scene seeds of the three scene sets
BOOTSTRAP_SEED, RESAMPLES = 0, 2000
WEIGHTS = {"shaped": 1.0, "sparse": 0.0}  # critic name -> shaping weight
METRICS = ("auc", "auc_raw", "auc_start", "sign_agreement")
# The SFT policy of bench/headline.py (its SIZES), stated here so a preset cannot silently change the benchmark;
# `bench.eval_scenes_per_split` is the number of scenes per split in each of the two rollout sets and
# `policy.critic_warmup` the critic-only steps (600: the critic updates of one headline round, 300 warm-up
# steps and 300 fine-tuning steps).
SIZES = [
    "policy.hidden=64", "policy.layers=2", "policy.heads=4", "policy.batch_size=128", "policy.lr=0.001",
    "policy.train_steps=1000", "policy.torch_threads=1", "policy.chunk_len=8", "policy.n_action_steps=4",
    "policy.improvement=bc", "policy.train_critic=false", "policy.critic_warmup=600",
    "scene.sft_scenes_per_family=100", "bench.eval_scenes_per_split=10", "runtime.workers=1",
]
FAST = ["scene.sft_scenes_per_family=30", "policy.train_steps=300", "policy.critic_warmup=300",
        "bench.eval_scenes_per_split=3"]
FAST_FAMILIES = ["pick_place"]


# ---- statistics ------------------------------------------------------------------------------------------


def auc(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """ROC AUC of `scores` for binary `labels`: the probability that a positive outscores a negative, ties
    counting one half (the Mann-Whitney U statistic over n_pos n_neg). NaN when a class is absent."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=bool).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"auc: {s.size} scores for {y.size} labels")
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(s.size, dtype=np.float64)
    # tied scores share the mean of the ranks they span (1-based)
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], s.size]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def paired_bootstrap(stat: Callable[[list[np.ndarray]], float], sizes: Sequence[int], *,
                     resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """A paired statistic (shaped − sparse, computed on the same episodes) with a 95% percentile bootstrap
    interval. Episodes are resampled with replacement within each stratum (family), as many as it holds.

    Args:
        stat: per-stratum episode indices (list of int arrays, repeats allowed) -> the difference.
        sizes: episodes per stratum.
        resamples: bootstrap resamples; seed: their generator's seed.
    Returns:
        {"diff": stat on all episodes, "ci95": [lo, hi]}; resamples where `stat` is NaN are left out,
        and the interval is [None, None] when every one is (None stands for NaN throughout).
    """
    point = stat([np.arange(n) for n in sizes])
    rng = np.random.default_rng(seed)
    draws = np.array([stat([rng.integers(0, n, n) for n in sizes]) for _ in range(resamples)], dtype=np.float64)
    draws = draws[np.isfinite(draws)]
    lo, hi = (float(x) for x in np.percentile(draws, [2.5, 97.5])) if draws.size else (None, None)
    return {"diff": _num(point), "ci95": [lo, hi]}


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class HeldOut:
    """One family's held-out chunk-boundary states, scored by every critic.

    Rows are states; `rows_of[e]` lists episode e's rows in time order (its first is the episode's start).
    The Q arrays have a row for every state; they are NaN except at the states of failed episodes.
    """

    success: np.ndarray  # (E,) bool, each episode's eventual outcome
    rows_of: list[np.ndarray]  # E arrays of row indices
    phi: np.ndarray  # (S,) Φ(s)
    v: dict[str, np.ndarray]  # critic -> (S,) V(s)
    q_expert: dict[str, np.ndarray]  # critic -> (S,) min-twin Q(s, expert chunk)
    q_policy: dict[str, np.ndarray]  # critic -> (S,) min-twin Q(s, executed chunk)
    weights: dict[str, float]  # critic -> shaping weight w

    @property
    def n_states(self) -> int:
        return int(self.phi.shape[0])

    def value(self, critic: str, raw: bool = False) -> np.ndarray:
        """The critic's value estimate V(s) + w Φ(s) (V(s) alone when `raw`)."""
        return self.v[critic] if raw else self.v[critic] + self.weights[critic] * self.phi


def family_auc(h: HeldOut, critic: str, episodes: np.ndarray, kind: str = "auc") -> float:
    """AUC of the value at the states of `episodes` (indices, repeats allowed) against their outcome; `kind`
    "auc", "auc_raw" (V alone) or "auc_start" (first states only)."""
    if kind == "auc_start":
        rows = np.array([h.rows_of[e][0] for e in episodes], dtype=np.int64)
        labels = h.success[episodes]
    else:
        rows = np.concatenate([h.rows_of[e] for e in episodes]) if len(episodes) else np.zeros(0, np.int64)
        labels = np.repeat(h.success[episodes], [len(h.rows_of[e]) for e in episodes])
    return auc(h.value(critic, raw=kind == "auc_raw")[rows], labels)


def agreement_counts(h: HeldOut, critic: str, episodes: np.ndarray) -> tuple[int, int]:
    """(states where Q(s, expert) > Q(s, policy), states compared) over the failed ones of `episodes`."""
    failed = [e for e in episodes if not h.success[e]]
    if not failed:
        return 0, 0
    rows = np.concatenate([h.rows_of[e] for e in failed])
    qe, qp = h.q_expert[critic][rows], h.q_policy[critic][rows]
    ok = np.isfinite(qe) & np.isfinite(qp)
    return int((qe[ok] > qp[ok]).sum()), int(ok.sum())


def mean_auc(fams: Sequence[HeldOut], critic: str, episodes: Sequence[np.ndarray], kind: str = "auc") -> float:
    """The mean over families of `family_auc` (families where it is NaN left out; NaN if all are)."""
    vals = [family_auc(h, critic, e, kind) for h, e in zip(fams, episodes)]
    vals = [v for v in vals if math.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


def pooled_agreement(fams: Sequence[HeldOut], critic: str, episodes: Sequence[np.ndarray]) -> float:
    """`sign_agreement` over the failed states of every family together (NaN without any)."""
    counts = [agreement_counts(h, critic, e) for h, e in zip(fams, episodes)]
    n = sum(c[1] for c in counts)
    return sum(c[0] for c in counts) / n if n else float("nan")


def phi_auc(fams: Sequence[HeldOut]) -> float:
    """The mean over families of the AUC of Φ(s) alone: the ranking the potential gives without any critic."""
    vals = [auc(h.phi[np.concatenate(h.rows_of)], np.repeat(h.success, [len(r) for r in h.rows_of]))
            for h in fams if h.rows_of]
    vals = [v for v in vals if math.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


def critic_metrics(fams: Sequence[HeldOut], critic: str, episodes: Sequence[np.ndarray] | None = None) -> dict[str, float | None]:
    """The four metrics of one critic over `episodes` per family (default: all of them)."""
    eps = [np.arange(len(h.success)) for h in fams] if episodes is None else list(episodes)
    out = {k: mean_auc(fams, critic, eps, k) for k in ("auc", "auc_raw", "auc_start")}
    out["sign_agreement"] = pooled_agreement(fams, critic, eps)
    return {k: _num(v) for k, v in out.items()}


def paired(fams: Sequence[HeldOut], a: str = "shaped", b: str = "sparse", *, resamples: int = RESAMPLES,
           seed: int = BOOTSTRAP_SEED) -> dict[str, dict[str, Any]]:
    """Critic `a` − critic `b` for `auc` and `sign_agreement`, paired bootstrap over held-out episodes."""
    sizes = [len(h.success) for h in fams]

    def d_auc(eps: list[np.ndarray]) -> float:
        return mean_auc(fams, a, eps) - mean_auc(fams, b, eps)

    def d_sign(eps: list[np.ndarray]) -> float:
        return pooled_agreement(fams, a, eps) - pooled_agreement(fams, b, eps)

    return {"auc": paired_bootstrap(d_auc, sizes, resamples=resamples, seed=seed),
            "sign_agreement": paired_bootstrap(d_sign, sizes, resamples=resamples, seed=seed)}


# ---- data ------------------------------------------------------------------------------------------------


def _digest(cfg: Any, sections: tuple[str, ...]) -> str:
    data = {k: cfg.model_dump(mode="json")[k] for k in sections}
    data.get("policy", {}).pop("critic_warmup", None)  # the critics' steps, not the SFT policy's
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]


def _write_once(out: Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` into a fresh temporary directory, renamed to `out`; nothing when `out` is complete."""
    if (out / "index.json").exists():
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    tmp.rename(out)
    return out


def replays(backend: Any, ckpt: Path, specs: list[Any], cfg: Any, workers: int, out: Path, labelled: bool) -> Path:
    """The SFT policy's episodes in `specs`, replayed with Φ into the dataset `out`; with `labelled`, failed
    ones carry the expert's chunk at every chunk boundary (a corrective episode, labels from step 0)."""
    from coda.engine.backend import EpisodeJob
    from coda.engine.rollout import evaluate_checkpoint
    from coda.policy.data import DemoWriter

    def write(tmp: Path) -> None:
        rollouts = evaluate_checkpoint(ckpt, specs, cfg.sim, workers=workers, record_states=False)
        p = cfg.policy
        jobs = [EpisodeJob("corrective", s, None, r.actions, 0, label_every=p.n_action_steps, label_len=p.chunk_len)
                if labelled and not r.success else EpisodeJob("replay", s, None, r.actions)
                for s, r in zip(specs, rollouts)]
        with DemoWriter(tmp) as writer:
            for r, ep in zip(rollouts, backend.round_episodes(jobs)):
                if ep.success != r.success:  # the replay must re-create the rollout
                    raise RuntimeError(f"replay of '{ep.spec_id}' ended {ep.success}, its rollout {r.success}")
                writer.add(ep)

    return _write_once(out, write)


# ---- critics ---------------------------------------------------------------------------------------------


def train_critic(sft: Path, data_dirs: list[Path], weight: float, steps: int) -> tuple[Any, dict[str, float]]:
    """The SFT policy with its critic trained alone for `steps` on `data_dirs`, shaped with `weight`.

    Raises:
        RuntimeError: the actor's weights changed (critic-only training must leave them alone).
    """
    import torch

    from coda.policy.checkpoint import load_policy
    from coda.policy.train import _warm_critic, load_chunk_dataset

    policy = load_policy(sft)
    data = load_chunk_dataset(data_dirs, policy.cfg, policy.text, shaping_weight=weight)
    actor = [p.detach().clone() for p in policy.actor_parameters()]
    torch.manual_seed(policy.cfg.seed)
    gen = torch.Generator().manual_seed(policy.cfg.seed)  # the same batches for every weight
    policy.train()
    try:
        lines = _warm_critic(policy, data, gen, steps, None)
    finally:
        policy.eval()
    if not all(torch.equal(a, p) for a, p in zip(actor, policy.actor_parameters())):
        raise RuntimeError("critic-only training changed the actor's weights")
    last = lines[-1] if lines else {}
    return policy, {k: float(v) for k, v in last.items() if k != "warmup_step"}


def _pad(chunk: np.ndarray, h: int) -> np.ndarray:
    """A chunk (K, A) padded to (h, A) the way the critic's training chunks are (the last action repeated)."""
    from coda.policy.features import ACTION_DIM
    from coda.policy.samples import _pad_chunk

    return _pad_chunk(np.asarray(chunk, np.float32).reshape(-1, ACTION_DIM), 0, h)


def score_held_out(episodes: list[Any], critics: dict[str, Any], every: int, block: int = 256) -> HeldOut:
    """V and the Q comparison of every critic at the chunk-boundary states (t = 0, every, 2 every, ... < T)
    of the held-out `episodes`."""
    import torch

    from coda.policy.features import obs_to_batch

    first = next(iter(critics.values()))
    h = first.cfg.chunk_len
    obs, phi, expert, executed, rows_of = [], [], [], [], []
    for ep in episodes:
        ts = range(0, ep.length, every)
        rows_of.append(np.arange(len(obs), len(obs) + len(ts)))
        for t in ts:
            obs.append(ep.observations[t])
            phi.append(float(ep.potentials[t]) if ep.potentials is not None else 0.0)
            label = ep.label_chunks[t] if (ep.label_chunks is not None and not ep.success) else None
            expert.append(None if label is None else _pad(label, h))
            executed.append(_pad(ep.actions[t:], h))
    n = len(obs)
    v = {k: np.zeros(n) for k in critics}
    qe = {k: np.full(n, np.nan) for k in critics}
    qp = {k: np.full(n, np.nan) for k in critics}
    with torch.no_grad():
        for lo in range(0, n, block):
            ob = obs_to_batch(obs[lo : lo + block], first.text)  # every critic reads the same observations
            sel = [i for i in range(lo, min(lo + block, n)) if expert[i] is not None]
            local = torch.tensor([i - lo for i in sel], dtype=torch.long)
            for name, pol in critics.items():
                v[name][lo : lo + block] = pol.state_values(ob).numpy()
                if not sel:
                    continue
                part = ob.index(local)
                qe[name][sel] = pol.q_values(part, torch.from_numpy(np.stack([expert[i] for i in sel]))).numpy()
                qp[name][sel] = pol.q_values(part, torch.from_numpy(np.stack([executed[i] for i in sel]))).numpy()
    return HeldOut(np.array([bool(ep.success) for ep in episodes]), rows_of, np.asarray(phi), v, qe, qp,
                   {k: WEIGHTS[k] for k in critics})


# ---- one family ------------------------------------------------------------------------------------------


def run_family(family: str, cfg: Any, work: Path, workers: int, bar: Progress, task: Any,
               console: Console) -> tuple[HeldOut, dict[str, Any]]:
    """SFT, rollouts in both scene sets, the two critics and their scores on the held-out states."""
    import torch

    from coda.engine.backend import RoundBackend
    from coda.policy.data import DemoDataset
    from coda.policy.train import train_sft

    backend = RoundBackend(cfg)
    n_sft, n_eval = cfg.scene.sft_scenes_per_family, cfg.bench.eval_scenes_per_split
    times: dict[str, Any] = {}

    def phase(name: str, t0: float) -> None:
        times[f"{name}_s"] = round(time.perf_counter() - t0, 1)
        bar.update(task, advance=1, description=f"{family}: {name} done")

    t0 = time.perf_counter()
    bar.update(task, description=f"{family}: scenes")
    train = scenes(work, family, "sft", n_sft, SFT_SEED, workers)
    sets = {name: [s for split in SPLITS for s in scenes(work, family, split, n_eval, seed, workers)]
            for name, seed in (("critic", CRITIC_SEED), ("held_out", HELD_OUT_SEED))}
    trained_on = {s.spec_id for s in (*train, *sets["critic"])}
    sets["held_out"] = [s for s in sets["held_out"] if s.spec_id not in trained_on]  # never judged on training scenes
    phase("scenes", t0)

    t0 = time.perf_counter()
    bar.update(task, description=f"{family}: SFT demos and training")
    demos = _write_once(work / family / f"demos_sft{n_sft}", lambda tmp: backend.collect_demos(train, tmp))
    root = work / family / f"sft-{_digest(cfg, ('policy', 'scene', 'sim'))}"
    root.mkdir(parents=True, exist_ok=True)
    sft = root / "sft.pt"
    if not sft.exists():
        torch.manual_seed(SFT_SEED)
        train_sft([demos], cfg.policy, sft)
    phase("sft", t0)

    t0 = time.perf_counter()
    bar.update(task, description=f"{family}: rollouts")
    eval_dirs = {name: replays(backend, sft, specs, cfg, workers, root / f"episodes_{name}_n{n_eval}", name == "held_out")
                 for name, specs in sets.items()}
    backend.close()  # its workers
    phase("rollouts", t0)

    t0 = time.perf_counter()
    critics, losses = {}, {}
    for name, w in WEIGHTS.items():
        bar.update(task, description=f"{family}: {name} critic ({cfg.policy.critic_warmup} steps)")
        critics[name], losses[name] = train_critic(sft, [demos, eval_dirs["critic"]], w, cfg.policy.critic_warmup)
    phase("critics", t0)

    t0 = time.perf_counter()
    bar.update(task, description=f"{family}: scoring held-out states")
    held = list(DemoDataset(eval_dirs["held_out"]).episodes())
    scored = score_held_out(held, critics, cfg.policy.n_action_steps)
    phase("score", t0)
    critic_train = list(DemoDataset(eval_dirs["critic"]).episodes())
    info = {"seconds": times, "final_critic_losses": losses, "held_out_episodes": len(held),
            "critic_train_rollouts": len(critic_train),
            "critic_train_rollout_success": float(np.mean([e.success for e in critic_train])) if critic_train else None,
            "sft_demos": len(DemoDataset(demos))}
    rate = float(np.mean(scored.success)) if len(held) else float("nan")
    console.print(f"{family}: {len(held)} held-out episodes ({scored.n_states} states, success {rate:.2f}); "
                  + "; ".join(f"{k} auc {_fmt(critic_metrics([scored], k)['auc'])}" for k in WEIGHTS))
    return scored, info


# ---- report ----------------------------------------------------------------------------------------------


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(p: dict[str, Any]) -> str:
    lo, hi = p["ci95"]
    return f"{_fmt(p['diff'])} [{_fmt(lo)}, {_fmt(hi)}]"


def markdown(result: dict[str, Any]) -> str:
    m = result["meta"]
    sizes = m["sizes"]
    lines = [f"Command: `{m['command']}`; families {', '.join(result['per_family'])}; {sizes['sft_demos']} SFT demos, "
             f"{sizes['scenes_per_split']} scenes per split in each rollout set, {sizes['critic_steps']} critic-only "
             f"steps; {result['n']} held-out episodes; wall {m['wall_seconds'] / 60:.1f} min.", "",
             "AUCs: per family, then averaged over families; sign agreement: states of every family pooled.", "",
             "| critic | auc (V + wΦ) | auc_raw (V) | auc_start | sign_agreement |", "|---|---|---|---|---|"]
    for name in WEIGHTS:
        r = result[name]
        lines.append(f"| {name} (w = {WEIGHTS[name]}) | " + " | ".join(_fmt(r[k]) for k in METRICS) + " |")
    pr = result["paired"]
    lines += ["", f"Φ alone (no critic): auc {_fmt(m['phi_auc']['mean'])}."]
    lines += ["", f"Shaped − sparse (paired bootstrap over held-out episodes, {RESAMPLES} resamples, seed "
              f"{BOOTSTRAP_SEED}): auc {_ci(pr['auc'])}; sign_agreement {_ci(pr['sign_agreement'])}.", "",
              "| family | episodes | states | success | shaped auc | sparse auc | shaped sign | sparse sign |",
              "|---|---|---|---|---|---|---|---|"]
    for fam, r in result["per_family"].items():
        lines.append(f"| {fam} | {r['n_episodes']} | {r['n_states']} | {_fmt(r['success_rate'], 2)} | "
                     f"{_fmt(r['shaped']['auc'])} | {_fmt(r['sparse']['auc'])} | "
                     f"{_fmt(r['shaped']['sign_agreement'])} | {_fmt(r['sparse']['sign_agreement'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help=f"small sizes, {', '.join(FAST_FAMILIES)} only: a few minutes")
    ap.add_argument("--families", nargs="+", default=None, choices=list(FAMILIES),
                    help=f"default all ({', '.join(FAMILIES)}); --fast: {', '.join(FAST_FAMILIES)}")
    ap.add_argument("--workers", type=int, default=1, help="processes for validity checks and rollouts")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override, e.g. policy.critic_warmup=2000")
    ap.add_argument("--work", type=Path, default=None, help="scenes, demos, checkpoints (default runs/bench_critic_value[_fast])")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    families = args.families or (FAST_FAMILIES if args.fast else list(FAMILIES))
    overrides = SIZES + (FAST if args.fast else []) + args.overrides
    cfg = build_config("full", overrides=overrides)
    work = args.work or Path("runs") / ("bench_critic_value_fast" if args.fast else "bench_critic_value")
    out = args.out or RESULTS / ("critic_value_fast.json" if args.fast else "critic_value.json")
    command = " ".join(["python bench/critic_value.py", *(sys.argv[1:] if argv is None else argv)])
    import torch

    torch.set_num_threads(cfg.policy.torch_threads)
    console = Console()
    t_all = time.perf_counter()
    held: dict[str, HeldOut] = {}
    infos: dict[str, Any] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("critic value", total=5 * len(families))  # five phases per family
        for family in families:
            held[family], infos[family] = run_family(family, cfg, work, args.workers, bar, task, console)
    fams = list(held.values())
    per_family = {f: {**{k: critic_metrics([h], k) for k in WEIGHTS}, "n_episodes": len(h.success),
                      "n_states": h.n_states, "success_rate": _num(float(np.mean(h.success)) if len(h.success) else float("nan"))}
                  for f, h in held.items()}
    result: dict[str, Any] = {
        **{k: critic_metrics(fams, k) for k in WEIGHTS},
        "per_family": per_family,
        "paired": paired(fams),
        "n": sum(len(h.success) for h in fams),
        "meta": {
            "sizes": {"sft_demos": cfg.scene.sft_scenes_per_family, "scenes_per_split": cfg.bench.eval_scenes_per_split,
                      "splits": list(SPLITS), "critic_steps": cfg.policy.critic_warmup,
                      "sft_steps": cfg.policy.train_steps, "overrides": overrides,
                      "policy": cfg.policy.model_dump(mode="json")},
            "seeds": {"sft_scenes": SFT_SEED, "critic_scenes": CRITIC_SEED, "held_out_scenes": HELD_OUT_SEED,
                      "torch": cfg.policy.seed, "bootstrap": BOOTSTRAP_SEED, "resamples": RESAMPLES},
            "weights": WEIGHTS, "pooling": "auc*: mean of per-family AUCs; sign_agreement: states pooled",
            "phi_auc": {"mean": _num(phi_auc(fams)), **{f: _num(phi_auc([h])) for f, h in held.items()}},
            "command": command, "wall_seconds": round(time.perf_counter() - t_all, 1),
            "python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "families": infos, "work": str(work),
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    out.with_suffix(".md").write_text(markdown(result))

    table = Table(title=f"chunk critic on held-out states ({result['n']} episodes)")
    for col in ("critic", *METRICS):
        table.add_column(col)
    for name in WEIGHTS:
        table.add_row(name, *(_fmt(result[name][k]) for k in METRICS))
    console.print(table)
    console.print(f"shaped − sparse: auc {_ci(result['paired']['auc'])}, sign_agreement "
                  f"{_ci(result['paired']['sign_agreement'])}; wall {result['meta']['wall_seconds'] / 60:.1f} min → {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
