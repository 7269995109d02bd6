"""`agent/requestPermission`: asking the editor (LSP) before a daemon-run tool call.

The editor declares that it can answer with `initializationOptions.
requestPermission: true`; without it no request is sent and calls that need
permission are refused (fail closed). The request's params and result follow
ACP's `session/request_permission` (the same options, the same outcome
shape), so one client-side implementation serves both; see
docs/protocol.md.

A cancelled wait (the prompt was cancelled, or the permission timed out)
withdraws the request: its future is dropped, so a late answer is ignored,
and the editor gets `$/cancelRequest` to close its dialog.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from agentd.agent.permission import PermissionAnswer, PermissionRequest, read_answer

if TYPE_CHECKING:
    from agentd.agent.session import Session
    from agentd.lsp.server import AgentdServer

METHOD = "agent/requestPermission"


def permission_params(session_id: str, request: PermissionRequest) -> dict[str, Any]:
    params: dict[str, Any] = {
        "sessionId": session_id,
        "toolCallId": request.tool_call_id,
        "tool": request.tool,
        "title": request.title,
        "arguments": request.arguments,
        "options": request.options,
    }
    if request.server is not None:
        params["server"] = request.server
        params["serverTool"] = request.server_tool
    if request.description:
        params["description"] = request.description
    if request.kind == "sampling":
        params["kind"] = "sampling"
    return params


class LspPermissions:
    def __init__(self, server: AgentdServer) -> None:
        self._server = server

    async def ask_permission(
        self, session: Session, request: PermissionRequest
    ) -> PermissionAnswer:
        proto = self._server.agentd_protocol
        msg_id = f"perm-{uuid.uuid4().hex}"
        fut = proto.send_request_async(METHOD, permission_params(session.id, request), msg_id)
        try:
            result = await fut
        except asyncio.CancelledError:
            proto._request_futures.pop(msg_id, None)
            proto.notify("$/cancelRequest", {"id": msg_id})
            raise
        return read_answer(result)
