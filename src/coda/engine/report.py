"""`report.html`: what a run did and how well the policy does, rebuilt from the run's memory alone."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from coda.engine.context import RunContext

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.gallery{display:flex;flex-wrap:wrap;gap:1rem}.card{border:1px solid #ddd;padding:.5rem;width:420px;font-size:.85rem}
.card img{width:128px;height:128px;image-rendering:pixelated}
"""


def _png_data_url(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def success_by_round(ctx: RunContext) -> dict[int, dict[str, dict[str, list[int]]]]:
    """round -> family -> split -> [successes, episodes] over the policy's evaluate-phase episodes."""
    out: dict[int, dict[str, dict[str, list[int]]]] = {}
    for e in ctx.memory.list("episode", run_id=ctx.run_id):
        if e.phase != "measure" or e.info.get("kind") != "eval":
            continue
        c = out.setdefault(e.round, {}).setdefault(e.info["family"], {}).setdefault(e.info["split"], [0, 0])
        c[0] += int(e.success)
        c[1] += 1
    return out


def _success_plot(table: dict[int, dict[str, dict[str, list[int]]]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    last = max(table)
    families = sorted(table[last])
    splits = sorted({s for f in families for s in table[last][f]}, key=lambda s: (s != "sft", s))
    fig, ax = plt.subplots(figsize=(9, 3.2))
    width = 0.8 / max(1, len(families))
    for i, f in enumerate(families):
        vals = [table[last][f].get(s, [0, 0]) for s in splits]
        ax.bar([j + i * width for j in range(len(splits))], [k / n if n else 0 for k, n in vals], width, label=f)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(splits))], splits)
    ax.set_ylim(0, 1)
    ax.set_ylabel("success")
    ax.set_title(f"policy success per split (round {last})")
    ax.legend(fontsize=8, ncol=4)
    url = _png_data_url(fig)
    plt.close(fig)
    return url


def write_report(ctx: RunContext, path: Path | None = None) -> Path:
    """Write `report.html` into the run directory from memory and artifacts; returns its path."""
    path = path or ctx.run_dir / "report.html"
    table = success_by_round(ctx)
    run = ctx.memory.get_run(ctx.run_id)
    parts = [f"<h1>CoDA run {html.escape(ctx.run_id)}</h1>",
             f"<p>strategy <b>{html.escape(run.strategy)}</b> · seed {run.seed} · preset "
             f"{html.escape(str(run.config.get('preset')))} · status {html.escape(run.status)}</p>"]
    counts = ctx.memory.counts(ctx.run_id)
    parts.append("<h2>Memory</h2><table><tr><th>record kind</th><th>count</th></tr>"
                 + "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in counts.items())
                 + "</table>")
    if table:
        parts.append(f'<h2>Success</h2><img alt="success per split" src="{_success_plot(table)}">')
        for rnd in sorted(table):
            fam = table[rnd]
            splits = sorted({s for f in fam for s in fam[f]}, key=lambda s: (s != "sft", s))
            rows = "".join(
                f"<tr><td>{html.escape(f)}</td>"
                + "".join(f"<td>{_cell(fam[f].get(s))}</td>" for s in splits) + "</tr>" for f in sorted(fam))
            parts.append(f"<h3>Round {rnd}</h3><table><tr><th>family</th>"
                         + "".join(f"<th>{html.escape(s)}</th>" for s in splits) + f"</tr>{rows}</table>")
    parts.append(_failure_gallery(ctx))
    parts.append("<h2>Configuration</h2><pre>" + html.escape(json.dumps(run.config, indent=1)) + "</pre>")
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>CoDA {html.escape(ctx.run_id)}</title>"
           f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(doc)
    tmp.replace(path)
    return path


def _cell(c: list[int] | None) -> str:
    if not c or not c[1]:
        return "–"
    return f"{c[0] / c[1]:.2f} <small>({c[0]}/{c[1]})</small>"


def _failure_gallery(ctx: RunContext, limit: int = 24) -> str:
    cards = []
    for e in ctx.memory.list("episode", run_id=ctx.run_id):
        if e.success or not e.artifacts or len(cards) >= limit:
            continue
        sc = ctx.memory.get("scenario", e.scenario_id)
        imgs = "".join(f'<img alt="{html.escape(k)}" src="{html.escape(ref["path"])}">'
                       for k, ref in sorted(e.artifacts.items()) if k.startswith("keyframe"))
        cards.append(f'<div class="card">{imgs}<br>round {e.round} · {html.escape(sc.family)} / '
                     f'{html.escape(str(sc.split))}<br><i>{html.escape(sc.spec["instruction"])}</i></div>')
    if not cards:
        return ""
    return "<h2>Failures</h2><div class='gallery'>" + "".join(cards) + "</div>"
