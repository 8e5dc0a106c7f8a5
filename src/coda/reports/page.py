"""The sections of `report.html`, each a function of ReportData (and embedded images) returning escaped HTML.

Every piece of text from memory (instructions, explanations, reasons, keys, configuration) goes through
`esc`, so markup in a critic's answer or a generated instruction is shown, never interpreted. Images are
`data:` URLs: the report is one file that opens anywhere and requests nothing.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from coda.reports.data import (
    DIAGNOSIS_OUTCOMES,
    FailureCard,
    ProgramRow,
    Rate,
    ReportData,
    SceneRow,
    lineage,
    round_robin,
    split_order,
)

Frames = Callable[[dict[str, Any]], "bytes | str"]  # artifact reference -> PNG bytes, or why not

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#fafbfc}
main{max-width:1180px;margin:0 auto;padding:1.2rem 2rem 3rem}
header{background:#1d2330;color:#fff;padding:1rem 2rem}header h1{margin:.2rem 0;font-size:1.5rem}
header .meta{opacity:.85;font-size:.9rem}nav{font-size:.85rem;margin-top:.5rem}
nav a{color:#9ecbff;margin-right:.9rem;text-decoration:none}
h2{border-bottom:2px solid #dde3ea;padding-bottom:.2rem;margin-top:2.2rem}h3{margin-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.85rem;background:#fff}
td,th{border:1px solid #d5dbe3;padding:.25rem .55rem;text-align:right;vertical-align:top}
th{background:#eef2f6}td.l,th.l{text-align:left}td:not(.l){white-space:nowrap}small{color:#667}
.plot{max-width:100%;border:1px solid #e3e7ec;background:#fff;margin:.3rem 0}
.row{display:flex;flex-wrap:wrap;gap:1rem;align-items:flex-start}
.gallery{display:flex;flex-wrap:wrap;gap:.8rem}
.scene{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:.4rem;width:180px;font-size:.78rem}
.scene img{width:160px;height:160px;display:block;margin:0 auto .3rem}
.card{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:.7rem .9rem;margin:.8rem 0}
.card .frames img{width:128px;height:128px;margin:.3rem .3rem 0 0;border:1px solid #ccd}
.card .split{display:flex;gap:1rem;align-items:flex-start;margin-top:.4rem}.card .text{flex:1;min-width:0}
.card .split .frames{display:grid;grid-template-columns:repeat(2,130px);gap:.3rem;flex:none}
.card .split .frames img{margin:0}
.card.mini{width:420px;margin:0;font-size:.85rem}.card.mini .frames img{width:96px;height:96px}
.badge{display:inline-block;border-radius:3px;padding:0 .4rem;font-size:.78rem;color:#fff}
.ok{background:#2e7d32}.bad{background:#c62828}.muted{background:#78909c}
.explain{background:#f4f6f9;border-left:3px solid #8aa4c8;padding:.3rem .6rem;margin:.4rem 0}
pre{background:#fff;border:1px solid #dde3ea;padding:.6rem;overflow:auto;font-size:.78rem;max-height:32rem}
pre.config{column-count:3;column-gap:1.5rem;max-height:none}
.lineage{font-family:ui-monospace,monospace;font-size:.82rem;margin:.15rem 0}
.empty{color:#667;font-style:italic}
"""


def esc(value: Any) -> str:
    """HTML-escape any value's text (quotes included)."""
    return html.escape(str(value), quote=True)


