"""A local chat-completions server (real HTTP on 127.0.0.1, OpenAI wire format) and a small scene."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from coda.critic.base import EpisodeRecord
from coda.scene.spec import ContainerSpec, GoalPredicate, ObjectSpec, ScenarioSpec

Reply = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def completion(content: str | None, model: str = "test-model", finish_reason: str = "stop") -> dict[str, Any]:
    """A chat.completion body as OpenAI-compatible servers send it."""
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


class ChatServer:
    """Answers POST /v1/chat/completions from a script of replies; records every request it receives.

    A reply is {"content": str} (200 with that message), {"status": int, "error": str} (an error body),
    optionally with "delay" seconds before answering, or a callable(request body) -> such a dict.
    """

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default: Reply | None = None  # answered when the script is empty
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # small replies otherwise wait on delayed ACKs (~40 ms each)
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                    if server.script:
                        reply = server.script.popleft()
                    else:
                        reply = server.default or {"status": 500, "error": "no reply scripted"}
                if callable(reply):
                    reply = reply(body)
                time.sleep(float(reply.get("delay", 0.0)))
                if not self.path.endswith("/chat/completions"):
                    status, payload = 404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
                elif "error" in reply:
                    status, payload = int(reply["status"]), {"error": {"message": reply["error"], "type": "server_error"}}
                else:
                    status, payload = 200, completion(reply["content"], model=body.get("model", "?"))
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def add(self, *replies: Reply) -> None:
        self.script.extend(replies)


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    srv = ChatServer()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.fixture
def pick_place_spec() -> ScenarioSpec:
    return ScenarioSpec(
        family="pick_place",
        objects=(
            ObjectSpec(name="obj0", shape="box", size=(0.02, 0.02, 0.02), color="red", pos=(0.05, 0.10)),
            ObjectSpec(name="obj1", shape="cylinder", size=(0.02, 0.02, 0.03), color="blue", pos=(0.10, -0.05)),
        ),
        containers=(ContainerSpec(name="bowl0", kind="bowl", size=(0.06, 0.06, 0.02), color="blue", pos=(0.0, -0.15)),),
        instruction="put the red cube in the blue bowl",
        goal=(GoalPredicate(name="in", args=("obj0", "bowl0")),),
    )


@pytest.fixture
def make_episode(pick_place_spec: ScenarioSpec) -> Callable[..., EpisodeRecord]:
    """Build a failed EpisodeRecord in the pick-and-place scene with n distinct RGB keyframes."""

    def make(n_frames: int = 6, episode_id: str = "ep-1", **kw: Any) -> EpisodeRecord:
        keyframes = tuple(np.full((16, 20, 3), 10 * i, dtype=np.uint8) for i in range(n_frames))
        kw.setdefault("spec", pick_place_spec)
        return EpisodeRecord(
            episode_id=episode_id,
            success=False,
            steps=120,
            keyframes=keyframes,
            keyframe_steps=tuple(20 * i for i in range(n_frames)),
            summary="gripper closed 3 cm left of obj0; obj0 never lifted",
            outcome="timeout",
            **kw,
        )

    return make


# ---- rollouts of scripted policies in the real simulator ------------------------------------------------


class Sim:
    """Rolls policies `(state, t) -> action (5,)` out in one TabletopEnv and records EpisodeRecords."""

    def __init__(self) -> None:
        from coda.sim.tabletop.env import TabletopEnv

        self.env = TabletopEnv()

    def episode(self, spec: ScenarioSpec, policy: Callable[[Any, int], np.ndarray], max_steps: int = 120,
                episode_id: str = "ep") -> EpisodeRecord:
        self.env.reset_to(spec)
        states = [self.env.state()]
        success = False
        for t in range(max_steps):
            _, _, terminated, truncated, info = self.env.step(policy(states[-1], t))
            states.append(self.env.state())
            success = bool(info["success"])
            if terminated or truncated:
                break
        return EpisodeRecord(episode_id=episode_id, spec=spec, success=success, steps=len(states) - 1,
                             states=tuple(states), outcome="success" if success else "timeout")

    @staticmethod
    def expert(spec: ScenarioSpec, shift: dict[str, tuple[float, float]] | None = None) -> Callable[[Any, int], np.ndarray]:
        """The scripted expert for `spec`'s goal, believing entities sit `shift` metres away from where they are."""
        import dataclasses

        from coda.sim.tabletop.experts import expert_for

        ex = expert_for(spec)

        def act(s: Any, t: int) -> np.ndarray:
            if shift:
                pos = s.pos.copy()
                for name, (dx, dy) in shift.items():
                    pos[s.row(name), :2] += (dx, dy)
                s = dataclasses.replace(s, pos=pos)
            return ex.act(s)[0]

        return act

    @staticmethod
    def hold_still(s0: Any = None) -> Callable[[Any, int], np.ndarray]:
        start: list[np.ndarray] = []

        def act(s: Any, t: int) -> np.ndarray:
            if not start:
                start.append(np.array([*s.gripper_pos, s.gripper_yaw, 1.0]))
            return start[0]

        return act

    @staticmethod
    def circle(radius: float = 0.15, z: float = 0.25) -> Callable[[Any, int], np.ndarray]:
        return lambda s, t: np.array([radius * np.cos(t / 4), radius * np.sin(t / 4), z, 0.0, 1.0])

    @staticmethod
    def drop_when_lifted(spec: ScenarioSpec, height: float = 0.05) -> Callable[[Any, int], np.ndarray]:
        """The expert, except that the jaws open for good once the target's bottom is `height` up."""
        from coda.sim.tabletop import predicates as P

        inner = Sim.expert(spec)
        target = spec.goal[0].args[0]
        dropped: list[bool] = []

        def act(s: Any, t: int) -> np.ndarray:
            a = np.array(inner(s, t), dtype=np.float64)
            if not dropped and P.grasped(s, target) and P.bottom(s, target) >= height:
                dropped.append(True)
            if dropped:
                a[4] = 1.0
            return a

        return act


