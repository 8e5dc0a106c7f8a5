"""The `vlm` critic: any OpenAI-compatible chat-completions endpoint with image input.

It sends the instruction, the scene's entities, a compact trajectory summary and up to `max_images`
keyframes (PNG data URLs), and asks for JSON in the diagnosis schema — `response_format` json_schema where
the endpoint supports it, falling back to plain text checked by the same strict parser when the endpoint
refuses the format. Works with vLLM, Ollama, hosted APIs, through the official `openai` client.

The API key is read from the environment variable *named* by `CriticConfig.api_key_env` when the client is
built; it is never logged, never put in a record, and never shown in `repr`.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import threading
import time
from typing import Any

import numpy as np
import openai
from PIL import Image

try:  # the HTTP client the installed openai client is built on
    import httpx2
except ImportError:  # openai releases before httpx2
    import httpx as httpx2  # type: ignore[no-redef]

from coda.critic.base import CriticUnavailable, EpisodeRecord, Keyframe
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import CriticResult, DiagnosisRejected, diagnosis_json_schema, parse_diagnosis, prompt_taxonomy
from coda.errors import ConfigError
from coda.redact import one_line, register_secret
from coda.scene.language import describe

log = logging.getLogger(__name__)

# Keyless local servers (vLLM, Ollama) still need a non-empty key in the client.
_NO_KEY = "no-key"

SYSTEM_PROMPT = """You are a robot-manipulation failure analyst. A robot policy tried to follow an instruction \
in a tabletop scene and failed. From the keyframes (in time order) and the trajectory summary, diagnose why.

Answer with ONE JSON object and nothing else, with exactly these keys:
- failure_mode: one of the failure modes below
- stage_reached: the furthest stage of the task the robot completed, in order
- objects: names of the scene entities involved (use the names given, e.g. "obj0")
- factors: scene factors that plausibly caused the failure, each {"kind", "entity", "value", "detail"}
- explanation: two or three sentences on what went wrong
- stage_plan: a numbered plan in words that would succeed, one short step each, e.g. \
"1. reach the red cube 2. grasp it 3. lift it 4. move above the blue bowl 5. release it inside the bowl"

"""


MAX_ANSWER_BYTES = 1 << 20  # a chat answer larger than this (1 MiB) is refused unread
MAX_JSON_DEPTH = 64  # an answer nested deeper than this is refused unparsed


class AnswerError(Exception):
    """An endpoint's HTTP answer that cannot be a chat completion (wrong type, too large, ill-shaped)."""

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class DeadlineExceeded(Exception):
    """A request got no complete answer within its total deadline."""


class _BoundedStream(httpx2.SyncByteStream):
    """A response body that raises once it passes `limit` bytes, or once its request is abandoned."""

    def __init__(self, inner: Any, limit: int, cancelled: threading.Event) -> None:
        self._inner, self._limit, self._cancelled = inner, limit, cancelled

    def __iter__(self) -> Any:
        n = 0
        for chunk in self._inner:
            n += len(chunk)
            if n > self._limit:
                raise AnswerError(f"answer body is over {self._limit} bytes")
            if self._cancelled.is_set():
                raise DeadlineExceeded("request abandoned at its deadline")
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _BoundedTransport(httpx2.BaseTransport):
    """HTTP transport whose response bodies are bounded in size (declared or actual)."""

    def __init__(self, limit: int) -> None:
        self._inner = httpx2.HTTPTransport()
        self._limit = limit
        self.cancelled = threading.Event()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        resp = self._inner.handle_request(request)
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            resp.close()
            raise AnswerError(f"answer body declares {int(declared)} bytes, over {self._limit}")
        return httpx2.Response(resp.status_code, headers=resp.headers,
                               stream=_BoundedStream(resp.stream, self._limit, self.cancelled),
                               extensions=resp.extensions)

    def close(self) -> None:
        self._inner.close()


