"""Read a `TabletopState` out of MjData cheaply (a handful of vectorised gathers).

Poses are those of the current `qpos` (the env reruns the cheap `mj_kinematics` after `mj_step`, which
leaves body poses one physics substep behind); finger contacts are those of the last collision
pass, at most one substep (2 ms) old. Re-running collision detection every control step would cost a few
percent of the step for no practical gain.
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
        self._names_ext = idx.contact_names
        self._index = {nm: i for i, nm in enumerate(idx.names)}
        self._empty: frozenset[str] = frozenset()
        self._ent_list: list[int] = idx.geom_entity.tolist()
        self._vel0 = np.zeros((n, 3))
        self._frac0 = np.zeros(n)
        self._frac0.setflags(write=False)
        self._vel0.setflags(write=False)
        self._pos_rest = self._pos0[self._n_obj:]  # fixed rows (containers, drawers, regions) after the objects
        self._rot_rest = self._rot0[self._n_obj:]
        self._vel_rest = self._vel0[self._n_obj:]
        self._shared = {  # fields every state of this scene shares (immutable or read-only)
            "names": idx.names, "kinds": idx.kinds, "types": idx.types, "size": self._size,
            "travel": self._travel, "axis": self._axis, "index": self._index,
        }
        self._qsel = np.concatenate([idx.grip_qpos, self._opos]).astype(np.int64)
        self._vsel = np.concatenate([idx.grip_qvel, self._ovel]).astype(np.int64)
        self._finger_side = np.zeros(scene.model.ngeom, dtype=np.int8)  # 1 left finger, 2 right finger
        self._finger_side[self._lf], self._finger_side[self._rf] = 1, 2

    def finger_contacts(self, d: mujoco.MjData) -> tuple[frozenset[str], frozenset[str]]:
        """Entity names (and "table") touched by the left and the right finger."""
        if d.ncon == 0:
            return self._empty, self._empty
        lf, rf, ent = self._lf, self._rf, self._ent_list
        left: set[int] = set()
        right: set[int] = set()
        # A plain loop over the pairs beats vectorised numpy at the few dozen contacts a scene has.
        for g1, g2 in d.contact.geom.tolist():
            if g1 == lf:
                left.add(ent[g2])
            elif g2 == lf:
                left.add(ent[g1])
            if g1 == rf:
                right.add(ent[g2])
            elif g2 == rf:
                right.add(ent[g1])
        names = self._names_ext
        return (
            frozenset(names[r] for r in left if r >= 0) if left else self._empty,
            frozenset(names[r] for r in right if r >= 0) if right else self._empty,
        )

    def read(self, d: mujoco.MjData, grip_cmd: float) -> TabletopState:
        """The state of `d` now; `grip_cmd` is the last grip command (the env keeps it)."""
        # One gather per source array: the per-step cost is dominated by the number of numpy calls.
        q = d.qpos[self._qsel]  # gripper x, y, z, yaw, fingers, then object positions
        v = d.qvel[self._vsel]  # gripper linear velocity, then object linear velocities
        no = self._n_obj
        if no:
            pos = np.concatenate((q[6:].reshape(no, 3), self._pos_rest))
            rot = np.concatenate((d.xmat[self._obody].reshape(no, 3, 3), self._rot_rest))
            vel = np.concatenate((v[3:].reshape(no, 3), self._vel_rest))
        else:
            pos, rot, vel = self._pos0.copy(), self._rot0.copy(), self._vel0
        frac = self._frac0
        if self._drows.size:
            dq = d.qpos[self._dq]
            frac = frac.copy()
            frac[self._drows] = dq / self._dtravel
            pos[self._drows] = self._pos0[self._drows] + self._daxis * dq[:, None]
            vel = vel.copy() if not no else vel
            vel[self._drows] = self._daxis * d.qvel[self._dv][:, None]
        g = q[:6].tolist()
        s = object.__new__(TabletopState)  # fast path: fields are consistent by construction, skip __init__
        f = s.__dict__
        f.update(self._shared)
        f["time"] = d.time
        f["gripper_pos"] = q[:3]
        f["gripper_yaw"] = g[3]
        f["gripper_width"] = g[4] + g[5]
        f["grip_cmd"] = grip_cmd
        f["gripper_vel"] = v[:3]
        f["finger_contacts"] = self.finger_contacts(d)
        f["pos"] = pos
        f["rot"] = rot
        f["lin_vel"] = vel
        f["fraction"] = frac
        return s
