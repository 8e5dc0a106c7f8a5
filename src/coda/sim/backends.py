"""Simulator backends by name (`SimConfig.backend`), imported only when an environment is made.

`tabletop` is registered here; other backends are declared by their package under the entry-point group
`coda.sim_backends` (this package declares `libero = "coda.sim.libero.env:LiberoEnv"`), so a new simulator
is added without editing this module. Importing it does not import MuJoCo or any simulator; `make_env`
imports the chosen backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coda.registry import Registry
from coda.scene.spec import ScenarioSpec
from coda.sim.config import SimConfig

EnvFactory = Callable[..., Any]  # (spec | None, SimConfig, **kwargs) -> a gymnasium-shaped Env

BACKENDS: Registry[EnvFactory] = Registry("sim backend", entry_points="coda.sim_backends")


def _tabletop(spec: ScenarioSpec | None, config: SimConfig, **kwargs: Any) -> Any:
    from coda.sim.tabletop.env import TabletopEnv

    return TabletopEnv(spec, config, **kwargs)


BACKENDS.register("tabletop", _tabletop)


def make_env(config: SimConfig | None = None, spec: Any = None, **kwargs: Any) -> Any:
    """An environment of the backend `config.backend` (default "tabletop").

    Raises RegistryError naming the available backends when the backend is not registered.
    """
    cfg = config or SimConfig()
    return BACKENDS.get(cfg.backend)(spec, cfg, **kwargs)
