"""A session's MCP tools: the turn engine's `ExtraTools`, over shared connections.

One `SessionMcpTools` per session that uses MCP servers. It turns the
ready servers' tools into `ToolSpec`s under their model-facing names, asks
permission before a call (unless the tool is read-only or trusted, or the
user allowed it for the rest of the session), runs the call with its
timeout (paused while the server asks the user something: `agentd.mcp.elicit`,
or asks to use the model: `agentd.mcp.sampling`),
and turns the result into text for the model. Failures of every
kind are failed results; only a cancel propagates (and withdraws the call).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentd.agent.permission import PermissionAnswer, PermissionRequest, ask_within
from agentd.agent.session import Session
from agentd.agent.tools import truncate_result
from agentd.config import McpServerSettings, McpSettings
from agentd.mcp import names
from agentd.mcp.connection import McpConnection, ServerUnavailable
from agentd.mcp.elicit import CallElicitation
from agentd.mcp.results import result_images, result_text
from agentd.messages import ToolCall, ToolResultPart, ToolSpec

if TYPE_CHECKING:
    from agentd.mcp.manager import McpManager

log = logging.getLogger("agentd.mcp")


@dataclass(slots=True)
class Attached:
    """A server as one session knows it: its name there, its settings, the connection."""

    name: str
    config: McpServerSettings
    connection: McpConnection


@dataclass(slots=True)
class _Tool:
    server: Attached
    tool: str  # the server's own name for it
    spec: ToolSpec


class SessionMcpTools:
    def __init__(self, manager: McpManager, servers: list[Attached], settings: McpSettings) -> None:
        self._manager = manager
        self.servers = servers
        self._settings = settings
        self._tools: dict[str, _Tool] = {}
        self._built: dict[str, tuple[int, list[_Tool]]] = {}
        # Model-facing names the user allowed for the rest of this session.
        self._always: set[str] = set()
        # Servers whose notice this session's chat has shown.
        self._told: set[str] = set()

    # --- ExtraTools ------------------------------------------------------------------------

    async def specs(self, session: Session, first_step: bool) -> list[ToolSpec]:
        if first_step:
            # A server still starting gets a small, bounded head start (counted
            # from its own start, so a later prompt never waits): its tools then
            # make the first request; a slower one joins at a later step.
            waits = [
                a.connection.wait_started(a.connection.started_at + self._settings.startup_wait)
                for a in self.servers
                if a.connection.state == "starting"
            ]
            if waits:
                await asyncio.gather(*waits)
        tools: dict[str, _Tool] = {}
        for attached in self.servers:
            for entry in await self._server_tools(attached):
                tools.setdefault(entry.spec.name, entry)
        self._tools = tools
        return [t.spec for t in tools.values()]

    def notices(self) -> list[str]:
        texts = []
        for attached in self.servers:
            notice = attached.connection.notice
            if notice is not None and attached.name not in self._told:
                self._told.add(attached.name)
                texts.append(notice)
        return texts

    def server_of(self, name: str) -> str | None:
        entry = self._tools.get(name)
        return entry.server.name if entry is not None else None

    def spec_of(self, name: str) -> ToolSpec | None:
        entry = self._tools.get(name)
        return entry.spec if entry is not None else None

    async def run(
        self, session: Session, call: ToolCall, limit: int, started: Callable[[], None]
    ) -> ToolResultPart:
        entry = self._tools[call.name]
        server = entry.server
        if not self._may_run_unasked(entry):
            answer = await self._ask(session, call, entry)
            if not answer.allowed:
                return ToolResultPart(call.id, _refusal(answer, entry), True)
            if answer.choice == "allow_always":
                self._always.add(call.name)
        started()
        timeout = server.config.timeout or self._settings.call_timeout
        # The server's questions to the user during this call (elicitation).
        questions = CallElicitation(
            session,
            call.id,
            server.name,
            self._settings.permission_timeout,
            tool=call.name,
            server_tool=entry.tool,
        )
        try:
            async with asyncio.timeout(timeout) as deadline:
                questions.deadline = deadline
                result = await server.connection.call(entry.tool, call.arguments, questions)
        except TimeoutError:
            return ToolResultPart(
                call.id,
                f"The MCP tool {entry.tool!r} of server {server.name!r} did not answer within "
                f"{timeout:g} s; the call was cancelled.",
                True,
            )
        except ServerUnavailable as exc:
            return ToolResultPart(call.id, f"{exc}. The call was not made.", True)
        except Exception as exc:
            detail = str(exc) or type(exc).__name__
            if server.connection.state != "ready":
                detail = f"{detail}; {server.connection.last_error or 'the server stopped'}"
            log.info("MCP call %s on %r failed: %s", entry.tool, server.name, detail)
            what = f"The MCP tool {entry.tool!r} of server {server.name!r}"
            return ToolResultPart(call.id, f"{what} failed: {detail}", True)
        finally:
            questions.end()
        text, is_error = result_text(result)
        return ToolResultPart(
            call.id, truncate_result(text, limit), is_error, result_images(result)
        )

    def close(self, session: Session) -> None:
        self._manager.release(self)

    # --- helpers ---------------------------------------------------------------------------

    async def _server_tools(self, attached: Attached) -> list[_Tool]:
        connection = attached.connection
        tools = await connection.current_tools()
        cached = self._built.get(attached.name)
        if cached is not None and cached[0] == connection.generation:
            return cached[1]
        built = [
            _Tool(
                attached,
                t.name,
                ToolSpec(
                    names.tool_name(attached.name, t.name),
                    _description(t),
                    names.input_schema(t.input_schema),
                    read_only=bool(t.annotations is not None and t.annotations.read_only_hint),
                ),
            )
            for t in tools
        ]
        self._built[attached.name] = (connection.generation, built)
        return built

    def _may_run_unasked(self, entry: _Tool) -> bool:
        config = entry.server.config
        return (
            entry.spec.read_only
            or config.trust
            or entry.tool in config.trusted_tools
            or entry.spec.name in self._always
        )

    async def _ask(self, session: Session, call: ToolCall, entry: _Tool) -> PermissionAnswer:
        request = PermissionRequest(
            tool_call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            title=f"{entry.server.name}: {entry.tool}",
            server=entry.server.name,
            server_tool=entry.tool,
            description=entry.spec.description,
        )
        return await ask_within(session, request, self._settings.permission_timeout)


def _description(tool: Any) -> str:
    text = tool.description or getattr(tool, "title", None) or ""
    return str(text)


def _refusal(answer: PermissionAnswer, entry: _Tool) -> str:
    what = f"The MCP tool {entry.tool!r} of server {entry.server.name!r}"
    if answer.choice == "reject_once":
        return f"The user rejected this call: {what} was not run."
    if answer.choice == "cancelled":
        return f"The permission request was cancelled: {what} was not run."
    return (
        f"{what} was not run: it needs the user's permission, and none was given "
        f"({answer.detail}). A user can mark the server or the tool trusted in agentd's "
        "configuration (`trust = true` or `trusted_tools`)."
    )
