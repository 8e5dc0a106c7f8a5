"""The `vlm` critic through the real openai client against a local chat-completions server."""

from __future__ import annotations

import base64
import io
import json
import logging
import socket
import time
from typing import Any

import pytest
from PIL import Image

from coda.config import build_config
from coda.critic.base import CriticUnavailable, FallbackCritic, make_critic
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import Diagnosis, DiagnosisRejected, diagnosis_json_schema
from coda.critic.vlm import VLMCritic, pick_keyframes
from coda.errors import ConfigError

SECRET = "sk-test-7f3a9c1e5b2d4f60"

GOOD = {
    "failure_mode": "missed_grasp",
    "stage_reached": "reach",
    "objects": ["obj0"],
    "factors": [{"kind": "position", "entity": "obj0", "value": "far_left", "detail": "the cube sits far left"}],
    "explanation": "The gripper closed beside the red cube and never held it.",
    "stage_plan": "1. reach the red cube 2. grasp it 3. lift it 4. move above the blue bowl 5. release it inside the bowl",
}


def cfg(url: str, **kw: Any) -> CriticConfig:
    base = dict(name="vlm", base_url=url, model="local-vl-7b", api_key_env="CODA_TEST_KEY", timeout_s=2.0,
                retries=2, backoff_s=0.01, max_images=3)
    base.update(kw)
    return CriticConfig(**base)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_TEST_KEY", SECRET)


def test_valid_answer_and_the_request_the_server_saw(chat_server, make_episode, caplog) -> None:
    caplog.set_level(logging.DEBUG)  # the openai client and httpx log requests at DEBUG
    chat_server.add({"content": json.dumps(GOOD)})
    critic = VLMCritic(cfg(chat_server.url))
    result = critic.diagnose(make_episode(n_frames=6))

    assert isinstance(result, Diagnosis)
    assert result.failure_mode == "missed_grasp" and result.objects == ("obj0",)
    assert result.critic == "vlm" and result.episode_id == "ep-1" and result.notes == ()

    (req,) = chat_server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == f"Bearer {SECRET}"  # the key did reach the server
    body = req["body"]
    assert body["model"] == "local-vl-7b"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == diagnosis_json_schema()
    user = body["messages"][1]["content"]
    assert "put the red cube in the blue bowl" in user[0]["text"] and "obj0: small red cube" in user[0]["text"]
    urls = [part["image_url"]["url"] for part in user if part["type"] == "image_url"]
    assert len(urls) == 3  # max_images of 6 keyframes
    shades = []
    for u in urls:
        assert u.startswith("data:image/png;base64,")
        img = Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1])))
        assert img.format == "PNG" and img.size == (20, 16)
        shades.append(img.getpixel((0, 0))[0])
    assert shades == [0, 30, 50]  # first, middle and last keyframe

    everything = [r.getMessage() for r in caplog.records] + [result.model_dump_json(), repr(critic)]
    assert caplog.records, "expected the client to log at DEBUG"
    assert not [t for t in everything if SECRET in t]


def test_malformed_json_is_a_recorded_rejection(chat_server, make_episode) -> None:
    raw = '{"failure_mode": "missed_grasp", "objects": [obj0]'
    chat_server.add({"content": raw})
    result = VLMCritic(cfg(chat_server.url)).diagnose(make_episode())
    assert isinstance(result, DiagnosisRejected)
    assert result.raw_text == raw and result.reason.startswith("malformed JSON")
    assert result.episode_id == "ep-1" and result.critic == "vlm"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"failure_mode": "exploded"}, "'failure_mode' = 'exploded'"),
        ({"confidence": 0.9}, "'confidence' is not a known field"),
        ({"objects": ["obj7"]}, "'objects.0' = 'obj7' is not an entity"),
        ({"stage_plan": ""}, "'stage_plan'"),
    ],
)
def test_off_schema_answers_are_rejected_with_the_field(chat_server, make_episode, change, needle) -> None:
    raw = json.dumps({**GOOD, **change})
    chat_server.add({"content": raw})
    result = VLMCritic(cfg(chat_server.url)).diagnose(make_episode())
    assert isinstance(result, DiagnosisRejected)
    assert needle in result.reason and result.raw_text == raw


def test_answer_past_the_timeout_is_unavailable_after_retries(chat_server, make_episode) -> None:
    chat_server.add(*[{"content": json.dumps(GOOD), "delay": 1.0}] * 2)
    critic = VLMCritic(cfg(chat_server.url, timeout_s=0.25, retries=1))
    t0 = time.monotonic()
    with pytest.raises(CriticUnavailable, match=r"timed out after 2 attempt\(s\)") as err:
        critic.diagnose(make_episode())
    assert time.monotonic() - t0 < 1.5  # gave up on time instead of waiting the answers out
    assert len(chat_server.requests) == 2
    assert chat_server.url in str(err.value) and SECRET not in str(err.value)


def test_http_500_then_success_on_retry(chat_server, make_episode) -> None:
    chat_server.add({"status": 500, "error": "overloaded"}, {"content": json.dumps(GOOD)})
    result = VLMCritic(cfg(chat_server.url)).diagnose(make_episode())
    assert isinstance(result, Diagnosis)
    assert len(chat_server.requests) == 2
    assert any("HTTP 500" in n and "retried" in n for n in result.notes)


