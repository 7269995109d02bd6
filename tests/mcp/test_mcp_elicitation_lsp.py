"""MCP elicitation over LSP end to end: an MCP server's question during a
tool call reaches the editor as `agent/elicit` (when the editor declared
`initializationOptions.elicitation`), and its checked answer goes back to
the server. The real daemon, tests/mcp/server.py's `ask` tool over stdio,
the bundled model server calling it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient
from tests.mcp import server as test_server
from tests.mcp.conftest import StartClient, stdio_server

pytestmark = pytest.mark.e2e

BOTH = {"form": True, "url": True}


def ask(kind: str) -> dict[str, Any]:
    return {"toolCalls": [{"id": "m1", "name": "mcp__calc__ask", "arguments": {"kind": kind}}]}


def server_answer(model_server: ModelServer) -> dict[str, Any]:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    content = next(m for m in reversed(messages) if m["role"] == "tool")["content"]
    return dict(json.loads(content))


def answer_with(client: AgentdClient, answer: Any, seen: list[dict[str, Any]]) -> None:
    async def on_request(params: Any) -> Any:
        seen.append(params)
        return answer

    client.lsp.feature("agent/elicit")(on_request)


async def test_a_form_reaches_the_editor_and_its_answer_the_server(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, elicitation=BOTH)
    seen: list[dict[str, Any]] = []
    answer_with(client, {"action": "accept", "content": {"account": "work", "confirm": True}}, seen)
    model_server.enqueue(ask("form"))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "ask"))["stopReason"] == "end_turn"
    assert server_answer(model_server) == {
        "action": "accept",
        "content": {"account": "work", "confirm": True},
    }
    (asked,) = seen
    assert asked["sessionId"] == sid and asked["toolCallId"] == "m1"
    assert asked["mode"] == "form" and asked["server"] == "calc"
    assert asked["message"] == "Which account?"
    assert asked["requestedSchema"] == test_server.FORM


async def test_a_url_is_shown_and_its_completion_passed_on(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, elicitation=BOTH)
    seen: list[dict[str, Any]] = []
    completed: list[Any] = []
    answer_with(client, {"action": "accept"}, seen)

    async def on_complete(params: Any) -> None:
        completed.append(params)

    client.lsp.feature("agent/elicitationComplete")(on_complete)

    model_server.enqueue(ask("url"))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "sign in")
    assert server_answer(model_server) == {"action": "accept", "content": None}
    (asked,) = seen
    assert asked["mode"] == "url" and asked["url"] == test_server.SIGN_IN
    assert asked["elicitationId"] == "elic-1"
    assert completed == [{"sessionId": sid, "elicitationId": "elic-1"}]


@pytest.mark.parametrize("declared", [None, {"url": True}])
async def test_an_editor_that_did_not_declare_the_mode_declines_for_the_server(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path, declared: Any
) -> None:
    options = {} if declared is None else {"elicitation": declared}
    client = await mcp_client({"calc": stdio_server()}, **options)
    seen: list[dict[str, Any]] = []
    answer_with(client, {"action": "accept", "content": {"account": "work"}}, seen)
    model_server.enqueue(ask("form"))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "ask"))["stopReason"] == "end_turn"
    assert server_answer(model_server)["action"] == "decline"
    assert seen == []


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "accept", "content": {"account": "work", "rows": "3"}},
        {"action": "accept", "content": {"account": "work", "tags": "a"}},
        {"action": "accept", "content": {"account": "x" * 100_000}},
        {"action": "approve"},
    ],
)
async def test_a_hostile_answer_is_declined_for_the_server(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path, answer: Any
) -> None:
    client = await mcp_client({"calc": stdio_server()}, elicitation=BOTH)
    answer_with(client, answer, [])
    model_server.enqueue(ask("form"))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "ask"))["stopReason"] == "end_turn"
    assert server_answer(model_server) == {"action": "decline", "content": None}


def never_answer(client: AgentdClient) -> tuple[asyncio.Event, asyncio.Event]:
    """The editor's first dialog stays open (a later one is declined);
    (asked, withdrawn by `$/cancelRequest`)."""
    asked, withdrawn = asyncio.Event(), asyncio.Event()

    async def on_request(params: Any) -> Any:
        if asked.is_set():
            return {"action": "decline"}
        asked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            withdrawn.set()
            raise

    client.lsp.feature("agent/elicit")(on_request)
    return asked, withdrawn


async def test_an_editor_that_never_answers_is_bounded_and_withdrawn(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client(
        {"calc": stdio_server()},
        elicitation=BOTH,
        mcp={"startupWait": 60, "permissionTimeout": 0.5},
    )
    _, withdrawn = never_answer(client)
    model_server.enqueue(ask("form"))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "ask"))["stopReason"] == "end_turn"
    assert server_answer(model_server) == {"action": "cancel", "content": None}
    await asyncio.wait_for(withdrawn.wait(), 30)


async def test_a_cancelled_prompt_withdraws_the_question(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, elicitation=BOTH)
    asked, withdrawn = never_answer(client)
    model_server.enqueue(ask("form"))
    sid = await client.new_session(workspace)
    task = asyncio.ensure_future(client.prompt(sid, "ask", msg_id="p-ask"))
    await asyncio.wait_for(asked.wait(), 30)
    client.cancel("p-ask")
    with pytest.raises(JsonRpcException) as info:
        await task
    assert info.value.code == -32800
    await asyncio.wait_for(withdrawn.wait(), 30)
    # The session and the server go on.
    model_server.enqueue(ask("form"))
    assert (await client.prompt(sid, "again"))["stopReason"] == "end_turn"
    assert server_answer(model_server)["action"] == "decline"


async def test_questions_during_parallel_calls_of_one_server_are_declined(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    # Nothing on the wire says which of the two calls a question belongs to.
    client = await mcp_client({"calc": stdio_server()}, elicitation=BOTH)
    seen: list[dict[str, Any]] = []
    answer_with(client, {"action": "accept", "content": {"account": "work"}}, seen)
    calls = [
        {"id": f"m{i}", "name": "mcp__calc__ask", "arguments": {"kind": "form"}} for i in (1, 2)
    ]
    model_server.enqueue({"toolCalls": calls})
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "ask twice"))["stopReason"] == "end_turn"
    messages = model_server.requests("main")[-1]["body"]["messages"]
    answers = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    assert answers == [{"action": "decline", "content": None}] * 2
    assert seen == []


async def test_the_calls_timeout_is_paused_while_the_user_is_asked(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client(
        {"calc": stdio_server()}, elicitation=BOTH, mcp={"startupWait": 60, "callTimeout": 1}
    )

    async def slow_user(params: Any) -> Any:
        await asyncio.sleep(2.5)  # the user thinks longer than the call may take
        return {"action": "accept", "content": {"account": "work"}}

    client.lsp.feature("agent/elicit")(slow_user)
    model_server.enqueue(ask("form"))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "ask"))["stopReason"] == "end_turn"
    assert server_answer(model_server) == {"action": "accept", "content": {"account": "work"}}
