"""Validity of a generated LIBERO scenario: it loads, its objects settle, and the scripted expert solves it.

`check_scenario(env, scenario)` never raises for an invalid scene: it returns a `Validity` with a named
reason (`does_not_load`, `unplaceable`, `not_settled`, `off_table`, `out_of_reach`, `already_solved`,
`expert_fails`), so
generated scenes are kept as records with their reason rather than silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from coda.errors import CodaError
from coda.sim.libero.scenario import LiberoScenario

if TYPE_CHECKING:
    from coda.sim.libero.env import LiberoEnv

SETTLED_SPEED = 0.05  # m/s: every movable object slower than this after the settle steps
FALLEN_BELOW = 0.2  # m below the lowest object's start height counts as off the table
REACH = 0.5  # m (horizontal) from the grip site at reset within which every movable object must rest


@dataclass(frozen=True)
class Validity:
    valid: bool
    reason: str = ""  # one of the names in the module docstring, then ': details'
    expert_steps: int | None = None


def check_scenario(env: "LiberoEnv", scenario: LiberoScenario, *, expert: bool = True,
                   max_steps: int | None = None) -> Validity:
    """Load `scenario`, check that it settled on the table and (by default) that the expert solves it."""
    from coda.sim.libero.experts import rollout_expert

    try:
        env.reset_to(scenario)
    except CodaError as e:
        first = str(e).splitlines()[0]
        kind = "unplaceable" if "plac" in first.lower() else "does_not_load"
        return Validity(False, f"{kind}: {first}")
    except Exception as e:  # noqa: BLE001 - LIBERO's own loader raises plain exceptions on bad BDDL
        return Validity(False, f"does_not_load: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    s = env.state()
    movable = ~s.fixture
    if movable.any():
        speed = _speeds(env)
        if float(np.max(speed, initial=0.0)) > SETTLED_SPEED:
            return Validity(False, f"not_settled: an object moves at {float(np.max(speed)):.3f} m/s after settling")
        far = np.linalg.norm(s.center[movable, :2] - s.eef_pos[:2], axis=1)
        if float(far.max()) > REACH:
            name = np.asarray(s.names)[movable][int(far.argmax())]
            return Validity(False, f"out_of_reach: {name} rests {float(far.max()):.2f} m from the gripper (limit {REACH} m)")
        z = s.center[movable, 2]
        if float(z.min()) < float(np.median(z)) - FALLEN_BELOW:
            return Validity(False, f"off_table: an object rests {float(np.median(z) - z.min()):.2f} m below the others")
    if s.success:
        return Validity(False, "already_solved: the goal holds before any action")
    if not expert:
        return Validity(True)
    episode = rollout_expert(env, scenario, max_steps=max_steps)
    if not episode.success:
        return Validity(False, f"expert_fails: no success in {episode.steps} steps", episode.steps)
    return Validity(True, expert_steps=episode.steps)


def _speeds(env: "LiberoEnv") -> np.ndarray:
    """Linear speeds of the free joints of the scene (the movable objects), m/s."""
    import mujoco

    sim = env.control_env.env.sim
    m, d = sim.model._model, sim.data._data
    out = []
    for j in range(m.njnt):
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            a = m.jnt_dofadr[j]
            out.append(float(np.linalg.norm(d.qvel[a : a + 3])))
    return np.asarray(out)


__all__ = ["Validity", "check_scenario"]
