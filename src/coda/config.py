"""The composed CoDA configuration: sections, presets, files and `--set` overrides.

Resolution order (later wins): section defaults → preset → config file → `--set key=value` overrides.
Every run writes the resolved configuration to `config.yaml` in its run directory, and
`load_config_file(dump) == cfg` holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from coda.bench.config import BenchConfig
from coda.config_base import Section
from coda.critic.config import CriticConfig
from coda.engine.config import EngineConfig
from coda.errors import ConfigError
from coda.memory.config import MemoryConfig
from coda.policy.config import PolicyConfig
from coda.redact import redact_value, short_repr
from coda.runtime.config import RuntimeConfig
from coda.scene.config import SceneConfig
from coda.shaping.config import ShapingConfig
from coda.sim.config import SimConfig

PRESETS = ("tiny", "quick", "full", "libero")


class CodaConfig(Section):
    preset: str = "quick"  # name of the preset this configuration started from
    sim: SimConfig = Field(default_factory=SimConfig)  # simulator backend and rendering
    scene: SceneConfig = Field(default_factory=SceneConfig)  # scene language, splits and validity
    policy: PolicyConfig = Field(default_factory=PolicyConfig)  # action-chunk policy and its training
    critic: CriticConfig = Field(default_factory=CriticConfig)  # failure diagnosis and verification
    shaping: ShapingConfig = Field(default_factory=ShapingConfig)  # Text2potential
    memory: MemoryConfig = Field(default_factory=MemoryConfig)  # the shared memory store
    engine: EngineConfig = Field(default_factory=EngineConfig)  # the round loop
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)  # executors
    bench: BenchConfig = Field(default_factory=BenchConfig)  # benchmarks

    @model_validator(mode="after")
    def _families_of_the_backend(self) -> "CodaConfig":
        if self.sim.backend == "libero":
            from coda.sim.libero.scenario import BASE_SUITES as known
        else:
            from coda.scene.spec import FAMILIES as known
        unknown = [f for f in self.scene.families if f not in known]
        if unknown:
            raise ValueError(f"scene.families = {list(self.scene.families)}: {unknown} are not families of the "
                             f"{self.sim.backend} backend. Available: {list(known)}")
        return self


MAX_VALUES = 100_000  # values a config file or override may hold, counting every use of a YAML alias
MAX_ERROR = 2000  # characters of a config error


def _check_size(data: Any, where: str) -> None:
    """Refuse data with more than MAX_VALUES values (YAML aliases expand: a small file can hold billions)."""
    stack, seen = [data], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(f"{where} holds more than {MAX_VALUES} values (YAML aliases expanded?)")
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def _format_validation_error(err: ValidationError, data: Mapping[str, Any]) -> str:
    parts = []
    for e in err.errors()[:10]:
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown key '{loc}' (value {short_repr(e['input'])})")
        elif e["type"] == "missing":
            parts.append(f"missing key '{loc}'")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if not loc:  # a rule over several fields: the message names them
                parts.append(msg)
                continue
            value = e.get("input")
            shown = "" if isinstance(value, Mapping) else f" = {short_repr(value)}"
            parts.append(f"'{loc}'{shown}: {msg}")
    return ("invalid config: " + "; ".join(parts))[:MAX_ERROR]


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def preset_overrides(name: str) -> dict[str, Any]:
    """The partial configuration a preset applies on top of the section defaults."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}'. Available: {list(PRESETS)}")
    text = resources.files("coda.presets").joinpath(f"{name}.yaml").read_text()
    data = yaml.safe_load(text) or {}
    data["preset"] = name
    return data


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or JSON config file into a mapping. Raises ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{p}' does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file '{p}' is not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r})") from None
    except OSError as e:
        raise ConfigError(f"config file '{p}' cannot be read: {e.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, RecursionError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"config file '{p}' is not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {first[:200]}") from None
    _check_size(data, f"config file '{p}'")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{p}' must hold a mapping at top level, got {type(data).__name__}")
    return data


def parse_override(item: str) -> tuple[list[str], Any]:
    """Parse `section.key=value` (value as YAML scalar/list). Raises ConfigError on bad syntax."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    shown = short_repr(item)
    if not sep or not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {shown} must look like section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, RecursionError):
        raise ConfigError(f"override {shown}: value {short_repr(raw)} of '{key}' is not a valid YAML scalar") from None
    _check_size(value, f"override of '{key}'")
    return key.split("."), value


def build_config(
    preset: str | None = None,
    file: str | Path | None = None,
    overrides: Sequence[str] = (),
    data: Mapping[str, Any] | None = None,
) -> CodaConfig:
    """Resolve a configuration: defaults → preset → file → mapping `data` → overrides.

    The preset is `preset` if given, else the file's `preset` key, else "quick".

    Raises:
        ConfigError: unknown preset, unreadable file, unknown key or invalid value (named).
    """
    merged: dict[str, Any] = {}
    file_data = read_config_file(file) if file is not None else {}
    preset = preset or str(file_data.get("preset") or "quick")
    merged = _deep_merge(merged, preset_overrides(preset))
    merged = _deep_merge(merged, file_data)
    if data:
        merged = _deep_merge(merged, data)
    for item in overrides:
        path, value = parse_override(item)
        nested: Any = value
        for part in reversed(path):
            nested = {part: nested}
        merged = _deep_merge(merged, nested)
    return validate_config(merged)


def validate_config(data: Mapping[str, Any]) -> CodaConfig:
    """Validate a full mapping into a CodaConfig. Raises ConfigError naming the bad field."""
    try:
        return CodaConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, data)) from None


def dump_config(cfg: CodaConfig, path: str | Path) -> Path:
    """Write the resolved configuration as YAML (atomically) and return its path. Secrets are masked (a memory
    URL's password: `coda run --resume RUN --memory URL` gives it back)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(redact_value(cfg.model_dump(mode="json")), sort_keys=False))
    tmp.replace(p)
    return p


def load_config_file(path: str | Path) -> CodaConfig:
    """Load a resolved configuration written by `dump_config` (no preset applied on top)."""
    return validate_config(read_config_file(path))
