"""The bundled local model server: OpenAI and Anthropic APIs with scripted replies.

Tests, the demo and the benchmarks talk to it over loopback HTTP, the same
code path a real provider uses. It speaks:

    POST /v1/chat/completions    OpenAI Chat Completions (stream or not)
    POST /v1/messages            Anthropic Messages (stream or not)
    GET  /v1/models              a small model list, for health checks
    POST /_agentd/enqueue        {"purpose", "reply"} or {"purpose", "replies": [...]}
    POST /_agentd/rule           {"match", "reply", "purpose"?, "times"?}
    POST /_agentd/latency        {"purpose", "seconds"}
    POST /_agentd/default_arguments  {"tool", "arguments"}
    POST /_agentd/context_window {"tokens": N or null}
    POST /_agentd/model          {"name", "reasoning"?, "replayReasoning"?}
    POST /_agentd/cache          {"enabled"?, "minTokens"?, "ttl"?}
    GET  /_agentd/log            every log entry, as a JSON array
    POST /_agentd/reset

A context window (`context_window`, `--context-window`, the control
endpoint; none by default) makes the server count each request's input
tokens as a real API would (here: a quarter of the characters of its
messages, system prompt and tools as JSON, each image billed by its pixels
as the API emulated counts them (`images`), the same count its `usage`
reports) and refuse one that does not fit, before any reply is chosen, the
way each API does: OpenAI-style 400 `context_length_exceeded` ("This
model's maximum context length is W tokens. However, you requested T tokens
(I in the messages, M in the completion)...", input plus `max_tokens` over
the window), Anthropic-style 400 `invalid_request_error` ("prompt is too
long: I tokens > W maximum", or "input length and `max_tokens` exceed
context limit: I + M > W"). `/v1/models` then reports the window as
`context_length` (OpenRouter's name) and `max_model_len` (vLLM's).

Which reply answers a request of purpose P (header `X-Agentd-Purpose`,
default `main`): the head of P's queue, else the first of P's rules whose
`match` is a substring of the last user text, else, for a `compact` request
that forces a tool, the stand-in summariser (`summarise.py`), else
`default_reply` (forced tool -> a call of it; a trailing tool result ->
"Tool result received: ..."; otherwise `!tool`/`!ttft`/`!delay`/`!chunks`/
`!status` directives or an echo).
Reply dicts are documented in `replies.parse_reply`'s keys:
text, chunks, thinking, redactedThinking, toolCalls, stopReason, ttft,
chunkDelay, usage ({input, output, cacheRead?, cacheWrite?}), status,
retryAfter, errorBody, dropAfter, stallAfter, malformed, errorAfter, hangUp,
pingEvery.

Requests are checked as the real APIs check them (`checks`): tool calls
without their results (and results without their calls) are refused, reasoning
models refuse `max_tokens`, reasoning text in the history is refused or
required by model, Anthropic thinking blocks must come back signed and
unchanged, and with thinking on the assistant message that tool results
answer must start with one (a reply then always carries thinking, as
Claude's do). The prompt cache is emulated (`cache`): an unscripted reply's
usage reports the tokens each API would have served from its cache, and the
request's log entry records them.

Content chunks (thinking pieces, text pieces, tool-argument fragments) are what
`dropAfter`/`stallAfter`/`errorAfter` count. HTTP headers of a stream are sent
at once; `ttft` delays everything after them, so `stallAfter: 0` is a stream
that stalls right after its headers. With `hold_headers` (`--hold-headers`)
the server behaves like several OpenAI-compatible servers and proxies: a
stream's status line and headers wait for its first chunk, so `ttft` delays
them too (and `stallAfter: 0` stalls right after headers sent at `ttft`). A
non-streaming answer has no chunks: with `dropAfter` it sends half its body
and drops, with `stallAfter` only its headers; `malformed: bad_json`
truncates its JSON, `error_event` makes it a 500.

Connections (set on the server object, in process): `idle_timeout` closes a
kept-alive connection that waits that long for its next request, as real
servers' keep-alive timeouts do; `close_every` answers every request with
`connection: close` and closes; a reply's `hangUp` closes its connection
once the request is read, before any byte of an answer (the keep-alive
timeout crossing a request); `pingEvery` sends an SSE comment that often
while a stream waits for its first token.

Log entries, in order (and as JSON lines in `log_path`):
    request      id, ts, purpose, api, path, headers (secrets redacted), body, replySource,
                 cache ({input, read, write}: the emulated cache's view of the prompt),
                 connection (the TCP connection's number, from 1: `accepted` counts them)
    first_chunk  id, ts                 the first content chunk was sent
    complete     id, ts                 the whole response was sent
    disconnect   id, ts, chunksSent     the client left before the end
    fault        id, ts, kind, ...      kind: status (with status), drop, stall, malformed,
                                        overflow (with inputTokens, window), hang_up
    bad_request  ts, path, status, message
    reset        ts                     (file only: `reset()` empties the list)
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from agentd.testing.model_server.cache import PromptCache, TooManyBreakpoints
from agentd.testing.model_server.checks import ModelRules, Signer, check_anthropic, check_openai
from agentd.testing.model_server.http import ClientGone, Connection, HTTPError, Request
from agentd.testing.model_server.replies import (
    Api,
    BadRequest,
    JSONDict,
    Output,
    Reply,
    RequestView,
    ScriptedToolCall,
    default_reply,
    inspect_request,
    parse_reply,
    resolve,
)
from agentd.testing.model_server.summarise import standin_summary
from agentd.testing.model_server.wire import (
    Frame,
    anthropic_body,
    anthropic_stream,
    bad_json_frame,
    comments_crlf,
    error_body,
    models_body,
    openai_body,
    openai_stream,
    split_odd,
    stream_error_frame,
)

__all__ = ["ModelServer", "parse_reply"]

_log = logging.getLogger(__name__)
_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
_JSON_HEADERS = {"content-type": "application/json"}


def _loopback_host(host: str) -> str:
    """The address to bind for `host`; ValueError unless it is a loopback address."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise ValueError(f"the model server only listens on loopback, not {host!r}") from None
    if not address.is_loopback:
        raise ValueError(f"the model server only listens on loopback, not {host!r}")
    return str(address)


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


