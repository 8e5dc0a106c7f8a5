"""Synthetic worlds that follow the tabletop env contract, for policy tests that need no MuJoCo.

- `PointReachEnv`: a kinematic gripper must reach the object the instruction names and close on it;
  a scripted `ReachExpert` solves it. Observations follow the env contract exactly (proprio with position
  and sin/cos yaw first, zero-padded entity rows, descriptions, instruction).
- `chain_episodes`: a 6-state chain MDP whose values are known in closed form (see `chain_values`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coda.policy.config import PolicyConfig
from coda.policy.data import Episode

COLORS = {"red": (0.85, 0.12, 0.12), "green": (0.15, 0.65, 0.2), "blue": (0.15, 0.3, 0.85), "yellow": (0.95, 0.85, 0.1)}
SHAPES = ("cube", "ball", "cylinder")
F_DIM = 10  # pos (3), size, rgb (3), kind one-hot (3)
MAX_STEP = 0.04  # metres the gripper moves per control step
Z_ABOVE = 0.10


@dataclass(frozen=True)
class PointSpec:
    """A scene: objects (x, y, colour, shape), which one to reach, the gripper start, padding rows."""

    objects: tuple[tuple[float, float, str, str], ...]
    target: int
    start: tuple[float, float, float]
    pad: int = 1
    seed: int = 0

    @property
    def spec_id(self) -> str:
        return f"point-{self.seed}"

    @property
    def family(self) -> str:
        return "reach"

    def describe(self, i: int) -> str:
        return f"small {self.objects[i][2]} {self.objects[i][3]}"


def make_specs(n: int, seed: int, n_objects: int = 3, region: tuple[float, float] = (-0.2, 0.2)) -> list[PointSpec]:
    """n random scenes with distinct (colour, shape) objects."""
    rng = np.random.default_rng(seed)
    specs = []
    combos = [(c, s) for c in COLORS for s in SHAPES]
    for i in range(n):
        picks = rng.choice(len(combos), size=n_objects, replace=False)
        objs = tuple(
            (float(rng.uniform(*region)), float(rng.uniform(*region)), combos[k][0], combos[k][1]) for k in picks
        )
        start = (float(rng.uniform(-0.25, -0.15)), float(rng.uniform(-0.1, 0.1)), 0.2)
        specs.append(PointSpec(objs, int(rng.integers(n_objects)), start, seed=seed * 10_000 + i))
    return specs


def _clip_step(delta: np.ndarray, limit: float = MAX_STEP) -> np.ndarray:
    n = float(np.linalg.norm(delta))
    return delta if n <= limit else delta * (limit / n)


class PointReachEnv:
    """Kinematic reach-and-grasp world with the env contract's observations and 5-D absolute actions."""

    def __init__(self, max_steps: int = 40) -> None:
        self.max_steps = max_steps
        self.spec: PointSpec | None = None

    def reset_to(self, spec: PointSpec) -> tuple[dict, dict]:
        self.spec = spec
        self.pos = np.array(spec.start, dtype=np.float64)
        self.yaw = 0.0
        self.grip = 1.0
        self.t = 0
        return self._obs(), {"success": False}

    def state(self) -> dict:
        assert self.spec is not None
        x, y, _, _ = self.spec.objects[self.spec.target]
        return {"gripper": self.pos.copy(), "grip": self.grip, "target": np.array([x, y, 0.02])}

    def _success(self) -> bool:
        s = self.state()
        return bool(np.linalg.norm(s["gripper"] - s["target"]) < 0.015 and self.grip < 0.5)

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        self.pos = self.pos + _clip_step(a[:3] - self.pos)
        self.yaw = float(a[3])
        self.grip = float(np.clip(a[4], 0, 1))
        self.t += 1
        success = self._success()
        return self._obs(), float(success), success, (self.t >= self.max_steps and not success), {"success": success}

    def _obs(self) -> dict:
        assert self.spec is not None
        spec = self.spec
        m = len(spec.objects) + spec.pad
        objects = np.zeros((m, F_DIM), np.float32)
        mask = np.zeros(m, np.int8)
        text = [""] * m
        for i, (x, y, color, _shape) in enumerate(spec.objects):
            objects[i, :3] = (x, y, 0.02)
            objects[i, 3] = 0.02
            objects[i, 4:7] = COLORS[color]
            objects[i, 7] = 1.0
            mask[i] = 1
            text[i] = spec.describe(i)
        proprio = np.array(
            [*self.pos, np.sin(self.yaw), np.cos(self.yaw), self.grip, self.grip], dtype=np.float32
        )
        return {
            "proprio": proprio,
            "objects": objects,
            "object_mask": mask,
            "object_text": tuple(text),
            "instruction": f"reach the {spec.describe(spec.target)}",
        }


