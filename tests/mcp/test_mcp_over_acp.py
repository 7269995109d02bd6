"""MCP over ACP end to end: MCP servers the editor serves over the ACP
connection itself (`type: "acp"` in `mcpServers`, `mcp/connect`,
`mcp/message`, `mcp/disconnect`), with the real daemon, a real ACP client
(the `acp` package, its routes extended by tests/mcp/acp_bridge.py) serving
tests/mcp/server.py's MCP server in-process, and the bundled model server."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from acp import RequestError, text_block
from acp.schema import AcpMcpServer
from acp.stdio import spawn_agent_process

from agentd.testing.daemon import daemon_command, daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, capabilities, connect_acp
from tests.mcp import server as test_server
from tests.mcp.acp_bridge import EditorMcp

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


@pytest.fixture
def editor() -> EditorClient:
    return EditorClient()


@pytest.fixture
def bridge() -> EditorMcp:
    return EditorMcp()


@pytest_asyncio.fixture
async def acp(
    editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, tmp_path: Path
) -> AsyncIterator[Any]:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as conn:
        bridge.install(conn)
        reply = await conn.initialize(
            protocol_version=1,
            client_capabilities=capabilities(),
            client_info=CLIENT_INFO,
            agentd={"mcp": {"startupWait": 60}},
        )
        assert reply.agent_capabilities.mcp_capabilities.acp is True
        yield conn
        await bridge.aclose()
    assert editor.schema_problems == []


def editors_server(name: str = "ed", server_id: str = "srv-1") -> AcpMcpServer:
    return AcpMcpServer(type="acp", name=name, server_id=server_id)


def tool(name: str, **arguments: Any) -> list[Any]:
    return [text_block(f"!tool {name} {json.dumps(arguments)}")]


def tool_result(model_server: ModelServer) -> str:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    return str(next(m for m in reversed(messages) if m["role"] == "tool")["content"])


def offered(model_server: ModelServer) -> list[str]:
    body = model_server.requests("main")[-1]["body"]
    return [t["function"]["name"] for t in body.get("tools", [])]


async def test_a_tool_of_the_editors_server_reaches_the_model_and_closing_disconnects(
    acp: Any, editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    result = await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=20, b=22))
    assert result.stop_reason == "end_turn"
    assert tool_result(model_server) == "42"
    assert bridge.connects == ["srv-1"]
    methods = [method for method, _ in bridge.requests]
    assert methods[0] == "initialize" and "tools/list" in methods
    assert ("tools/call", {"name": "add", "arguments": {"a": 20, "b": 22}}) in bridge.requests
    started = editor.updates(sid, "tool_call")[0]
    assert started["title"] == "ed: add"
    status = await acp.ext_method("agentd/mcp/status", {})
    (ed,) = status["servers"]
    assert ed["state"] == "ready" and ed["transport"] == "acp" and "add" in ed["tools"]
    await acp.close_session(session_id=sid)
    await bridge.wait(lambda: bridge.disconnects == ["conn-1"])


async def test_a_tool_with_side_effects_asks_permission_first(
    acp: Any, editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    async def reject(request: dict[str, Any]) -> str:
        return "reject_once"

    editor.decide = reject
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__echo", text="hi"))
    (asked,) = editor.requests("session/request_permission")
    assert asked["params"]["toolCall"]["title"] == "ed: echo"
    assert "rejected" in tool_result(model_server)
    assert not any(method == "tools/call" for method, _ in bridge.requests)


async def test_cancel_stops_the_call_and_the_server_is_told(
    acp: Any, editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    cancelled = asyncio.Event()
    bridge.servers["srv-1"] = lambda: test_server.build("ed", lambda tool: cancelled.set())
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    prompt = asyncio.ensure_future(acp.prompt(session_id=sid, prompt=tool("mcp__ed__hang")))
    await bridge.wait(lambda: any(m == "tools/call" for m, _ in bridge.requests))
    await acp.cancel(session_id=sid)
    assert (await prompt).stop_reason == "cancelled"
    # The inner cancel names the outer request, which the bridge made the
    # inner id: the server's own handler is cancelled.
    await asyncio.wait_for(cancelled.wait(), 30)
    (cancel,) = [p for m, p in bridge.notified if m == "notifications/cancelled"]
    assert isinstance(cancel["requestId"], int)
    # And the outer request agentd stopped waiting for is withdrawn, as ACP says.
    (call,) = [m for m in editor.requests("mcp/message") if m["params"]["method"] == "tools/call"]
    assert call["id"] == cancel["requestId"]
    await editor.wait_for(
        lambda m: m.get("method") == "$/cancel_request" and m["params"] == {"requestId": call["id"]}
    )
    # The session goes on, over the same connection.
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=1, b=2))
    assert tool_result(model_server) == "3"
    assert bridge.connects == ["srv-1"]


async def test_a_refused_connect_is_said_in_the_chat_and_the_session_works(
    acp: Any, editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    bridge.servers["srv-x"] = None  # the editor refuses it
    entry = editors_server("gone", "srv-x")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[entry])).session_id
    result = await acp.prompt(session_id=sid, prompt=[text_block("hello")])
    assert result.stop_reason == "end_turn"
    chat = editor.text(sid)
    assert "'gone'" in chat and "refused mcp/connect" in chat and "no MCP server srv-x" in chat
    assert not [name for name in offered(model_server) if name.startswith("mcp__")]
    # Said once, and not asked again.
    await acp.prompt(session_id=sid, prompt=[text_block("again")])
    assert editor.text(sid).count("refused mcp/connect") == 1
    assert bridge.connects == ["srv-x"]
    status = await acp.ext_method("agentd/mcp/status", {})
    assert status["servers"][0]["state"] == "failed"


async def test_the_editors_messages_reach_agentds_client(
    acp: Any, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=1, b=1))
    (connection_id,) = bridge.open
    # A ping from the editor's side is answered by agentd's MCP client.
    assert await bridge.send(connection_id, "ping") == {}
    # A request it does not serve is an error, not a hang.
    with pytest.raises(RequestError):
        await bridge.send(connection_id, "sampling/createMessage", {"messages": []})
    # The server's tools/list_changed (a notification, over mcp/message) is heard.
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__grow"))
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__extra"))
    assert tool_result(model_server) == "extra tool ran"


async def test_an_unknown_connection_id_is_refused_naming_it(
    acp: Any, bridge: EditorMcp, workspace: Path
) -> None:
    with pytest.raises(RequestError) as info:
        await bridge.send("no-such-connection", "ping")
    assert info.value.code == -32602
    assert "connectionId" in str(info.value) or "connectionId" in json.dumps(info.value.data)
    # A notification for it is dropped; the daemon still answers.
    await bridge._conn.send_notification(
        "mcp/message", {"connectionId": "nope", "method": "notifications/initialized"}
    )
    assert (await acp.ext_method("agentd/mcp/status", {}))["servers"] == []


@pytest.mark.parametrize(
    "server_id", ["", "\ud800", "x" * 5000], ids=["empty", "surrogate", "long"]
)
async def test_an_unusable_server_id_is_refused_naming_it(
    acp: Any, workspace: Path, server_id: str
) -> None:
    with pytest.raises(RequestError) as info:
        await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server("x", server_id)])
    assert info.value.code == -32602 and "mcpServers.0.serverId" in str(info.value.data)


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"content": [{"type": "text", "text": "half \ud83d of it"}]}, "half \ufffd of it"),
        ({"content": [{"type": "text", "text": "y" * 20_000_000}]}, "truncated"),
        (["not", "an", "object"], "not an object"),
        # Deeper than the SDK's serialiser goes: a failed call, not a crash.
        ({"content": [], "structuredContent": {"v": deep(900)}}, "failed"),
    ],
    ids=["lone-surrogate", "huge", "not-an-object", "deep"],
)
async def test_hostile_answers_end_as_results_and_the_session_goes_on(
    acp: Any,
    bridge: EditorMcp,
    model_server: ModelServer,
    workspace: Path,
    answer: Any,
    expected: str,
) -> None:
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    bridge.answers_for["tools/call"] = answer
    # `picture` has no output schema: any content is a valid answer of it.
    result = await acp.prompt(session_id=sid, prompt=tool("mcp__ed__picture"))
    assert result.stop_reason == "end_turn"
    assert expected in tool_result(model_server)
    del bridge.answers_for["tools/call"]
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=2, b=2))
    assert tool_result(model_server) == "4"


async def test_a_stopping_daemon_disconnects_while_the_editor_still_reads(
    editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, tmp_path: Path
) -> None:
    # SIGTERM with stdin still open, as ACP editors stop agents.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = daemon_env(model_server.openai_base_url, tmp_path)
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    with (tmp_path / "agentd-stderr.log").open("ab") as stderr:
        async with spawn_agent_process(
            editor,
            *daemon_command(acp=True),
            env=env,
            transport_kwargs={"stderr": stderr.fileno()},
            observers=[editor.observe],
        ) as (conn, process):
            bridge.install(conn)
            await conn.initialize(
                protocol_version=1,
                client_capabilities=capabilities(),
                agentd={"mcp": {"startupWait": 60}},
            )
            new = await conn.new_session(cwd=str(workspace), mcp_servers=[editors_server()])
            await conn.prompt(session_id=new.session_id, prompt=tool("mcp__ed__add", a=1, b=2))
            assert tool_result(model_server) == "3"
            assert bridge.disconnects == []
            process.send_signal(signal.SIGTERM)
            await bridge.wait(lambda: bridge.disconnects == ["conn-1"])
            assert await asyncio.wait_for(process.wait(), 30) == 0
            await bridge.aclose()
    assert editor.schema_problems == []


async def test_an_answer_too_deep_to_read_fails_the_call_at_once(
    acp: Any, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    # Deeper than agentd's decoder reads (its recursion limit); the test's own
    # side may write it. The call fails now, not after the call timeout.
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    bridge.answers_for["tools/call"] = {"content": [], "structuredContent": {"v": deep(5000)}}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)
    try:
        result = await acp.prompt(session_id=sid, prompt=tool("mcp__ed__picture"))
    finally:
        sys.setrecursionlimit(limit)
    assert result.stop_reason == "end_turn"
    assert "nested deeper than agentd reads" in tool_result(model_server)
    del bridge.answers_for["tools/call"]
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=2, b=3))
    assert tool_result(model_server) == "5"


async def test_deleting_the_session_disconnects(
    acp: Any, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=1, b=2))
    assert bridge.disconnects == []
    await acp._conn.send_request("session/delete", {"sessionId": sid})
    await bridge.wait(lambda: bridge.disconnects == ["conn-1"])


async def test_a_flood_of_the_editors_requests_is_answered_not_queued(
    acp: Any, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=1, b=2))
    (connection_id,) = bridge.open
    answers = await asyncio.gather(
        *(bridge.send(connection_id, "ping", {"pad": "p" * 10_000}) for _ in range(300)),
        return_exceptions=True,
    )
    # Each one answered: a pong, or "busy" for those beyond the buffer.
    assert all(a == {} or isinstance(a, RequestError) for a in answers)
    assert {} in answers
    # A method with a lone surrogate is an error answer too, and the daemon goes on.
    with pytest.raises(RequestError):
        await bridge.send(connection_id, "no/such\ud800method")
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=3, b=4))
    assert tool_result(model_server) == "7"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            RequestError(-32000, "no \ud800 " + "z" * 100_000),
            "the editor refused mcp/connect: no \ufffd",
        ),
        ({"connectionId": 7}, "no usable connectionId"),
        ({}, "no usable connectionId"),
        ({"connectionId": "c" * 5000}, "no usable connectionId"),
    ],
    ids=["huge-refusal-with-surrogate", "id-not-text", "no-id", "id-too-long"],
)
async def test_a_broken_connect_answer_is_said_briefly_and_the_session_works(
    acp: Any, editor: EditorClient, bridge: EditorMcp, workspace: Path, answer: Any, said: str
) -> None:
    bridge.connect_answers["srv-x"] = answer
    sid = (
        await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server("ed", "srv-x")])
    ).session_id
    result = await acp.prompt(session_id=sid, prompt=[text_block("hello")])
    assert result.stop_reason == "end_turn"
    chat = editor.text(sid)
    assert said in chat and len(chat) < 2000


async def test_a_loaded_session_connects_again(
    acp: Any, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    bridge.servers["srv-1"] = lambda: test_server.build("ed")
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[editors_server()])).session_id
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=1, b=2))
    await acp.close_session(session_id=sid)
    await bridge.wait(lambda: bridge.disconnects == ["conn-1"])
    await acp.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[editors_server()])
    await acp.prompt(session_id=sid, prompt=tool("mcp__ed__add", a=5, b=5))
    assert tool_result(model_server) == "10"
    assert bridge.connects == ["srv-1", "srv-1"] and list(bridge.open) == ["conn-2"]