def test_backoff_doubles_between_retries(chat_server, make_episode) -> None:
    chat_server.add(*[{"status": 503, "error": "busy"}] * 3)
    critic = VLMCritic(cfg(chat_server.url, retries=2, backoff_s=0.2))
    t0 = time.monotonic()
    with pytest.raises(CriticUnavailable, match="HTTP 503"):
        critic.diagnose(make_episode())
    assert 0.6 <= time.monotonic() - t0 < 2.0  # 0.2 + 0.4 s of backoff
    assert len(chat_server.requests) == 3


def test_connection_refused_is_a_clean_error(make_episode) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    critic = VLMCritic(cfg(f"http://127.0.0.1:{port}/v1", retries=1))
    with pytest.raises(CriticUnavailable, match=rf"127\.0\.0\.1:{port}.*connection failed.*after 2 attempt"):
        critic.diagnose(make_episode())


def test_non_transient_errors_are_not_retried(chat_server, make_episode) -> None:
    chat_server.add({"status": 401, "error": "bad key"}, {"content": json.dumps(GOOD)})
    with pytest.raises(CriticUnavailable, match="HTTP 401"):
        VLMCritic(cfg(chat_server.url)).diagnose(make_episode())
    assert len(chat_server.requests) == 1


def test_structured_output_refused_falls_back_to_the_strict_text_parser(chat_server, make_episode) -> None:
    def no_schema(body: dict[str, Any]) -> dict[str, Any]:
        if "response_format" in body:
            return {"status": 400, "error": "response_format is not supported by this model"}
        return {"content": "```json\n" + json.dumps(GOOD) + "\n```"}

    chat_server.add(no_schema, no_schema, no_schema)
    critic = VLMCritic(cfg(chat_server.url))
    first = critic.diagnose(make_episode())
    second = critic.diagnose(make_episode(episode_id="ep-2"))
    assert isinstance(first, Diagnosis) and isinstance(second, Diagnosis)
    assert "response_format" in chat_server.requests[0]["body"]
    assert all("response_format" not in r["body"] for r in chat_server.requests[1:])
    assert len(chat_server.requests) == 3  # the downgrade is remembered
    assert any("refused response_format=json_schema" in n for n in first.notes)


def test_prose_around_json_is_not_extracted(chat_server, make_episode) -> None:
    chat_server.add({"content": "Sure! Here is the diagnosis: " + json.dumps(GOOD)})
    result = VLMCritic(cfg(chat_server.url)).diagnose(make_episode())
    assert isinstance(result, DiagnosisRejected) and "malformed JSON" in result.reason


def test_fallback_critic_records_why_it_fell_back(chat_server, make_episode) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    chat_server.add({"content": json.dumps(GOOD)})
    primary = VLMCritic(cfg(dead, retries=0))
    backup = VLMCritic(cfg(chat_server.url), name="vlm-backup")
    result = FallbackCritic([primary, backup]).diagnose(make_episode())
    assert isinstance(result, Diagnosis) and result.critic == "vlm-backup"
    assert any("critic 'vlm' unavailable" in n and "used 'vlm-backup'" in n for n in result.notes)

    with pytest.raises(CriticUnavailable, match="critic 'vlm' unavailable"):
        FallbackCritic([primary]).diagnose(make_episode())


def test_missing_key_variable_is_named(monkeypatch, chat_server) -> None:
    monkeypatch.delenv("CODA_TEST_KEY")
    with pytest.raises(CriticUnavailable, match="'CODA_TEST_KEY', which is not set"):
        make_critic(cfg(chat_server.url))


def test_keyless_server(monkeypatch, chat_server, make_episode) -> None:
    chat_server.add({"content": json.dumps(GOOD)})
    result = make_critic(cfg(chat_server.url, api_key_env=None)).diagnose(make_episode(n_frames=0))
    assert isinstance(result, Diagnosis)
    user = chat_server.requests[0]["body"]["messages"][1]["content"]
    assert [p["type"] for p in user] == ["text"]


def test_config_errors_are_one_line_and_never_echo_a_key() -> None:
    cfg_no_url = build_config(preset="tiny", overrides=["critic.name=vlm"]).critic
    with pytest.raises(ConfigError, match="critic.base_url is not set"):
        make_critic(cfg_no_url)
    with pytest.raises(ConfigError, match="must be the NAME of an environment variable") as err:
        build_config(preset="tiny", overrides=["critic.api_key_env=sk-live-abc-123"])
    assert "sk-live-abc-123" not in str(err.value)
    with pytest.raises(ConfigError, match=r"fallback \('vlm'\) must differ"):
        build_config(preset="tiny", overrides=["critic.name=vlm", "critic.fallback=vlm", "critic.base_url=http://x/v1"])


def test_pick_keyframes() -> None:
    assert pick_keyframes(10, 4) == [0, 3, 6, 9]
    assert pick_keyframes(3, 4) == [0, 1, 2]
    assert pick_keyframes(5, 1) == [4]
    assert pick_keyframes(5, 0) == []
