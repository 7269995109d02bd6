"""One MCP server connection: started, watched, restarted, stopped.

`McpConnection.run` is a long-lived task (owned by the manager's
supervisor) that connects with the SDK's `Client`, lists the tools, and
keeps the client open until the server goes away or the daemon stops. The
SDK's client must be entered and left in one task (anyio task groups), which
is why the connection has a task of its own; tool calls come from the turn's
tasks and only send and await messages.

States: `starting` (first connect), `ready`, `restarting` (waiting out the
backoff after a crash or a failed start), `failed` (the last attempt failed;
it is retried after the backoff), `stopped`.

- Crash: the transport's read stream ends (a stdio server exited, an HTTP
  session was dropped). Calls in flight fail with "connection closed"; the
  state goes to `restarting` with the error and the last lines of the
  server's stderr, and the server is started again after 1, 2, 4, ... 60 s
  (back to 1 s once a connection has stayed up for a minute).
- stderr of a stdio server goes to agentd's log line by line (logger
  `agentd.mcp.stderr`, INFO, prefixed with the server's name); its last lines
  are kept for the status.
- Environment of a stdio server: the SDK's short safe list (HOME, LOGNAME,
  PATH, SHELL, TERM, USER) plus the `env` written in its configuration;
  nothing else of agentd's environment, its API key included.
- Stop: the client is left normally, so the SDK closes the server's stdin,
  waits, then terminates and kills its process group, each step bounded.
- `tools/list_changed` marks the tool list stale; the next `tools()` refetches it.
- A server the editor provides over its own connection (transport `acp`,
  `agentd.mcp.tunnel`) is not restarted: an editor that refused
  `mcp/connect` would refuse again, and the tunnel ends only with the
  editor's connection. Its failure is a `notice` the session shows once in
  the chat.

Elicitation: the client declares form and URL elicitation; a server's
`elicitation/create` goes to the one tool call of this connection in flight
(`agentd.mcp.elicit.CallElicitation`, which asks the session's editor).
Nothing on the wire says which call a server's question belongs to, so with
no call or several calls in flight (a shared server, parallel calls) the
question is declined rather than shown to the wrong session. A URL
question's `notifications/elicitation/complete` is passed on to the editor
that was shown it.

Sampling: with a `Sampler` (the daemon's; `agentd mcp status` has none) the
client declares sampling, and a server's `sampling/createMessage` is served
by agentd's model for the one tool call of this connection in flight, with
the user's permission (`agentd.mcp.sampling`). With no call or several in
flight it is refused (an MCP error), for the same reason as a question.

Connections speak the MCP handshake (`initialize`, protocol 2025-11-25),
which servers in the field speak; its `notifications/cancelled` is how a
cancelled or timed-out call is withdrawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from agentd import __version__
from agentd.config import McpServerSettings

if TYPE_CHECKING:
    from mcp import Client

    from agentd.agent.elicitation import ElicitationRequest, Elicitor
    from agentd.agent.session import Session
    from agentd.mcp.elicit import CallElicitation
    from agentd.mcp.sampling import Sampler
    from agentd.mcp.tunnel import TunnelPeer

log = logging.getLogger("agentd.mcp")
stderr_log = logging.getLogger("agentd.mcp.stderr")

State = Literal["starting", "ready", "restarting", "failed", "stopped"]

BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0
# A connection that stayed up this long starts the backoff over.
STABLE_AFTER = 60.0
STDERR_TAIL = 20
STDERR_LINE_MAX = 2000
# URL questions whose completion is passed on to the editor that showed them.
URL_ELICITATIONS_KEPT = 64


class ServerUnavailable(Exception):
    """The server is not connected (still starting, restarting, or failed)."""


class McpConnection:
    def __init__(
        self,
        name: str,
        config: McpServerSettings,
        load_sdk: Callable[[], Awaitable[None]],
        startup_timeout: float,
        peer: TunnelPeer | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.name = name
        # Serves the server's sampling requests; None: not declared, refused.
        self._sampler = sampler
        self.config = config
        self.transport = config.transport
        self._load_sdk = load_sdk
        self._startup_timeout = startup_timeout
        # The front end that reaches the editor's own servers (transport `acp`).
        self._peer = peer
        self.state: State = "starting"
        self.last_error: str | None = None
        # What the chat should say of this server (an editor's server that could not be reached).
        self.notice: str | None = None
        self.restarts = 0
        # Monotonic time the current attempt started (the first prompt's wait counts from it).
        self.started_at = time.monotonic()
        self.tools: list[Any] = []
        # Bumped whenever `tools` changes, so views can cache what they built from it.
        self.generation = 0
        self.protocol_version: str | None = None
        self.users = 0
        self._client: Client | None = None
        # Set when the current attempt to connect has ended, either way.
        self._attempt_done = asyncio.Event()
        self._stop = asyncio.Event()
        # The deadline of the start under way, None outside one: `stop` brings
        # it to now.
        self._start_deadline: asyncio.Timeout | None = None
        self._stale = False
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        # The tool calls in flight that a server's question may belong to.
        self._calls: set[CallElicitation] = set()
        # elicitationId -> who showed that URL question (newest last, bounded).
        self._url_shown: OrderedDict[str, tuple[Elicitor, Session]] = OrderedDict()

    # --- what sessions use ---------------------------------------------------------------

    async def wait_started(self, until: float) -> None:
        """Wait (no later than the monotonic time `until`) while an attempt to connect runs."""
        remaining = until - time.monotonic()
        if self.state != "starting" or remaining <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempt_done.wait(), remaining)

    async def current_tools(self) -> list[Any]:
        """The tools, refetched first when the server said they changed."""
        if self._stale and self._client is not None:
            await self._refetch()
        return self.tools if self.state == "ready" else []

    async def call(
        self, tool: str, arguments: dict[str, Any], questions: CallElicitation | None = None
    ) -> Any:
        """Call a tool; the caller bounds the time (a cancel withdraws the call:
        the SDK sends `notifications/cancelled`). `questions` answers the
        server's elicitations made while it runs."""
        client = self._client
        if client is None or self.state != "ready":
            raise ServerUnavailable(self._unavailable())
        if questions is None:
            return await client.call_tool(tool, arguments)
        self._calls.add(questions)
        try:
            return await client.call_tool(tool, arguments)
        finally:
            self._calls.discard(questions)

    def _unavailable(self) -> str:
        why = f"the MCP server {self.name!r} is {self.state}"
        return f"{why}: {self.last_error}" if self.last_error else why

    def stop(self) -> None:
        self._stop.set()
        # A server still starting (one that never answers `initialize`) is
        # given up on now, not at the end of its startup timeout: the SDK then
        # closes its stdin, terminates and kills it within the shutdown's
        # grace. Left to the timeout, shutdown cancelled the task first and
        # abandoned the SDK's shielded cleanup half-way: the server lived on
        # after the daemon (and the exit waited the whole grace).
        if self._start_deadline is not None:
            self._start_deadline.reschedule(asyncio.get_running_loop().time())

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "transport": self.transport,
            "toolCount": len(self.tools) if self.state == "ready" else 0,
            "tools": [t.name for t in self.tools] if self.state == "ready" else [],
            "restarts": self.restarts,
        }
        if self.last_error:
            out["lastError"] = self.last_error
        if self.protocol_version:
            out["protocolVersion"] = self.protocol_version
        return out

    # --- the connection's own task -----------------------------------------------------

    async def run(self) -> None:
        """Connect, serve until the server goes away, restart with backoff; until stopped."""
        delay = BACKOFF_FIRST
        try:
            await self._load_sdk()
            while not self._stop.is_set():
                self.started_at = time.monotonic()
                self.state = "starting"
                self._attempt_done.clear()
                try:
                    await self._serve_once()
                except Exception as exc:
                    self._failed(exc)
                self._attempt_done.set()
                if self._stop.is_set():
                    break
                if self.transport == "acp":
                    self._tunnel_failed()
                    break
                if time.monotonic() - self.started_at >= STABLE_AFTER:
                    delay = BACKOFF_FIRST
                log.warning(
                    "MCP server %r: %s; restarting in %.0f s", self.name, self.last_error, delay
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                delay = min(delay * 2, BACKOFF_MAX)
                self.restarts += 1
        except Exception as exc:  # the SDK could not be loaded
            self._failed(exc)
            log.error("MCP server %r cannot start: %s", self.name, self.last_error)
        finally:
            self._client = None
            if self._stop.is_set():
                self.state = "stopped"
            self._attempt_done.set()  # nobody waits for a server that will not come

    def _failed(self, exc: BaseException) -> None:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]  # anyio's task groups wrap what failed inside them
        log.debug("MCP server %r: %r", self.name, exc, exc_info=exc)
        message = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            message = f"no answer within {self._startup_timeout:g} s of starting"
        tail = " | ".join(self._stderr_tail)
        self.last_error = f"{message} (stderr: {tail})" if tail else message
        self._client = None
        # A server that was up crashed: it is restarted. One that never came up failed
        # (and is tried again after the backoff all the same).
        if self.state == "ready":
            self.generation += 1
            self.state = "restarting"
        else:
            self.state = "failed"

    def _tunnel_failed(self) -> None:
        log.warning("MCP server %r (over ACP): %s", self.name, self.last_error)
        self.state = "failed"
        self.notice = (
            f"The MCP server {self.name!r} that the editor provides could not be used "
            f"({self.last_error}). This session goes on without its tools."
        )

    async def _serve_once(self) -> None:
        from mcp import Client
        from mcp_types import Implementation

        closed = asyncio.Event()
        client = Client(
            self._transport(closed),
            mode="legacy",
            message_handler=self._on_message,
            elicitation_callback=self._on_elicit,
            sampling_callback=self._on_sample if self._sampler is not None else None,
            client_info=Implementation(name="agentd", version=__version__),
            cache=None,
        )
        async with contextlib.AsyncExitStack() as stack:
            # asyncio's timeout, not anyio's: an anyio scope must not enclose the
            # client's task groups, which outlive the start.
            async with asyncio.timeout(self._startup_timeout) as deadline:
                self._start_deadline = deadline
                try:
                    await stack.enter_async_context(client)
                    tools = await self._list_tools(client)
                finally:
                    self._start_deadline = None
            self.protocol_version = client.protocol_version
            self._set_tools(tools)
            self._client = client
            self.state = "ready"
            self.last_error = None
            self._stderr_tail.clear()
            self._attempt_done.set()
            log.info("MCP server %r ready: %d tools", self.name, len(tools))
            stop = asyncio.ensure_future(self._stop.wait())
            gone = asyncio.ensure_future(closed.wait())
            try:
                await asyncio.wait([stop, gone], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                gone.cancel()
            self._client = None
        # Raised once the client is closed: raised inside, the SDK's task groups
        # would wrap it in exception groups.
        if not self._stop.is_set():
            raise ConnectionError("the server closed the connection")

    def _set_tools(self, tools: list[Any]) -> None:
        self.tools = tools
        self.generation += 1
        self._stale = False

    async def _list_tools(self, client: Client) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang a start
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        allowed = [t for t in tools if self._offered(t.name)]
        return allowed

    def _offered(self, tool: str) -> bool:
        include = self.config.include_tools
        return (not include or tool in include) and tool not in self.config.exclude_tools

    async def _refetch(self) -> None:
        client = self._client
        if client is None:
            return
        try:
            self._set_tools(await asyncio.wait_for(self._list_tools(client), 10.0))
            log.info("MCP server %r: tool list changed (%d tools)", self.name, len(self.tools))
        except Exception as exc:
            log.warning("MCP server %r: cannot refetch its tools: %s", self.name, exc)
            self._stale = False

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        """The SDK's elicitation callback: always an `ElicitResult`."""
        from mcp_types import ElicitResult

        calls = list(self._calls)
        if len(calls) != 1:
            why = "no tool call" if not calls else f"{len(calls)} tool calls"
            log.warning(
                "MCP server %r asked the user during %s in flight: declined", self.name, why
            )
            return ElicitResult(action="decline")
        answer = await calls[0].answer(params, self._remember_url)
        return ElicitResult(action=answer.action, content=answer.content)

    async def _on_sample(self, context: Any, params: Any) -> Any:
        """The SDK's sampling callback: a `CreateMessageResult` or the `ErrorData` refusing it."""
        from mcp_types import CreateMessageResult, ErrorData, TextContent

        from agentd.mcp.sampling import INTERNAL_ERROR, INVALID_REQUEST, Refused

        calls = list(self._calls)
        sampler = self._sampler
        if sampler is None:
            return ErrorData(code=INVALID_REQUEST, message="sampling is not served here")
        if len(calls) != 1:
            why = "no tool call" if not calls else f"{len(calls)} tool calls"
            log.warning("MCP server %r asked for sampling during %s in flight", self.name, why)
            message = (
                "agentd serves sampling only during one tool call of this server "
                f"(refused with {why} in flight)"
            )
            return ErrorData(code=INVALID_REQUEST, message=message)
        try:
            answer = await sampler.serve(calls[0], params)
        except Refused as exc:
            log.warning("sampling request of MCP server %r refused: %s", self.name, exc.message)
            return ErrorData(code=exc.code, message=exc.message)
        except Exception:  # a bug here must not take the connection down
            log.exception("sampling request of MCP server %r failed", self.name)
            return ErrorData(code=INTERNAL_ERROR, message="agentd failed to serve the request")
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=answer.text),
            model=answer.model,
            stop_reason=answer.stop_reason,
        )

    def _remember_url(
        self, elicitor: Elicitor, session: Session, request: ElicitationRequest
    ) -> None:
        if request.elicitation_id is None:
            return
        self._url_shown[request.elicitation_id] = (elicitor, session)
        self._url_shown.move_to_end(request.elicitation_id)
        while len(self._url_shown) > URL_ELICITATIONS_KEPT:
            self._url_shown.popitem(last=False)

    async def _on_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method == "notifications/tools/list_changed":
            self._stale = True
        elif method == "notifications/elicitation/complete":
            eid = getattr(message.params, "elicitation_id", None)
            if isinstance(eid, str) and eid in self._url_shown:
                elicitor, session = self._url_shown.pop(eid)
                elicitor.complete(session, eid)
        elif isinstance(message, Exception):
            log.warning("MCP server %r sent something unreadable: %s", self.name, message)

    # --- transports ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transport(self, closed: asyncio.Event) -> AsyncIterator[Any]:
        """The SDK's transport for this server, its read stream watched for its end."""
        import anyio

        from agentd.mcp.salvage import salvaged

        inner: contextlib.AbstractAsyncContextManager[Any]
        if self.transport == "stdio":
            inner = self._stdio()
        elif self.transport == "acp":
            inner = self._tunnel()
        else:
            inner = self._http()
        async with inner as (read, write):
            send, receive = anyio.create_memory_object_stream[Any](0)

            async def pump() -> None:
                try:
                    async with read, send:
                        async for item in read:
                            await send.send(salvaged(item))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
                finally:
                    closed.set()

            async with anyio.create_task_group() as group:
                group.start_soon(pump)
                try:
                    yield receive, write
                finally:
                    group.cancel_scope.cancel()

    def _tunnel(self) -> contextlib.AbstractAsyncContextManager[Any]:
        from agentd.mcp.tunnel import tunnel_transport

        if self._peer is None or self.config.server_id is None:
            raise ConnectionError("only an ACP editor's session can reach this server")
        return tunnel_transport(self._peer, self.config.server_id)

    @contextlib.asynccontextmanager
    async def _stdio(self) -> AsyncIterator[Any]:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        config = self.config
        assert config.command is not None
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env=dict(config.env) or None,
            cwd=config.cwd,
            encoding_error_handler="replace",
        )
        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w")
        reader = asyncio.ensure_future(self._read_stderr(read_fd))
        try:
            async with stdio_client(params, errlog=errlog) as streams:
                # The server has its own copy; ours would keep the pipe from ending.
                errlog.close()
                yield streams
        finally:
            if not errlog.closed:
                errlog.close()
            # The pipe ends when the server (and whatever it started) has exited.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), 1.0)
            reader.cancel()

    async def _read_stderr(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 16)
        pipe = os.fdopen(fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while True:
                try:
                    raw = await reader.readline()
                except ValueError:  # a line over the limit: take what is there
                    raw = await reader.read(1 << 16)
                if not raw:
                    return
                line = raw.decode("utf-8", "replace").rstrip()[:STDERR_LINE_MAX]
                if line:
                    self._stderr_tail.append(line)
                    stderr_log.info("[%s] %s", self.name, line)
        finally:
            transport.close()

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[Any]:
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        config = self.config
        assert config.url is not None
        headers = dict(config.headers) or None
        if self.transport == "sse":
            async with sse_client(config.url, headers=headers) as streams:
                yield streams
            return
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(config.url, http_client=http) as streams,
        ):
            yield streams
