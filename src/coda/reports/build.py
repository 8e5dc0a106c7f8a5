"""`report.html`: what a run did and how well the policy does, rebuilt from the run's memory alone.

The report is one self-contained HTML file in the run directory: figures are matplotlib PNGs and images
(keyframes of failures, rendered generated scenes) are embedded as `data:` URLs, so it opens from anywhere and
makes no request. It shows

- rounds at a glance (committed phases, probe success, verified diagnoses, programs, generated scenes);
- policy success per round on the sft split and every OOD split, per family (line plot + table with counts);
- critic diagnoses per round and failure-mode class with their verification outcome; verified failure modes
  with learning progress and budget share per round; the generation budget per source and round;
- generation programs with lineage (parent → child, level), the scenes each made, training programs;
- a handful of generated scenes per round rendered with the run's simulator, with their program's key, and
  the invalid generated scenes with the validity check's reason;
- diagnosed probe failures: keyframes, diagnosis (mode, explanation, factors) and verdict (every check);
- failed evaluation episodes, checkpoints and the run's resolved configuration.

`coda report RUN_DIR` rebuilds it for a finished, running or killed run (`build_report`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coda.engine.context import RunContext
from coda.reports.data import ReportData, load_report_data
from coda.reports.page import (
    CSS,
    checkpoints_section,
    config_section,
    diagnosed_section,
    esc,
    eval_failures_section,
    failure_mode_section,
    header,
    pick_scenes,
    programs_section,
    scenes_section,
    success_section,
    summary_section,
)

REPORT_FILE = "report.html"
SECTIONS = (("summary", "Rounds"), ("success", "Success"), ("modes", "Failure modes"), ("programs", "Programs"),
            ("scenes", "Generated scenes"), ("invalid", "Invalid scenes"), ("diagnosed", "Diagnosed failures"),
            ("eval-failures", "Evaluation failures"), ("checkpoints", "Checkpoints"), ("config", "Configuration"))


@dataclass
class ReportOptions:
    """How much the report shows.

    Attributes:
        scenes_per_round: generated scenes rendered per round (0: none; rendering needs headless GL).
        thumbnail_size: rendered scene size in pixels.
        eval_failures_per_round: failed evaluation episodes with keyframes shown per round.
    """

    scenes_per_round: int = 4
    thumbnail_size: int = 160
    eval_failures_per_round: int = 3


def build_report(memory: Any, run_id: str, run_dir: Path, path: Path | None = None,
                 options: ReportOptions | None = None) -> Path:
    """Write `report.html` for one run from its memory records and the artifacts in its run directory.

    Args:
        memory: a `coda.memory.Memory` holding the run (read-only is enough).
        run_id: the run's name.
        run_dir: the run directory (keyframe artifacts are read from there; the report goes there).
        path: where to write the report (default `run_dir/report.html`); written atomically.
        options: what to show (default ReportOptions()).

    Returns:
        The report's path.

    Raises:
        RecordNotFoundError: no run named `run_id` in memory.
    """
    options = options or ReportOptions()
    data = load_report_data(memory, run_id, max_eval_failures=options.eval_failures_per_round)
    html_text = render_report(data, run_dir, options)
    path = Path(path) if path is not None else Path(run_dir) / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(html_text, encoding="utf-8")
    tmp.replace(path)
    return path


def write_report(ctx: RunContext, path: Path | None = None, options: ReportOptions | None = None) -> Path:
    """Write `report.html` into the run directory of a running engine (see `build_report`)."""
    return build_report(ctx.memory, ctx.run_id, ctx.run_dir, path, options)


def render_report(data: ReportData, run_dir: Path, options: ReportOptions | None = None) -> str:
    """The report's HTML text for `data` (plots drawn, keyframes read from `run_dir`, scenes rendered)."""
    from coda.reports import plots

    options = options or ReportOptions()
    frames = _ArtifactReader(Path(run_dir))
    shown = [s for r in sorted({s.round for s in data.generated})
             for s in pick_scenes([s for s in data.generated if s.round == r and s.valid], options.scenes_per_round)]
    thumbs = render_thumbnails([(s.id, s.spec) for s in shown], data.config.get("sim") or {},
                               options.thumbnail_size)
    body = [
        header(data, SECTIONS),
        "<main>",
        summary_section(data),
        success_section(data, {f: plots.success_plot(f, data.success[f]) for f in data.success}),
        failure_mode_section(data, plots.diagnosis_plot(data.diagnosis_counts),
                             plots.progress_plot(data.failure_modes), plots.budget_plot(data.budget)),
        programs_section(data),
        scenes_section(data, thumbs, options.scenes_per_round),
        diagnosed_section(data, frames),
        eval_failures_section(data, frames),
        checkpoints_section(data),
        config_section(data),
        "</main>",
    ]
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>CoDA report · {esc(data.run_id)}</title><style>{CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")


class _ArtifactReader:
    """Reads referenced PNG artifacts of a run directory; a missing or corrupt file gives its reason."""

    def __init__(self, run_dir: Path) -> None:
        from coda.memory.artifacts import ArtifactStore

        self.store = ArtifactStore(run_dir)

    def __call__(self, ref: dict[str, Any]) -> bytes | str:
        from coda.memory.errors import ArtifactError

        try:
            return self.store.read_bytes(ref)
        except (ArtifactError, OSError, KeyError, TypeError, ValueError) as e:
            return str(e).splitlines()[0] if str(e) else type(e).__name__


def render_thumbnails(scenes: list[tuple[int, dict[str, Any]]], sim: dict[str, Any],
                      size: int) -> dict[int, bytes | str]:
    """Render each scene's initial state (front camera) with the run's simulator backend (its `target_env`).

    Args:
        scenes: (scenario id, scene record as JSON) pairs.
        sim: the run's `sim` configuration section (backend and physics settings).
        size: image size in pixels.

    Returns:
        scenario id -> PNG bytes, or the reason it could not be rendered (never raises for a bad scene).
    """
    if not scenes:
        return {}
    import io

    from PIL import Image

    from coda.errors import CodaError
    from coda.sim.backends import sim_backend
    from coda.sim.config import SimConfig

    try:
        cfg = SimConfig.model_validate(sim) if sim else SimConfig()
        backend = sim_backend(cfg.backend)
        env = backend.target_env(cfg)
    except (CodaError, ValueError, RuntimeError, ImportError) as e:
        return {i: f"not rendered: {str(e).splitlines()[0] if str(e) else type(e).__name__}" for i, _ in scenes}
    out: dict[int, bytes | str] = {}
    try:
        for sid, spec in scenes:
            try:
                env.reset_to(backend.scenario_from_dict(spec))
                buf = io.BytesIO()
                Image.fromarray(env.render(camera="front", size=size)).save(buf, format="PNG")
                out[sid] = buf.getvalue()
            except (CodaError, ValueError, RuntimeError, KeyError, TypeError) as e:
                out[sid] = f"not rendered: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    finally:
        env.close()
    return out


__all__ = ["REPORT_FILE", "ReportOptions", "build_report", "render_report", "render_thumbnails", "write_report"]
