"""MCP servers an editor runs itself, reached over the editor's own connection.

ACP calls them `type: "acp"` MCP servers (MCP over ACP): the editor names one
in a session's `mcpServers` by a `serverId`, agentd opens it with
`mcp/connect` (-> a `connectionId`), and every MCP message then travels
inside an ACP `mcp/message`: a request's result is the inner result, an
inner error the JSON-RPC error; the editor's own MCP messages (its server's
notifications, pings, requests) come back the same way.

`tunnel_transport(peer, server_id)` is the SDK's transport for such a
server: it yields the read and write streams the SDK's client takes and
carries their messages over the front end's `TunnelPeer`, so the SDK, not
agentd, speaks MCP (handshake, tool list, calls, their cancel). Plain
asyncio and the SDK's own stream types; the wire is the front end's.

Ids. The id of a request agentd's client sends never travels: the id of the
outer `mcp/message` request stands for it (it is all the editor sees). So
the inner `notifications/cancelled` agentd sends names the outer id (and
the outer request itself is withdrawn: ACP's `$/cancel_request`), and
one the editor sends names the outer id of its own request; each is mapped
to the inner id here.

What comes from the editor is untrusted: text is made valid Unicode
(`clean_json`), a result that is not an object is an error, and the
editor's requests wait in a small buffer (a flood is answered "busy", never
queued without bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from agentd.errors import INTERNAL_ERROR
from agentd.messages import clean_json

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream

log = logging.getLogger("agentd.mcp")

CANCELLED = "notifications/cancelled"
# The editor's MCP messages waiting for the SDK; more at once are refused.
INBOUND_BUFFER = 64
# How long closing a tunnel waits for the editor to answer `mcp/disconnect`.
DISCONNECT_WAIT = 2.0
# The SDK's code for "the connection closed before an answer" (mcp_types.CONNECTION_CLOSED).
CONNECTION_CLOSED = -32000


class TunnelError(Exception):
    """A JSON-RPC error from the other side of a tunnel (or for it)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class Tunnel(Protocol):
    """One open `mcp/connect` connection, as the front end carries it."""

    connection_id: str

    def request(
        self, method: str, params: dict[str, Any] | None
    ) -> tuple[Any, asyncio.Future[Any]]:
        """Send an inner request: (the outer request's id, its answer). The
        answer is the inner result, or a `TunnelError`."""
        ...

    def notify(self, method: str, params: dict[str, Any] | None) -> None: ...

    def withdraw(self, outer_id: Any) -> None:
        """agentd stopped waiting for the outer request `outer_id` (a cancelled call)."""
        ...

    def disconnect(self) -> asyncio.Future[Any] | None:
        """Send `mcp/disconnect` now (once: None after the first); the future is its answer."""
        ...


class Inbound(Protocol):
    """Where the front end hands what the editor sends on a connection."""

    def request(
        self, outer_id: Any, method: str, params: dict[str, Any] | None
    ) -> asyncio.Future[dict[str, Any]]: ...

    def notify(self, method: str, params: dict[str, Any] | None) -> None: ...

    def closed(self) -> None:
        """The editor's connection is gone: nothing more will come."""
        ...


class TunnelPeer(Protocol):
    """The front end that reaches an editor's MCP servers (ACP's `mcp/connect`)."""

    async def connect(self, server_id: str, inbound: Inbound) -> Tunnel:
        """Open a connection to the editor's server `server_id`; raises
        `ConnectionError` (saying why) when the editor refuses or cannot."""
        ...


@contextlib.asynccontextmanager
async def tunnel_transport(peer: TunnelPeer, server_id: str) -> AsyncIterator[Any]:
    """The SDK transport (read stream, write stream) of the editor's server `server_id`."""
    import anyio
    from mcp.shared.message import SessionMessage

    to_sdk, sdk_reads = anyio.create_memory_object_stream[SessionMessage | Exception](
        INBOUND_BUFFER
    )
    sdk_writes, from_sdk = anyio.create_memory_object_stream[SessionMessage](0)
    streams = (to_sdk, sdk_reads, sdk_writes, from_sdk)
    bridge = _Bridge(to_sdk)
    try:
        tunnel = await peer.connect(server_id, bridge)
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    bridge.tunnel = tunnel
    pump = asyncio.ensure_future(bridge.pump(from_sdk))
    try:
        yield sdk_reads, sdk_writes
    finally:
        pump.cancel()
        await bridge.aclose()
        await asyncio.wait([pump])
        for stream in streams:
            stream.close()
        # Sent at once, whatever cancel may be closing us; its answer is
        # awaited a bounded time (`wait` neither raises its error nor cancels it).
        answer = tunnel.disconnect()
        if answer is not None:
            await asyncio.wait([answer], timeout=DISCONNECT_WAIT)


