"""A hostile OpenAI-compatible server: every bad answer is a named rejection within the deadline, the round
goes on, and the API key is nowhere in what the run keeps.

The server is raw TCP on 127.0.0.1 (so it can send what no well-behaved HTTP server would: truncated bodies,
wrong content types, a byte a second) and shuts itself down after a minute whatever happens.
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coda.critic.config import CriticConfig
from coda.critic.diagnosis import DiagnosisRejected
from coda.critic.vlm import MAX_ANSWER_BYTES, VLMCritic
from coda.engine.round import diagnose_safely

SECRET = "sk-hostile-5e1f0c9a7b3d2e81"
DEADLINE = 1.0

Answer = Callable[[socket.socket, bytes], None]


def _http(status: str, ctype: str, body: bytes, length: bool = True) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nConnection: close\r\n"
    head += f"Content-Length: {len(body)}\r\n" if length else ""
    return head.encode() + b"\r\n" + body


def _send(data: bytes) -> Answer:
    return lambda sock, request: sock.sendall(data)


def _json(obj: Any, status: str = "200 OK") -> Answer:
    return _send(_http(status, "application/json", json.dumps(obj).encode()))


def _echo_key(status: str) -> Answer:
    """An error body that echoes the request's Authorization header, as some proxies do."""
    def answer(sock: socket.socket, request: bytes) -> None:
        auth = next((line.split(b":", 1)[1].strip() for line in request.split(b"\r\n")
                     if line.lower().startswith(b"authorization:")), b"")
        body = json.dumps({"error": {"message": f"invalid credentials: {auth.decode()} (key {SECRET})"}})
        sock.sendall(_http(status, "application/json", body.encode()))
    return answer


def _trickle(data: bytes, every: float = 0.2) -> Answer:
    def answer(sock: socket.socket, request: bytes) -> None:
        for i in range(len(data)):
            sock.sendall(data[i:i + 1])
            time.sleep(every)
    return answer


def _chunked_forever(sock: socket.socket, request: bytes) -> None:
    """A 200 JSON answer without Content-Length, streaming far more than MAX_ANSWER_BYTES."""
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"[" * 65536
    for _ in range(4 * MAX_ANSWER_BYTES // len(chunk)):
        sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")


def _completion(**message: Any) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}]}


# name -> (what the server does, what the rejection's reason says)
HOSTILE: dict[str, tuple[Answer, str]] = {
    "truncated_json": (_send(_http("200 OK", "application/json", b'{"choices": [{"message": {"cont')),
                       "answer body is not valid JSON"),
    "text_plain": (_send(_http("200 OK", "text/plain", b"all good")), "Content-Type 'text/plain'"),
    "text_html": (_send(_http("200 OK", "text/html", b"<html>502 Bad Gateway</html>")), "Content-Type 'text/html'"),
    "message_null": (_json({"choices": [{"index": 0, "message": None}]}), "'choices.0.message' is a NoneType"),
    "choices_string": (_json({"choices": "abc"}), "'choices' is a str"),
    "content_number": (_json(_completion(content=3.5)), "'choices.0.message.content' is a float"),
    "deep_nesting": (_send(_http("200 OK", "application/json", b"[" * 100_000 + b"]" * 100_000)), "nested deeper"),
    "huge_declared": (_send(_http("200 OK", "application/json", b" " * (2 * MAX_ANSWER_BYTES))), "over 1048576"),
    "huge_chunked": (_chunked_forever, "over 1048576"),
    "http_401_echoes_key": (_echo_key("401 Unauthorized"), "critic unavailable: endpoint http://127.0.0.1"),
    "http_500_echoes_key": (_echo_key("500 Internal Server Error"), "HTTP 500"),
    "trickle_headers": (_trickle(_http("200 OK", "application/json", json.dumps(_completion(content="{}")).encode())),
                        "request timed out"),
    "trickle_body": (_trickle(_http("200 OK", "application/json", b" " * 200)), "request timed out"),
    "model_prose": (_json(_completion(content="I think the robot missed. " * 40_000)), "malformed JSON"),
}


