"""A language model may translate free text into a stage program; its JSON is validated, never executed."""

from __future__ import annotations

import json

import pytest

from coda.critic.config import CriticConfig
from coda.critic.vlm import ChatEndpoint
from coda.shaping.program import StageProgram, program_json_schema
from coda.shaping.text2potential import PlanRejected, translate_plan


@pytest.fixture
def endpoint(chat_server):
    return ChatEndpoint(CriticConfig(name="vlm", base_url=chat_server.url, api_key_env=None, retries=0, timeout_s=2))


def test_valid_translation(chat_server, endpoint, pick_place_spec) -> None:
    stages = [{"kind": "grasp", "args": ["obj0"], "value": None}, {"kind": "place", "args": ["obj0", "bowl0"], "value": None}]
    chat_server.add({"content": json.dumps({"stages": stages})})
    prog = translate_plan("get the cube into the bowl somehow", pick_place_spec, endpoint)
    assert isinstance(prog, StageProgram) and prog.describe() == "grasp(obj0) → place(obj0, bowl0)"
    assert prog.source == "get the cube into the bowl somehow"
    body = chat_server.requests[0]["body"]
    assert body["response_format"]["json_schema"]["schema"] == program_json_schema()
    assert "obj0: small red cube" in body["messages"][1]["content"]


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        ("__import__('os').system('true')", "malformed JSON"),
        (json.dumps({"stages": [{"kind": "teleport", "args": ["obj0"], "value": None}]}), "'stages.0.kind' = 'teleport'"),
        (json.dumps({"stages": [{"kind": "grasp", "args": ["bowl0"], "value": None}]}), "'bowl0' is a container"),
        (json.dumps({"stages": []}), "'stages'"),
    ],
)
def test_bad_translations_are_rejected(chat_server, endpoint, pick_place_spec, answer: str, needle: str) -> None:
    chat_server.add({"content": answer})
    r = translate_plan("do the thing", pick_place_spec, endpoint)
    assert isinstance(r, PlanRejected) and needle in r.reason and r.text == "do the thing"
