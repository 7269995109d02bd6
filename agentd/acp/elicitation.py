"""An MCP server's question to the user, over ACP: `elicitation/create`.

The core's `Elicitor` for an ACP connection (`agentd.agent.elicitation`).
A question is sent only in a mode the client declared at `initialize`
(`clientCapabilities.elicitation.form` / `.url`), scoped to the session and
to the `tool_call` agentd sent for the MCP call (`sessionId`,
`toolCallId`), with the server's name in `_meta.agentd.server`. A question
agentd stops waiting for (the prompt was cancelled, the call ended, no
answer in time) is withdrawn with `$/cancel_request {requestId}`; a late
answer finds its future and is dropped. The server's
`notifications/elicitation/complete` becomes `elicitation/complete`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.acp.caps import ClientCaps
from agentd.acp.rpc import Connection
from agentd.agent.elicitation import ElicitationRequest, PendingElicitation

if TYPE_CHECKING:
    from agentd.agent.session import Session


class AcpElicitor:
    def __init__(self, conn: Connection, caps: ClientCaps) -> None:
        self._conn = conn
        self._caps = caps

    def supports(self, mode: str) -> bool:
        if mode == "form":
            return self._caps.elicitation_form
        return mode == "url" and self._caps.elicitation_url

    def ask(self, session: Session, request: ElicitationRequest) -> PendingElicitation:
        params = request.params(session.id)
        params["_meta"] = {"agentd": {"server": request.server}}
        msg_id, answer = self._conn.request("elicitation/create", params)

        def withdraw() -> None:
            if msg_id is not None and not answer.done():
                self._conn.cancel_request(msg_id)

        return PendingElicitation(answer, withdraw)

    def complete(self, session: Session, elicitation_id: str) -> None:
        self._conn.notify("elicitation/complete", {"elicitationId": elicitation_id})