def _transient(e: Exception) -> bool:
    """Errors worth retrying: timeouts, refused/dropped connections, server errors, rate limits."""
    if isinstance(e, (DeadlineExceeded, openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    return isinstance(e, openai.APIStatusError) and e.status_code >= 500


def _describe_error(e: Exception) -> str:
    """One redacted line: what went wrong with a request (an error body may echo the request's key)."""
    if isinstance(e, (openai.APITimeoutError, DeadlineExceeded)):
        what = "request timed out"
    elif isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e.__context__
        what = f"connection failed ({type(cause).__name__ if cause else 'unknown'}: {str(cause or e)[:120]})"
    elif isinstance(e, openai.APIStatusError):
        what = f"HTTP {e.status_code} ({str(e.message)[:160]})"
    else:
        what = f"{type(e).__name__}: {str(e)[:160]}"
    return one_line(what, 300)


def _depth_ok(text: str, limit: int) -> bool:
    """Whether JSON text nests at most `limit` brackets deep (counted outside strings), before parsing it."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def completion_content(ctype: str, body: bytes) -> tuple[str | None, list[str]]:
    """The message text of a chat.completion answer body, and notes (cut off, refused).

    Raises:
        AnswerError: the body is not JSON, not UTF-8, too deeply nested, or not shaped like a chat completion.
    """
    raw = body[:20_000].decode("utf-8", "replace")
    if "json" not in ctype.lower():
        raise AnswerError(f"answer has Content-Type {ctype[:80]!r}, not JSON", raw)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise AnswerError("answer body is not UTF-8", raw) from None
    if not _depth_ok(text, MAX_JSON_DEPTH):
        raise AnswerError(f"answer JSON is nested deeper than {MAX_JSON_DEPTH} levels", raw)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise AnswerError(f"answer body is not valid JSON ({str(e)[:120]})", raw) from None
    if not isinstance(data, dict):
        raise AnswerError(f"answer is a JSON {type(data).__name__}, not an object", raw)
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise AnswerError(f"answer field 'choices' is a {type(choices).__name__}, not a list", raw)
    if not choices:
        return None, ["endpoint returned no choices"]
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise AnswerError(f"answer field 'choices.0.message' is a {type(message).__name__}, not an object", raw)
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise AnswerError(f"answer field 'choices.0.message.content' is a {type(content).__name__}, not a string", raw)
    notes: list[str] = []
    if choice.get("finish_reason") == "length":
        notes.append("answer was cut off at max_tokens")
    refusal = message.get("refusal")
    if refusal:
        notes.append(f"model refused: {str(refusal)[:200]}")
    return content, notes


class ChatEndpoint:
    """An OpenAI-compatible chat-completions endpoint with retries, backoff, a deadline and a JSON output mode.

    Each attempt has a total deadline of `cfg.timeout_s` seconds, headers and body together (a server that
    trickles its answer is cut off there), and an answer body of at most `MAX_ANSWER_BYTES`.

    Args:
        cfg: the critic config (base URL, model, key variable name, timeout, retries, backoff, format).

    Raises:
        ConfigError: no base_url configured.
        CriticUnavailable: the key variable is named but not set.
    """

    def __init__(self, cfg: CriticConfig) -> None:
        if not cfg.base_url:
            raise ConfigError("critic.base_url is not set; the 'vlm' critic needs an OpenAI-compatible endpoint URL")
        self.cfg = cfg
        self.base_url = cfg.base_url
        key = _NO_KEY
        if cfg.api_key_env is not None:
            got = os.environ.get(cfg.api_key_env)
            if not got:
                raise CriticUnavailable(
                    f"critic.api_key_env names environment variable '{cfg.api_key_env}', which is not set "
                    "(set it, or set api_key_env to null for a keyless server)"
                )
            key = got
            register_secret(key)  # whatever echoes it (an error body, a log line) is redacted
        self._key = key
        self._client, self._transport = self._new_client()
        self.format = cfg.response_format  # may degrade to "text" if the endpoint refuses structured output

    def _new_client(self) -> tuple[openai.OpenAI, _BoundedTransport]:
        transport = _BoundedTransport(MAX_ANSWER_BYTES)
        # Retries are ours (counted, logged, with our backoff); the client's own are off.
        client = openai.OpenAI(base_url=self.base_url, api_key=self._key, timeout=self.cfg.timeout_s, max_retries=0,
                               http_client=httpx2.Client(transport=transport, timeout=self.cfg.timeout_s))
        return client, transport

    def __repr__(self) -> str:
        return f"ChatEndpoint(base_url={self.base_url!r}, model={self.cfg.model!r})"

    def _attempt(self, req: dict[str, Any]) -> tuple[str | None, list[str]]:
        """One request within the deadline: the answer's text and notes, or the exception it raised."""
        client, transport = self._client, self._transport
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                with client.chat.completions.with_streaming_response.create(**req) as r:
                    ctype = r.headers.get("content-type", "")
                    body = b"".join(r.iter_bytes())
                box["ok"] = completion_content(ctype, body)
            except BaseException as e:  # handed to the caller's thread
                box["err"] = e

        worker = threading.Thread(target=call, name="coda-critic-request", daemon=True)
        worker.start()
        worker.join(self.cfg.timeout_s)
        if worker.is_alive():
            # Abandon the request: its body stops at the next chunk, and the next attempt uses new connections.
            transport.cancelled.set()
            self._client, self._transport = self._new_client()
            raise DeadlineExceeded(f"no complete answer within {self.cfg.timeout_s:g}s")
        if "err" in box:
            raise box["err"]
        return box["ok"]

    def complete(self, messages: list[dict[str, Any]], schema: dict[str, Any], schema_name: str) -> tuple[str | None, list[str]]:
        """Send one chat request and return (answer text, notes on what happened).

        Transient failures (timeouts, the deadline, refused connections, HTTP 5xx and 429) are retried
        `cfg.retries` times with exponential backoff. If the endpoint answers HTTP 400 to a structured-output
        request, the request is repeated once without `response_format` (the answer is then checked by the
        caller's strict parser), and later requests skip it.

        Raises:
            CriticUnavailable: no answer after all attempts, or a non-transient refusal (401, 404, 400...).
            AnswerError: the endpoint answered, but not with a chat completion.
        """
        notes: list[str] = []
        attempt = 0
        while True:
            attempt += 1
            try:
                text, more = self._attempt(self._request(messages, schema, schema_name))
            except openai.BadRequestError as e:
                if self.format != "text":
                    notes.append(f"endpoint refused response_format={self.format} ({_describe_error(e)}); using text")
                    log.warning("endpoint %s refused response_format=%s; falling back to text", self.base_url, self.format)
                    self.format = "text"
                    attempt -= 1  # a format downgrade is not a retry
                    continue
                raise CriticUnavailable(f"endpoint {self.base_url} rejected the request: {_describe_error(e)}") from None
            except AnswerError:
                raise
            except (openai.OpenAIError, DeadlineExceeded) as e:
                if isinstance(e.__cause__, AnswerError):
                    raise e.__cause__ from None
                what = _describe_error(e)
                if not _transient(e):
                    raise CriticUnavailable(f"endpoint {self.base_url}: {what}") from None
                if attempt > self.cfg.retries:
                    raise CriticUnavailable(
                        f"endpoint {self.base_url}: {what} after {attempt} attempt(s)"
                    ) from None
                wait = self.cfg.backoff_s * 2 ** (attempt - 1)
                notes.append(f"attempt {attempt}: {what}; retried after {wait:g}s")
                log.warning("endpoint %s attempt %d: %s; retrying in %.3gs", self.base_url, attempt, what, wait)
                time.sleep(wait)
                continue
            return text, [*notes, *more]

    def _request(self, messages: list[dict[str, Any]], schema: dict[str, Any], schema_name: str) -> dict[str, Any]:
        req: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": messages,
            "max_tokens": self.cfg.max_tokens,
            "temperature": self.cfg.temperature,
        }
        if self.format == "json_schema":
            req["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            }
        elif self.format == "json_object":
            req["response_format"] = {"type": "json_object"}
        return req

    def close(self) -> None:
        """Close the underlying HTTP connections."""
        self._client.close()
        self._transport.close()


def png_bytes(frame: Keyframe) -> bytes:
    """Encode a uint8 (H, W, 3|4) frame as PNG; PNG bytes pass through unchanged."""
    if isinstance(frame, (bytes, bytearray)):
        return bytes(frame)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame)).save(buf, format="PNG")
    return buf.getvalue()