class _Bridge:
    """Translates between the SDK's streams and one tunnel (the `Inbound` side too)."""

    def __init__(self, to_sdk: MemoryObjectSendStream[Any]) -> None:
        self.tunnel: Tunnel | None = None
        self._to_sdk = to_sdk
        # agentd's requests in flight: inner id -> (outer id, the task awaiting the answer).
        self._calls: dict[Any, tuple[Any, asyncio.Task[None]]] = {}
        # Every such task until it has ended (a withdrawn call's too): `aclose` awaits them.
        self._tasks: set[asyncio.Task[None]] = set()
        # The editor's requests the SDK has not answered: inner id -> (outer id, answer).
        self._answers: dict[str, tuple[Any, asyncio.Future[dict[str, Any]]]] = {}
        self._inner_ids = (f"editor-{n}" for n in itertools.count(1))

    # --- from the SDK to the editor ----------------------------------------------------

    async def pump(self, from_sdk: Any) -> None:
        import anyio

        try:
            async for message in from_sdk:
                try:
                    self._outgoing(message.message)
                except Exception:
                    log.exception("an MCP message to the editor was dropped")
        except (anyio.ClosedResourceError, anyio.EndOfStream):
            pass

    def _outgoing(self, message: Any) -> None:
        from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

        tunnel = self.tunnel
        assert tunnel is not None
        if isinstance(message, JSONRPCRequest):
            outer_id, answer = tunnel.request(message.method, message.params)
            task = asyncio.ensure_future(self._answer(message.id, message.method, answer))
            self._calls[message.id] = (outer_id, task)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _: self._calls.pop(message.id, None))
        elif isinstance(message, JSONRPCNotification):
            params = message.params
            if message.method == CANCELLED and isinstance(params, dict):
                call = self._calls.pop(params.get("requestId"), None)
                if call is None:
                    return  # answered already, or never sent: nothing to withdraw
                outer_id, task = call
                task.cancel()
                params = {**params, "requestId": outer_id}
                tunnel.notify(message.method, params)
                tunnel.withdraw(outer_id)
                return
            tunnel.notify(message.method, params)
        elif isinstance(message, JSONRPCResponse | JSONRPCError):
            entry = self._answers.pop(str(message.id), None)
            if entry is None or entry[1].done():
                return
            if isinstance(message, JSONRPCResponse):
                entry[1].set_result(message.result)
            else:
                error = message.error
                entry[1].set_exception(TunnelError(error.code, error.message, error.data))

    async def _answer(self, inner_id: Any, method: str, answer: asyncio.Future[Any]) -> None:
        from mcp.shared.message import SessionMessage
        from mcp_types import ErrorData, JSONRPCError, JSONRPCResponse

        reply: JSONRPCResponse | JSONRPCError
        try:
            result = await answer
        except TunnelError as exc:
            error = ErrorData(
                code=exc.code, message=str(clean_json(exc.message)), data=clean_json(exc.data)
            )
            reply = JSONRPCError(jsonrpc="2.0", id=inner_id, error=error)
        else:
            if isinstance(result, dict):
                reply = JSONRPCResponse(jsonrpc="2.0", id=inner_id, result=clean_json(result))
            else:
                why = f"the editor's answer to {method} is not an object"
                error = ErrorData(code=INTERNAL_ERROR, message=why)
                reply = JSONRPCError(jsonrpc="2.0", id=inner_id, error=error)
        with contextlib.suppress(Exception):
            await self._to_sdk.send(SessionMessage(reply))

    # --- from the editor to the SDK (`Inbound`) -------------------------------------------

    def request(
        self, outer_id: Any, method: str, params: dict[str, Any] | None
    ) -> asyncio.Future[dict[str, Any]]:
        from mcp_types import JSONRPCRequest

        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        inner_id = next(self._inner_ids)
        message = JSONRPCRequest(
            jsonrpc="2.0", id=inner_id, method=method, params=clean_json(params)
        )
        if not self._send_nowait(message):
            answer.set_exception(
                TunnelError(INTERNAL_ERROR, "agentd is still busy with this server's messages")
            )
            return answer
        self._answers[inner_id] = (outer_id, answer)
        answer.add_done_callback(lambda _: self._answers.pop(inner_id, None))
        return answer

    def notify(self, method: str, params: dict[str, Any] | None) -> None:
        from mcp_types import JSONRPCNotification

        params = clean_json(params)
        if method == CANCELLED and isinstance(params, dict):
            # The editor names its own outer request: the SDK knows it by the inner id.
            outer = params.get("requestId")
            inner = next((i for i, (o, _) in self._answers.items() if o == outer), None)
            if inner is None:
                return
            params = {**params, "requestId": inner}
        if not self._send_nowait(JSONRPCNotification(jsonrpc="2.0", method=method, params=params)):
            log.warning("an MCP notification %s from the editor was dropped (busy)", method)

    def closed(self) -> None:
        self._to_sdk.close()  # the SDK reads the end of its stream: the connection is gone

    def _send_nowait(self, message: Any) -> bool:
        import anyio
        from mcp.shared.message import SessionMessage

        try:
            self._to_sdk.send_nowait(SessionMessage(message))
        except anyio.WouldBlock:
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    async def aclose(self) -> None:
        """Stop waiting: agentd's calls in flight end, the editor's requests are refused."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for _, answer in list(self._answers.values()):
            if not answer.done():
                answer.set_exception(TunnelError(CONNECTION_CLOSED, "the MCP connection closed"))
        self._answers.clear()
