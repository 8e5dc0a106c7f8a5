"""report.html from a small memory written through the memory API with real records (scenes from the split
generators, compiled mode programs with a child, critic diagnoses and verdicts in their schemas): sections,
tables with counts, plots, lineage, embedded keyframes and rendered scenes, escaping, the `coda report`
command, and the page in headless Chromium (no console error, every image decoded, no request leaves the file).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html.parser
import io
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from coda.config import build_config
from coda.critic.diagnosis import Diagnosis, DiagnosisRejected, SceneFactor
from coda.critic.verify import CheckResult, FactorTrial, Verdict
from coda.engine.compile import TrainingProgramBody, next_level
from coda.sim.tabletop.programs import child_program, compile_generation_program
from coda.reports.build import ReportOptions, build_report
from coda.reports.data import Rate, lineage, load_report_data
from coda.memory import (
    Checkpoint,
    Episode,
    FailureMode,
    GenerationProgram,
    LearningProgress,
    Scenario,
    TrainingProgram,
    open_memory,
)
from coda.memory import Diagnosis as DiagnosisRecord
from coda.memory import Verdict as VerdictRecord
from coda.scene.programs import run_program
from coda.scene.splits import make_split

RUN = "report-run"
MODE = "missed_grasp|position:far_left"
EXPLANATION = 'The gripper closed 3 cm left of the cube <script>alert("x")</script> & never held it.'
RAW = '<img src=x onerror="alert(1)"> not JSON'
INVALID_REASON = "expert failed: <timeout> after 200 steps"
SECTIONS = ("summary", "success", "modes", "programs", "scenes", "invalid", "diagnosed", "eval-failures",
            "checkpoints", "config")


def _png(seed: int, size: int = 48) -> bytes:
    """A small, distinct PNG (a keyframe stand-in)."""
    img = Image.new("RGB", (size, size), ((40 * seed) % 256, 120, (255 - 30 * seed) % 256))
    img.putpixel((seed % size, seed % size), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@dataclass
class Written:
    """What the fixture wrote, to compare the report against."""

    run_dir: Path
    keyframes: dict[str, bytes] = field(default_factory=dict)  # artifact path -> bytes
    program_keys: dict[int, str] = field(default_factory=dict)  # round -> mode program record key


def _write_run(run_dir: Path) -> Written:
    """Two rounds of a coda run on pick_place, written phase by phase as the engine writes them."""
    cfg = build_config("tiny", data={"scene": {"families": ["pick_place"]}})
    out = Written(run_dir)
    mem = open_memory(run_dir)
    store = mem.artifacts

    def keyframes(name: str, seed: int) -> dict[str, Any]:
        arts = {}
        for t in (0, 40):
            data = _png(seed + t)
            ref = store.put_bytes(f"keyframes/{name}_t{t:03d}.png", data)
            out.keyframes[ref.path] = data
            arts[f"keyframe_t{t:03d}"] = ref.to_dict()
        return arts

    def checkpoint(r: int) -> Checkpoint:
        ref = store.put_bytes(f"checkpoints/round_{r:03d}.pt", b"weights %d" % r)
        return Checkpoint(path=ref.path, sha256=ref.sha256, metrics={"final_loss": 0.5 / (r + 1), "steps": 10})

    sft = make_split("pick_place", "sft", 2, 0)
    pos = make_split("pick_place", "position", 2, 0)
    probes = make_split("pick_place", "distractor", 2, 1)
    try:
        mem.create_run(RUN, config=cfg.model_dump(mode="json"), seed=0, strategy="coda")
        with mem.phase(RUN, 0, "scenes") as tx:
            ids = {s.spec_id: tx.add(Scenario.from_spec(s, split=n)).id for n, ss in (("sft", sft), ("position", pos))
                   for s in ss}
        with mem.phase(RUN, 0, "demos") as tx:
            tx.add(TrainingProgram(key="demos_r0", body={"kind": "expert_demos", "episodes": 2, "steps": 180}))
        with mem.phase(RUN, 0, "train") as tx:
            tx.add(checkpoint(0))

        def measure(r: int, outcomes: dict[str, list[bool]], extra: list[Any] = ()) -> None:
            with mem.phase(RUN, r, "measure") as tx:
                tx.add_all(list(extra))
                for split, specs in (("sft", sft), ("position", pos)):
                    for i, (spec, ok) in enumerate(zip(specs, outcomes[split])):
                        arts = {} if ok else keyframes(f"round_{r:03d}/measure_{split}_{i}", 10 * r + i)
                        tx.add(Episode(scenario_id=ids[spec.spec_id], policy="policy", seed=0, success=ok,
                                       episode_return=float(ok), length=60 if ok else 200, artifacts=arts,
                                       info={"family": "pick_place", "split": split, "kind": "eval"}))

        measure(0, {"sft": [True, False], "position": [False, False]})

        # round 1: probes fail, one diagnosis verified, one malformed; a mode program and exploration
        with mem.phase(RUN, 1, "evaluate") as tx:
            eps = []
            for i, spec in enumerate(probes):
                sc = tx.add(Scenario.from_spec(spec, split="probe"))
                eps.append(tx.add(Episode(scenario_id=sc.id, policy="policy", seed=i, success=False,
                                          episode_return=0.0, length=200,
                                          artifacts=keyframes(f"round_001/evaluate_{i}", 3 + i),
                                          info={"family": "pick_place", "kind": "probe"})).id)
        target = probes[0].goal[0].args[0]
        diag = Diagnosis(failure_mode="missed_grasp", stage_reached="reach", objects=(target,),
                         factors=(SceneFactor(kind="position", entity=target, value="far_left",
                                              detail="the cube sits <far> left"),),
                         explanation=EXPLANATION, stage_plan="1. reach the cube\n2. grasp it", critic="privileged",
                         episode_id=str(eps[0]))
        bad = DiagnosisRejected(critic="privileged", episode_id=str(eps[1]), reason="malformed JSON: line 1",
                                raw_text=RAW)
        with mem.phase(RUN, 1, "diagnose") as tx:
            d_ok = tx.add(DiagnosisRecord(episode_id=eps[0], critic="privileged", data=diag.model_dump(mode="json"),
                                          accepted=True))
            tx.add(DiagnosisRecord(episode_id=eps[1], critic="privileged", data=bad.model_dump(mode="json"),
                                   raw=RAW, accepted=False, reason=bad.reason))
        verdict = Verdict(episode_id=str(eps[0]), critic="privileged", failure_mode="missed_grasp", accepted=True,
                          checks=(CheckResult(name="consistency", status="passed", reason="the trace shows a miss"),
                                  CheckResult(name="counterfactual", status="passed", reason="2 of 2 reproduce",
                                              details={"rate": 1.0}),
                                  CheckResult(name="potential", status="not_run", reason="no demos")),
                          trials=(FactorTrial(factor=diag.factors[0], n=2, base_failure_rate=0.0,
                                              factor_failure_rate=1.0, reproduced=True),),
                          verified_factors=diag.factors)
        with mem.phase(RUN, 1, "verify") as tx:
            tx.add(VerdictRecord(diagnosis_id=d_ok.id, checks=verdict.model_dump(mode="json"), passed=True))
        mp = compile_generation_program(MODE, (), "pick_place", seed=5, budget=3, level=0, reason="new failure mode")
        with mem.phase(RUN, 1, "compile") as tx:
            fm = tx.add(FailureMode(key=MODE, description="misses the grasp far left", last_round=1))
            p1 = tx.add(GenerationProgram(key="mode0_r1", failure_mode_id=fm.id, body={
                "kind": "program", "program": mp.program.model_dump(mode="json"), "mode_program": mp.body(),
                "mode": MODE, "count": 3}))
            tx.add(GenerationProgram(key="explore", body={"kind": "dr", "families": ["pick_place"], "n_edits": 2,
                                                          "seed": 1, "count": 1}))
            tx.add(TrainingProgram(key="corrective_r1", body={"kind": "corrective", "episodes": [eps[0]]}))
            tx.add(TrainingProgram(key="train:mode0_r1", failure_mode_id=fm.id, body=TrainingProgramBody(
                mode=MODE, generation_program="mode0_r1", expert_demos=4).model_dump(mode="json")))
        scenes = run_program(mp.program)
        with mem.phase(RUN, 1, "generate") as tx:
            for j, s in enumerate(scenes):
                tx.add(Scenario.from_spec(s, split="generated:mode0_r1", program_id=p1.id, valid=j < 2,
                                          invalid_reason=None if j < 2 else INVALID_REASON))
        with mem.phase(RUN, 1, "train") as tx:
            tx.add(checkpoint(1))
        measure(1, {"sft": [True, True], "position": [True, False]},
                [LearningProgress(failure_mode_id=fm.id, before=0.0, after=0.5, budget_share=0.75)])

        # round 2: the mode's child program (lineage), measured again
        child = child_program(mp, *next_level(mp.level, "active", 3), seed=6, budget=4)
        with mem.phase(RUN, 2, "compile") as tx:
            p2 = tx.add(GenerationProgram(key="mode0_r2", failure_mode_id=fm.id, parent_id=p1.id, body={
                "kind": "program", "program": child.program.model_dump(mode="json"), "mode_program": child.body(),
                "mode": MODE, "count": 4}))
        with mem.phase(RUN, 2, "generate") as tx:
            tx.add(Scenario.from_spec(run_program(child.program)[0], split="generated:mode0_r2", program_id=p2.id))
        measure(2, {"sft": [True, True], "position": [True, True]},
                [LearningProgress(failure_mode_id=fm.id, before=0.5, after=1.0, budget_share=1.0)])
        mem.set_run_status(RUN, "done")
    finally:
        mem.close()
    out.program_keys = {1: "mode0_r1", 2: "mode0_r2"}
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return _write_run(tmp_path_factory.mktemp("runs") / RUN)


@pytest.fixture(scope="module")
def report(written: Written) -> Path:
    with open_memory(written.run_dir, readonly=True) as mem:
        return build_report(mem, RUN, written.run_dir, options=ReportOptions(scenes_per_round=1))


class _Page(html.parser.HTMLParser):
    """Tags, images, section ids, tables (rows of cell text) and visible text of a page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def plain(self) -> str:
        """The page's text with whitespace runs collapsed."""
        return " ".join("".join(self.text).split())

    def imgs(self) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == "img"]

    def table_with(self, *head: str) -> list[list[str]]:
        return next(t for t in self.tables if t and all(h in t[0] for h in head))


