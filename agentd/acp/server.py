"""The ACP daemon over stdio: read loop, dispatch, lifecycle.

Start-up is kept cheap: only the stdlib and agentd's light modules (`rpc`,
`caps`, the `handlers` table) are imported before `initialize` is answered.
The rest (pydantic, httpx, the turn engine) is imported, and the `App` built
with its provider's HTTP client, by the shared `Warmup` right after that
reply; the first request that needs it awaits the warm-up, as the LSP front
end does. `session/new` needs only its first stage (the settings): it is
answered while the App is still being built.

Routing: `handlers.HANDLERS` is the one table of methods; the server knows
only `initialize` (it starts the warm-up) and the notifications
(`session/cancel`; `$/cancel_request`, which ends a `nes/suggest`; the
`document/*`, `nes/accept` and `nes/reject` ones, handed to
`agentd.acp.nes`), and advertises `session/load`, the session capabilities
(`list`, `resume`, `close`, `fork`, `delete`), `providers`, `nes`,
`auth.logout` and the extension methods from the table.

Every request is answered exactly once: by its handler's result, by the
error it raised (`RpcError` as is, agentd's `ProtocolError`s mapped in
`handlers.dispatch`, anything else `-32603`, logged), or, when the daemon
shuts down under it, by `-32800`. A handler failure never stops the loop.

Cancellation: `session/cancel` marks the session's prompt (registered when
its request arrived, so a cancel that races the prompt's start still counts)
and cancels the task running it; the prompt handler turns that cancel (or
the core's, on `_agentd/session/reset`, `close` or `session/delete`) into `stopReason:
"cancelled"`. A cancel caused by shutdown is not turned into an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd import PROTOCOL_VERSION, __version__
from agentd.acp import nes
from agentd.acp.caps import ClientCaps
from agentd.acp.handlers import HANDLERS, dispatch
from agentd.acp.mcp_tunnels import AcpTunnels
from agentd.acp.nes import NesState, position_encoding
from agentd.acp.rpc import NO_REPLY, Connection, LineSplitter, RpcError, parse_message
from agentd.answers import unreadable
from agentd.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    SESSION_BUSY,
    internal_error_message,
)
from agentd.stdio import Pump, on_terminate, open_pump, open_writer
from agentd.vision import peek_images
from agentd.warmup import Warmup

if TYPE_CHECKING:
    from agentd.acp.elicitation import AcpElicitor
    from agentd.acp.tools import AcpToolRunner
    from agentd.app import App

log = logging.getLogger("agentd.acp")

ACP_VERSION = 1
# How long a cancelled prompt waits for the client to answer the requests it
# abandoned (permission requests answered "cancelled", terminal releases).
DRAIN_TIMEOUT = 5.0
SHUTDOWN_TIMEOUT = 10.0

NOTIFICATIONS_SENT = [
    "_agentd/memory",
    "_agentd/memory/changed",
    "_agentd/usage",
    "_agentd/compaction",
]
# `agentCapabilities.sessionCapabilities` entries, each advertised when its
# `session/<name>` method is in the handler table.
SESSION_CAPABILITIES = ("list", "resume", "close", "fork", "delete")
# Requests `$/cancel_request` ends (a prompt has `session/cancel`).
CANCELLABLE = ("nes/suggest",)


@dataclass(eq=False)
class PromptState:
    """A `session/prompt` from its arrival to its reply."""

    session_id: str
    cancel_requested: bool = False
    # True once the core runs it: from then on a cancel cancels the request's task.
    started: bool = False


@dataclass(eq=False)
class Request:
    id: Any
    method: str
    params: Any
    prompt: PromptState | None = None
    after_reply: list[Callable[[], None]] = field(default_factory=list)
    answered: bool = False
    # Set by the client's `$/cancel_request`: a cancel before its handler ran is not shutdown.
    cancelled: bool = False


class AcpServer:
    def __init__(self, write: Callable[[bytes], None]) -> None:
        self.conn = Connection(write)
        self.initialized = False
        self.caps = ClientCaps()
        # The App, built off the critical path; its params models are loaded with it.
        self.warmup = Warmup(
            imports=("agentd.acp.params",),
            first=("NewSessionParams",),
            later=("agentd.acp.tools",),
        )
        self.warmup.listeners.append(self._attach)
        self.prompts: dict[str, PromptState] = {}
        # Set when the daemon stops: a cancel from then on is not the user's.
        self.closing = False
        self._abandoned: dict[str, set[asyncio.Future[Any]]] = {}
        self._tasks: dict[asyncio.Task[None], Request] = {}
        self._runner: AcpToolRunner | None = None
        self._elicitor: AcpElicitor | None = None
        # The editor's own MCP servers (`type: "acp"`), reached over this connection.
        self.tunnels = AcpTunnels(self.conn)
        # Next edit suggestions: their sessions, documents and suggestions in flight.
        self.nes = NesState()

    def _attach(self, app: App) -> None:
        app.memory_listeners.append(self._memory_changed)
        app.mcp.tunnels = self.tunnels

    def _memory_changed(self, root: Path, paths: list[Path]) -> None:
        self.conn.notify(
            "_agentd/memory/changed",
            {"workspaceRoot": str(root), "paths": [str(p) for p in paths]},
        )

    @property
    def runner(self) -> AcpToolRunner:
        if self._runner is None:
            from agentd.acp.tools import AcpToolRunner

            self._runner = AcpToolRunner(self, self.caps)
        return self._runner

    @property
    def elicitor(self) -> AcpElicitor:
        if self._elicitor is None:
            from agentd.acp.elicitation import AcpElicitor

            self._elicitor = AcpElicitor(self.conn, self.caps)
        return self._elicitor

    # --- the channel the tool runner uses (tools.ClientChannel) ------------------------

    def start_request(self, method: str, params: dict[str, Any]) -> asyncio.Future[Any]:
        return self.conn.start_request(method, params)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.conn.notify(method, params)

    def abandon(self, session_id: str, fut: asyncio.Future[Any]) -> None:
        if fut.done():
            return
        pending = self._abandoned.setdefault(session_id, set())
        pending.add(fut)
        fut.add_done_callback(pending.discard)

    async def drain(self, session_id: str) -> None:
        """Wait (bounded) until the client answered what a cancelled prompt abandoned."""
        pending = self._abandoned.pop(session_id, set())
        if pending:
            _, late = await asyncio.wait(pending, timeout=DRAIN_TIMEOUT)
            if late:
                log.warning("%d client request(s) unanswered after a cancel", len(late))

    # --- dispatch ------------------------------------------------------------------------

    def handle_line(self, line: bytes | None) -> None:
        if line is None:
            self.conn.respond_error(None, RpcError(PARSE_ERROR, "Parse error: message too long"))
            return
        message, error, reply_id = parse_message(line)
        if message is None:
            assert error is not None
            log.warning("bad message: %s", error.message)
            # An answer to one of agentd's requests (it names no method) that
            # cannot be read (too deep, a number too long) ends that request
            # now, instead of leaving it to its timeout or answering an answer.
            if b'"method"' not in line and self.conn.fail(
                reply_id, RpcError(error.code, unreadable(error.message))
            ):
                return
            if reply_id is not NO_REPLY:
                self.conn.respond_error(reply_id, error)
            return
        method = message.get("method")
        if method is None:
            self.conn.on_response(message)
        elif "id" in message:
            self._on_request(message["id"], method, message.get("params"))
        else:
            self._on_notification(method, message.get("params"))

    def _on_request(self, msg_id: Any, method: str, params: Any) -> None:
        if method == "initialize":
            try:
                self.conn.respond(msg_id, self.initialize(params))
            except RpcError as exc:
                self.conn.respond_error(msg_id, exc)
                return
            self.warmup.start()
            return
        if not self.initialized:
            self.conn.respond_error(
                msg_id, RpcError(INVALID_REQUEST, f"{method} before initialize")
            )
            return
        if method not in HANDLERS:
            self.conn.respond_error(
                msg_id, RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            )
            return
        request = Request(msg_id, method, params)
        if method == "session/prompt":
            sid = params.get("sessionId") if isinstance(params, dict) else None
            if isinstance(sid, str):
                if sid in self.prompts:
                    # Prompts are not queued: the user sees at once that one still runs.
                    self.conn.respond_error(
                        msg_id, RpcError(SESSION_BUSY, f"session {sid} is already running a prompt")
                    )
                    return
                request.prompt = self.prompts[sid] = PromptState(sid)
        task = asyncio.get_running_loop().create_task(
            self._run_request(request), name=f"acp {method}"
        )
        self._tasks[task] = request
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        request = self._tasks.pop(task)
        if not request.answered:
            # Cancelled by shutdown (or the client), maybe before it started: still answered.
            why = f"{request.method} cancelled" if request.cancelled else "agentd is shutting down"
            self._reply_error(request, RpcError(REQUEST_CANCELLED, why))
        self._forget_prompt(request)

    def _forget_prompt(self, request: Request) -> None:
        state = request.prompt
        if state is not None and self.prompts.get(state.session_id) is state:
            del self.prompts[state.session_id]

    def _reply_error(self, request: Request, error: RpcError) -> None:
        request.answered = True
        self.conn.respond_error(request.id, error)

    async def _run_request(self, request: Request) -> None:
        try:
            result = await dispatch(self, request)
        except RpcError as exc:
            self._reply_error(request, exc)
        except Exception as exc:
            log.exception("%s failed", request.method)
            message = internal_error_message(request.method, exc)
            self._reply_error(request, RpcError(INTERNAL_ERROR, message))
        else:
            request.answered = True
            self.conn.respond(request.id, result)
        finally:
            self._forget_prompt(request)
        for callback in request.after_reply:
            try:
                callback()
            except Exception:
                log.exception("after-reply work of %s failed", request.method)

    def _on_notification(self, method: str, params: Any) -> None:
        if not self.initialized:
            return
        if method == "session/cancel":
            self.cancel(params)
        elif method == "$/cancel_request":
            self.cancel_request(params)
        elif method.startswith("document/") or method in ("nes/accept", "nes/reject"):
            nes.on_notification(self, method, params)
        elif method == "mcp/message":
            self.tunnels.on_notification(params)
        elif method.startswith("_"):
            log.debug("extension notification %s ignored", method)
        else:
            log.info("unknown notification %.200r ignored", method)

    def cancel(self, params: Any) -> None:
        sid = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(sid, str):
            log.warning("session/cancel ignored: sessionId must be a string")
            return
        state = self.prompts.get(sid)
        if state is None or state.cancel_requested:
            return
        state.cancel_requested = True
        app = self.warmup.get()
        if state.started and app is not None:
            app.core.cancel(sid)

    def cancel_request(self, params: Any) -> None:
        """ACP `$/cancel_request`: a `nes/suggest` named is ended (-32800);
        prompts are cancelled by `session/cancel`, other requests run to their end."""
        msg_id = params.get("requestId") if isinstance(params, dict) else None
        for task, request in self._tasks.items():
            if request.id == msg_id and request.method in CANCELLABLE and not task.done():
                request.cancelled = True
                task.cancel()
                return
        log.debug("$/cancel_request for no request agentd can cancel ignored")

    # --- initialize (no heavy imports here) ---------------------------------------------

    def initialize(self, params: Any) -> dict[str, Any]:
        if self.initialized:
            raise RpcError(INVALID_REQUEST, "initialize was already received")
        if not isinstance(params, dict):
            raise _bad_param("params", "must be an object")
        version = params.get("protocolVersion")
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 65536:
            raise _bad_param("protocolVersion", "must be an integer between 0 and 65535")
        caps = params.get("clientCapabilities")
        if caps is not None and not isinstance(caps, dict):
            raise _bad_param("clientCapabilities", "must be an object")
        self.caps = ClientCaps.from_json(caps)
        self.nes.encoding = position_encoding(caps)
        meta = params.get("_meta")
        options = meta.get("agentd") if isinstance(meta, dict) else None
        if isinstance(options, dict):
            # The same settings an LSP editor passes as initializationOptions;
            # client tools come from clientCapabilities instead.
            self.warmup.options = {k: v for k, v in options.items() if k != "clientTools"}
        self.initialized = True
        # Images are advertised when a model the user can pick takes them
        # (a session on another model gets a clear error instead).
        image = peek_images(self.warmup.options)
        return {
            # We speak version 1 only; a client asking for another gets our latest.
            "protocolVersion": ACP_VERSION,
            "agentCapabilities": {
                "loadSession": "session/load" in HANDLERS,
                "promptCapabilities": {"image": image, "audio": False, "embeddedContext": True},
                # `acp`: MCP servers the editor provides over this connection.
                "mcpCapabilities": {"http": True, "sse": True, "acp": True},
                "sessionCapabilities": {
                    **{name: {} for name in SESSION_CAPABILITIES if f"session/{name}" in HANDLERS},
                    # Taken by session/new, load, resume and fork; reported by session/list.
                    "additionalDirectories": {},
                },
                # `logout` drops what `providers/set` holds for the connection.
                "auth": {"logout": {}} if "logout" in HANDLERS else {},
                # The editor may route the model requests (`providers/*`).
                **({"providers": {}} if "providers/set" in HANDLERS else {}),
                # Next edit suggestions (`nes/*`, agentd.acp.nes), positions in this encoding.
                **({"nes": nes.capabilities()} if "nes/suggest" in HANDLERS else {}),
                "positionEncoding": self.nes.encoding,
                "_meta": {
                    "agentd": {
                        "version": __version__,
                        "protocolVersion": PROTOCOL_VERSION,
                        "clientTools": self.caps.tool_names(),
                        "daemonTools": ["read_file", "list_dir", "search", "glob"],
                        "extMethods": [m for m in HANDLERS if m.startswith("_")],
                        "extNotifications": NOTIFICATIONS_SENT,
                    }
                },
            },
            "agentInfo": {"name": "agentd", "title": "agentd", "version": __version__},
            # The key comes from AGENTD_API_KEY or the config file, never from ACP.
            "authMethods": [],
        }

    # --- the main loop -------------------------------------------------------------------

    async def serve(self, pump: Pump, stop: asyncio.Event | None = None) -> int:
        """Read and dispatch until stdin ends or `stop` is set, then shut down."""
        loop = asyncio.get_running_loop()
        reading = loop.create_task(self._read_loop(pump), name="acp-read")
        waits: list[asyncio.Task[Any]] = [reading]
        if stop is not None:
            waits.append(loop.create_task(stop.wait(), name="acp-stop"))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            log.info("stdin closed; exiting")
        else:
            reading.cancel()
            await asyncio.wait([reading])
        for task in waits:
            task.cancel()
        await self.aclose()
        return 0

    async def _read_loop(self, pump: Pump) -> None:
        # Each line is dispatched from the read callback that completed it.
        lines = LineSplitter(self._on_line)
        await pump(lines.feed)
        lines.end()

    def _on_line(self, line: bytes | None) -> None:
        try:
            self.handle_line(line)
        except Exception:
            log.exception("failed to dispatch a message")

    async def aclose(self) -> None:
        """Stop serving: cancel running prompts, let other requests finish (bounded)."""
        self.closing = True
        for task, request in list(self._tasks.items()):
            if request.method in ("session/prompt", *CANCELLABLE):
                task.cancel()
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=SHUTDOWN_TIMEOUT)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=SHUTDOWN_TIMEOUT)
        # While the editor can still read it: its MCP connections are closed.
        await self.tunnels.aclose()
        self.conn.close()
        await self.warmup.aclose()


def _bad_param(name: str, message: str) -> RpcError:
    return RpcError(
        INVALID_PARAMS,
        f"Invalid params for initialize: {name}: {message}",
        {"fields": [{"field": name, "message": message}]},
    )


# --- stdio --------------------------------------------------------------------------------


async def _main(prefix: bytes = b"") -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def lost() -> None:
        log.info("stdout closed; exiting")
        stop.set()

    def terminated() -> None:
        log.info("stop signal; shutting down")
        stop.set()

    writer = await open_writer(loop, sys.stdout.buffer, lost)
    server = AcpServer(writer.write)
    pump = await open_pump(loop, sys.stdin.buffer, prefix)
    # The end of stdin, a closed stdout and SIGTERM (stdin may stay open) all
    # end in the same shutdown: prompts cancelled, extraction drained, exit 0.
    with on_terminate(loop, terminated):
        return await server.serve(pump, stop)


def run_acp_stdio(prefix: bytes = b"") -> int:
    """Entry point of `agentd serve --acp` (and `python -m agentd.acp`);
    `prefix`: bytes already read from stdin (framing detection)."""
    return asyncio.run(_main(prefix))