def data_url(png: bytes) -> str:
    """A `data:image/png;base64,...` URL for PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def img(png: bytes, alt: str, cls: str = "") -> str:
    """An <img> with the PNG embedded."""
    c = f' class="{esc(cls)}"' if cls else ""
    return f'<img{c} alt="{esc(alt)}" src="{data_url(png)}">'


def table(head: Sequence[str], rows: Iterable[Sequence[str]], *, left: int | Collection[int] = 1,
          cls: str = "") -> str:
    """A table; `head` is escaped here, cells must already be HTML. Columns align right (numbers) except
    the first `left` ones, or those whose indices `left` lists, which hold text."""
    def cell(tag: str, i: int, content: str) -> str:
        is_left = i < left if isinstance(left, int) else i in left
        return f'<{tag} class="l">{content}</{tag}>' if is_left else f"<{tag}>{content}</{tag}>"

    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows)
    c = f' class="{esc(cls)}"' if cls else ""
    return (f"<table{c}><tr>" + "".join(cell("th", i, esc(h)) for i, h in enumerate(head)) + f"</tr>{body}</table>")


def empty(text: str) -> str:
    """A muted sentence saying why a section has nothing to show."""
    return f'<p class="empty">{esc(text)}</p>'


def rate_cell(rate: Rate | None) -> str:
    """`0.50 (1/2)`, or an en dash without episodes."""
    if rate is None or not rate.n:
        return "–"
    return f"{rate.rate:.2f} <small>({rate.k}/{rate.n})</small>"


def pooled(rates: Iterable[Rate | None]) -> Rate:
    """Successes and episodes summed over several rates."""
    rs = [r for r in rates if r is not None]
    return Rate(sum(r.k for r in rs), sum(r.n for r in rs))


# ---- sections -------------------------------------------------------------------------------------------

def header(d: ReportData, sections: Sequence[tuple[str, str]]) -> str:
    """The page header: run name, strategy, seed, preset, status, and links to the sections."""
    preset = d.config.get("preset")
    fams = ", ".join(d.families) or "–"
    nav = "".join(f'<a href="#{esc(i)}">{esc(t)}</a>' for i, t in sections)
    return (f"<header><h1>CoDA run {esc(d.run_id)}</h1><div class='meta'>strategy <b>{esc(d.strategy)}</b> · "
            f"seed {esc(d.seed)} · preset {esc(preset)} · families {esc(fams)} · status <b>{esc(d.status)}</b> · "
            f"rounds {esc(max(d.rounds) if d.rounds else '–')} · started {esc(d.created)}</div>"
            f"<nav>{nav}</nav></header>")


def summary_section(d: ReportData) -> str:
    """Rounds at a glance, and the memory's record counts."""
    rows = []
    for r in d.rounds:
        evals = [d.success[f][s].get(r) for f in d.success for s in d.success[f]]
        sft = pooled(d.success[f].get("sft", {}).get(r) for f in d.success)
        ood = pooled(d.success[f][s].get(r) for f in d.success for s in d.success[f] if s != "sft")
        diag = list(d.diagnosis_counts.get(r, {}).values())
        n_diag = sum(sum(m.values()) for m in diag)
        n_ver = sum(m.get("verified", 0) for m in diag)
        gen = [s for s in d.generated if s.round == r]
        progs = [p for p in d.programs if p.round == r]
        rows.append([
            str(r), esc(" → ".join(d.phases.get(r, []))), rate_cell(d.probe_success.get(r)),
            f"{n_ver}/{n_diag}" if n_diag else "–", str(len(progs)) if progs else "–",
            f"{sum(s.valid for s in gen)} / {sum(not s.valid for s in gen)}" if gen else "–",
            rate_cell(sft), rate_cell(ood) if any(e is not None for e in evals) else "–"])
    rounds = table(["round", "committed phases", "probe success", "verified / diagnoses", "programs",
                    "generated valid / invalid", "sft success", "OOD success (pooled)"], rows, left=2)
    counts = table(["record kind", "count"], ([esc(k), str(v)] for k, v in d.counts.items()))
    notes = "".join(f"<li>{esc(n)}</li>" for n in d.notes)
    return (f'<section id="summary"><h2>Rounds at a glance</h2>{rounds if rows else empty("no phase committed yet")}'
            f'<details><summary>records in memory</summary>{counts}</details>'
            + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else "") + "</section>")


