"""The editor's side of MCP over ACP, for the tests: MCP servers served over
the ACP connection itself (`type: "acp"` in `mcpServers`).

`EditorMcp.install(conn)` adds `mcp/connect`, `mcp/message` and
`mcp/disconnect` to the routes of the `acp` package's client connection
(its 0.12 release has none for them). Each `mcp/connect` starts the
server registered under that `serverId` (tests/mcp/server.py's
`MCPServer`, in this process, on memory streams) and bridges it: an
`mcp/message` request from agentd becomes an inner request whose id is the
outer request's (so agentd's inner `notifications/cancelled`, which names
the outer id, reaches the right call), and what the server sends on its own
(a notification, a ping) goes to agentd as an `mcp/message`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from acp import RequestError
from acp.router import Route
from mcp.server.mcpserver import MCPServer
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp_types import (
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

# The id of the request being handled (the package's routes are not told it).
_OUTER_ID: contextvars.ContextVar[Any] = contextvars.ContextVar("outer_id", default=None)


@dataclass
class Served:
    """One open connection: the server's task, its streams, agentd's calls in flight."""

    connection_id: str
    server_id: str
    write: Any = None
    pending: dict[Any, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)


class EditorMcp:
    def __init__(self) -> None:
        # serverId -> what makes its server (None: mcp/connect is refused).
        self.servers: dict[str, Callable[[], MCPServer] | None] = {}
        self.open: dict[str, Served] = {}
        self.connects: list[str] = []
        self.disconnects: list[str] = []
        # Inner requests of agentd, as (method, params); and its inner notifications.
        self.requests: list[tuple[str, Any]] = []
        self.notified: list[tuple[str, Any]] = []
        # The answers agentd gave to the requests the servers sent it.
        self.answers: list[Any] = []
        self.changed = asyncio.Event()
        # When set, answers agentd's inner requests of these methods itself
        # (what a hostile or broken editor may answer) instead of the server.
        self.answers_for: dict[str, Any] = {}
        # serverId -> what mcp/connect answers instead (an exception is raised).
        self.connect_answers: dict[str, Any] = {}
        self._conn: Any = None
        self._count = 0

    def install(self, conn: Any) -> None:
        inner = conn._conn
        self._conn = inner
        router = inner._handler
        router.add_route(Route("mcp/connect", self._connect, "request"))
        router.add_route(Route("mcp/message", self._message, "request"))
        router.add_route(Route("mcp/message", self._notification, "notification"))
        router.add_route(Route("mcp/disconnect", self._disconnect, "request"))
        execute = inner._execute_request

        async def with_id(message: dict[str, Any]) -> dict[str, Any]:
            token = _OUTER_ID.set(message.get("id"))
            try:
                return dict(await execute(message))
            finally:
                _OUTER_ID.reset(token)

        inner._execute_request = with_id

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(30):  # a hang guard, not a synchronisation
            while not predicate():
                await self.changed.wait()

    # --- agentd -> the editor ---------------------------------------------------------

    async def _connect(self, params: dict[str, Any]) -> dict[str, Any]:
        server_id = params["serverId"]
        self.connects.append(server_id)
        self._changed()
        if server_id in self.connect_answers:
            answer = self.connect_answers[server_id]
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[no-any-return]
        make = self.servers.get(server_id)
        if make is None:
            raise RequestError(-32001, f"no MCP server {server_id} here")
        self._count += 1
        served = Served(f"conn-{self._count}", server_id)
        await self._start(served, make())
        self.open[served.connection_id] = served
        return {"connectionId": served.connection_id}

    async def _start(self, served: Served, server: MCPServer) -> None:
        streams = await served.stack.enter_async_context(create_client_server_memory_streams())
        (client_read, client_write), (server_read, server_write) = streams
        served.write = client_write
        lowlevel = server._lowlevel_server

        async def run() -> None:
            await lowlevel.run(server_read, server_write, lowlevel.create_initialization_options())

        async def read() -> None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.EndOfStream):
                async for item in client_read:
                    if isinstance(item, Exception):
                        continue
                    await self._from_server(served, item.message)

        served.tasks += [asyncio.ensure_future(run()), asyncio.ensure_future(read())]

    async def _from_server(self, served: Served, message: Any) -> None:
        outer: dict[str, Any] = {"connectionId": served.connection_id}
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            answer = served.pending.pop(message.id, None)
            if answer is not None and not answer.done():
                if isinstance(message, JSONRPCResponse):
                    answer.set_result(message.result)
                else:
                    error = message.error
                    answer.set_exception(RequestError(error.code, error.message, error.data))
        elif isinstance(message, JSONRPCNotification):
            params = {**outer, "method": message.method}
            if message.params is not None:
                params["params"] = message.params
            await self._conn.send_notification("mcp/message", params)
        else:  # a request of the server's: agentd's MCP client answers it
            params = {**outer, "method": message.method, "params": message.params or {}}
            try:
                result = await self._conn.send_request("mcp/message", params)
                reply: Any = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
            except RequestError as exc:
                error = ErrorData(code=exc.code, message=str(exc), data=exc.data)
                reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
            self.answers.append(reply)
            self._changed()
            await served.write.send(SessionMessage(reply))

    async def _message(self, params: dict[str, Any]) -> dict[str, Any]:
        served = self.open[params["connectionId"]]
        outer_id = _OUTER_ID.get()
        self.requests.append((params["method"], params.get("params")))
        self._changed()
        if params["method"] in self.answers_for:
            return self.answers_for[params["method"]]  # type: ignore[no-any-return]
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        served.pending[outer_id] = answer
        request = JSONRPCRequest(
            jsonrpc="2.0", id=outer_id, method=params["method"], params=params.get("params")
        )
        await served.write.send(SessionMessage(request))
        return await answer

    async def _notification(self, params: dict[str, Any]) -> None:
        self.notified.append((params["method"], params.get("params")))
        self._changed()
        served = self.open.get(params["connectionId"])
        if served is None:
            return
        message = JSONRPCNotification(
            jsonrpc="2.0", method=params["method"], params=params.get("params")
        )
        await served.write.send(SessionMessage(message))

    async def _disconnect(self, params: dict[str, Any]) -> dict[str, Any]:
        connection_id = params["connectionId"]
        self.disconnects.append(connection_id)
        self._changed()
        served = self.open.pop(connection_id, None)
        if served is not None:
            await self.stop(served)
        return {}

    async def stop(self, served: Served) -> None:
        for task in served.tasks:
            task.cancel()
        await asyncio.gather(*served.tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await served.stack.aclose()

    async def aclose(self) -> None:
        for served in list(self.open.values()):
            await self.stop(served)
        self.open.clear()

    # --- the editor -> agentd -----------------------------------------------------------

    async def send(self, connection_id: str, method: str, params: Any = None) -> Any:
        """A raw `mcp/message` request from the editor (hostile or not)."""
        body: dict[str, Any] = {"connectionId": connection_id, "method": method}
        if params is not None:
            body["params"] = params
        return await self._conn.send_request("mcp/message", body)
