"""The headline as a figure: success per strategy, pooled out of distribution and per split, with 95% intervals.

Reads a result of `bench/headline.py` and draws two panels: (left) OOD success pooled over the six OOD splits
and the families, each strategy with its Wilson interval and its paired difference to `coda`; (right) each
split's success (in distribution and the six OOD axes) per strategy, pooled over seeds and families, with
Wilson intervals over that split's episodes (seeds × families × evaluation scenes; every family plays the
same number of scenes, so the split's rate is the mean of the families' rates). Writes a PNG beside the JSON.

Usage:
    python bench/headline_plot.py                                   # bench/results/headline.json -> .png
    python bench/headline_plot.py bench/results/headline_fast.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from coda.policy.stats import wilson_interval

RESULTS = Path(__file__).parent / "results"
SPLITS = ("sft", "position", "instruction", "task", "object", "distractor", "physics")
ORDER = ("sft", "coda", "coda-sparse", "replay", "dagger", "dr", "plr", "accel")
COLOURS = {"sft": "#9e9e9e", "coda": "#d62728", "coda-sparse": "#ff9896", "replay": "#1f77b4", "dagger": "#2ca02c",
           "dr": "#9467bd", "plr": "#8c564b", "accel": "#e377c2"}


def split_rates(st: dict[str, Any], n_split: int) -> dict[str, tuple[float, float, float]]:
    """Split -> (rate, low, high): the families' mean rate and its Wilson interval over `n_split` episodes."""
    out = {}
    for split in SPLITS:
        rates = [fam[split] for fam in st["per_family"].values() if split in fam]
        k = round(n_split * sum(rates) / len(rates))  # successes: every family plays the same scenes per split
        lo, hi = wilson_interval(k, n_split)
        out[split] = (k / n_split, min(lo, k / n_split), max(hi, k / n_split))
    return out


def draw(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = [s for s in ORDER if s in result["strategies"]]
    families = len(next(iter(result["strategies"].values()))["per_family"])
    n_split = result["seeds"] * families * result["eval_scenes_per_split"]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(15, 4.8), gridspec_kw={"width_ratios": [1, 2.6]})
    for i, s in enumerate(strategies):
        st = result["strategies"][s]
        p, (lo, hi) = st["ood_success"], st["ci95"]
        ax0.bar(i, p, color=COLOURS.get(s, "k"), yerr=[[p - lo], [hi - p]], capsize=3)
        pv = st.get("paired_vs_coda")
        label = f"{p:.3f}" if not pv else f"{p:.3f}\n{100 * pv['diff']:+.1f}"
        ax0.text(i, min(hi + 0.02, 1.02), label, ha="center", va="bottom", fontsize=7)
    ax0.set_xticks(range(len(strategies)), strategies, rotation=40, ha="right")
    ax0.set_ylim(0, 1.12)
    ax0.set_ylabel("success")
    ax0.set_title("OOD, pooled (95% Wilson; pp vs coda, paired)", fontsize=10)
    width = 0.8 / len(strategies)
    for i, s in enumerate(strategies):
        rates = split_rates(result["strategies"][s], n_split)
        xs = [k + (i - (len(strategies) - 1) / 2) * width for k in range(len(SPLITS))]
        ps = [rates[sp][0] for sp in SPLITS]
        err = [[rates[sp][0] - rates[sp][1] for sp in SPLITS], [rates[sp][2] - rates[sp][0] for sp in SPLITS]]
        ax1.bar(xs, ps, width, color=COLOURS.get(s, "k"), yerr=err, capsize=1.5, label=s, error_kw={"lw": 0.7})
    ax1.set_xticks(range(len(SPLITS)), ["in distribution", *SPLITS[1:]])
    ax1.set_ylim(0, 1.05)
    seeds = f"{result['seeds']} seed{'s' if result['seeds'] > 1 else ''}"
    ax1.set_title(f"per split ({seeds} × {families} families × "
                  f"{result['eval_scenes_per_split']} scenes = {n_split} episodes each)", fontsize=10)
    ax1.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(f"Headline: {result['rounds']} rounds × {result['generation_budget_per_round']} generated scenes "
                 f"and {result['labels_per_round']} labels per round, every strategy from the same SFT policy",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path, nargs="?", default=RESULTS / "headline.json")
    ap.add_argument("--out", type=Path, default=None, help="PNG (default: the JSON's name with .png)")
    args = ap.parse_args()
    out = args.out or args.result.with_suffix(".png")
    draw(json.loads(args.result.read_text()), out)
    print(out)


if __name__ == "__main__":
    main()