def _colours(im: Image.Image) -> int:
    """Distinct colours of an image (a blank or one-colour image has 1)."""
    return len(im.convert("RGB").getcolors(1 << 20) or ())


def _decode(src: str | None) -> bytes:
    assert src is not None and src.startswith("data:image/png;base64,"), (src or "")[:60]
    return base64.b64decode(src.split(",", 1)[1])


def test_tables_match_the_records(written: Written) -> None:
    with open_memory(written.run_dir, readonly=True) as mem:
        d = load_report_data(mem, RUN)
    sft = d.success["pick_place"]["sft"]
    assert {r: (x.k, x.n) for r, x in sft.items()} == {0: (1, 2), 1: (2, 2), 2: (2, 2)}
    assert {r: (x.k, x.n) for r, x in d.success["pick_place"]["position"].items()} == {0: (0, 2), 1: (1, 2), 2: (2, 2)}
    assert d.probe_success[1] == Rate(0, 2)
    assert d.diagnosis_counts[1]["missed_grasp"]["verified"] == 1
    assert d.diagnosis_counts[1]["unparsed"]["malformed answer"] == 1
    assert d.mode_counts == {MODE: {1: 1}}  # the verified diagnosis, keyed as the engine keys it
    assert d.budget == {1: {MODE: 3, "explore": 1}, 2: {MODE: 4}}
    (mode,) = d.failure_modes
    assert mode.progress == {1: (0.0, 0.5, 0.75), 2: (0.5, 1.0, 1.0)}
    chains = [[p.key for p in c] for c in lineage(d.programs)]
    assert ["mode0_r1", "mode0_r2"] in chains and ["explore"] in chains
    progs = {p.key: p for p in d.programs}
    assert (progs["mode0_r1"].valid, progs["mode0_r1"].invalid, progs["mode0_r1"].level) == (2, 1, 0)
    assert [s.invalid_reason for s in d.generated if not s.valid] == [INVALID_REASON]
    assert len(d.cards) == 2 and sum(c.verdict_passed is True for c in d.cards) == 1
    lo, hi = Rate(1, 2).interval()
    assert lo == pytest.approx(0.0945, abs=1e-3) and hi == pytest.approx(0.9055, abs=1e-3)