@dataclass(slots=True)
class _Rule:
    match: str
    reply: Reply
    purpose: str
    times: int | None


@dataclass(slots=True)
class _Progress:
    request_id: int
    chunks_sent: int = 0
    first_logged: bool = False


class ModelServer:
    """The server, on the running event loop. Not thread-safe: see ModelServerThread."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | Path | None = None,
        *,
        hold_headers: bool = False,
        context_window: int | None = None,
    ) -> None:
        self.host = _loopback_host(host)
        self.port = port
        self.hold_headers = hold_headers
        # How long a kept-alive connection may sit idle before the server
        # closes it (None: for ever), as real servers do on their own clock
        # (uvicorn: 5 s); and whether every answer closes its connection
        # (`Connection: close`), as some proxies do.
        self.idle_timeout: float | None = None
        self.close_every = False
        self.context_window: int | None = None
        self.set_context_window(context_window)
        self.log: list[dict[str, Any]] = []
        # With `keep_raw_bodies` set, the raw body of each model request by its
        # log entry's id, for a test that compares the bytes a client sent
        # (the log has them parsed).
        self.keep_raw_bodies = False
        self.raw_bodies: dict[int, bytes] = {}
        self._log_path = Path(log_path) if log_path is not None else None
        self._log_file: IO[str] | None = None
        self._queues: dict[str, deque[Reply]] = {}
        self._rules: list[_Rule] = []
        self._latency: dict[str, float] = {}
        self._default_args: dict[str, JSONDict] = {}
        self.models = ModelRules()
        self.cache = PromptCache()
        self.signer = Signer()
        # Ids stay unique across reset() so that a waiter never confuses two requests.
        self._next_id = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        # TCP connections accepted so far (never reset); a model request's log
        # entry names its connection by number (`connection`, from 1).
        self.accepted = 0
        # Requests of any kind answered in full (never reset): a test that must
        # know a client's connection went back to its pool waits for this.
        self.answered = 0
        # TCP connections ended so far, by either side (never reset): a test
        # that must know a client let its connection go waits for this.
        self.closed = 0
        self._counted: asyncio.Event | None = None
        # Replaced by a fresh Event each time the log grows: waiters wake, rescan, rewait.
        self._log_grew: asyncio.Event | None = None

    # --- lifecycle ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the model server is already running")
        self._log_grew = asyncio.Event()
        if self._log_path is not None:
            self._log_file = self._log_path.open("a", encoding="utf-8")
        try:
            self._server = await asyncio.start_server(self._on_connection, self.host, self.port)
        except BaseException:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            raise
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Python 3.11's wait_closed does not wait for open connections, and a
        # stalled stream never ends by itself: cancel every handler and wait.
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    async def __aenter__(self) -> ModelServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- scripting ---------------------------------------------------------------

    def enqueue(self, reply: dict[str, Any], purpose: str = "main") -> None:
        """Queue a reply for the next request of `purpose` (FIFO); ValueError if invalid."""
        self._queues.setdefault(purpose, deque()).append(parse_reply(reply))

    def add_rule(
        self, match: str, reply: dict[str, Any], purpose: str = "main", times: int | None = None
    ) -> None:
        """Answer requests whose last user text contains `match` (when the queue is empty)."""
        if not isinstance(match, str):
            raise ValueError("match must be a string")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int)):
            raise ValueError("times must be an integer")
        if times is not None and times < 1:
            raise ValueError("times must be at least 1")
        self._rules.append(_Rule(match, parse_reply(reply), purpose, times))

    def set_latency(self, purpose: str, seconds: float) -> None:
        """Extra ttft for every request of `purpose`."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError("seconds must be a number >= 0")
        self._latency[purpose] = float(seconds)

    def set_default_arguments(self, tool_name: str, arguments: dict[str, Any]) -> None:
        """Arguments for calls of `tool_name` that are scripted or forced without any."""
        if not isinstance(arguments, dict):
            raise ValueError("arguments must be an object")
        self._default_args[tool_name] = dict(arguments)

    def set_context_window(self, tokens: int | None) -> None:
        """Refuse requests whose input does not fit `tokens` (None: no limit)."""
        if tokens is not None and (
            isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
        ):
            raise ValueError("tokens must be a positive integer or null")
        self.context_window = tokens

    def set_hold_headers(self, hold: bool) -> None:
        """Hold a stream's headers until its first chunk (True) or send them at once."""
        self.hold_headers = bool(hold)

    def set_model(
        self, name: str, *, reasoning: bool | None = None, replay_reasoning: bool | None = None
    ) -> None:
        """Treat `name` as a reasoning model (or not), and say whether it
        requires its reasoning text back after tool calls."""
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string")
        for value in (reasoning, replay_reasoning):
            if value is not None and not isinstance(value, bool):
                raise ValueError("reasoning and replayReasoning must be booleans")
        if reasoning is not None:
            self.models.reasoning[name] = reasoning
        if replay_reasoning is not None:
            self.models.replay[name] = replay_reasoning

    def configure_cache(
        self,
        *,
        enabled: bool | None = None,
        min_tokens: int | None = None,
        ttl: float | None = None,
    ) -> None:
        """The prompt cache emulation: on or off, its minimum prefix, its entries' life."""
        if enabled is not None and not isinstance(enabled, bool):
            raise ValueError("enabled must be a boolean")
        if min_tokens is not None and (
            isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0
        ):
            raise ValueError("minTokens must be an integer >= 0")
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0
        ):
            raise ValueError("ttl must be a number > 0")
        self.cache.configure(enabled=enabled, min_tokens=min_tokens, ttl=ttl)

    def reset(self) -> None:
        """Forget queued replies, rules, latencies, default arguments, model
        settings, the prompt cache (and its settings) and the log."""
        self._queues.clear()
        self._rules.clear()
        self._latency.clear()
        self._default_args.clear()
        self.models = ModelRules()
        self.cache = PromptCache()
        self.log.clear()
        self.raw_bodies.clear()
        self._write_log_line({"type": "reset", "ts": time.time()})

    def _choose(self, purpose: str, view: RequestView) -> tuple[Reply, str]:
        queue = self._queues.get(purpose)
        if queue:
            return queue.popleft(), "queue"
        for rule in self._rules:
            if rule.purpose == purpose and rule.match in view.last_user_text:
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times == 0:
                        self._rules.remove(rule)
                return rule.reply, "rule"
        if purpose == "compact" and view.forced_tool is not None:
            arguments = standin_summary(view.last_user_text)
            return Reply(tool_calls=(ScriptedToolCall(view.forced_tool, arguments),)), "standin"
        return default_reply(view), "default"

    # --- the log -------------------------------------------------------------------

    def _write_log_line(self, entry: dict[str, Any]) -> None:
        if self._log_file is not None:
            self._log_file.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._log_file.flush()

    def _record(self, entry: dict[str, Any]) -> None:
        self.log.append(entry)
        self._write_log_line(entry)
        if self._log_grew is not None:
            self._log_grew.set()
            self._log_grew = asyncio.Event()

    def requests(self, purpose: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.log
            if e["type"] == "request" and (purpose is None or e["purpose"] == purpose)
        ]

    # The documented test API takes a timeout, like ModelServerThread.wait_for.
    async def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """The first log entry, past or future, matching `predicate`; TimeoutError after
        `timeout` seconds."""
        checked = 0
        async with asyncio.timeout(timeout):
            while True:
                # reset() may have shortened the log: scan it again from the start.
                if checked > len(self.log):
                    checked = 0
                for entry in self.log[checked:]:
                    if predicate(entry):
                        return entry
                checked = len(self.log)
                if self._log_grew is None:
                    self._log_grew = asyncio.Event()
                await self._log_grew.wait()

    # --- connections -----------------------------------------------------------------

    async def wait_accepted(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` TCP connections have been accepted (TimeoutError after `timeout`)."""
        await self._wait_count(lambda: self.accepted, count, timeout)

    async def wait_answered(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` requests of any kind have been answered in full, their
        last byte written (TimeoutError after `timeout`)."""
        await self._wait_count(lambda: self.answered, count, timeout)

    async def wait_closed(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` TCP connections have ended, by either side (TimeoutError
        after `timeout`)."""
        await self._wait_count(lambda: self.closed, count, timeout)

    async def _wait_count(self, value: Callable[[], int], count: int, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while value() < count:
                if self._counted is None:
                    self._counted = asyncio.Event()
                await self._counted.wait()

    def _count_changed(self) -> None:
        # Waiters wake, re-check their own count, and wait on a fresh Event.
        changed, self._counted = self._counted, None
        if changed is not None:
            changed.set()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._server is None:
            # Accepted just as stop() ran: stop() no longer sees this handler.
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        conn = Connection(reader, writer)
        self.accepted += 1
        conn.number = self.accepted
        self._count_changed()
        try:
            await self._serve(conn)
        except ClientGone:
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections. Ending normally here keeps
            # asyncio's stream callback from logging the cancel as an error.
            if self._server is not None:
                raise
        except Exception:
            # A bug must cost one connection, never the server.
            _log.exception("model server: unexpected error while serving a connection")
        finally:
            try:
                await conn.close()
            except asyncio.CancelledError:
                pass
            if task is not None:
                self._connections.discard(task)
            self.closed += 1
            self._count_changed()

    async def _serve(self, conn: Connection) -> None:
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout):
                    request = await conn.read_request()
            except TimeoutError:
                return  # idle too long (or a request sent too slowly): closed
            except HTTPError as exc:
                self._bad_request(None, exc.status, exc.message)
                body = _json_bytes({"error": {"message": exc.message, "type": "invalid_request"}})
                await conn.send(exc.status, body, _JSON_HEADERS, keep_alive=False)
                return
            if request is None:
                return
            if self.close_every:
                # Every answer then says `connection: close` and ends it.
                request.headers["connection"] = "close"
            reusable = await self._dispatch(conn, request)
            self.answered += 1
            self._count_changed()
            if not reusable or not request.keep_alive:
                return

    async def _dispatch(self, conn: Connection, request: Request) -> bool:
        """Answer one request; False when the connection cannot be reused."""
        keep = request.keep_alive
        path, method = request.path, request.method
        api: Api | None = None
        if path == "/v1/chat/completions":
            api = "openai"
        elif path == "/v1/messages":
            api = "anthropic"
        if api is not None:
            if method != "POST":
                return await self._plain(conn, request, 405, {"error": "use POST"})
            return await self._model_request(conn, request, api)
        if path == "/v1/models":
            if method != "GET":
                return await self._plain(conn, request, 405, {"error": "use GET"})
            body = _json_bytes(models_body(self.context_window))
            await conn.send(200, body, _JSON_HEADERS, keep_alive=keep)
            return True
        if path.startswith("/_agentd/"):
            return await self._control(conn, request)
        return await self._plain(conn, request, 404, {"error": f"no such path: {path}"})

    async def _plain(self, conn: Connection, request: Request, status: int, body: Any) -> bool:
        await conn.send(status, _json_bytes(body), _JSON_HEADERS, keep_alive=request.keep_alive)
        return True

    # --- control endpoints ---------------------------------------------------------------

    async def _control(self, conn: Connection, request: Request) -> bool:
        name = request.path.removeprefix("/_agentd/")
        if name == "log":
            if request.method != "GET":
                return await self._plain(conn, request, 405, {"error": "use GET"})
            return await self._plain(conn, request, 200, self.log)
        handlers: dict[str, Callable[[Any], JSONDict]] = {
            "enqueue": self._control_enqueue,
            "rule": self._control_rule,
            "latency": self._control_latency,
            "default_arguments": self._control_default_arguments,
            "context_window": self._control_context_window,
            "model": self._control_model,
            "cache": self._control_cache,
            "reset": self._control_reset,
        }
        handler = handlers.get(name)
        if handler is None:
            return await self._plain(conn, request, 404, {"error": f"no such path: {request.path}"})
        if request.method != "POST":
            return await self._plain(conn, request, 405, {"error": "use POST"})
        try:
            data = json.loads(request.body) if request.body.strip() else {}
            if not isinstance(data, dict):
                raise ValueError("the body must be a JSON object")
            result = handler(data)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            return await self._plain(conn, request, 400, {"error": str(exc)})
        return await self._plain(conn, request, 200, {"ok": True, **result})

    @staticmethod
    def _purpose(data: JSONDict) -> str:
        purpose = data.get("purpose", "main")
        if not isinstance(purpose, str) or not purpose:
            raise ValueError("purpose must be a non-empty string")
        return purpose

    def _control_enqueue(self, data: JSONDict) -> JSONDict:
        purpose = self._purpose(data)
        if "replies" in data:
            replies = data["replies"]
            if not isinstance(replies, list):
                raise ValueError("replies must be a list")
        elif "reply" in data:
            replies = [data["reply"]]
        else:
            raise ValueError("give reply or replies")
        # Validate them all first, so that a bad one enqueues none.
        parsed = [parse_reply(r) for r in replies]
        self._queues.setdefault(purpose, deque()).extend(parsed)
        return {"queued": len(self._queues[purpose])}

    def _control_rule(self, data: JSONDict) -> JSONDict:
        match, reply, times = data.get("match"), data.get("reply"), data.get("times")
        if not isinstance(match, str):
            raise ValueError("match must be a string")
        if not isinstance(reply, dict):
            raise ValueError("reply must be an object")
        self.add_rule(match, reply, self._purpose(data), times)
        return {}

    def _control_latency(self, data: JSONDict) -> JSONDict:
        seconds = data.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError("seconds must be a number")
        self.set_latency(self._purpose(data), seconds)
        return {}

    def _control_default_arguments(self, data: JSONDict) -> JSONDict:
        tool, arguments = data.get("tool"), data.get("arguments")
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            raise ValueError("give tool (a string) and arguments (an object)")
        self.set_default_arguments(tool, arguments)
        return {}

    def _control_context_window(self, data: JSONDict) -> JSONDict:
        self.set_context_window(data.get("tokens"))
        return {}

    def _control_model(self, data: JSONDict) -> JSONDict:
        unknown = set(data) - {"name", "reasoning", "replayReasoning"}
        if unknown:
            raise ValueError(f"unknown keys: {sorted(unknown)}")
        name = data.get("name")
        if not isinstance(name, str):
            raise ValueError("name must be a string")
        self.set_model(
            name, reasoning=data.get("reasoning"), replay_reasoning=data.get("replayReasoning")
        )
        return {}

    def _control_cache(self, data: JSONDict) -> JSONDict:
        unknown = set(data) - {"enabled", "minTokens", "ttl"}
        if unknown:
            raise ValueError(f"unknown keys: {sorted(unknown)}")
        self.configure_cache(
            enabled=data.get("enabled"), min_tokens=data.get("minTokens"), ttl=data.get("ttl")
        )
        return {}

    def _control_reset(self, data: JSONDict) -> JSONDict:
        self.reset()
        return {}

    # --- model requests ----------------------------------------------------------------

    async def _model_request(self, conn: Connection, request: Request, api: Api) -> bool:
        keep = request.keep_alive
        thinking: int | None = None
        try:
            body = json.loads(request.body)
            view = inspect_request(api, body)
            if api == "openai":
                check_openai(body, self.models)
                use = self.cache.openai(body)
            else:
                thinking = check_anthropic(body, self.signer)
                use = self.cache.anthropic(body)
        except (ValueError, BadRequest) as exc:
            # TooManyBreakpoints is a ValueError the API words itself.
            if isinstance(exc, BadRequest | TooManyBreakpoints):
                message = str(exc)
            else:
                message = f"invalid JSON body: {exc}"
            param = exc.param if isinstance(exc, BadRequest) else None
            code = exc.code if isinstance(exc, BadRequest) else None
            self._bad_request(request.path, 400, message)
            body = _json_bytes(error_body(api, 400, message, param=param, code=code))
            await conn.send(400, body, _JSON_HEADERS, keep_alive=keep)
            return True
        purpose = request.headers.get("x-agentd-purpose", "").strip() or "main"
        overflow = self._overflow(api, view)
        if overflow is not None:
            # Refused before a reply is chosen, as a real API refuses it:
            # nothing scripted is used up.
            reply, source = overflow, "overflow"
        else:
            reply, source = self._choose(purpose, view)
        if thinking is not None and not (reply.thinking or reply.redacted_thinking):
            # With thinking on, Claude's answers always begin with it.
            reply = dataclasses.replace(reply, thinking="Thinking about the request.")
        self._next_id += 1
        rid = self._next_id
        if self.keep_raw_bodies:
            self.raw_bodies[rid] = request.body
        headers = {
            k: "<redacted>" if k in _SECRET_HEADERS else v for k, v in request.headers.items()
        }
        self._record(
            {
                "type": "request",
                "id": rid,
                "ts": time.time(),
                "arrivedTs": request.arrived,
                "completeTs": request.complete,
                "connection": conn.number,
                "purpose": purpose,
                "api": api,
                "path": request.path,
                "headers": headers,
                "body": body,
                "replySource": source,
                "cache": {"input": use.total, "read": use.read, "write": use.write},
            }
        )
        progress = _Progress(rid)
        conn.watch()
        try:
            ttft = reply.ttft + self._latency.get(purpose, 0.0)
            if reply.hang_up:
                self._fault(rid, "hang_up")
                await conn.close()
                return False
            if reply.status is not None:
                return await self._fault_status(
                    conn, request, api, reply, rid, ttft, overflow=source == "overflow"
                )
            out = resolve(reply, view, rid, self._default_args, (use.total, use.read, use.write))
            if api == "anthropic":
                out.signature = self.signer.sign("".join(out.thinking))
                if reply.redacted_thinking:
                    out.redacted = self.signer.redact(reply.redacted_thinking)
            if view.stream:
                return await self._stream(conn, request, api, view, reply, out, progress, ttft)
            return await self._whole(conn, request, api, view, reply, out, progress, ttft)
        except ClientGone:
            entry = {"type": "disconnect", "id": rid, "ts": time.time()}
            self._record({**entry, "chunksSent": progress.chunks_sent})
            return False
        finally:
            await conn.unwatch()

    def _overflow(self, api: Api, view: RequestView) -> Reply | None:
        """The error reply for a request over the context window, else None."""
        window = self.context_window
        if window is None:
            return None
        used, room = view.input_tokens, view.max_tokens
        if api == "openai":
            if used + room <= window:
                return None
            message = (
                f"This model's maximum context length is {window} tokens. However, you "
                f"requested {used + room} tokens ({used} in the messages, {room} in the "
                "completion). Please reduce the length of the messages or completion."
            )
            body: JSONDict = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        else:
            if used > window:
                message = f"prompt is too long: {used} tokens > {window} maximum"
            elif used + room > window:
                message = (
                    f"input length and `max_tokens` exceed context limit: {used} + {room} > "
                    f"{window}, decrease input length or `max_tokens` and try again"
                )
            else:
                return None
            body = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": message},
            }
        return Reply(status=400, error_body=body)

    def _bad_request(self, path: str | None, status: int, message: str) -> None:
        entry = {"type": "bad_request", "ts": time.time(), "path": path}
        self._record({**entry, "status": status, "message": message})

    def _fault(self, rid: int, kind: str, **fields: Any) -> None:
        self._record({"type": "fault", "id": rid, "ts": time.time(), "kind": kind, **fields})

    async def _fault_status(
        self,
        conn: Connection,
        request: Request,
        api: Api,
        reply: Reply,
        rid: int,
        ttft: float,
        *,
        overflow: bool = False,
    ) -> bool:
        await conn.pause(ttft)
        status = reply.status
        assert status is not None
        headers = dict(_JSON_HEADERS)
        if reply.retry_after is not None:
            headers["retry-after"] = reply.retry_after
        body = reply.error_body if reply.error_body is not None else error_body(api, status)
        if overflow:
            self._fault(rid, "overflow", status=status, window=self.context_window)
        else:
            self._fault(rid, "status", status=status)
        await conn.send(status, _json_bytes(body), headers, keep_alive=request.keep_alive)
        return True

    def _first_chunk(self, progress: _Progress) -> None:
        if not progress.first_logged:
            progress.first_logged = True
            self._record({"type": "first_chunk", "id": progress.request_id, "ts": time.time()})

    def _complete(self, progress: _Progress) -> None:
        self._first_chunk(progress)
        self._record({"type": "complete", "id": progress.request_id, "ts": time.time()})

    async def _whole(
        self,
        conn: Connection,
        request: Request,
        api: Api,
        view: RequestView,
        reply: Reply,
        out: Output,
        progress: _Progress,
        ttft: float,
    ) -> bool:
        """A non-streaming answer: one JSON body (faults cut or spoil that body)."""
        build = openai_body if api == "openai" else anthropic_body
        data = _json_bytes(build(out, model=view.model, request_id=progress.request_id))
        await conn.pause(ttft)
        if reply.stall_after is not None:
            self._fault(progress.request_id, "stall", chunksSent=0)
            head = {**_JSON_HEADERS, "content-length": str(len(data))}
            await conn.send_head(200, head, keep_alive=request.keep_alive)
            await conn.wait_gone()
            raise ClientGone("client left a stalled response")
        if reply.drop_after is not None:
            self._fault(progress.request_id, "drop", chunksSent=0)
            head = {**_JSON_HEADERS, "content-length": str(len(data))}
            await conn.send_head(200, head, keep_alive=request.keep_alive)
            await conn.write(data[: len(data) // 2])
            conn.abort()
            return False
        if reply.malformed == "error_event":
            self._fault(progress.request_id, "malformed", malformed=reply.malformed)
            body = _json_bytes(error_body(api, 500))
            await conn.send(500, body, _JSON_HEADERS, keep_alive=request.keep_alive)
            self._complete(progress)
            return True
        if reply.malformed == "bad_json":
            self._fault(progress.request_id, "malformed", malformed=reply.malformed)
            data = data[: len(data) // 2]
        await conn.send(200, data, _JSON_HEADERS, keep_alive=request.keep_alive)
        self._complete(progress)
        return True

    async def _stream(
        self,
        conn: Connection,
        request: Request,
        api: Api,
        view: RequestView,
        reply: Reply,
        out: Output,
        progress: _Progress,
        ttft: float,
    ) -> bool:
        rid = progress.request_id
        if api == "openai":
            frames = openai_stream(
                out, model=view.model, request_id=rid, include_usage=view.include_usage
            )
        else:
            frames = anthropic_stream(out, model=view.model, request_id=rid)
        if reply.malformed is not None:
            self._fault(rid, "malformed", malformed=reply.malformed)
        if reply.malformed == "error_event":
            # The error ends the stream, as a real API does: nothing valid follows it.
            frames = frames[: _after_content(frames, reply.error_after)]
            frames.append(stream_error_frame(api))
        elif reply.malformed == "bad_json":
            at = _after_content(frames, reply.error_after)
            frames.insert(at, bad_json_frame(api))
        elif reply.malformed == "comments_crlf":
            frames = comments_crlf(frames)

        cut: int | None = None
        cut_kind = ""
        if reply.drop_after is not None:
            total = sum(f.content for f in frames)
            n = reply.drop_after
            if out.tool_calls:
                # Never let the last argument fragment through: a drop scripted on a
                # tool call must cut its JSON, not land after it is complete.
                n = min(n, total - 1)
            cut, cut_kind = _after_content(frames, n), "drop"
        elif reply.stall_after is not None:
            n = reply.stall_after
            cut, cut_kind = _after_content(frames, n), "stall"

        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "x-request-id": f"req_agentd{rid:08d}",
        }
        # HTTP/1.0 has no chunked encoding: there the end of the stream is the close.
        chunked = request.version == "HTTP/1.1"
        if self.hold_headers:
            # Nothing at all, not even the status line, until the first token.
            await conn.pause(ttft)
        await conn.start_stream(200, headers, keep_alive=request.keep_alive, chunked=chunked)
        if not self.hold_headers:
            await self._wait_first_token(conn, ttft, reply.ping_every)
        split = reply.malformed == "split_events"
        carry = b""
        for i, frame in enumerate(frames):
            if i == cut:
                break
            if frame.content and progress.chunks_sent > 0:
                await conn.pause(reply.chunk_delay)
            if split:
                # Hold back the tail of each frame so that pieces straddle events.
                pieces = split_odd(carry + frame.data)
                carry = pieces.pop() if i < len(frames) - 1 and pieces else b""
                for piece in pieces:
                    await conn.write_chunk(piece)
            else:
                await conn.write_chunk(frame.data)
            if frame.content:
                progress.chunks_sent += 1
                self._first_chunk(progress)
        if cut is not None and cut < len(frames):
            self._fault(rid, cut_kind, chunksSent=progress.chunks_sent)
            if cut_kind == "drop":
                conn.abort()
                return False
            await conn.wait_gone()
            raise ClientGone("client left a stalled stream")
        await conn.write_chunk(carry)
        await conn.end_stream()
        self._complete(progress)
        return chunked

    async def _wait_first_token(self, conn: Connection, ttft: float, ping_every: float) -> None:
        """`ttft` seconds, with an SSE comment every `ping_every` (if > 0)."""
        if ping_every <= 0:
            await conn.pause(ttft)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + ttft
        while (left := end - loop.time()) > 0:
            await conn.pause(min(ping_every, left))
            if loop.time() < end:
                await conn.write_chunk(b": keep-alive\n\n")


def _after_content(frames: list[Frame], n: int) -> int:
    """Index just after the n-th content frame (after the last one if fewer; 1 if none)."""
    if n <= 0:
        return 0
    seen = 0
    last = 0
    for i, frame in enumerate(frames):
        if frame.content:
            seen += 1
            last = i + 1
            if seen == n:
                return last
    return last or 1
