"""`agent/elicit`: an MCP server's question to the user, over LSP.

The editor declares the modes it shows with `initializationOptions.
elicitation: {form: true, url: true}`; without it no request is sent and
the server gets `decline` (fail closed). The params and the result follow
ACP's `elicitation/create` (form and URL modes, scoped to the session and
the tool call), so one client-side implementation serves both; see
docs/protocol.md. A question agentd stops waiting for (the prompt was
cancelled, no answer in time) is withdrawn: its future is dropped, so a
late answer is ignored, and the editor gets `$/cancelRequest`. The
server's completion of a URL question is `agent/elicitationComplete`.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from agentd.agent.elicitation import ElicitationRequest, PendingElicitation

if TYPE_CHECKING:
    from agentd.agent.session import Session
    from agentd.lsp.server import AgentdServer

METHOD = "agent/elicit"
COMPLETE = "agent/elicitationComplete"


class LspElicitor:
    def __init__(self, server: AgentdServer, modes: frozenset[str]) -> None:
        self._server = server
        self._modes = modes

    def supports(self, mode: str) -> bool:
        return mode in self._modes

    def ask(self, session: Session, request: ElicitationRequest) -> PendingElicitation:
        proto = self._server.agentd_protocol
        msg_id = f"elicit-{uuid.uuid4().hex}"
        params = {**request.params(session.id), "server": request.server}
        sent: asyncio.Future[Any] = proto.send_request_async(METHOD, params, msg_id)

        def withdraw() -> None:
            if not sent.done():
                proto._request_futures.pop(msg_id, None)
                proto.notify("$/cancelRequest", {"id": msg_id})

        return PendingElicitation(sent, withdraw)

    def complete(self, session: Session, elicitation_id: str) -> None:
        self._server.agentd_protocol.notify(
            COMPLETE, {"sessionId": session.id, "elicitationId": elicitation_id}
        )