class HostileServer:
    """Answers each connection with the next scripted `Answer` (cycling); stops by itself after `lifetime` s."""

    def __init__(self, answers: list[Answer], lifetime: float = 60.0) -> None:
        self.answers = answers
        self.count = 0
        lock = threading.Lock()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(5.0)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        data += sock.recv(65536) or b"\r\n\r\n"
                    head, _, body = data.partition(b"\r\n\r\n")
                    n = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")), 0)
                    while len(body) < n:
                        more = sock.recv(65536)
                        if not more:
                            break
                        body += more
                    with lock:
                        answer = server.answers[server.count % len(server.answers)]
                        server.count += 1
                    answer(sock, head)
                except OSError:
                    pass  # the client gave up

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.tcp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.tcp.daemon_threads = True
        self.thread = threading.Thread(target=self.tcp.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.timer = threading.Timer(lifetime, self.stop)
        self.timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.tcp.server_address[1]}/v1"

    def start(self) -> "HostileServer":
        self.thread.start()
        self.timer.start()
        return self

    def stop(self) -> None:
        self.timer.cancel()
        self.tcp.shutdown()
        self.tcp.server_close()


@pytest.fixture
def hostile() -> Iterator[Callable[[list[Answer]], HostileServer]]:
    servers: list[HostileServer] = []

    def start(answers: list[Answer]) -> HostileServer:
        servers.append(HostileServer(answers).start())
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def _cfg(url: str, retries: int = 0) -> CriticConfig:
    return CriticConfig(name="vlm", base_url=url, model="m", api_key_env="CODA_HOSTILE_KEY", timeout_s=DEADLINE,
                        retries=retries, backoff_s=0.01, max_images=1)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_HOSTILE_KEY", SECRET)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_hostile_answer_is_a_named_rejection_within_the_deadline(name, hostile, make_episode) -> None:
    answer, needle = HOSTILE[name]
    server = hostile([answer])
    critic = VLMCritic(_cfg(server.url))
    t0 = time.monotonic()
    result = diagnose_safely(critic, make_episode())
    elapsed = time.monotonic() - t0
    assert isinstance(result, DiagnosisRejected)
    assert needle in result.reason, result.reason
    assert "\n" not in result.reason and len(result.reason) <= 1000 and len(result.raw_text) <= 20_000
    assert elapsed < DEADLINE + 1.5, f"{name} took {elapsed:.1f}s"
    assert SECRET not in result.model_dump_json()


def test_refused_connection_is_a_named_rejection(make_episode) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = diagnose_safely(VLMCritic(_cfg(f"http://127.0.0.1:{port}/v1", retries=1)), make_episode())
    assert isinstance(result, DiagnosisRejected) and "connection failed" in result.reason


def test_retries_each_get_the_deadline_and_the_total_is_bounded(hostile, make_episode) -> None:
    server = hostile([HOSTILE["trickle_headers"][0]])
    t0 = time.monotonic()
    result = diagnose_safely(VLMCritic(_cfg(server.url, retries=2)), make_episode())
    assert isinstance(result, DiagnosisRejected) and "after 3 attempt(s)" in result.reason
    assert 3 * DEADLINE <= time.monotonic() - t0 < 3 * DEADLINE + 2.0
    assert server.count == 3


def test_a_round_against_the_hostile_server_goes_on_and_keeps_no_key(hostile, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
    import engine_runs as E

    from coda.engine.loop import run, start_run
    from coda.reports.build import write_report

    names = ["http_401_echoes_key", "text_html", "trickle_body", "deep_nesting", "http_500_echoes_key"]
    server = hostile([HOSTILE[n][0] for n in names])
    extra = ("critic.name=vlm", f"critic.base_url={server.url}", "critic.api_key_env=CODA_HOSTILE_KEY",
             f"critic.timeout_s={DEADLINE}", "critic.retries=0", "engine.max_diagnoses=5")
    path = tmp_path / "hostile"
    with start_run(E.config("coda", extra=extra), path, from_round0=E.round0()) as ctx:
        run(ctx)
        write_report(ctx)
    with E.open_run(path) as mem:
        assert mem.get_run(path.name).status == "done"
        diagnoses = mem.list("diagnosis", run_id=path.name)
        assert diagnoses and not any(d.accepted for d in diagnoses)
        assert all(d.reason and ("critic unavailable" in d.reason or "endpoint answer unusable" in d.reason)
                   for d in diagnoses), [d.reason for d in diagnoses]
    leaked = [p for p in path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
