"""The `noisy` critic corrupts a seeded fraction of a real critic's diagnoses and records each corruption."""

from __future__ import annotations

import json

import pytest

from coda.critic.base import make_critic
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import FACTOR_KINDS, Diagnosis, DiagnosisRejected
from coda.critic.noisy import NoisyCritic
from coda.errors import CodaError

GOOD = {
    "failure_mode": "missed_grasp",
    "stage_reached": "reach",
    "objects": ["obj0"],
    "factors": [{"kind": "position", "entity": "obj0", "value": "far_left", "detail": "far from the start"}],
    "explanation": "The gripper closed beside the red cube.",
    "stage_plan": "1. reach the red cube 2. grasp it",
}


@pytest.fixture
def vlm(chat_server, monkeypatch):
    chat_server.default = {"content": json.dumps(GOOD)}
    cfg = CriticConfig(name="vlm", base_url=chat_server.url, api_key_env=None, timeout_s=2, retries=0, max_images=1)
    return make_critic(cfg)


def run(critic, make_episode, ids):
    return {i: critic.diagnose(make_episode(n_frames=1, episode_id=i)) for i in ids}


def test_rate_zero_and_one(vlm, make_episode) -> None:
    clean = run(NoisyCritic(vlm, rate=0.0), make_episode, [f"e{i}" for i in range(10)])
    assert all(d.answer().model_dump(mode="json") == GOOD for d in clean.values())
    assert all(d.critic == "noisy" for d in clean.values())

    noisy = NoisyCritic(vlm, rate=1.0, seed=3)
    out = run(noisy, make_episode, [f"e{i}" for i in range(30)])
    assert set(noisy.corruptions) == set(out)
    kinds = {c.kind for c in noisy.corruptions.values()}
    assert kinds == {"mode", "object", "factor"}
    for eid, d in out.items():
        c = noisy.corrupted(eid)
        field = {"mode": "failure_mode", "object": "objects", "factor": "factors"}[c.kind]
        got = d.answer().model_dump(mode="json")
        assert json.loads(c.original)[field] == GOOD[field] != got[field]
        assert json.loads(c.corrupted)[field] == got[field]
        assert {k: v for k, v in got.items() if k != field} == {k: v for k, v in GOOD.items() if k != field}
        if c.kind == "object":
            assert got["objects"][0] in {"obj1"}  # the only other object of the scene
        if c.kind == "factor":
            assert got["factors"][0]["kind"] != "position"


def test_fraction_is_seeded_and_independent_of_order(vlm, make_episode) -> None:
    ids = [f"episode-{i}" for i in range(60)]
    a = NoisyCritic(vlm, rate=0.3, seed=11)
    run(a, make_episode, ids)
    b = NoisyCritic(vlm, rate=0.3, seed=11)
    run(b, make_episode, list(reversed(ids)))
    c = NoisyCritic(vlm, rate=0.3, seed=12)
    run(c, make_episode, ids[:20])
    assert a.corruptions == b.corruptions
    assert {i for i in a.corruptions if i in ids[:20]} != set(c.corruptions)
    assert 0.1 <= len(a.corruptions) / len(ids) <= 0.5  # binomial(60, 0.3): mean 18, sd 3.5


def test_rejections_pass_through(chat_server, make_episode) -> None:
    chat_server.default = {"content": "not json"}
    cfg = CriticConfig(name="noisy", noisy_base="vlm", noise=1.0, base_url=chat_server.url, api_key_env=None, retries=0)
    critic = make_critic(cfg)
    assert isinstance(critic, NoisyCritic)
    r = critic.diagnose(make_episode(n_frames=0))
    assert isinstance(r, DiagnosisRejected) and not critic.corruptions


def test_bad_arguments(vlm) -> None:
    with pytest.raises(CodaError, match=r"rate = 1.5"):
        NoisyCritic(vlm, rate=1.5)
    with pytest.raises(CodaError, match=r"kinds = \['colour'\]"):
        NoisyCritic(vlm, rate=0.5, kinds=("colour",))  # type: ignore[arg-type]


def test_factor_corruptions_draw_every_other_kind(vlm, make_episode) -> None:
    noisy = NoisyCritic(vlm, rate=1.0, seed=5, kinds=("factor",))
    out = run(noisy, make_episode, [f"f{i}" for i in range(60)])
    kinds = {d.factors[0].kind for d in out.values()}
    assert kinds == set(FACTOR_KINDS) - {"position"}
    task = next(d.factors[0] for d in out.values() if d.factors[0].kind == "task")
    assert task.value.endswith({"obj0": "red cube", "obj1": "blue cylinder"}[task.entity or ""])  # the entity's words