class ReachExpert:
    """Above the target, down, close: returns a chunk of `k` absolute actions planned from the state."""

    def __init__(self, k: int = 4) -> None:
        self.k = k

    def act(self, state: dict) -> np.ndarray:
        pos, target = state["gripper"].astype(np.float64), state["target"]
        out = []
        for _ in range(self.k):
            if np.linalg.norm(pos[:2] - target[:2]) > 0.005:
                goal, grip = np.array([target[0], target[1], Z_ABOVE]), 1.0
            elif pos[2] - target[2] > 0.005:
                goal, grip = target, 1.0
            else:
                goal, grip = target, 0.0
            pos = pos + _clip_step(goal - pos)
            out.append([*pos, 0.0, grip])
        return np.asarray(out, np.float32)


def expert_episodes(specs: list[PointSpec], max_steps: int = 40) -> list[Episode]:
    """Expert demonstrations of `specs` (all successful)."""
    from coda.policy.data import run_expert_episode

    env = PointReachEnv(max_steps)
    eps = [run_expert_episode(env, s, ReachExpert()) for s in specs]
    assert all(e.success for e in eps)
    return eps


# ---- chain MDP ------------------------------------------------------------------------------------

CHAIN_N = 6  # states 0..5; entering 5 gives reward 1 and ends the episode
CHAIN_DX = 0.05  # metres per chain state along x


def chain_obs(s: int) -> dict:
    """Observation of chain state s: gripper at x = 0.05 s, a one-hot of s in proprio, one goal entity."""
    onehot = np.zeros(CHAIN_N, np.float32)
    onehot[s] = 1.0
    return {
        "proprio": np.concatenate([np.array([CHAIN_DX * s, 0.0, 0.1, 0.0, 1.0], np.float32), onehot]),
        "objects": np.array([[CHAIN_DX * (CHAIN_N - 1), 0.0, 0.02, 0.02]], np.float32),
        "object_mask": np.array([1], np.int8),
        "object_text": ("goal",),
        "instruction": "walk to the goal",
    }


def chain_action(s: int, a: int) -> np.ndarray:
    """Absolute target of moving a in {-1, +1} from state s (the wall at 0 makes left a no-op)."""
    return np.array([CHAIN_DX * (s + a), 0.0, 0.1, 0.0, 1.0], np.float32)


def chain_step(s: int, a: int) -> int:
    return min(max(s + a, 0), CHAIN_N - 1)


def chain_episodes(n: int, seed: int, max_steps: int = 30, potential=None) -> list[Episode]:
    """Episodes of a uniformly random walk from random non-terminal starts."""
    rng = np.random.default_rng(seed)
    eps = []
    for _ in range(n):
        s = int(rng.integers(CHAIN_N - 1))
        states, acts, rews = [s], [], []
        terminated = False
        for _ in range(max_steps):
            a = int(rng.choice([-1, 1]))
            acts.append(chain_action(s, a))
            s = chain_step(s, a)
            states.append(s)
            terminated = s == CHAIN_N - 1
            rews.append(1.0 if terminated else 0.0)
            if terminated:
                break
        eps.append(
            Episode(
                observations=[chain_obs(x) for x in states],
                actions=np.stack(acts),
                rewards=np.array(rews, np.float32),
                terminated=terminated,
                success=terminated,
                potentials=None if potential is None else np.array([potential(x) for x in states], np.float32),
            )
        )
    return eps


def chain_values(gamma: float) -> np.ndarray:
    """V of the uniform random walk, V(terminal) = 0, by solving the Bellman equations exactly."""
    n = CHAIN_N - 1
    a_mat = np.eye(n)
    b = np.zeros(n)
    for s in range(n):
        for a in (-1, 1):
            s2 = chain_step(s, a)
            if s2 == CHAIN_N - 1:
                b[s] += 0.5
            else:
                a_mat[s, s2] -= 0.5 * gamma
    return np.append(np.linalg.solve(a_mat, b), 0.0)


def chain_chunk_value(s: int, moves: tuple[int, ...], gamma: float, v: np.ndarray) -> float:
    """Q of executing `moves` from s then following the random walk."""
    ret, disc = 0.0, 1.0
    for a in moves:
        s = chain_step(s, a)
        if s == CHAIN_N - 1:
            return ret + disc
        disc *= gamma
    return ret + disc * v[s]


def chain_chunk(s: int, moves: tuple[int, ...]) -> np.ndarray:
    """The absolute action chunk (h, 5) of `moves` from s as the data records it (after the terminal
    state the last action repeats)."""
    out: list[np.ndarray] = []
    for a in moves:
        out.append(chain_action(s, a) if s != CHAIN_N - 1 else out[-1])
        s = chain_step(s, a)
    return np.stack(out)


def tiny_cfg(**kw) -> PolicyConfig:
    """hidden=16, one layer, hashing text: the size every shape test runs at; the gripper's frame, as the
    synthetic reach demos record no goal roles (the task frame's tests ask for it)."""
    base = dict(hidden=16, layers=1, heads=2, chunk_len=4, n_action_steps=2, batch_size=16, train_steps=5,
                text_model="hashing", torch_threads=1, log_every=1, frame="gripper")
    base.update(kw)
    return PolicyConfig(**base)
