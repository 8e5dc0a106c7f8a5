"""The report's figures: matplotlib (Agg) PNGs as bytes, one function per figure, each from ReportData tables.

Every function returns None when there is nothing to draw, so the report says so in words instead of
showing an empty axis.
"""

from __future__ import annotations

import io
from typing import Any

from coda.reports.data import DIAGNOSIS_OUTCOMES, FailureModeRow, Rate, split_order

_DPI = 96
_OUTCOME_COLOURS = {"verified": "#2e7d32", "rejected by verifier": "#c62828", "not verified": "#9e9e9e",
                    "malformed answer": "#6a1b9a"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def success_plot(family: str, table: dict[str, dict[int, Rate]]) -> bytes | None:
    """Success over rounds, one line per evaluation split (sft solid and thick), with 95% Wilson bands.

    Args:
        family: the task family (title).
        table: split -> round -> Rate.

    Returns:
        PNG bytes, or None when the table is empty.
    """
    if not any(table.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    rounds = sorted({r for rs in table.values() for r in rs})
    splits = sorted(table, key=split_order)
    for i, split in enumerate(splits):
        xs = [r for r in rounds if r in table[split]]
        ys = [table[split][r].rate for r in xs]
        # Splits are dodged sideways a little so equal rates stay visible as separate markers.
        dx = 0.0 if len(splits) < 2 else 0.16 * (i / (len(splits) - 1) - 0.5)
        sft = split == "sft"
        ax.plot([x + dx for x in xs], ys, marker="o", ms=5, lw=2.6 if sft else 1.3, ls="-" if sft else "--",
                color="black" if sft else None, label=split, zorder=3 if sft else 2)
        if sft:  # one band only: the in-distribution split's 95% interval
            lo, hi = zip(*(table[split][r].interval() for r in xs))
            ax.fill_between([x + dx for x in xs], lo, hi, color="black", alpha=0.08, lw=0)
    ax.set_xticks(rounds)
    ax.set_xlim(min(rounds) - 0.25, max(rounds) + 0.25)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("round")
    ax.set_ylabel("success rate")
    ax.set_title(f"{family}: success per evaluation split (band: sft 95% Wilson interval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _png(fig)


def diagnosis_plot(counts: dict[int, dict[str, dict[str, int]]]) -> bytes | None:
    """Diagnoses per round and failure-mode class, stacked by outcome (verified, rejected, ...).

    Args:
        counts: round -> critic failure mode -> outcome -> count.

    Returns:
        PNG bytes, or None without diagnoses.
    """
    cells = [(r, m) for r in sorted(counts) for m in sorted(counts[r])]
    if not cells:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(min(12.0, 3.2 + 0.5 * len(cells)), 3.2))
    xs = list(range(len(cells)))
    bottom = [0] * len(cells)
    for outcome in DIAGNOSIS_OUTCOMES:
        vals = [counts[r][m].get(outcome, 0) for r, m in cells]
        if any(vals):
            ax.bar(xs, vals, 0.6, bottom=bottom, color=_OUTCOME_COLOURS[outcome], label=outcome)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(xs, [f"r{r} {m}" for r, m in cells], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("diagnoses")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlim(-0.6, len(cells) - 0.4)
    ax.set_title("critic diagnoses per round and failure mode")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def progress_plot(modes: list[FailureModeRow]) -> bytes | None:
    """Learning progress (after − before on held-apart probes) per failure mode over rounds.

    Returns:
        PNG bytes, or None when no mode has a progress record.
    """
    modes = [m for m in modes if m.progress]
    if not modes:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    rounds = sorted({r for m in modes for r in m.progress})
    for m in modes:
        xs = sorted(m.progress)
        ax.plot(xs, [m.progress[r][1] - m.progress[r][0] for r in xs], marker="o", label=_short(m.key))
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(rounds)
    ax.set_xlim(min(rounds) - 0.25, max(rounds) + 0.25)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel("round")
    ax.set_ylabel("learning progress")
    ax.set_title("learning progress per failure mode (after − before)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _png(fig)


def budget_plot(budget: dict[int, dict[str, int]]) -> bytes | None:
    """The generation budget per round, stacked by source (failure mode, exploration, baseline source), as
    shares of the round's total.

    Returns:
        PNG bytes, or None without generation programs.
    """
    rounds = sorted(r for r in budget if sum(budget[r].values()) > 0)
    if not rounds:
        return None
    plt = _pyplot()
    labels = sorted({k for r in rounds for k in budget[r]})
    fig, ax = plt.subplots(figsize=(min(9.0, 3.6 + 0.6 * len(rounds)), 3.2))
    bottom = [0.0] * len(rounds)
    cmap = plt.get_cmap("tab20")
    for i, label in enumerate(labels):
        vals = [budget[r].get(label, 0) / sum(budget[r].values()) for r in rounds]
        ax.bar([str(r) for r in rounds], vals, 0.6, bottom=bottom, label=_short(label), color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylim(0, 1)
    ax.set_xlim(-0.6, len(rounds) - 0.4)
    ax.set_xlabel("round")
    ax.set_ylabel("share of generation budget")
    ax.set_title("generation budget per source")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _png(fig)


def _short(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


__all__ = ["budget_plot", "diagnosis_plot", "progress_plot", "success_plot"]
