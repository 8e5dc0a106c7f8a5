"""Benchmark splits: determinism, narrow sft, single-factor OOD splits, versioned JSONL files."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import pytest

from coda.errors import CodaError, SchemaVersionError
from coda.scene.language import canonical_instruction, heldout_only_words, tokens
from coda.scene.regions import REGIONS
from coda.scene.spec import FAMILIES, ScenarioSpec
from coda.scene.splits import (
    SFT_COLORS,
    SFT_PARAMS,
    SPLITS,
    SPLITS_VERSION,
    SplitError,
    build_split,
    make_split,
    paired_base,
    read_split,
    write_split,
)

N = 4
DIGESTS = Path(__file__).with_name("split_digests.json")


@lru_cache(maxsize=None)
def split(family: str, name: str, seed: int = 3) -> tuple[ScenarioSpec, ...]:
    return tuple(make_split(family, name, N, seed))


def _positions(spec: ScenarioSpec) -> dict[str, tuple[float, float]]:
    return {e.name: tuple(getattr(e, "pos", None) or e.center) for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)}


def _bytes(tmp_path: Path, specs, name: str) -> bytes:  # noqa: ANN001
    return write_split(tmp_path / name, specs, family="x").read_bytes()


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_bytes(family: str, tmp_path: Path) -> None:
    for name in ("sft", "position", "distractor"):
        a = _bytes(tmp_path, make_split(family, name, 4, 9), "a.jsonl")
        b = _bytes(tmp_path, make_split(family, name, 4, 9), "b.jsonl")
        c = _bytes(tmp_path, make_split(family, name, 4, 10), "c.jsonl")
        assert a == b and a != c


def test_generated_specs_round_trip_through_json() -> None:
    for family in FAMILIES:
        for name in SPLITS:
            for s in split(family, name):
                assert ScenarioSpec.from_json(s.to_json()) == s
                assert s.provenance.split == name and s.provenance.program == f"{family}/{name}@v{SPLITS_VERSION}"


@pytest.mark.parametrize("family", FAMILIES)
def test_sft_is_narrow_and_canonical(family: str) -> None:
    params = SFT_PARAMS[family]
    for s in make_split(family, "sft", 20, 0):
        assert s.instruction == canonical_instruction(s)
        assert all(o.color in SFT_COLORS and o.shape == "box" for o in s.objects)
        g = s.goal[0]
        if family != "drawer":
            assert REGIONS[params["target_region"]].contains(*s.object(g.args[0]).pos)
            dest = s.entity(g.args[1])
            assert REGIONS[params["goal_region"]].contains(*(getattr(dest, "pos", None) or dest.center))
        else:
            assert REGIONS[params["goal_region"]].contains(*s.drawers[0].pos) and g.value == 1.0
    if family in ("pick_place", "stack"):  # the memorisable shortcut: the target is the leftmost object
        for s in make_split(family, "sft", 20, 0):
            target = s.object(s.goal[0].args[0])
            assert target.pos[1] == max(o.pos[1] for o in s.objects)


def test_heldout_vocabulary_never_in_sft_and_always_in_instruction_split() -> None:
    held = heldout_only_words()
    for family in FAMILIES:
        sft = make_split(family, "sft", 30, 3)
        sft_words = {w for s in sft for w in tokens(s.instruction)}
        assert not sft_words & held
        sft_texts = {s.instruction for s in sft}
        for s in split(family, "instruction"):
            assert set(tokens(s.instruction)) & held and s.instruction not in sft_texts


@pytest.mark.parametrize("family", FAMILIES)
def test_ood_splits_are_sft_plus_one_factor(family: str) -> None:
    sft = split(family, "sft")
    for name in ("instruction", "task", "object", "physics"):
        for base, s in zip(sft, split(family, name)):
            if s.provenance.parent != base.spec_id:  # a redrawn scene (the edit failed on scene i): not paired
                continue
            assert _positions(s) == _positions(base), name
    pairs = list(zip(sft, split(family, "instruction")))
    assert sum(s.provenance.parent == b.spec_id for b, s in pairs) >= N - 1
    for b, s in pairs:
        assert s.goal == b.goal and s.provenance.factors == ("instruction",)
    for b, s in zip(sft, split(family, "task")):
        assert s.goal != b.goal and s.provenance.factors == ("task",)
    for s in split(family, "object"):
        assert len(s.provenance.factors) == 1 and s.provenance.factors[0].startswith("object:")
    for b, s in zip(sft, split(family, "physics")):
        assert len(s.provenance.factors) == 1 and s.provenance.factors[0].startswith("physics:")
        if family == "drawer":  # objects play no part in a drawer task: the slide's damping changes
            assert s.drawers[0].damping != b.drawers[0].damping
        else:
            assert (s.physics.friction_scale, s.physics.mass_scale) != (1.0, 1.0)
    for s in split(family, "distractor"):
        assert s.provenance.factors == ("distractor",)
    for s in split(family, "position"):
        assert all(f.startswith(("position:", "robot_start")) for f in s.provenance.factors)


@pytest.mark.parametrize("family", FAMILIES)
def test_paired_base_is_the_scene_without_the_split_edit(family: str) -> None:
    for name in ("position", "object", "physics"):
        for s in split(family, name):
            base = paired_base(s, seed=3)
            assert base.spec_id == s.provenance.parent and base.provenance.split == "sft" and base.family == family
            assert name == "position" or _positions(base) == _positions(s)
    sft = split(family, "sft")
    with pytest.raises(SplitError, match="provenance.split = 'sft'"):
        paired_base(sft[0], seed=3)
    with pytest.raises(SplitError, match="not among the first 3 candidates"):
        paired_base(split(family, "physics")[0], seed=4, max_candidates=3)


def test_position_split_leaves_the_sft_spots() -> None:
    moved = 0
    for s in make_split("pick_place", "position", 20, 0):
        g = s.goal[0]
        t_in = REGIONS["spot_left"].contains(*s.object(g.args[0]).pos)
        d_in = REGIONS["spot_far"].contains(*s.entity(g.args[1]).pos)
        moved += not (t_in and d_in)
    assert moved == 20


def test_unknown_family_or_split_lists_options() -> None:
    with pytest.raises(SplitError, match=r"Unknown split 'hard'. Available: \['sft', 'position'"):
        make_split("stack", "hard", 1, 0)
    with pytest.raises(SplitError, match=r"Unknown family 'juggle'. Available"):
        make_split("juggle", "sft", 1, 0)


def test_pinned_digests_match_splits_version() -> None:
    """Changing what a split contains must bump SPLITS_VERSION and re-pin these digests."""
    pinned = json.loads(DIGESTS.read_text())
    assert pinned["splits_version"] == SPLITS_VERSION
    for key, digest in pinned["digests"].items():
        family, name = key.split("/")
        text = "\n".join(s.to_json() for s in make_split(family, name, 3, 0))
        assert hashlib.sha256(text.encode()).hexdigest()[:16] == digest, key


# ---- files -------------------------------------------------------------------------------------------


def _file(tmp_path: Path, edit=None) -> Path:  # noqa: ANN001
    specs = list(split("stack", "sft"))[:2]
    p = write_split(tmp_path / "s.jsonl", specs, family="stack", split="sft", seed=3)
    if edit is not None:
        lines = p.read_text().splitlines()
        header, scene = json.loads(lines[0]), json.loads(lines[1])
        edit(header, scene)
        lines[0], lines[1] = json.dumps(header), json.dumps(scene)
        p.write_text("\n".join(lines) + "\n")
    return p


def test_split_file_round_trip(tmp_path: Path) -> None:
    header, specs = read_split(_file(tmp_path))
    assert header["coda_split"] == SPLITS_VERSION and header["n"] == 2 and header["family"] == "stack"
    assert specs == list(split("stack", "sft"))[:2]


@pytest.mark.parametrize(
    ("edit", "err", "pattern"),
    [
        (lambda h, s: s.pop("goal"), CodaError, r"line 2: scenario field 'goal' is missing"),
        (lambda h, s: s["objects"][0].update(mass="heavy"), CodaError, r"line 2: scenario field 'objects.0.mass' = 'heavy'"),
        (lambda h, s: s["objects"][0].update(color="mauve"), CodaError, r"line 2: scenario field 'objects.0.color' = 'mauve': colour 'mauve' is not in the palette"),
        (lambda h, s: s.update(schema_version=99), SchemaVersionError, r"line 2: scenario field 'schema_version' = 99 is newer"),
        (lambda h, s: h.update(coda_split=99), SchemaVersionError, r"line 1: header field 'coda_split' = 99 is newer"),
        (lambda h, s: h.pop("coda_split"), SplitError, r"line 1: missing header field 'coda_split'"),
        (lambda h, s: h.update(n=5), SplitError, r"header field 'n' = 5 but the file holds 2 scenes"),
    ],
)
def test_bad_split_files_fail_on_one_line(tmp_path: Path, edit, err, pattern) -> None:  # noqa: ANN001
    with pytest.raises(err, match=pattern) as e:
        read_split(_file(tmp_path, edit))
    assert "\n" not in str(e.value)


def test_build_split_reports_rejections_with_reasons() -> None:
    def strict(spec):  # noqa: ANN001, ANN202 - reject every scene whose target starts left of y = 0.16
        y = spec.object(spec.goal[0].args[0]).pos[1]
        return (y >= 0.16, "" if y >= 0.16 else "too_far_right", {"y": y})

    result = build_split("stack", "sft", 3, seed=0, check=strict, max_candidates=40)
    assert len(result.valid) == 3 and result.rejected
    assert result.reasons() == {"too_far_right": len(result.rejected)}
    assert all(s.object(s.goal[0].args[0]).pos[1] >= 0.16 for s in result.valid)
    # judged in candidate order: the valid ones are the first three passing scenes of the stream
    stream = make_split("stack", "sft", len(result.valid) + len(result.rejected), seed=0)
    assert [s for s in stream if strict(s)[0]][:3] == result.valid
