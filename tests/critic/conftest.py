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
