"""The daemon process over stdio: pygls server, read loop, lifecycle.

Start-up is kept as cheap as a bare pygls server: only pygls, lsprotocol and
the stdlib are imported before `initialize` is answered. The rest of agentd
(pydantic, httpx, the turn engine) is imported by the shared `Warmup` right
after the reply, and the first request that needs it awaits that warm-up.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import lsp_method

from agentd import PROTOCOL_VERSION, __version__
from agentd.agent.modes import DEFAULT_MODE, MODES
from agentd.decode import Undecodable, decode_body
from agentd.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    SESSION_BUSY,
    SESSION_NOT_FOUND,
    short_text,
)
from agentd.lsp import attrs_globals
from agentd.lsp.protocol import AgentdProtocol, agentd_converter
from agentd.lsp.transport import FrameSplitter
from agentd.stdio import Pump, on_terminate, open_pump, open_writer
from agentd.vision import peek_images
from agentd.warmup import Warmup

if TYPE_CHECKING:
    from agentd.app import App

log = logging.getLogger("agentd.lsp")

DAEMON_TOOLS = ["read_file", "list_dir", "search", "glob"]
_LSP_LEVELS = {"error": 1, "warning": 2, "info": 3, "debug": 4}
# Errors that answer a bad request: the client's doing, not agentd's.
_CLIENT_ERRORS = (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    INVALID_PARAMS,
    SESSION_NOT_FOUND,
    SESSION_BUSY,
)


def elicitation_modes(declared: Any) -> frozenset[str]:
    """The modes of `initializationOptions.elicitation` set to true."""
    if not isinstance(declared, dict):
        return frozenset()
    return frozenset(m for m in ("form", "url") if declared.get(m) is True)


class ServerProtocol(AgentdProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Any:
        result = yield from super().lsp_initialize(params)
        server = cast(AgentdServer, self._server)
        options = (
            params.initialization_options if isinstance(params.initialization_options, dict) else {}
        )
        server.warmup.options = options
        # Roots known now: their memory is indexed as soon as the App exists.
        folders = params.workspace_folders or []
        server.initial_roots = [f.uri for f in folders] or [
            r for r in (params.root_uri, params.root_path) if isinstance(r, str) and r
        ][:1]
        # The editor answers `agent/requestPermission` only when it says so.
        server.permissions_supported = options.get("requestPermission") is True
        # And `agent/elicit` in the modes it names (`elicitation: {form, url}`).
        server.elicitation_modes = elicitation_modes(options.get("elicitation"))
        declared = options.get("clientTools") or []
        names = [
            d if isinstance(d, str) else d.get("name")
            for d in declared
            if isinstance(d, str | dict)
        ]
        result.capabilities.experimental = {
            "agentd": {
                "protocolVersion": PROTOCOL_VERSION,
                "version": __version__,
                "clientTools": [n for n in names if isinstance(n, str)],
                "daemonTools": DAEMON_TOOLS,
                "memory": True,
                # "image" when a model the user can pick takes images.
                "promptContent": ["text", "resource_link", "resource"]
                + (["image"] if peek_images(options) else []),
                "mcp": True,
                "modes": [
                    {"id": m.id, "name": m.name, "description": m.description}
                    for m in MODES.values()
                ],
                "defaultMode": DEFAULT_MODE,
                "compaction": True,
                "forkSession": True,
                "deleteSession": True,
                "additionalDirectories": True,
            }
        }
        result.server_info = types.ServerInfo(name="agentd", version=__version__)
        self.initialized = True
        server.set_editor_log_level(options.get("logLevel"))
        msg_id = self.msg_id
        self.after_reply(msg_id, server.warmup.start)
        pid = params.process_id
        if pid:
            self.after_reply(msg_id, lambda: server.watch_editor(pid))
        return result


class AgentdServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "agentd",
            __version__,
            protocol_cls=ServerProtocol,
            converter_factory=agentd_converter,
            text_document_sync_kind=types.TextDocumentSyncKind.None_,
        )
        # The App, built off the critical path, with the modules its handlers need.
        self.warmup = Warmup(
            imports=("agentd.lsp.ext",),
            first=("NewSessionParams",),
            later=("agentd.lsp.updates", "agentd.lsp.permission"),
            release=attrs_globals.slim,
        )
        self.warmup.listeners.append(self._attach)
        self._stop: asyncio.Event | None = None
        self._editor_level = 2
        self._watchdog: asyncio.Task[None] | None = None
        self.exit_code: int | None = None
        # Workspace roots named by `initialize` (rootUri, workspaceFolders).
        self.initial_roots: list[str] = []
        self.permissions_supported = False
        self.elicitation_modes: frozenset[str] = frozenset()

    @property
    def agentd_protocol(self) -> ServerProtocol:
        proto = self.protocol
        assert isinstance(proto, ServerProtocol)
        return proto

    # --- the App's notifications ---------------------------------------------------

    def _attach(self, app: App) -> None:
        from agentd.lsp.progress import WorkDone

        app.memory_listeners.append(self._memory_changed)
        app.progress_factory = lambda title: WorkDone(self, title)
        # Before any session asks for them (the index is then ready by the first
        # prompt); this runs before the requests waiting for the App resume.
        # A session opened on one of them while the App was built had it
        # scanned ahead: started from that scan.
        app.start_known_roots(self.initial_roots, self.warmup.take_memory_ahead)

    def _memory_changed(self, root: Path, paths: list[Path]) -> None:
        self.agentd_protocol.notify(
            "memory/changed", {"workspaceRoot": str(root), "paths": [str(p) for p in paths]}
        )

    def client_supports_progress(self) -> bool:
        caps = getattr(self.agentd_protocol, "client_capabilities", None)
        window = getattr(caps, "window", None)
        return bool(getattr(window, "work_done_progress", False))

    # --- logging to the editor ---------------------------------------------------------

    def set_editor_log_level(self, level: Any) -> None:
        if isinstance(level, str) and level in _LSP_LEVELS:
            self._editor_level = _LSP_LEVELS[level]

    def log_to_editor(self, record: logging.LogRecord) -> None:
        lsp_type = (
            1
            if record.levelno >= logging.ERROR
            else 2
            if record.levelno >= logging.WARNING
            else 3
            if record.levelno >= logging.INFO
            else 4
        )
        if lsp_type > self._editor_level or not self.agentd_protocol.initialized:
            return
        # Short, as error replies are: a log line may quote what a client sent.
        message = short_text(record.getMessage())
        self.agentd_protocol.notify("window/logMessage", {"type": lsp_type, "message": message})

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Never a pop-up (pygls' default is window/showMessage). Errors that
        # answer a bad request are the client's, not ours: debug level.
        code = getattr(error, "code", None)
        level = logging.DEBUG if code in _CLIENT_ERRORS else logging.ERROR
        log.log(level, "%s: %s", getattr(source, "__name__", source), error)

    # --- editor process watchdog ---------------------------------------------------------

    def watch_editor(self, pid: int) -> None:
        from agentd.lsp.watchdog import watch_process

        self._watchdog = asyncio.get_running_loop().create_task(
            watch_process(pid, self._editor_gone), name="editor-watchdog"
        )

    def _editor_gone(self) -> None:
        log.warning("the editor process is gone; exiting")
        self.request_stop(1)

    def request_stop(self, code: int) -> None:
        if self.exit_code is None:
            self.exit_code = code
        if self._stop is not None:
            self._stop.set()

    # --- the main loop -------------------------------------------------------------------

    async def serve(self, stdin: BinaryIO, stdout: BinaryIO, prefix: bytes = b"") -> int:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        writer = await open_writer(loop, stdout, on_lost=lambda: self.request_stop(0))
        pump = await open_pump(loop, stdin, prefix)
        # SIGTERM (stdin may stay open) stops as stdin EOF does, exiting 0.
        with on_terminate(loop, self._terminated):
            return await self.serve_stream(pump, writer)

    def _terminated(self) -> None:
        log.info("stop signal; shutting down")
        self.request_stop(0)

    async def serve_stream(self, pump: Pump, writer: Any) -> int:
        """Serve one connection: `pump` hands its bytes over until its end,
        `writer` has pygls' writer interface (`write`, `close`). Shared by
        stdio and TCP."""
        loop = asyncio.get_running_loop()
        if self._stop is None:
            self._stop = asyncio.Event()
        proto = self.agentd_protocol
        proto.on_exit = self.request_stop
        proto.set_writer(writer)
        reader_task = loop.create_task(self._read_loop(pump), name="stdin-reader")
        stop_task = loop.create_task(self._stop.wait())
        await asyncio.wait([reader_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
        if reader_task.done() and self.exit_code is None:
            # stdin EOF without `exit`: LSP says exit code 1 unless shut down first.
            self.exit_code = 0 if proto._shutdown else 1
            failure = None if reader_task.cancelled() else reader_task.exception()
            if failure is not None:
                # Not an EOF: say what stopped the reader.
                why = repr(failure)[:300]
                log.error("reading stdin failed: %s; exiting with %s", why, self.exit_code)
            else:
                log.info("stdin closed; exiting with %s", self.exit_code)
        reader_task.cancel()
        stop_task.cancel()
        await self._cleanup()
        return self.exit_code if self.exit_code is not None else 1

    async def _read_loop(self, pump: Pump) -> None:
        # Each message is dispatched from the read callback that completed it.
        frames = FrameSplitter(self._on_body)
        await pump(frames.feed)
        frames.end()

    def _on_body(self, body: bytes) -> None:
        proto = self.agentd_protocol
        try:
            data = decode_body(body)
        except Undecodable as exc:
            # An answer to one of agentd's requests (it names no method) that
            # cannot be read ends that request now, as over ACP.
            if exc.reply and b'"method"' not in body and proto.fail_sent(exc.reply_id, exc.message):
                return
            if exc.reply:
                log.error("unreadable message: %s", exc.message)
                proto.reply_error(exc.reply_id, exc.code, exc.message)
            else:
                log.error("unreadable notification dropped: %s", exc.message)
            return
        try:
            proto.dispatch(data)
        except Exception:
            log.exception("failed to dispatch a message")

    async def _cleanup(self) -> None:
        proto = self.agentd_protocol
        for fut in list(proto._request_futures.values()):
            fut.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
        await self.warmup.aclose()
        # Let cancelled request tasks write their replies before the pipe closes.
        await asyncio.sleep(0)


class EditorLogHandler(logging.Handler):
    def __init__(self, server: AgentdServer, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._server = server
        self._loop = loop
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if threading.get_ident() == self._thread:
                self._server.log_to_editor(record)
            else:
                self._loop.call_soon_threadsafe(self._server.log_to_editor, record)
        except Exception:
            pass


def run_stdio(prefix: bytes = b"") -> int:
    """Entry point of `agentd serve`; `prefix`: bytes already read from stdin."""
    # pygls logs every message it sends at INFO and every handler error with a
    # traceback; ours are logged by agentd's own handlers, once.
    logging.getLogger("pygls").setLevel(logging.CRITICAL)
    server = AgentdServer()
    from agentd.lsp import handlers

    handlers.register(server)

    async def main() -> int:
        handler = EditorLogHandler(server, asyncio.get_running_loop())
        handler.setLevel(logging.DEBUG)
        logging.getLogger("agentd").addHandler(handler)
        try:
            return await server.serve(sys.stdin.buffer, sys.stdout.buffer, prefix)
        finally:
            logging.getLogger("agentd").removeHandler(handler)

    return asyncio.run(main())