@pytest.fixture(scope="session")
def sim() -> Iterator[Sim]:
    s = Sim()
    yield s
    s.env.close()


class Episodes:
    """Failed (and solved) episodes of known cause, rolled out once per test session and cached."""

    def __init__(self, sim: Sim) -> None:
        from coda.scene.generators import sample_base

        self.sim = sim
        self.pick = sample_base("pick_place", np.random.default_rng(0))
        self.drawer = sample_base("drawer", np.random.default_rng(0))
        self.push = sample_base("push", np.random.default_rng(0))
        self._cache: dict[str, EpisodeRecord] = {}

    def __getitem__(self, cause: str) -> EpisodeRecord:
        if cause not in self._cache:
            self._cache[cause] = self._make(cause)
        return self._cache[cause]

    def _make(self, cause: str) -> EpisodeRecord:
        from coda.scene.generators import sample_base
        from coda.scene.spec import GoalPredicate

        sim, spec = self.sim, self.pick
        target, dest = spec.goal[0].args
        other = next(o.name for o in spec.objects if o.name != target)
        alt = next(c.name for c in spec.containers if c.name != dest)
        run = lambda s, pol, n=120: sim.episode(s, pol, n, episode_id=cause)  # noqa: E731
        if cause == "solved":
            return run(spec, sim.expert(spec))
        if cause == "wrong_object":
            return run(spec, sim.expert(spec.replace(goal=(GoalPredicate(name="in", args=(other, dest)),))))
        if cause == "wrong_target":
            return run(spec, sim.expert(spec.replace(goal=(GoalPredicate(name="in", args=(target, alt)),))))
        if cause == "missed_grasp":
            return run(spec, sim.expert(spec, {target: (0.04, 0.0)}), 80)
        if cause == "imprecise_placement":
            return run(spec, sim.expert(spec, {dest: (0.09, 0.0)}))
        if cause == "premature_release":
            return run(spec, sim.drop_when_lifted(spec))
        if cause == "slip_during_transport":
            heavy = spec.replace(physics=spec.physics.model_copy(update={"mass_scale": 10.0, "friction_scale": 0.2}))
            return run(heavy, sim.expert(heavy))
        if cause == "no_progress":
            return run(spec, sim.hold_still())
        if cause == "detour":
            return run(spec, sim.circle(), 100)
        if cause == "knocked_over":
            tall = sample_base("pick_place", np.random.default_rng(0), {"other_shapes": ("cylinder",)})
            return run(tall, lambda s, t: np.array([-0.25 + t / 120, 0.25 - 0.5 * ((t // 6) % 2), 0.04, 0.0, 1.0]), 60)
        if cause == "drawer_not_operated":
            return run(self.drawer, sim.hold_still(), 60)
        if cause == "drawer_missed_grasp":
            return run(self.drawer, sim.expert(self.drawer, {self.drawer.goal[0].args[0]: (0.0, 0.06)}), 60)
        if cause == "push_wrong_object":
            t, r = self.push.goal[0].args
            wide = max((o for o in self.push.objects if o.name != t), key=lambda o: min(o.size[:2]))
            return run(self.push, sim.expert(self.push.replace(goal=(GoalPredicate(name="at_region", args=(wide.name, r)),))))
        raise KeyError(cause)


@pytest.fixture(scope="session")
def episodes(sim: Sim) -> Episodes:
    return Episodes(sim)
