"""Asking the user whether a tool call that the daemon runs may run.

Daemon-run tools with side effects (MCP tools not annotated read-only) need
the user's yes. Each front end asks in its own way (ACP:
`session/request_permission`; LSP: `agent/requestPermission`) through a
`PermissionAsker` set on the session; both offer the same three options and
read the same answer shape. Anything but an explicit allow refuses the call:
no asker, an error, a timeout, a malformed answer (fail closed).

An MCP server's request to use the model (MCP sampling) is asked the same
way, with `kind` "sampling", a preview of what it asks, and no "always"
option: each request is asked about (`agentd.mcp.sampling`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from agentd.agent.session import Session

# The options offered, in ACP's `PermissionOption` shape (both wires use it).
PERMISSION_OPTIONS: list[dict[str, str]] = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow in this session", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]
# What is asked about each time: no option to allow it for the rest of the session.
ONCE_OPTIONS: list[dict[str, str]] = [
    o for o in PERMISSION_OPTIONS if o["optionId"] in ("allow_once", "reject_once")
]

log = logging.getLogger("agentd.permission")

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
    options: list[dict[str, str]] = field(default_factory=lambda: PERMISSION_OPTIONS)
    # "sampling": an MCP server asks to use the model during the call
    # `tool_call_id`; `arguments` then hold the preview of what it asks.
    kind: Literal["tool", "sampling"] = "tool"


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


async def ask_within(
    session: Session, request: PermissionRequest, timeout: float
) -> PermissionAnswer:
    """The user's answer through the session's asker, never longer than
    `timeout`: no asker, an error or no answer in time is "unavailable"."""
    asker = session.permissions
    if asker is None:
        why = "this editor cannot ask the user: it did not declare permission requests"
        return PermissionAnswer("unavailable", why)
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            answer = await asker.ask_permission(session, request)
    except TimeoutError:
        return PermissionAnswer("unavailable", f"no answer within {timeout:g} s")
    except Exception as exc:
        log.warning(
            "permission request for %s failed after %.1f s: %s",
            request.tool,
            time.monotonic() - started,
            exc,
        )
        return PermissionAnswer("unavailable", str(exc) or type(exc).__name__)
    offered = {o["optionId"] for o in request.options}
    if answer.allowed and answer.choice not in offered:
        # An editor that answers with an option it was not offered ("always"
        # where each request is asked): allowed this once, never remembered.
        return PermissionAnswer("allow_once")
    return answer


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