def success_section(d: ReportData, plots: dict[str, bytes | None]) -> str:
    """Per family: success over rounds on sft and each OOD split (plot + table with counts)."""
    parts = ['<section id="success"><h2>Policy success per round</h2>'
             "<p>Episodes of the policy on the fixed evaluation splits after each round's training "
             "(round 0: the SFT policy). Cells: success rate (successes/episodes).</p>"]
    if not d.success:
        parts.append(empty("no evaluation episodes in memory"))
    for family in sorted(d.success):
        table_ = d.success[family]
        splits = sorted(table_, key=split_order)
        rounds = sorted({r for s in splits for r in table_[s]})
        rows = []
        for r in rounds:
            ood = pooled(table_[s].get(r) for s in splits if s != "sft")
            rows.append([str(r), *(rate_cell(table_[s].get(r)) for s in splits), rate_cell(ood)])
        png = plots.get(family)
        parts.append(f"<h3>{esc(family)}</h3><div class='row'>"
                     + (img(png, f"success per round, {family}", "plot") if png else "")
                     + table(["round", *splits, "OOD pooled"], rows) + "</div>")
    return "".join(parts) + "</section>"


def failure_mode_section(d: ReportData, diag_png: bytes | None, progress_png: bytes | None,
                         budget_png: bytes | None) -> str:
    """Diagnoses per round and mode, failure modes with learning progress, and the budget per source."""
    parts = ['<section id="modes"><h2>Failure modes, learning progress and budget</h2>']
    parts.append("<h3>Diagnoses per round</h3><p>Failure-mode class named by the critic; outcome after "
                 "verification (simulator predicates and single-factor counterfactuals).</p>")
    rows = [[str(r), esc(m), *(str(c.get(o, 0)) for o in DIAGNOSIS_OUTCOMES)]
            for r in sorted(d.diagnosis_counts) for m, c in sorted(d.diagnosis_counts[r].items())]
    if rows:
        parts.append("<div class='row'>" + (img(diag_png, "diagnoses per round", "plot") if diag_png else "")
                     + table(["round", "critic failure mode", *DIAGNOSIS_OUTCOMES], rows, left=2) + "</div>")
    else:
        parts.append(empty("no diagnoses (this strategy runs no critic, or no probe failed)"))
    parts.append("<h3>Verified failure modes</h3><p>Clusters of verified diagnoses. Learning progress: success "
                 "on held-apart probe scenes of the mode's program before → after the round's training; "
                 "share: the mode's part of that round's generation budget.</p>")
    rounds = sorted({r for m in d.failure_modes for r in m.progress})
    rows = []
    for m in d.failure_modes:
        cells = []
        for r in rounds:
            p = m.progress.get(r)
            cells.append("–" if p is None else
                         f"{p[0]:.2f} → {p[1]:.2f} <small>(Δ {p[1] - p[0]:+.2f}, share {p[2]:.2f})</small>")
        rows.append([esc(m.key), esc(m.description), str(m.first_round), str(m.last_round), *cells])
    if rows:
        parts.append(table(["failure mode", "description", "first round", "last round",
                            *(f"round {r}" for r in rounds)], rows, left=2))
        if progress_png:
            parts.append(img(progress_png, "learning progress per failure mode", "plot"))
    else:
        parts.append(empty("no verified failure mode"))
    if d.mode_counts:
        known = {m.key for m in d.failure_modes}
        rounds = sorted({r for c in d.mode_counts.values() for r in c})
        rows = [[esc(k) + ("" if k in known else " *"),
                 *(str(c.get(r, 0)) if c.get(r) else "–" for r in rounds), str(sum(c.values()))]
                for k, c in sorted(d.mode_counts.items())]
        parts.append("<h3>Verified diagnoses per failure mode</h3><p>Keyed by failure mode and verified factors. "
                     "*: no failure-mode record under this key (merged into a mode of the same class with a "
                     "near-identical explanation, or never compiled into a program).</p>"
                     + table(["failure mode", *(f"round {r}" for r in rounds), "total"], rows))
    parts.append("<h3>Generation budget</h3>")
    labels = sorted({k for r in d.budget for k in d.budget[r]})
    if labels:
        rows = [[esc(label), *(_share(d.budget[r], label) for r in sorted(d.budget))] for label in labels]
        parts.append("<div class='row'>" + (img(budget_png, "generation budget per source", "plot") if budget_png
                                            else "")
                     + table(["source", *(f"round {r}" for r in sorted(d.budget))], rows) + "</div>")
    else:
        parts.append(empty("no generation programs"))
    return "".join(parts) + "</section>"