def data_url(frame: Keyframe) -> str:
    """A `data:image/png;base64,...` URL for one frame."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(frame)).decode("ascii")


def pick_keyframes(n: int, k: int) -> list[int]:
    """Indices of at most k of n frames, evenly spread, always including the first and last."""
    if k <= 0 or n == 0:
        return []
    if n <= k:
        return list(range(n))
    if k == 1:
        return [n - 1]  # the final frame shows how the episode ended
    return sorted({int(i * (n - 1) / (k - 1) + 0.5) for i in range(k)})


def scene_text(episode: EpisodeRecord) -> str:
    """The scene and episode in words: instruction, entities by name, outcome, summary."""
    spec = episode.spec
    lines = [f"Instruction: {episode.instruction}", f"Task family: {spec.family}", "Scene entities:"]
    for o in spec.objects:
        lines.append(f"- {o.name}: {describe(o)} at x={o.pos[0]:+.2f} y={o.pos[1]:+.2f}")
    for c in spec.containers:
        lines.append(f"- {c.name}: {c.color} {c.kind} at x={c.pos[0]:+.2f} y={c.pos[1]:+.2f}")
    for d in spec.drawers:
        lines.append(f"- {d.name}: {d.color} drawer at x={d.pos[0]:+.2f} y={d.pos[1]:+.2f}")
    for r in spec.regions:
        lines.append(f"- {r.name}: {r.color} region centred at x={r.center[0]:+.2f} y={r.center[1]:+.2f}")
    goal = ", ".join(f"{g.name}({', '.join(g.args)})" for g in spec.goal)
    lines.append(f"Goal: {goal}")
    lines.append(f"Outcome: {episode.outcome or ('success' if episode.success else 'failure')} after {episode.steps} steps")
    if episode.summary:
        lines.append(f"Trajectory summary:\n{episode.summary}")
    return "\n".join(lines)


def build_messages(episode: EpisodeRecord, max_images: int) -> list[dict[str, Any]]:
    """Chat messages for one diagnosis: system prompt with the taxonomy, then text and keyframes."""
    idx = pick_keyframes(len(episode.keyframes), max_images)
    content: list[dict[str, Any]] = [{"type": "text", "text": scene_text(episode)}]
    for i in idx:
        step = episode.keyframe_steps[i] if episode.keyframe_steps else i
        content.append({"type": "text", "text": f"Keyframe at step {step}:"})
        content.append({"type": "image_url", "image_url": {"url": data_url(episode.keyframes[i])}})
    return [
        {"role": "system", "content": SYSTEM_PROMPT + prompt_taxonomy()},
        {"role": "user", "content": content},
    ]


class VLMCritic:
    """Diagnoses episodes with a vision-language model behind an OpenAI-compatible endpoint.

    Args:
        cfg: critic config; `base_url`, `model`, `api_key_env`, `timeout_s`, `retries`, `backoff_s`,
            `max_images`, `response_format` are used.
        name: the name written into diagnoses.

    Raises:
        CriticUnavailable: at construction if the key variable is named but unset; from `diagnose` when the
            endpoint cannot be reached or refuses the request.
    """

    def __init__(self, cfg: CriticConfig, name: str = "vlm") -> None:
        self.name = name
        self.cfg = cfg
        self.endpoint = ChatEndpoint(cfg)

    def __repr__(self) -> str:
        return f"VLMCritic(name={self.name!r}, endpoint={self.endpoint!r})"

    def diagnose(self, episode: EpisodeRecord) -> CriticResult:
        """Ask the endpoint for a diagnosis; malformed or off-schema answers come back as DiagnosisRejected."""
        messages = build_messages(episode, self.cfg.max_images)
        try:
            text, notes = self.endpoint.complete(messages, diagnosis_json_schema(), "diagnosis")
        except AnswerError as e:
            return DiagnosisRejected(critic=self.name, episode_id=episode.episode_id,
                                     reason=f"endpoint answer unusable: {e}", raw_text=e.raw)
        if text is None:
            return DiagnosisRejected(
                critic=self.name,
                episode_id=episode.episode_id,
                reason="endpoint returned no message content",
                raw_text="",
                notes=tuple(notes),
            )
        return parse_diagnosis(
            text, critic=self.name, episode_id=episode.episode_id, spec=episode.spec, notes=tuple(notes)
        )

    def close(self) -> None:
        """Release HTTP connections."""
        self.endpoint.close()