def test_report_sections_tables_and_plots(report: Path, written: Written) -> None:
    text = report.read_text(encoding="utf-8")
    page = _Page(text)
    ids = {a.get("id") for _, a in page.tags}
    assert set(SECTIONS) <= ids
    success = page.table_with("round", "sft", "position", "OOD pooled")
    assert success[1] == ["0", "0.50 (1/2)", "0.00 (0/2)", "0.00 (0/2)"]
    assert success[2] == ["1", "1.00 (2/2)", "0.50 (1/2)", "0.50 (1/2)"]
    plots = {a["alt"]: _decode(a["src"]) for a in page.imgs() if a.get("class") == "plot"}
    assert set(plots) == {"success per round, pick_place", "diagnoses per round", "learning progress per failure mode",
                          "generation budget per source"}
    for name, png in plots.items():
        im = Image.open(io.BytesIO(png)).convert("RGB")
        assert im.width > 300 and _colours(im) > 20, name  # drawn, not blank
    modes = page.table_with("failure mode", "description", "round 1")
    assert modes[1][0] == MODE and "0.00 → 0.50" in modes[1][4] and "share 0.75" in modes[1][4]
    assert page.table_with("failure mode", "round 1", "total")[1] == [MODE, "1", "1"]
    assert "mode0_r1 r1 L0 · missed_grasp" in page.plain()
    programs = page.table_with("key", "level", "parent", "valid", "invalid")
    child = next(r for r in programs if r[1] == "mode0_r2")
    assert child[5] == "mode0_r1 (round 1)" and child[4] == "0"
    invalid = page.table_with("program", "reason")
    assert invalid[1][1] == "mode0_r1" and invalid[1][3] == INVALID_REASON
    assert "generation_budget: 4" in text  # the run's configuration
    training = page.table_with("round", "key", "kind", "contents")
    assert next(r for r in training if r[1] == "train:mode0_r1")[2] == "mode_training"  # its body names no kind


