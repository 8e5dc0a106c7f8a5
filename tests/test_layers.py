"""The package's layers import downward only (the `[tool.importlinter]` contract in pyproject.toml).

scene <- memory | runtime <- sim <- critic : shaping <- policy <- engine <- bench | reports <- cli: a module may import
its own layer and the ones below it, never one above, not even through a function-level import or a chain of
other modules. `lint-imports` from the repository root runs the same check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_layers_import_downward_only() -> None:
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0


def test_the_scene_language_loads_no_simulator() -> None:
    code = ("import sys, coda.scene.splits, coda.scene.regions, coda.scene.programs; "
            "print(sorted(m for m in sys.modules if m.startswith(('mujoco', 'coda.sim'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
