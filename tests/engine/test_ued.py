"""Level scores, the level buffer, and the PLR / ACCEL samplers (including the field's known bugs)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from coda.engine.mutate import mutate
from coda.engine.ued import (
    ACCELSampler,
    LevelBuffer,
    PLRSampler,
    SceneResults,
    Score,
    UEDError,
    failure,
    learnability,
    positive_value_loss,
)
from coda.errors import CodaError
from coda.scene.generators import sample_base
from coda.scene.spec import ScenarioSpec
from coda.scene.splits import SFT_PARAMS


@pytest.fixture(scope="module")
def scenes() -> list[ScenarioSpec]:
    """Twelve distinct scenes (same layout, different seeds: distinct spec_ids), cheap to make."""
    base = sample_base("pick_place", np.random.default_rng(0), SFT_PARAMS["pick_place"])
    return [base.replace(seed=k) for k in range(12)]


def _filled(sampler: PLRSampler, scenes: list[ScenarioSpec], scores: list[float] | np.ndarray) -> LevelBuffer:
    return sampler.insert(sampler.initial_buffer(), scenes[: len(scores)], scores)


# ---- scores --------------------------------------------------------------------------------------------


def test_score_functions_measure_what_they_say() -> None:
    assert failure([1, 0, 0, 1]) == pytest.approx(0.5)
    assert failure([True, True, True]) == 0.0 and failure([0, 0]) == 1.0
    assert learnability([1, 1, 1, 0]) == pytest.approx(0.75 * 0.25)
    assert learnability([1, 1, 1, 1]) == 0.0 and learnability([0, 0, 0]) == 0.0
    assert learnability([1, 0]) == pytest.approx(0.25)
    # max(0, G - V) = (0, 1, 2) -> mean 1
    assert positive_value_loss([1.0, 2.0, 3.0], [2.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert positive_value_loss([0.0, 0.0], [1.0, 2.0]) == 0.0


def test_score_enum_dispatches_to_the_pure_functions() -> None:
    res = SceneResults(successes=np.array([1, 0, 1, 1, 0]), returns=np.array([1.0, 0.5]), values=np.array([0.2, 0.9]))
    assert Score.FAILURE.compute(res) == failure(res.successes)
    assert Score.LEARNABILITY.compute(res) == learnability(res.successes)
    assert Score.POSITIVE_VALUE_LOSS.compute(res) == pytest.approx(0.4)
    assert Score.parse("learnability") is Score.LEARNABILITY
    with pytest.raises(UEDError, match=r"Unknown score 'regret'\. Available: \['failure', 'learnability', 'positive_value_loss'\]"):
        Score.parse("regret")
    with pytest.raises(UEDError, match="needs SceneResults fields 'returns' and 'values'"):
        Score.POSITIVE_VALUE_LOSS.compute(SceneResults(successes=[1]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: failure([1, 0.5]), r"successes\[1\] = 0\.5: each rollout's success must be 0/1"),
        (lambda: learnability([]), r"successes has shape \(0,\)"),
        (lambda: failure([1, float("nan")]), r"successes\[1\] = nan: values must be finite"),
        (lambda: positive_value_loss([1.0, float("-inf")], [0.0, 0.0]), r"returns\[1\] = -inf"),
        (lambda: positive_value_loss([1.0, 2.0], [0.0]), r"returns has shape \(2,\) but values has shape \(1,\)"),
    ],
)
def test_score_functions_reject_bad_input(call: Callable[[], object], message: str) -> None:
    with pytest.raises(UEDError, match=message):
        call()


# ---- non-finite scores never enter the buffer ----------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), float("inf")])
def test_insert_rejects_non_finite_scores_and_stores_nothing(scenes: list[ScenarioSpec], bad: float) -> None:
    sampler = PLRSampler(capacity=4)
    buf = _filled(sampler, scenes, [0.5, 0.2])
    with pytest.raises(UEDError, match=rf"scores\[1\] = {bad}: a level score must be finite"):
        sampler.insert(buf, scenes[2:4], [0.3, bad])
    assert len(buf) == 2 and np.all(np.isfinite(buf.scores))  # the input buffer is untouched


@pytest.mark.parametrize("bad", [float("nan"), float("-inf")])
def test_update_scores_rejects_non_finite_scores(scenes: list[ScenarioSpec], bad: float) -> None:
    sampler = PLRSampler(capacity=4)
    buf = _filled(sampler, scenes, [0.5, 0.2, 0.9])
    with pytest.raises(UEDError, match=r"scores\[0\] = (nan|-inf)"):
        sampler.update_scores(buf, [2], [bad])
    with pytest.raises(UEDError, match="LevelBuffer field 'scores'"):
        LevelBuffer(buf.scenes, np.array([0.1, bad, 0.3]), buf.last_sampled, buf.inserted_at, 4, buf.tick)


def test_power_prioritization_rejects_negative_scores(scenes: list[ScenarioSpec]) -> None:
    with pytest.raises(UEDError, match=r"scores\[0\] = -0\.1: prioritization 'power' needs scores >= 0"):
        _filled(PLRSampler(capacity=4, prioritization="power"), scenes, [-0.1])
    assert len(_filled(PLRSampler(capacity=4), scenes, [-0.1])) == 1  # rank only needs an order


# ---- PLR replays buffer scenes, by priority ------------------------------------------------------------


def test_plr_with_replay_prob_one_only_replays_buffer_scenes(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=6, replay_prob=1.0, temperature=0.5, staleness_coef=0.2)
    buf = _filled(sampler, scenes, [0.9, 0.1, 0.5, 0.3, 0.7, 0.2])
    stored = {s.spec_id for s in buf.scenes}
    rng = np.random.default_rng(3)
    for _ in range(300):
        assert sampler.decide(buf, rng) == "replay"
        buf, idx = sampler.sample_replay(buf, rng, 4)
        assert {buf.scenes[i].spec_id for i in idx} <= stored
    assert {s.spec_id for s in buf.scenes} == stored


def test_high_score_scenes_are_replayed_more_often(scenes: list[ScenarioSpec]) -> None:
    scores = [0.9, 0.6, 0.3, 0.1]
    sampler = PLRSampler(capacity=4, replay_prob=1.0, temperature=1.0, staleness_coef=0.0)
    buf = _filled(sampler, scenes, scores)
    _, idx = sampler.sample_replay(buf, np.random.default_rng(0), 20_000)
    freq = np.bincount(idx, minlength=4) / idx.size
    assert np.all(np.diff(freq) < 0), freq  # strictly fewer draws for each lower score
    expected = np.array([1, 1 / 2, 1 / 3, 1 / 4]) / (25 / 12)  # rank priority 1/rank, β = 1
    assert np.allclose(sampler.weights(buf), expected)
    assert np.allclose(freq, expected, atol=0.015), (freq, expected)


def test_sequential_replay_with_staleness_still_favours_high_scores(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=5, replay_prob=1.0, temperature=0.3, staleness_coef=0.3)
    buf = _filled(sampler, scenes, [0.9, 0.7, 0.5, 0.3, 0.1])
    rng = np.random.default_rng(1)
    counts = np.zeros(5, dtype=int)
    for _ in range(2000):
        buf, idx = sampler.sample_replay(buf, rng, 1)
        counts[idx] += 1
    assert counts[0] > counts[1] > counts[2] and counts[2] > counts[4], counts


def test_decide_respects_min_fill_and_replay_prob(scenes: list[ScenarioSpec]) -> None:
    rng = np.random.default_rng(0)
    sampler = PLRSampler(capacity=8, replay_prob=1.0, min_fill=3)
    buf = _filled(sampler, scenes, [0.5, 0.5])
    assert {sampler.decide(buf, rng) for _ in range(100)} == {"new"}  # not yet min_fill scenes
    buf = sampler.insert(buf, scenes[2:3], [0.4])
    assert {sampler.decide(buf, rng) for _ in range(100)} == {"replay"}
    never = PLRSampler(capacity=8, replay_prob=0.0)
    assert {never.decide(buf, rng) for _ in range(100)} == {"new"}
    half = PLRSampler(capacity=8, replay_prob=0.5)
    share = np.mean([half.decide(buf, rng) == "replay" for _ in range(4000)])
    assert abs(share - 0.5) < 0.03, share


def test_sample_replay_errors_and_unique_draws(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=4)
    rng = np.random.default_rng(0)
    with pytest.raises(UEDError, match="cannot replay from an empty level buffer"):
        sampler.sample_replay(sampler.initial_buffer(), rng, 1)
    buf = _filled(sampler, scenes, [0.5, 0.4, 0.3])
    with pytest.raises(UEDError, match="n = 4 unique scenes requested but the buffer holds 3"):
        sampler.sample_replay(buf, rng, 4, unique=True)
    with pytest.raises(UEDError, match=r"n = 0 must be an integer >= 1"):
        sampler.sample_replay(buf, rng, 0)
    _, idx = sampler.sample_replay(buf, rng, 3, unique=True)
    assert sorted(idx.tolist()) == [0, 1, 2]
    with pytest.raises(UEDError, match="buffer capacity 4 does not match PLRSampler field 'capacity' = 5"):
        PLRSampler(capacity=5).weights(buf)


# ---- capacity and replacement --------------------------------------------------------------------------


def test_full_buffer_replaces_the_lowest_score_only_when_beaten(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=3)
    buf = _filled(sampler, scenes, [0.5, 0.2, 0.8])
    assert buf.full and buf.tick == 1
    buf = sampler.insert(buf, [scenes[3]], [0.4])  # beats 0.2
    assert len(buf) == 3 and buf.index_of(scenes[1]) is None and buf.index_of(scenes[3]) == 1
    assert buf.scores.tolist() == [0.5, 0.4, 0.8] and buf.inserted_at.tolist() == [1, 2, 1]
    kept = sampler.insert(buf, [scenes[4]], [0.1])  # beats nothing: dropped
    assert kept.index_of(scenes[4]) is None and kept.scores.tolist() == [0.5, 0.4, 0.8]
    tie = sampler.insert(buf, [scenes[5]], [0.4])  # equal to the lowest is not higher: dropped
    assert tie.index_of(scenes[5]) is None


def test_reinserting_a_stored_scene_updates_it_instead_of_duplicating(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=4)
    buf = _filled(sampler, scenes, [0.5, 0.2])
    buf = sampler.insert(buf, [scenes[1]], [0.7])
    assert len(buf) == 2 and buf.scores.tolist() == [0.5, 0.7]
    assert buf.last_sampled.tolist() == [1, 2] and buf.inserted_at.tolist() == [1, 1]
    with pytest.raises(UEDError, match="holds the same scene twice"):
        LevelBuffer((scenes[0], scenes[0]), np.zeros(2), np.zeros(2, int), np.zeros(2, int), 4)


def test_update_scores_changes_only_the_given_entries(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=4)
    buf = _filled(sampler, scenes, [0.5, 0.2, 0.3])
    new = sampler.update_scores(buf, [2, 0], [0.9, 0.1])
    assert new.scores.tolist() == [0.1, 0.2, 0.9] and new.tick == buf.tick
    assert buf.scores.tolist() == [0.5, 0.2, 0.3]
    with pytest.raises(UEDError, match=r"indices\[0\] = 3 is outside the buffer of 3 scenes"):
        sampler.update_scores(buf, [3], [0.1])
    with pytest.raises(UEDError, match="repeat a scene"):
        sampler.update_scores(buf, [1, 1], [0.1, 0.2])


def test_buffers_are_immutable_values(scenes: list[ScenarioSpec]) -> None:
    sampler = PLRSampler(capacity=4)
    buf = _filled(sampler, scenes, [0.5, 0.2])
    with pytest.raises(ValueError, match="read-only"):
        buf.scores[0] = 10.0
    after, _ = sampler.sample_replay(buf, np.random.default_rng(0), 5)
    assert buf.tick == 1 and buf.last_sampled.tolist() == [1, 1] and after.tick == 2


# ---- staleness -----------------------------------------------------------------------------------------


def test_staleness_raises_the_weight_of_long_unsampled_scenes(scenes: list[ScenarioSpec]) -> None:
    stale = PLRSampler(capacity=3, staleness_coef=0.5)
    plain = PLRSampler(capacity=3, staleness_coef=0.0)
    previous = 0.0
    for tick in range(4, 10):  # scene 0 replayed at every tick, scene 1 one tick ago, scene 2 last at tick 2
        buf = LevelBuffer(tuple(scenes[:3]), np.full(3, 0.5), np.array([tick, tick - 1, 2]), np.array([1, 1, 1]), 3, tick)
        w = stale.weights(buf)
        assert w[2] > w[1] > w[0] and w[2] > previous
        previous = w[2]
        assert np.allclose(plain.weights(buf), 1 / 3)  # no staleness term: equal scores, equal weights


def test_staleness_keeps_low_score_scenes_in_rotation(scenes: list[ScenarioSpec]) -> None:
    scores = [0.9, 0.7, 0.5, 0.3, 0.1]

    def draws_of_lowest(coef: float) -> int:
        sampler = PLRSampler(capacity=5, replay_prob=1.0, temperature=0.1, staleness_coef=coef)
        buf = _filled(sampler, scenes, scores)
        rng = np.random.default_rng(7)
        n = 0
        for _ in range(400):
            buf, idx = sampler.sample_replay(buf, rng, 1)
            n += int(idx[0] == 4)
        return n

    greedy, stale = draws_of_lowest(0.0), draws_of_lowest(0.5)
    assert greedy == 0  # weight (1/5) ** 10 ~ 1e-7: never drawn without staleness
    assert stale >= 20, stale  # its staleness priority grows until it is replayed


# ---- weights -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prioritization", ["rank", "power"])
@pytest.mark.parametrize("coef", [0.0, 0.3, 1.0])
def test_weights_are_a_distribution(scenes: list[ScenarioSpec], prioritization: str, coef: float) -> None:
    rng = np.random.default_rng(5)
    sampler = PLRSampler(capacity=10, staleness_coef=coef, prioritization=prioritization, temperature=0.2)  # type: ignore[arg-type]
    buf = _filled(sampler, scenes, rng.uniform(0, 1, 10))
    for _ in range(5):
        buf, _ = sampler.sample_replay(buf, rng, 3)
        w = sampler.weights(buf)
        assert w.shape == (10,) and np.all(w >= 0) and math.isclose(w.sum(), 1.0, abs_tol=1e-12)
    assert sampler.weights(sampler.initial_buffer()).shape == (0,)


def test_tied_and_zero_scores_get_equal_weights(scenes: list[ScenarioSpec]) -> None:
    rank = PLRSampler(capacity=4, staleness_coef=0.0, temperature=0.5)
    w = rank.weights(_filled(rank, scenes, [0.5, 0.2, 0.5, 0.1]))
    assert w[0] == w[2] > w[1] > w[3]
    power = PLRSampler(capacity=3, staleness_coef=0.0, prioritization="power")
    assert np.allclose(power.weights(_filled(power, scenes, [0.0, 0.0, 0.0])), 1 / 3)
    big = power.weights(_filled(power, scenes, [1e300, 1e299, 0.0]))  # scaled before the power: no overflow
    assert np.all(np.isfinite(big)) and big[0] > big[1] > big[2]


# ---- determinism and serialisation ---------------------------------------------------------------------


def _episode(seed: int, scenes: list[ScenarioSpec]) -> tuple[LevelBuffer, list[list[int]]]:
    sampler = PLRSampler(capacity=6, replay_prob=0.6, temperature=0.5, staleness_coef=0.3, min_fill=2)
    rng = np.random.default_rng(seed)
    buf, drawn, k = sampler.initial_buffer(), [], 0
    for _ in range(30):
        if sampler.decide(buf, rng) == "replay":
            buf, idx = sampler.sample_replay(buf, rng, 2)
            buf = sampler.update_scores(buf, np.unique(idx), rng.uniform(0, 1, np.unique(idx).size))
            drawn.append(idx.tolist())
        else:
            buf = sampler.insert(buf, [scenes[k % len(scenes)]], [float(rng.uniform())])
            k += 1
    return buf, drawn


def test_same_seed_same_buffer_and_draws(scenes: list[ScenarioSpec]) -> None:
    a, da = _episode(11, scenes)
    b, db = _episode(11, scenes)
    c, dc = _episode(12, scenes)
    assert a == b and da == db
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
    assert (a != c) or (da != dc)


def test_buffer_round_trips_through_a_dict(scenes: list[ScenarioSpec]) -> None:
    buf, _ = _episode(3, scenes)
    again = LevelBuffer.from_dict(json.loads(json.dumps(buf.to_dict())))
    assert again == buf and again.scenes[0].spec_id == buf.scenes[0].spec_id
    with pytest.raises(UEDError, match="level buffer field 'tick' is missing"):
        LevelBuffer.from_dict({k: v for k, v in buf.to_dict().items() if k != "tick"})


# ---- hyper-parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, r"PLRSampler field 'temperature' = 0\.0 must be a finite number > 0"),
        ({"temperature": -1.0}, r"field 'temperature' = -1\.0"),
        ({"temperature": float("nan")}, r"field 'temperature' = nan"),
        ({"temperature": float("inf")}, r"field 'temperature' = inf"),
        ({"replay_prob": 1.5}, r"PLRSampler field 'replay_prob' = 1\.5 must be a number in \[0, 1\]"),
        ({"replay_prob": -0.1}, r"field 'replay_prob' = -0\.1"),
        ({"staleness_coef": 2.0}, r"field 'staleness_coef' = 2\.0"),
        ({"prioritization": "softmax"}, r"field 'prioritization' = 'softmax' must be 'rank' or 'power'"),
        ({"capacity": 0}, r"field 'capacity' = 0 must be an integer >= 1"),
        ({"capacity": True}, r"field 'capacity' = True"),
        ({"capacity": 4, "min_fill": 5}, r"field 'min_fill' = 5 must be an integer in \[1, capacity = 4\]"),
    ],
)
def test_bad_hyper_parameters_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UEDError, match=message) as err:
        PLRSampler(**kwargs)
    assert isinstance(err.value, CodaError) and "\n" not in str(err.value)


def test_accel_validates_its_own_field() -> None:
    with pytest.raises(UEDError, match=r"ACCELSampler field 'n_edits' = 0 must be an integer >= 1"):
        ACCELSampler(n_edits=0)
    with pytest.raises(UEDError, match=r"ACCELSampler field 'temperature' = 0"):
        ACCELSampler(temperature=0)


# ---- ACCEL ---------------------------------------------------------------------------------------------


def test_accel_selects_the_top_scoring_parents(scenes: list[ScenarioSpec]) -> None:
    sampler = ACCELSampler(capacity=6)
    buf = _filled(sampler, scenes, [0.3, 0.9, 0.1, 0.9, 0.5, 0.2])
    rng = np.random.default_rng(0)
    top2 = [tuple(sorted(sampler.select_parents(buf, rng, 2).tolist())) for _ in range(20)]
    assert set(top2) == {(1, 3)}
    firsts = {int(sampler.select_parents(buf, rng, 1)[0]) for _ in range(50)}
    assert firsts == {1, 3}  # the tie between the two best is broken both ways
    assert sampler.select_parents(buf, rng, 3).tolist()[2] == 4
    many = sampler.select_parents(buf, rng, 13)
    assert sorted(many[:6].tolist()) == list(range(6)) and many[6:12].tolist() == many[:6].tolist()
    assert many[12] == many[0] and set(many[:2].tolist()) == {1, 3}  # the ranking repeats, best first
    with pytest.raises(UEDError, match="cannot select parents from an empty level buffer"):
        sampler.select_parents(sampler.initial_buffer(), rng, 1)


def test_accel_round_mutates_parents_into_new_buffer_scenes(scenes: list[ScenarioSpec]) -> None:
    sampler = ACCELSampler(capacity=8, n_edits=2)
    buf = _filled(sampler, scenes, [0.1, 0.8, 0.4])
    rng = np.random.default_rng(4)
    parents = sampler.select_parents(buf, rng, 2)
    children = [mutate(rng, buf.scenes[int(i)], sampler.n_edits) for i in parents]
    assert {c.provenance.parent for c in children} == {buf.scenes[1].spec_id, buf.scenes[2].spec_id}
    buf = sampler.insert(buf, children, [0.6, 0.7])
    assert len(buf) == 5 and all(buf.index_of(c) is not None for c in children)