def test_keyframes_and_scenes_are_embedded(report: Path, written: Written) -> None:
    page = _Page(report.read_text(encoding="utf-8"))
    frames = [a for a in page.imgs() if (a.get("alt") or "").startswith("keyframe_t")]
    shown = {hashlib.sha256(_decode(a["src"])).hexdigest() for a in frames}
    probe = {hashlib.sha256(b).hexdigest() for p, b in written.keyframes.items() if "evaluate" in p}
    assert probe <= shown  # every diagnosed episode's keyframes, byte for byte
    assert len(frames) == 2 * 2 + 2 * (3 + 1)  # 2 diagnosed probes + failed eval episodes (3 + 1), 2 keyframes each
    scenes = [a for a in page.imgs() if (a.get("alt") or "").startswith("scene ")]
    assert len(scenes) == 2  # one per round with generated scenes
    for a in scenes:
        im = Image.open(io.BytesIO(_decode(a["src"])))
        assert im.size == (160, 160) and _colours(im) > 50  # a rendered scene
    assert "mode0_r1 · pick_place" in page.plain() and "mode0_r2 · pick_place" in page.plain()


def test_text_from_memory_is_escaped(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    page = _Page(text)
    tags = {t for t, _ in page.tags}
    assert "script" not in tags and "link" not in tags and "iframe" not in tags
    assert all(not k.startswith("on") for _, a in page.tags for k in a)
    assert all((a.get("src") or "").startswith("data:") for a in page.imgs())
    shown = "".join(page.text)
    assert EXPLANATION in shown and RAW in shown and "the cube sits <far> left" in shown
    assert "&lt;script&gt;" in text


def test_report_of_a_run_without_rounds(tmp_path: Path) -> None:
    # an sft run killed after round 0's scenes: every section still there, saying why it is empty
    cfg = build_config("tiny", data={"scene": {"families": ["stack"]}})
    with open_memory(tmp_path) as mem:
        mem.create_run("sft-run", config=cfg.model_dump(mode="json"), seed=3, strategy="sft")
        with mem.phase("sft-run", 0, "scenes") as tx:
            tx.add_all([Scenario.from_spec(s, split="sft") for s in make_split("stack", "sft", 2, 0)])
        out = build_report(mem, "sft-run", tmp_path)
    page = _Page(out.read_text(encoding="utf-8"))
    assert set(SECTIONS) <= {a.get("id") for _, a in page.tags}
    assert not page.imgs()
    text = page.plain()
    for said in ("no evaluation episodes in memory", "no diagnoses", "no verified failure mode",
                 "no generation programs", "no generated scenes", "no diagnosed episodes", "no checkpoints"):
        assert said in text, said
    assert "status running" in text and "families stack" in text


def _cli() -> typer.Typer:
    from coda.cli.report import report_command

    app = typer.Typer(add_completion=False)
    app.command("report")(report_command)

    @app.command("version")
    def _version() -> None:  # a second command keeps `report` a named subcommand
        pass

    return app


def test_report_command_rebuilds_from_memory(written: Written, tmp_path: Path) -> None:
    # the run directory copied elsewhere without its database (memory by --memory URL), one keyframe file lost
    copy = tmp_path / "copy" / RUN
    shutil.copytree(written.run_dir, copy, ignore=shutil.ignore_patterns("memory.sqlite*"))
    gone = next(p for p in written.keyframes if "evaluate_0" in p)
    (copy / gone).unlink()
    url = f"sqlite:///{written.run_dir / 'memory.sqlite'}"
    out = tmp_path / "again.html"
    res = CliRunner().invoke(_cli(), ["report", str(copy), "--memory", url, "--scenes", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = _Page(out.read_text(encoding="utf-8"))
    assert page.table_with("round", "sft", "position")[1][1] == "0.50 (1/2)"
    assert "is missing" in page.plain()  # said in words, not a broken image
    assert len([a for a in page.imgs() if (a.get("alt") or "").startswith("keyframe_t")]) == 2 * 2 + 2 * (3 + 1) - 1
    assert not [a for a in page.imgs() if (a.get("alt") or "").startswith("scene ")]
    other = tmp_path / "elsewhere"
    shutil.copytree(written.run_dir, other)  # a memory without a run of this directory's name
    res = CliRunner().invoke(_cli(), ["report", str(other), "--scenes", "0"])
    assert res.exit_code == 2 and "holds no run 'elsewhere'" in res.output and RUN in res.output
    res = CliRunner().invoke(_cli(), ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "does not exist" in res.output


# ---- the page in a browser ------------------------------------------------------------------------------

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--mute-audio")


class _DevTools:
    """A headless Chromium driven over the DevTools protocol (one page, events collected)."""

    def __init__(self, binary: str, profile: Path, timeout_s: float = 90.0) -> None:
        from websockets.sync.client import connect

        self._stack = contextlib.ExitStack()
        self.deadline = time.monotonic() + timeout_s
        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "--remote-debugging-port=0", "--window-size=1280,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.events: list[dict[str, Any]] = []
        self._id = 0
        try:
            port_file = profile / "DevToolsActivePort"
            while not (port_file.is_file() and len(port_file.read_text().split()) == 2):
                if self.proc.poll() is not None or time.monotonic() > self.deadline:
                    raise RuntimeError(f"chromium did not open its DevTools port (exit {self.proc.poll()})")
                time.sleep(0.1)
            port, path = port_file.read_text().split()
            self.ws = self._stack.enter_context(connect(f"ws://127.0.0.1:{port}{path}", max_size=None,
                                                        open_timeout=30))
            target = self.send("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        except BaseException:
            self.close()
            raise

    def send(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            got = self._recv()
            if got.get("id") == self._id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return dict(got.get("result", {}))

    def _recv(self) -> dict[str, Any]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("chromium did not answer in time")
        got = json.loads(self.ws.recv(timeout=left))
        if "method" in got:
            self.events.append(got)
        return dict(got)

    def open(self, url: str) -> None:
        """Navigate the page to `url` and wait for its load event."""
        start = len(self.events)
        self.send("Page.navigate", session=True, url=url)
        while not any(e["method"] == "Page.loadEventFired" for e in self.events[start:]):
            self._recv()

    def evaluate(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[_DevTools]:
    binary = _chromium()
    if binary is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    profile = Path(tempfile.mkdtemp(prefix="coda-chromium-", dir=tmp_path))
    dev = _DevTools(binary, profile)
    try:
        yield dev
    finally:
        dev.close()


def test_report_loads_cleanly_in_chromium(report: Path, browser: _DevTools) -> None:
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session=True)
    browser.open(report.resolve().as_uri())
    images = browser.evaluate(
        "Promise.all([...document.images].map(i => i.decode().then(() => [i.alt, i.naturalWidth], "
        "() => [i.alt, 0])))")
    assert len(images) >= 4 + 2 + 10, images
    assert all(w > 0 for _, w in images), [a for a, w in images if not w]
    sections = browser.evaluate("[...document.querySelectorAll('section')].map(s => s.id)")
    assert [s for s in SECTIONS if s != "invalid"] == sections
    events = browser.events
    errors = [e["params"] for e in events if e["method"] == "Runtime.exceptionThrown"]
    errors += [e["params"] for e in events if e["method"] == "Runtime.consoleAPICalled"
               and e["params"]["type"] in ("error", "assert", "warning")]
    errors += [e["params"]["entry"] for e in events if e["method"] == "Log.entryAdded"
               and e["params"]["entry"]["level"] in ("error", "warning")]
    assert not errors, errors
    requested = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    assert requested and all(u.split(":", 1)[0] in ("file", "data") for u in requested), requested[:5]
    failed = [e["params"] for e in events if e["method"] == "Network.loadingFailed"]
    assert not failed, failed


def test_browser_check_sees_a_broken_image(tmp_path: Path, browser: _DevTools) -> None:
    # the checks above can fail: a page with an undecodable image and a script error is caught
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><body><img alt='bad' src='data:image/png;base64,AAAA'>"
                    "<script>console.error('boom')</script></body></html>")
    for domain in ("Page", "Runtime"):
        browser.send(f"{domain}.enable", session=True)
    browser.open(page.as_uri())
    images = browser.evaluate("Promise.all([...document.images].map(i => i.decode().then(() => [i.alt, "
                              "i.naturalWidth], () => [i.alt, 0])))")
    assert images == [["bad", 0]]
    assert any(e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error" for e in browser.events)