def _share(budget: dict[str, int], label: str) -> str:
    n, total = budget.get(label, 0), sum(budget.values())
    return f"{n} <small>({n / total:.0%})</small>" if n and total else "–"


def programs_section(d: ReportData) -> str:
    """Generation programs with lineage (parent → child, level) and the scenes each made; training programs."""
    parts = ['<section id="programs"><h2>Programs</h2>']
    byid = d.program_by_id()
    chains = [c for c in lineage(d.programs) if any(p.program_key for p in c)]
    if chains:
        parts.append("<h3>Lineage of failure-mode programs</h3>")
        for chain in chains:
            parts.append("<div class='lineage'>" + " → ".join(_node(p) for p in chain) + "</div>")
    rows = []
    for p in d.programs:
        parent = byid.get(p.parent_id) if p.parent_id is not None else None
        rows.append([str(p.round), esc(p.key), esc(p.kind), esc(p.mode or "–"),
                     "–" if p.level is None else str(p.level),
                     "–" if parent is None else f"{esc(parent.key)} <small>(round {parent.round})</small>",
                     str(p.count), str(p.valid), str(p.invalid), esc(p.reason)])
    parts.append("<h3>Generation programs</h3>")
    parts.append(table(["round", "key", "kind", "failure mode", "level", "parent", "budget", "valid",
                        "invalid", "reason"], rows, left={1, 2, 3, 5, 9}) if rows else empty("no generation programs"))
    trows = [[str(r), esc(k), esc(b.get("kind") or ("mode_training" if "mode" in b else "?")), esc(_summary(b))]
             for r, k, b in d.training_programs]  # a compiled mode's body (TrainingProgramBody) names no kind
    parts.append("<h3>Training programs</h3>")
    parts.append(table(["round", "key", "kind", "contents"], trows, left=4) if trows
                 else empty("no training programs"))
    return "".join(parts) + "</section>"


def _node(p: ProgramRow) -> str:
    level = "" if p.level is None else f" L{p.level}"
    return f"<b>{esc(p.key)}</b><small> r{p.round}{esc(level)} · {esc(p.mode or p.kind)}</small>"


def _summary(body: dict[str, Any]) -> str:
    """The scalar fields of a body (lists as their length), in one line."""
    out = []
    for k, v in body.items():
        if k == "kind":
            continue
        if isinstance(v, (list, tuple, dict)):
            out.append(f"{k}: {len(v)} items")
        else:
            out.append(f"{k}: {v}")
    return " · ".join(out)


def scenes_section(d: ReportData, thumbs: dict[int, bytes | str], per_round: int) -> str:
    """Rendered generated scenes per round (a handful, spread over programs) and the invalid ones with reasons."""
    parts = ['<section id="scenes"><h2>Generated scenes</h2>']
    rounds = sorted({s.round for s in d.generated})
    if not rounds:
        parts.append(empty("no generated scenes"))
    for r in rounds:
        shown = pick_scenes([s for s in d.generated if s.round == r and s.valid], per_round)
        n_valid = sum(s.valid for s in d.generated if s.round == r)
        cards = []
        for s in shown:
            t = thumbs.get(s.id)
            pic = (img(t, f"scene {s.id}") if isinstance(t, bytes)
                   else f"<p class='empty'>{esc(t or 'not rendered')}</p>")
            cards.append(f"<div class='scene'>{pic}<b>{esc(s.program_key)}</b> · {esc(s.family)}<br>"
                         f"<i>{esc(s.instruction)}</i></div>")
        parts.append(f"<h3>Round {r} <small>({len(shown)} of {n_valid} valid scenes)</small></h3>"
                     + ("<div class='gallery'>" + "".join(cards) + "</div>" if cards else empty("no valid scene")))
    invalid = [s for s in d.generated if not s.valid]
    parts.append(f'<h3 id="invalid">Invalid generated scenes <small>({len(invalid)})</small></h3>')
    if invalid:
        limit = 60
        rows = [[str(s.round), esc(s.program_key), esc(s.family), esc(s.invalid_reason or "–"), esc(s.instruction)]
                for s in invalid[:limit]]
        parts.append(table(["round", "program", "family", "reason", "instruction"], rows, left=5))
        if len(invalid) > limit:
            parts.append(empty(f"… and {len(invalid) - limit} more"))
    else:
        parts.append(empty("every generated candidate passed the validity checks"))
    return "".join(parts) + "</section>"


