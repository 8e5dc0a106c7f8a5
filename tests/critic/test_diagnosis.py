"""The diagnosis schema, its strict JSON schema, the parser and stored records."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from coda.critic.base import CRITICS, EpisodeError, EpisodeRecord, make_critic
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import (
    DIAGNOSIS_SCHEMA_VERSION,
    FAILURE_MODES,
    Diagnosis,
    DiagnosisError,
    DiagnosisRejected,
    diagnosis_json_schema,
    parse_diagnosis,
    prompt_taxonomy,
    record_from_json,
)
from coda.errors import RegistryError, SchemaVersionError

GOOD: dict[str, Any] = {
    "failure_mode": "wrong_object",
    "stage_reached": "lift",
    "objects": ["obj1", "obj0"],
    "factors": [
        {"kind": "distractor", "entity": "obj1", "value": "blue cylinder", "detail": "same height as the target"},
        {"kind": "instruction", "entity": None, "value": "crimson block", "detail": "synonym of red cube"},
    ],
    "explanation": "The policy lifted the blue cylinder instead of the red cube.",
    "stage_plan": "1. reach the red cube 2. grasp it 3. lift it 4. move above the blue bowl 5. release it inside the bowl",
}


def walk(node: Any) -> list[dict[str, Any]]:
    out = []
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            out += walk(v)
    elif isinstance(node, list):
        for v in node:
            out += walk(v)
    return out


def test_json_schema_is_in_the_strict_subset() -> None:
    schema = diagnosis_json_schema()
    objects = [n for n in walk(schema) if n.get("type") == "object"]
    assert len(objects) == 2  # the answer and a scene factor
    for o in objects:
        assert o["additionalProperties"] is False
        assert sorted(o["required"]) == sorted(o["properties"])
    assert set(schema["properties"]["failure_mode"]["enum"]) == set(FAILURE_MODES) >= {
        "missed_grasp", "slip_during_transport", "wrong_object", "wrong_target", "knocked_over", "collision",
        "no_progress", "detour", "premature_release", "imprecise_placement", "drawer_not_operated", "other"}
    assert not [n for n in walk(schema) if {"minLength", "maxLength", "title"} & set(n)]


def test_parse_valid_and_round_trip(pick_place_spec) -> None:
    d = parse_diagnosis(json.dumps(GOOD), critic="c", episode_id="e", spec=pick_place_spec)
    assert isinstance(d, Diagnosis)
    assert d.factors[1].entity is None and d.answer().model_dump(mode="json") == GOOD
    assert record_from_json(d.model_dump_json()) == d
    fenced = parse_diagnosis("```json\n" + json.dumps(GOOD, indent=2) + "\n```")
    assert isinstance(fenced, Diagnosis) and fenced.answer() == d.answer()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty answer"),
        ("[1, 2]", "must be a JSON object, got list"),
        ('{"failure_mode": ', "malformed JSON"),
        ("I think it missed the grasp.", "malformed JSON"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "stage_plan"}), "'stage_plan' is missing"),
        (json.dumps({**GOOD, "stage_reached": "flying"}), "'stage_reached' = 'flying'"),
        (json.dumps({**GOOD, "factors": [{"kind": "mood", "entity": None, "value": "x", "detail": "y"}]}),
         "'factors.0.kind' = 'mood'"),
        (json.dumps({**GOOD, "factors": [{**GOOD["factors"][0], "entity": "lamp"}]}),
         "'factors.0.entity' = 'lamp' is not an entity"),
    ],
)
def test_bad_answers_become_rejections(pick_place_spec, text: str, needle: str) -> None:
    r = parse_diagnosis(text, critic="vlm", episode_id="e9", spec=pick_place_spec)
    assert isinstance(r, DiagnosisRejected)
    assert needle in r.reason and r.raw_text == text and r.episode_id == "e9"
    assert "\n" not in r.reason
    assert record_from_json(r.model_dump_json()) == r


def test_stored_records_are_checked() -> None:
    with pytest.raises(DiagnosisError, match="'record' = 'verdict'"):
        record_from_json(json.dumps({"record": "verdict"}))
    with pytest.raises(SchemaVersionError, match="'schema_version' = 99"):
        record_from_json(json.dumps({**GOOD, "record": "diagnosis", "schema_version": 99}))
    with pytest.raises(DiagnosisError, match="'failure_mode'"):
        record_from_json(json.dumps({**GOOD, "record": "diagnosis", "failure_mode": 3}))


def test_episode_record_validation(pick_place_spec) -> None:
    ok = EpisodeRecord("e", pick_place_spec, False, 10, keyframes=(np.zeros((4, 4, 3), np.uint8),))
    assert ok.instruction == pick_place_spec.instruction
    with pytest.raises(EpisodeError, match=r"'keyframes.0' has dtype float64"):
        EpisodeRecord("e", pick_place_spec, False, 10, keyframes=(np.zeros((4, 4, 3)),))
    with pytest.raises(EpisodeError, match=r"'keyframes.1' is bytes but not a PNG"):
        EpisodeRecord("e", pick_place_spec, False, 10, keyframes=(np.zeros((4, 4, 3), np.uint8), b"GIF89a.."))
    with pytest.raises(EpisodeError, match=r"'keyframe_steps' has 2 entries for 1 keyframes"):
        EpisodeRecord("e", pick_place_spec, False, 10, keyframes=(np.zeros((4, 4, 3), np.uint8),), keyframe_steps=(1, 2))
    with pytest.raises(EpisodeError, match="'steps' = -1"):
        EpisodeRecord("e", pick_place_spec, False, -1)


def test_registry_names_unknown_critics() -> None:
    assert {"vlm", "noisy"} <= set(CRITICS.names())
    with pytest.raises(RegistryError, match=r"Unknown critic 'oracle'. Available: \["):
        make_critic(CriticConfig(), name="oracle")


def test_task_factor_kind_and_version_one_records() -> None:
    schema = diagnosis_json_schema()
    kinds = next(n["enum"] for n in walk(schema) if "enum" in n and "position" in n["enum"])
    assert "task" in kinds and "instruction" in kinds
    assert "- task: which object or container the instruction asks for" in prompt_taxonomy()
    task = {"kind": "task", "entity": "obj1", "value": "blue cylinder -> blue bowl", "detail": "another target"}
    d = parse_diagnosis(json.dumps({**GOOD, "factors": [task]}))
    assert isinstance(d, Diagnosis) and d.factors[0].kind == "task" and d.schema_version == DIAGNOSIS_SCHEMA_VERSION == 2
    old = record_from_json(json.dumps({**GOOD, "record": "diagnosis", "schema_version": 1, "critic": "privileged"}))
    assert isinstance(old, Diagnosis) and old.schema_version == 1 and old.answer().model_dump(mode="json") == GOOD
    rejected = record_from_json(json.dumps({"record": "rejected", "schema_version": 1, "reason": "x", "raw_text": "{"}))
    assert isinstance(rejected, DiagnosisRejected) and rejected.schema_version == 1
