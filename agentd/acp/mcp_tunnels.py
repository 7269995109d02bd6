"""MCP over ACP: the editor's own MCP servers, reached over this connection.

The ACP side of `agentd.mcp.tunnel` (its `TunnelPeer`): `mcp/connect
{serverId}` -> `{connectionId}` opens one, each inner MCP message is an
`mcp/message {connectionId, method, params?}` request (its result the inner
result, its error the inner error) or notification, and `mcp/disconnect
{connectionId}` closes it. What the editor sends back (`mcp/message` to
agentd: its server's notifications, pings, requests) is routed here by
`connectionId`; an id agentd did not open is `-32602` naming it.

Connections end with their MCP connection (the session closed or deleted,
the last session using the server gone) and, all of them, when the daemon
stops (`aclose`, before the connection is closed). Stdlib only at import
(the server imports it before `initialize` is answered).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from agentd.acp.rpc import Connection, RpcError
from agentd.errors import INVALID_PARAMS
from agentd.messages import clean_text

if TYPE_CHECKING:
    from agentd.mcp.tunnel import Inbound

log = logging.getLogger("agentd.acp")

# A connectionId longer than this is not one agentd keeps.
MAX_CONNECTION_ID = 1024
# What of an editor's refusal the chat and the log repeat.
MAX_REFUSAL = 500


class AcpTunnel:
    """One open `mcp/connect` connection (`agentd.mcp.tunnel.Tunnel`)."""

    def __init__(self, owner: AcpTunnels, connection_id: str, inbound: Inbound) -> None:
        self.connection_id = connection_id
        self.inbound = inbound
        self._owner = owner
        self._disconnected = False

    def request(
        self, method: str, params: dict[str, Any] | None
    ) -> tuple[Any, asyncio.Future[Any]]:
        msg_id, answer = self._owner.conn.request("mcp/message", self._params(method, params))
        wrapped: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        answer.add_done_callback(lambda done: _carry(done, wrapped))
        return msg_id, wrapped

    def notify(self, method: str, params: dict[str, Any] | None) -> None:
        self._owner.conn.notify("mcp/message", self._params(method, params))

    def withdraw(self, outer_id: Any) -> None:
        if outer_id is not None:
            self._owner.conn.cancel_request(outer_id)

    def _params(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"connectionId": self.connection_id, "method": method}
        if params is not None:
            out["params"] = params
        return out

    def disconnect(self) -> asyncio.Future[Any] | None:
        return self._owner.forget(self)


class AcpTunnels:
    """Every MCP-over-ACP connection of this ACP connection (`TunnelPeer`)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._open: dict[str, AcpTunnel] = {}

    async def connect(self, server_id: str, inbound: Inbound) -> AcpTunnel:
        answer = self.conn.start_request("mcp/connect", {"serverId": server_id})
        try:
            result = await asyncio.shield(answer)
        except asyncio.CancelledError:
            # Given up (a timeout, the session closed): a connection the editor
            # opens after all is closed again, not left open on its side.
            answer.add_done_callback(self._disconnect_late)
            raise
        except RpcError as exc:
            # Its words reach the chat: valid text, and short.
            why = clean_text(exc.message)[:MAX_REFUSAL]
            raise ConnectionRefusedError(
                f"the editor refused mcp/connect: {why} (code {exc.code})"
            ) from None
        connection_id = _connection_id(result)
        if connection_id is None:
            raise ConnectionError("the editor's answer to mcp/connect has no usable connectionId")
        if connection_id in self._open:
            raise ConnectionError(
                f"the editor gave the connectionId {connection_id!r} of another open connection"
            )
        tunnel = AcpTunnel(self, connection_id, inbound)
        self._open[connection_id] = tunnel
        return tunnel

    def _disconnect_late(self, answer: asyncio.Future[Any]) -> None:
        if answer.cancelled() or answer.exception() is not None:
            return
        connection_id = _connection_id(answer.result())
        if connection_id is not None and connection_id not in self._open:
            self.conn.start_request("mcp/disconnect", {"connectionId": connection_id})

    def forget(self, tunnel: AcpTunnel) -> asyncio.Future[Any] | None:
        """Close `tunnel`: `mcp/disconnect` sent (the answer returned), once."""
        if self._open.get(tunnel.connection_id) is not tunnel:
            return None
        del self._open[tunnel.connection_id]
        return self.conn.start_request("mcp/disconnect", {"connectionId": tunnel.connection_id})

    # --- what the editor sends ----------------------------------------------------------

    def tunnel(self, connection_id: str) -> AcpTunnel:
        tunnel = self._open.get(connection_id)
        if tunnel is None:
            raise RpcError(
                INVALID_PARAMS,
                "Invalid params for mcp/message: connectionId: no open MCP connection has this id",
                {"fields": [{"field": "connectionId", "message": "no open MCP connection"}]},
            )
        return tunnel

    async def on_request(
        self, outer_id: Any, connection_id: str, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """An `mcp/message` request: the SDK's answer to the inner request."""
        from agentd.mcp.tunnel import TunnelError

        answer = self.tunnel(connection_id).inbound.request(outer_id, method, params)
        try:
            return await answer
        except TunnelError as exc:
            raise RpcError(exc.code, exc.message, exc.data) from None

    def on_notification(self, params: Any) -> None:
        """An `mcp/message` notification; one that names no open connection is dropped."""
        if not isinstance(params, dict):
            log.warning("mcp/message notification ignored: params must be an object")
            return
        connection_id, method = params.get("connectionId"), params.get("method")
        inner = params.get("params")
        if not isinstance(connection_id, str) or not isinstance(method, str):
            log.warning("mcp/message notification ignored: no connectionId or method")
            return
        if inner is not None and not isinstance(inner, dict):
            log.warning("mcp/message notification ignored: params.params must be an object")
            return
        tunnel = self._open.get(connection_id)
        if tunnel is None:
            log.warning("mcp/message notification for an unknown connectionId ignored")
            return
        tunnel.inbound.notify(method, inner)

    async def aclose(self) -> None:
        """The daemon stops: every connection is disconnected (answers not awaited)
        and its MCP client told that nothing more will come."""
        for tunnel in list(self._open.values()):
            self.forget(tunnel)
            tunnel.inbound.closed()


def _connection_id(result: Any) -> str | None:
    value = result.get("connectionId") if isinstance(result, dict) else None
    if isinstance(value, str) and 0 < len(value) <= MAX_CONNECTION_ID:
        return value
    return None


def _carry(answer: asyncio.Future[Any], to: asyncio.Future[Any]) -> None:
    """The outer answer, as the tunnel's (an `RpcError` becomes a `TunnelError`)."""
    if to.done():
        return
    if answer.cancelled():
        to.cancel()
        return
    exc = answer.exception()
    if exc is None:
        to.set_result(answer.result())
        return
    from agentd.mcp.tunnel import TunnelError

    if isinstance(exc, RpcError):
        to.set_exception(TunnelError(exc.code, exc.message, exc.data))
    else:
        to.set_exception(TunnelError(-32603, str(exc) or type(exc).__name__))
    to.exception()  # retrieved: the call may have been withdrawn, nobody waiting
