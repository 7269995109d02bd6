"""Asking the user whether a tool call that the daemon runs may run.

Daemon-run tools with side effects (MCP tools not annotated read-only) need
the user's yes. Each front end asks in its own way (ACP:
`session/request_permission`; LSP: `agent/requestPermission`) through a
`PermissionAsker` set on the session; both offer the same three options and
read the same answer shape. Anything but an explicit allow refuses the call:
no asker, an error, a timeout, a malformed answer (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from agentd.agent.session import Session

# The options offered, in ACP's `PermissionOption` shape (both wires use it).
PERMISSION_OPTIONS: list[dict[str, str]] = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow in this session", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]

Choice = Literal["allow_once", "allow_always", "reject_once", "cancelled", "unavailable"]
_SELECTABLE: dict[str, Choice] = {
    "allow_once": "allow_once",
    "allow_always": "allow_always",
    "reject_once": "reject_once",
}


@dataclass(slots=True)
class PermissionRequest:
    tool_call_id: str
    # The name the model called (`mcp__server__tool`), the server and its own name for the tool.
    tool: str
    arguments: dict[str, Any]
    title: str
    server: str | None = None
    server_tool: str | None = None
    description: str = ""


@dataclass(slots=True)
class PermissionAnswer:
    choice: Choice
    # Why there is no allow (for "unavailable": what failed), for the model and the log.
    detail: str = ""

    @property
    def allowed(self) -> bool:
        return self.choice in ("allow_once", "allow_always")


class PermissionAsker(Protocol):
    async def ask_permission(
        self, session: Session, request: PermissionRequest
    ) -> PermissionAnswer: ...


def read_answer(result: Any) -> PermissionAnswer:
    """`{outcome: {outcome: "selected", optionId} | {outcome: "cancelled"}}` -> an answer."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if isinstance(outcome, dict):
        if outcome.get("outcome") == "cancelled":
            return PermissionAnswer("cancelled")
        option = outcome.get("optionId")
        choice = _SELECTABLE.get(option) if isinstance(option, str) else None
        if outcome.get("outcome") == "selected" and choice is not None:
            return PermissionAnswer(choice)
    return PermissionAnswer("unavailable", "the editor gave no valid permission answer")