def pick_scenes(scenes: Sequence[SceneRow], n: int) -> list[SceneRow]:
    """Up to n scenes, taken in turn from each program so every program of the round is represented."""
    by_prog: dict[str, list[SceneRow]] = {}
    for s in scenes:
        by_prog.setdefault(s.program_key, []).append(s)
    return round_robin([v for _, v in sorted(by_prog.items())], n)


def diagnosed_section(d: ReportData, frames: Frames) -> str:
    """Diagnosed probe failures: keyframes, the critic's diagnosis, and the verdict with every check."""
    parts = ['<section id="diagnosed"><h2>Diagnosed failures</h2>'
             "<p>Failed probe episodes with their keyframes, what the critic said, and whether verification "
             "accepted it. Rejected diagnoses are kept and never used.</p>"]
    if not d.cards:
        parts.append(empty("no diagnosed episodes"))
    for r in sorted({c.round for c in d.cards}):
        cards = [c for c in d.cards if c.round == r]
        n_ok = sum(c.verdict_passed is True for c in cards)
        parts.append(f"<h3>Round {r} <small>({n_ok} of {len(cards)} accepted)</small></h3>")
        parts.extend(_card(c, frames) for c in cards)
    return "".join(parts) + "</section>"


def _frames_html(keyframes: Sequence[tuple[str, dict[str, Any]]], frames: Frames) -> str:
    out = []
    for name, ref in keyframes:
        got = frames(ref)
        out.append(img(got, name) if isinstance(got, bytes) else f"<span class='empty'>{esc(name)}: {esc(got)}</span>")
    return "<div class='frames'>" + "".join(out) + "</div>" if out else empty("no keyframes stored")


def _card(c: FailureCard, frames: Frames) -> str:
    dg = c.diagnosis
    head = (f"<b>round {c.round} · episode {c.episode_id}</b> · {esc(c.family)} · <i>{esc(c.instruction)}</i> "
            + _verdict_badge(c))
    body: list[str] = []
    if c.accepted_by_critic:
        body.append(f"<div>critic <b>{esc(c.critic)}</b> · failure mode <b>{esc(dg.get('failure_mode', '?'))}</b> · "
                    f"stage reached <b>{esc(dg.get('stage_reached', '?'))}</b> · objects "
                    f"{esc(', '.join(map(str, dg.get('objects') or [])) or '–')}</div>")
        body.append(f"<div class='explain'>{esc(dg.get('explanation', ''))}</div>")
        if c.mode_key:
            body.append(f"<div>mode key <b>{esc(c.mode_key)}</b></div>")
        factors = [f for f in dg.get("factors") or [] if isinstance(f, dict)]
        if factors:
            body.append(table(["factor", "entity", "value", "why"],
                              ([esc(f.get("kind")), esc(f.get("entity") or "–"), esc(f.get("value")),
                                esc(f.get("detail"))] for f in factors), left=4))
        if dg.get("stage_plan"):
            body.append(f"<details><summary>stage plan</summary><pre>{esc(dg['stage_plan'])}</pre></details>")
    else:
        body.append(f"<div>critic <b>{esc(c.critic)}</b>: answer rejected — {esc(c.reject_reason or '?')}</div>")
        raw = dg.get("raw_text")
        if raw:
            body.append(f"<details><summary>raw answer</summary><pre>{esc(raw)}</pre></details>")
    body.append(_verdict_html(c))
    return (f"<div class='card'>{head}<div class='split'>{_frames_html(c.keyframes, frames)}"
            f"<div class='text'>{''.join(body)}</div></div></div>")


def _verdict_badge(c: FailureCard) -> str:
    if c.verdict_passed is None:
        return "<span class='badge muted'>not verified</span>"
    return ("<span class='badge ok'>accepted</span>" if c.verdict_passed
            else "<span class='badge bad'>rejected</span>")


