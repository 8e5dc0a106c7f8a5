"""Property-based fuzzing of the two ways users hand CoDA data: scene JSON and `--set` values.

Every input is either accepted (a scene then simulates without NaN; a configuration then round-trips through
config.yaml) or refused with a one-line error that names the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.config import build_config, dump_config, load_config_file
from coda.errors import ConfigError
from coda.scene.spec import ScenarioSpec, SpecError

BASE: dict[str, dict[str, Any]] = {}


def _base(family: str) -> dict[str, Any]:
    if family not in BASE:
        from coda.scene.splits import build_split
        from coda.sim.tabletop.validity import sim_check

        BASE[family] = build_split(family, "sft", 1, seed=0, check=sim_check).valid[0].model_dump(mode="json")
    return json.loads(json.dumps(BASE[family]))


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(node, list):
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, (*path, i))]
    return [(path, node)]


def _set(node: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1.0, max_value=1.0),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=12),
    st.none(),
    st.booleans(),
    st.lists(st.floats(min_value=-0.5, max_value=0.5), max_size=4),
)


def _field_path(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


@settings(max_examples=120, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(["pick_place", "stack", "push", "drawer"]), data=st.data(), value=values)
def test_scene_json_is_accepted_and_simulates_finite_or_refused_naming_the_field(family, data, value) -> None:
    spec_json = _base(family)
    leaves = [p for p, v in _leaves(spec_json) if p[0] not in ("provenance", "schema_version")]
    path = data.draw(st.sampled_from(leaves), label="field")
    _set(spec_json, path, value)
    text = json.dumps(spec_json)  # NaN and Infinity become JSON's non-standard literals, as Python writes them
    try:
        spec = ScenarioSpec.from_json(text)
    except SpecError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 2000, msg
        head = _field_path(path[:2]) if path[0] != "family" else "family"
        assert head in msg or _field_path(path) in msg or "scenario" in msg, (path, msg)
        return
    from coda.sim.tabletop.builder import BuildError
    from coda.sim.tabletop.env import EnvError, TabletopEnv

    try:
        env = TabletopEnv(spec)
    except (EnvError, BuildError) as e:  # a scene the simulator refuses is refused in one line too
        assert "\n" not in str(e)
        return
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(5):
            obs, reward, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
            parts = obs.values() if isinstance(obs, dict) else [obs]
            numeric = [np.asarray(v) for v in parts if np.asarray(v).dtype.kind in "fiu"]
            assert numeric and all(np.all(np.isfinite(a)) for a in numeric) and math.isfinite(float(reward))
    finally:
        env.close()


def _config_fields() -> list[str]:
    data = build_config("tiny").model_dump(mode="json")
    return sorted(_field_path(p) for p, v in _leaves(data) if not isinstance(v, (dict, list)))


FIELDS = _config_fields()
set_values = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=16),
    st.sampled_from(["nan", "inf", "-inf", ".inf", "1e400", "-1", "0", "[]", "{}", "null", "true", "''",
                     str(2**64), str(-(2**63) - 1), "9" * 40, "&a [*a, *a]", "!!python/object:os.system"]),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=set_values)
def test_set_values_are_accepted_and_round_trip_or_refused_naming_the_field(field, value, tmp_path_factory) -> None:
    try:
        cfg = build_config("tiny", overrides=[f"{field}={value}"])
    except ConfigError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 2000, msg
        assert field.split(".")[0] in msg, (field, value, msg)
        return
    path: Path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    dump_config(cfg, path)
    assert load_config_file(path) == cfg
    for p, v in _leaves(cfg.model_dump(mode="json")):
        if isinstance(v, float):
            assert math.isfinite(v), f"{_field_path(p)} = {v} accepted from --set {field}={value}"
        if isinstance(v, int) and not isinstance(v, bool):
            assert -(2**63) <= v < 2**63, f"{_field_path(p)} = {v} accepted from --set {field}={value}"


def test_the_fuzzed_fields_cover_the_configuration() -> None:
    assert len(FIELDS) > 80 and "policy.lr" in FIELDS and "engine.seed" in FIELDS


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
