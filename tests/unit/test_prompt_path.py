"""What a prompt's way to its model request keeps from one prompt to the next
(issue 20): the turn context, the tools offered, the system prompt and
compaction's count of the two. Each is made again as soon as what it is made
of changes: the mode, the model, the instruction files' text, the client's
tools; MCP tools that join at a later step reach that step's request and
leave the kept list alone."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any, cast

from agentd.acp.caps import ClientCaps
from agentd.acp.tools import AcpToolRunner
from agentd.agent import modes, turn
from agentd.agent.context import overhead_bytes
from agentd.agent.core import AgentCore
from agentd.agent.hooks import NoMemory
from agentd.agent.session import AwaitClientResult, Session
from agentd.config import Settings
from agentd.messages import ToolCall, ToolResultPart, ToolSpec
from agentd.providers.base import (
    ModelRequest,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCallReady,
    Usage,
)
from agentd.tasks import Supervisor

MCP_TOOL = ToolSpec("mcp__calc__add", "Add two numbers.", {"type": "object"}, read_only=True)
EDIT_TOOL = ToolSpec("edit_file", "Edit a file in the editor.", {"type": "object"})


class Recorder:
    """A model that answers every request at once, and keeps the requests;
    `calls` are made (one per request, in order) before it answers in text."""

    name = "recorder"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.calls: list[ToolCall] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        self.requests.append(request)
        if self.calls:
            yield ToolCallReady(self.calls.pop(0))
            yield StreamEnd("tool_use", Usage(100, 1))
            return
        yield TextDelta("ok")
        yield StreamEnd("end_turn", Usage(100, 1))

    def warm(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class Instructions(NoMemory):
    """Memory off but for the instruction files' text, which the test sets."""

    text = ""

    async def system_context(self, session: Session) -> str:
        return self.text


class LateServer:
    """An MCP server whose tool is listed from the prompt's second step on."""

    def __init__(self) -> None:
        self.listed = 0

    async def specs(self, session: Session, first_step: bool) -> list[ToolSpec]:
        self.listed += 1
        return [] if first_step else [MCP_TOOL]

    def notices(self) -> list[str]:
        return []

    def server_of(self, name: str) -> str | None:
        return "calc" if name == MCP_TOOL.name else None

    def spec_of(self, name: str) -> ToolSpec | None:
        return MCP_TOOL if name == MCP_TOOL.name else None

    async def run(
        self, session: Session, call: ToolCall, limit: int, started: Callable[[], None]
    ) -> ToolResultPart:
        started()
        return ToolResultPart(call.id, "3")

    def close(self, session: Session) -> None:
        return None


def _core(memory: Instructions | None = None) -> tuple[AgentCore, Recorder]:
    settings = Settings.model_validate({"model": "main-model", "models": ["other-model"]})
    provider = Recorder()
    core = AgentCore(settings, provider, Supervisor(), memory=memory, persist=False)
    return core, provider


def _names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


async def test_the_tools_and_system_prompt_are_kept_until_what_makes_them_changes(
    tmp_path: Path,
) -> None:
    memory = Instructions()
    core, provider = _core(memory)
    session = core.new_session(tmp_path, AwaitClientResult([EDIT_TOOL]))
    await core.prompt(session.id, "one", lambda u: None)
    await core.prompt(session.id, "two", lambda u: None)
    first, second = provider.requests
    assert second.tools is first.tools and second.system is first.system
    assert core._turn_context(session) is core._turn_context(session)
    # Another session of the root starts with them.
    other = core.new_session(tmp_path, session.client_tools)
    await core.prompt(other.id, "elsewhere", lambda u: None)
    assert provider.requests[-1].tools is first.tools
    assert provider.requests[-1].system is first.system
    counted = core.compactor.state(session)
    assert counted.overhead == overhead_bytes(second.system, second.tools)

    # The instruction files changed: a new system prompt, counted again.
    memory.text = "Instructions from AGENTS.md: answer in French."
    await core.prompt(session.id, "three", lambda u: None)
    third = provider.requests[-1]
    assert third.system.endswith(memory.text) and third.system.startswith(first.system)
    assert third.tools is first.tools
    assert counted.overhead == overhead_bytes(third.system, third.tools)

    # Ask mode: read-only tools and its note, then the same again in code mode.
    core.set_mode(session.id, modes.ASK)
    await core.prompt(session.id, "four", lambda u: None)
    fourth = provider.requests[-1]
    assert modes.ASK_MODE_NOTE in fourth.system
    assert "edit_file" in _names(first) and "edit_file" not in _names(fourth)
    assert set(_names(fourth)) < set(_names(first))
    assert counted.overhead == overhead_bytes(fourth.system, fourth.tools)
    core.set_mode(session.id, modes.CODE)
    await core.prompt(session.id, "five", lambda u: None)
    fifth = provider.requests[-1]
    assert _names(fifth) == _names(first) and fifth.system == third.system

    # Another model: its own turn context, the same tools.
    main_context = core._turn_context(session)
    core.set_model(session.id, "other-model")
    await core.prompt(session.id, "six", lambda u: None)
    assert provider.requests[-1].model == "other-model"
    assert core._turn_context(session) is not main_context
    assert core._turn_context(session).model == "other-model"


async def test_a_clients_new_tools_are_offered_at_once(tmp_path: Path) -> None:
    core, provider = _core()
    client = AwaitClientResult([])
    session = core.new_session(tmp_path, client)
    await core.prompt(session.id, "one", lambda u: None)
    assert "edit_file" not in _names(provider.requests[-1])
    session.client_tools = AwaitClientResult([EDIT_TOOL])
    await core.prompt(session.id, "two", lambda u: None)
    assert "edit_file" in _names(provider.requests[-1])


async def test_mcp_tools_joining_at_a_later_step_leave_the_kept_list_alone(
    tmp_path: Path,
) -> None:
    core, provider = _core()
    session = core.new_session(tmp_path, AwaitClientResult([]))
    session.extra_tools = LateServer()
    provider.calls = [ToolCall("c1", MCP_TOOL.name, {"a": 1, "b": 2})]
    await core.prompt(session.id, "add", lambda u: None)
    provider.calls = [ToolCall("c2", MCP_TOOL.name, {"a": 1, "b": 2})]
    await core.prompt(session.id, "add again", lambda u: None)
    first_step, second_step, next_first, next_second = provider.requests
    assert MCP_TOOL.name not in _names(first_step)
    assert _names(second_step).count(MCP_TOOL.name) == 1
    assert _names(next_second).count(MCP_TOOL.name) == 1
    assert _names(next_first) == _names(first_step)
    assert MCP_TOOL not in turn._tool_specs(session)


def test_an_acp_clients_tools_are_one_list_per_capabilities() -> None:
    runner = AcpToolRunner(cast(Any, None), ClientCaps(read_text_file=True))
    offered = runner.specs
    assert [s.name for s in offered] == ["read_file"]
    assert runner.specs is offered
    runner.caps = ClientCaps(read_text_file=True, write_text_file=True, terminal=True)
    assert [s.name for s in runner.specs] == [
        "read_file",
        "edit_file",
        "write_file",
        "run_command",
    ]