def _verdict_html(c: FailureCard) -> str:
    """The verdict's outcome in words (reasons, verified factors), its checks and trials folded below."""
    v = c.verdict
    if v is None:
        return ""
    said, folded = [], []
    reasons = v.get("reasons") or ([c.verdict_reason] if c.verdict_reason else [])
    if reasons:
        said.append("<div>rejected because: " + "; ".join(esc(r) for r in reasons) + "</div>")
    verified = [f for f in v.get("verified_factors") or [] if isinstance(f, dict)]
    if verified:
        said.append("<div>verified factors: " + ", ".join(esc(_factor(f)) for f in verified) + "</div>")
    checks = [x for x in v.get("checks") or [] if isinstance(x, dict)]
    if checks:
        folded.append(table(["check", "status", "reason", "details"],
                            ([esc(x.get("name")), _status(x.get("status")), esc(x.get("reason", "")),
                              esc(json.dumps(x.get("details") or {}, sort_keys=True, ensure_ascii=False))]
                             for x in checks), left=4))
    trials = [t for t in v.get("trials") or [] if isinstance(t, dict)]
    if trials:
        folded.append(table(["counterfactual factor", "scenes", "base failure", "with factor", "reproduced", "error"],
                            ([esc(_factor(t.get("factor"))), esc(t.get("n", 0)), _num(t.get("base_failure_rate")),
                              _num(t.get("factor_failure_rate")), "yes" if t.get("reproduced") else "no",
                              esc(t.get("error") or "")] for t in trials), left=1))
    summary = " · ".join(f"{esc(x.get('name'))} {_status(x.get('status'))}" for x in checks) or "checks"
    return "".join(said) + (f"<details><summary>verdict: {summary}</summary>{''.join(folded)}</details>"
                            if folded else "")


def _status(s: Any) -> str:
    cls = {"passed": "ok", "failed": "bad"}.get(str(s), "muted")
    return f"<span class='badge {cls}'>{esc(s)}</span>"


def _factor(f: Any) -> str:
    if not isinstance(f, dict):
        return str(f)
    ent = f.get("entity")
    return f"{f.get('kind')}:{ent + '=' if ent else ''}{f.get('value')}"


def _num(x: Any) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else "–"


def eval_failures_section(d: ReportData, frames: Frames) -> str:
    """A few failed evaluation episodes per round, with keyframes (evaluation splits are not diagnosed)."""
    parts = ['<section id="eval-failures"><h2>Evaluation failures</h2>']
    if not d.eval_failures:
        parts.append(empty("no failed evaluation episode with keyframes"))
    for r in sorted({e.round for e in d.eval_failures}):
        cards = [f"<div class='card mini'><b>episode {e.episode_id}</b> · {esc(e.family)} / {esc(e.split)}<br>"
                 f"<i>{esc(e.instruction)}</i>{_frames_html(e.keyframes, frames)}</div>"
                 for e in d.eval_failures if e.round == r]
        parts.append(f"<h3>Round {r}</h3><div class='gallery'>" + "".join(cards) + "</div>")
    return "".join(parts) + "</section>"


def checkpoints_section(d: ReportData) -> str:
    """Policy checkpoints with their training metrics."""
    rows = [[str(r), esc(p), esc(", ".join(f"{k}={_fmt(v)}" for k, v in sorted(m.items())))]
            for r, p, m in d.checkpoints]
    return ('<section id="checkpoints"><h2>Checkpoints</h2>'
            + (table(["round", "path", "metrics"], rows, left=3) if rows else empty("no checkpoints")) + "</section>")


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def config_section(d: ReportData) -> str:
    """The run's resolved configuration as YAML."""
    import yaml

    text = yaml.safe_dump(d.config, sort_keys=False, default_flow_style=False)
    return f'<section id="config"><h2>Configuration</h2><pre class="config">{esc(text)}</pre></section>'


__all__ = ["CSS", "checkpoints_section", "config_section", "data_url", "diagnosed_section", "esc",
           "eval_failures_section", "failure_mode_section", "header", "img", "pick_scenes", "programs_section",
           "scenes_section", "success_section", "summary_section", "table"]
