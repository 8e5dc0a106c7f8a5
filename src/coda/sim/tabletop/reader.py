"""Read a `TabletopState` out of MjData cheaply (a handful of vectorised gathers).

`refresh` recomputes kinematics and contacts for the current `qpos` (a few microseconds; the physics is
untouched because `mj_step` recomputes both), so a state is a function of the physics state alone and
`get_state` / `set_state` reproduce it exactly.
"""

from __future__ import annotations

import numpy as np

import mujoco

from coda.sim.tabletop.builder import BuiltScene
from coda.sim.tabletop.predicates import TabletopState


class StateReader:
    """Extracts `TabletopState`s from the MjData of one built scene."""

    def __init__(self, scene: BuiltScene) -> None:
        idx = scene.index
        self._idx = idx
        n = len(idx.names)
        self._n_obj = len(idx.obj_rows)
        self._pos0 = idx.static_pos.copy()
        self._rot0 = idx.static_rot.copy()
        self._size = idx.size.copy()
        self._size.setflags(write=False)
        k3 = np.arange(3)
        self._opos = (idx.obj_qpos[:, None] + k3).ravel()
        self._obody = idx.obj_body
        self._ovel = (idx.obj_qvel[:, None] + k3).ravel()
        self._drows = idx.drawer_rows
        self._dq = idx.drawer_qpos
        self._dv = idx.drawer_qvel
        self._daxis = idx.drawer_axis
        self._dtravel = idx.drawer_travel
        self._travel = np.zeros(n)
        self._travel[self._drows] = self._dtravel
        self._axis = np.zeros((n, 3))
        self._axis[self._drows] = self._daxis
        for a in (self._travel, self._axis):
            a.setflags(write=False)
        self._gq = idx.grip_qpos
        self._gv = idx.grip_qvel
        self._lf, self._rf = idx.finger_geoms
        self._ent = idx.geom_entity
        self._names_ext = (*idx.names, "table")
        self._index = {nm: i for i, nm in enumerate(idx.names)}
        self._empty: frozenset[str] = frozenset()
        self._finger_side = np.zeros(scene.model.ngeom, dtype=np.int8)  # 1 left finger, 2 right finger
        self._finger_side[self._lf], self._finger_side[self._rf] = 1, 2

    @staticmethod
    def refresh(m: mujoco.MjModel, d: mujoco.MjData) -> None:
        """Recompute body poses and contacts for the current qpos (after `mj_step` they lag one substep)."""
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)

    def finger_contacts(self, d: mujoco.MjData) -> tuple[frozenset[str], frozenset[str]]:
        """Entity names (and "table") touched by the left and the right finger."""
        if d.ncon == 0:
            return self._empty, self._empty
        flat = d.contact.geom.ravel()  # geom1, geom2 of contact 0, then of contact 1, ...
        side = self._finger_side[flat]
        hits = np.flatnonzero(side)
        if hits.size == 0:
            return self._empty, self._empty
        other = self._ent[flat[hits ^ 1]].tolist()  # the geom paired with the finger in the same contact
        sides = side[hits].tolist()
        names = self._names_ext
        left = frozenset(names[r] for r, sd in zip(other, sides) if sd == 1 and r >= 0)
        right = frozenset(names[r] for r, sd in zip(other, sides) if sd == 2 and r >= 0)
        return left or self._empty, right or self._empty

    def read(self, d: mujoco.MjData, grip_cmd: float) -> TabletopState:
        """The state of `d` now; `grip_cmd` is the last grip command (the env keeps it)."""
        qpos, qvel = d.qpos, d.qvel
        g = qpos[self._gq]
        pos = self._pos0.copy()
        rot = self._rot0.copy()
        n = len(self._names_ext) - 1
        vel = np.zeros((n, 3))
        if self._n_obj:
            pos[: self._n_obj] = qpos[self._opos].reshape(-1, 3)
            rot[: self._n_obj] = d.xmat[self._obody].reshape(-1, 3, 3)
            vel[: self._n_obj] = qvel[self._ovel].reshape(-1, 3)
        frac = np.zeros(n)
        if self._drows.size:
            q = qpos[self._dq]
            frac[self._drows] = q / self._dtravel
            pos[self._drows] = self._pos0[self._drows] + self._daxis * q[:, None]
            vel[self._drows] = self._daxis * qvel[self._dv][:, None]
        return TabletopState(
            time=float(d.time),
            gripper_pos=g[:3].copy(),
            gripper_yaw=float(g[3]),
            gripper_width=float(g[4] + g[5]),
            grip_cmd=float(grip_cmd),
            gripper_vel=qvel[self._gv].copy(),
            finger_contacts=self.finger_contacts(d),
            names=self._idx.names,
            kinds=self._idx.kinds,
            types=self._idx.types,
            pos=pos,
            rot=rot,
            size=self._size,
            lin_vel=vel,
            fraction=frac,
            travel=self._travel,
            axis=self._axis,
            index=self._index,
        )
