from __future__ import annotations

import json
from pathlib import Path

import pytest

from coda.config import PRESETS, CodaConfig, build_config, dump_config, load_config_file
from coda.errors import ConfigError


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_resolve_and_round_trip(preset: str, tmp_path: Path) -> None:
    cfg = build_config(preset)
    assert cfg.preset == preset
    path = dump_config(cfg, tmp_path / "config.yaml")
    assert load_config_file(path) == cfg


def test_presets_differ_in_size() -> None:
    tiny, quick, full = (build_config(p) for p in ("tiny", "quick", "full"))
    assert tiny.policy.train_steps < quick.policy.train_steps < full.policy.train_steps
    assert tiny.engine.generation_budget < full.engine.generation_budget


def test_precedence_defaults_preset_file_overrides(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("preset: tiny\npolicy: {hidden: 32, heads: 2}\nengine: {rounds: 7}\n")
    cfg = build_config(file=f, overrides=["engine.rounds=3", "critic.name=vlm"])
    assert cfg.preset == "tiny"  # taken from the file
    assert cfg.policy.hidden == 32  # file beats preset
    assert cfg.policy.train_steps == build_config("tiny").policy.train_steps  # preset beats default
    assert cfg.engine.rounds == 3  # override beats file
    assert cfg.critic.name == "vlm"


def test_json_config_file(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"policy": {"chunk_len": 4}}))
    assert build_config(file=f).policy.chunk_len == 4


def test_every_field_is_documented_where_declared() -> None:
    import inspect

    for sec in _sections(CodaConfig):
        src = inspect.getsource(sec)
        for name in sec.model_fields:
            line = next(ln for ln in src.splitlines() if ln.strip().startswith(f"{name}:"))
            assert "#" in line, f"{sec.__name__}.{name} has no comment where it is declared"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["policy.chunk_lenn=3"], "unknown key 'policy.chunk_lenn'"),
        (["nosuchsection.x=1"], "unknown key 'nosuchsection'"),
        (["policy.hidden=-1"], "'policy.hidden' = -1"),
        (["policy.lr=fast"], "'policy.lr' = 'fast'"),
        (["policy.heads=3"], "heads (3) must divide hidden (64)"),
        (["sim.backend=bullet"], "'sim.backend' = 'bullet'"),
        (["policy"], "must look like section.key=value"),
    ],
)
def test_bad_values_name_field_and_value(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(overrides=overrides)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_malformed_files(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("policy: {hidden: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        build_config(file=bad_yaml)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{policy: 1}")
    with pytest.raises(ConfigError, match="not valid JSON"):
        build_config(file=bad_json)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="mapping at top level"):
        build_config(file=scalar)
    with pytest.raises(ConfigError, match="does not exist"):
        build_config(file=tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        build_config("huge")


def test_config_is_frozen() -> None:
    cfg = build_config("tiny")
    with pytest.raises(Exception):
        cfg.policy.hidden = 3  # type: ignore[misc]


def test_importing_configs_does_not_import_heavy_libraries() -> None:
    import subprocess
    import sys

    code = ("import sys, coda.config; heavy = [m for m in ('torch', 'mujoco') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def _sections(model: type) -> list[type]:
    from coda.config_base import Section

    out = [model]
    for f in model.model_fields.values():
        t = f.annotation
        if isinstance(t, type) and issubclass(t, Section):
            out += _sections(t)
    return out


def _names_read_in_src() -> set[str]:
    """Attribute names read anywhere in src/coda outside the configuration classes' own bodies, plus names
    given to getattr as string constants."""
    import ast

    import coda

    root = Path(coda.__file__).parent
    read: set[str] = set()

    class Reads(ast.NodeVisitor):
        def visit_ClassDef(self, node: ast.ClassDef) -> None:
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if bases & {"Section", "CodaConfig"}:
                return  # a field's own declaration and validators are not a use
            self.generic_visit(node)

        def visit_Attribute(self, node: ast.Attribute) -> None:
            if isinstance(node.ctx, ast.Load):
                read.add(node.attr)
            self.generic_visit(node)

        def visit_Call(self, node: ast.Call) -> None:
            if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    read.add(arg.value)
            self.generic_visit(node)

    for path in root.rglob("*.py"):
        Reads().visit(ast.parse(path.read_text(), filename=str(path)))
    return read


def test_every_field_is_read_somewhere_in_the_package() -> None:
    """A setting nothing reads does nothing: each field of every section is read as an attribute (or by
    getattr) somewhere in the package outside the configuration classes."""
    read = _names_read_in_src()
    unread = [f"{sec.__name__}.{name}" for sec in _sections(CodaConfig) for name in sec.model_fields if name not in read]
    assert not unread, f"config fields nothing in src/coda reads: {unread}"


def test_the_unread_field_check_can_fail() -> None:
    assert "a_field_no_code_reads" not in _names_read_in_src()
