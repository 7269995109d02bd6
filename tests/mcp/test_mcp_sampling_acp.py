"""MCP sampling over ACP end to end: an MCP server's `sampling/createMessage`
during a tool call is asked about with `session/request_permission` (the
running call's card, `_meta.agentd.sampling`) and, allowed, served by
agentd's model. The real daemon, a real ACP client (tests/acp/harness.py,
whose checks hold every message agentd sends to ACP's schema), the test
server's `summarize` tool over stdio or served by the editor over the ACP
connection (tests/mcp/acp_bridge.py), the bundled model server."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from acp import text_block
from acp.schema import (
    AcpMcpServer,
    ClientCapabilities,
    EnvVariable,
    FileSystemCapabilities,
    McpServerStdio,
)
from mcp_types import JSONRPCError

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, connect_acp
from tests.mcp import server as test_server
from tests.mcp.acp_bridge import EditorMcp
from tests.mcp.conftest import SERVER

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

SUMMARY = "A one-line summary from agentd's model."


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
    caps = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
    )
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as conn:
        bridge.install(conn)
        await conn.initialize(
            protocol_version=1,
            client_capabilities=caps,
            client_info=CLIENT_INFO,
            agentd={"mcp": {"startupWait": 60}},
        )
        yield conn
        await bridge.aclose()
    assert editor.schema_problems == []


def stdio() -> McpServerStdio:
    return McpServerStdio(
        name="acct",
        command=sys.executable,
        args=[str(SERVER)],
        env=[EnvVariable(name="MCP_TEST_NAME", value="acct")],
    )


def summarize(text: str = "Summarise this please.") -> dict[str, Any]:
    arguments = {"text": text}
    return {"toolCalls": [{"id": "c1", "name": "mcp__acct__summarize", "arguments": arguments}]}


def server_got(model_server: ModelServer) -> dict[str, Any]:
    """What the server's tool got back from agentd, as it told the model."""
    messages = model_server.requests("main")[-1]["body"]["messages"]
    content = next(m for m in reversed(messages) if m["role"] == "tool")["content"]
    return dict(json.loads(content))


def choosing(choice: str) -> Any:
    async def decide(request: dict[str, Any]) -> str:
        return choice

    return decide


async def session(conn: Any, workspace: Path, server: Any = None) -> str:
    servers = [server or stdio()]
    return str((await conn.new_session(cwd=str(workspace), mcp_servers=servers)).session_id)


async def test_allowed_the_server_gets_the_models_answer(
    acp: Any, editor: EditorClient, model_server: ModelServer, workspace: Path
) -> None:
    editor.decide = choosing("allow_once")
    model_server.enqueue(summarize())
    model_server.enqueue({"text": "Done."})
    model_server.enqueue({"text": SUMMARY}, "sampling")
    sid = await session(acp, workspace)
    result = await acp.prompt(session_id=sid, prompt=[text_block("use the zebra tool")])
    assert result.stop_reason == "end_turn"
    got = server_got(model_server)["result"]
    assert got["content"] == {"type": "text", "text": SUMMARY}
    assert got["role"] == "assistant" and got["stopReason"] == "endTurn"
    (sampled,) = model_server.requests("sampling")
    body = sampled["body"]
    assert "tools" not in body and "zebra" not in json.dumps(body["messages"])
    assert body["messages"][0] == {"role": "system", "content": test_server.SUMMARY_SYSTEM}
    # Asked on the running call's card: no pending status, the preview as content.
    (asked,) = editor.requests("session/request_permission")
    tool_call = asked["params"]["toolCall"]
    assert tool_call["toolCallId"] == "c1" and "status" not in tool_call
    assert tool_call["_meta"]["agentd"] == {
        "server": "acct",
        "tool": "mcp__acct__summarize",
        "sampling": True,
    }
    # The card keeps the call's own title and input (the tool's, not the question).
    assert "title" not in tool_call and "rawInput" not in tool_call
    shown = tool_call["content"][0]["content"]["text"]
    assert "'acct' asks to use the model" in shown and test_server.SUMMARY_SYSTEM in shown
    options = [o["optionId"] for o in asked["params"]["options"]]
    assert options == ["allow_once", "reject_once"]
    # The model's answer went to the server, not to the chat.
    assert SUMMARY not in editor.text(sid) and "Done." in editor.text(sid)
    assert editor.updates(sid, "tool_call_update")[-1]["status"] == "completed"


async def test_rejected_the_server_gets_an_error(
    acp: Any, editor: EditorClient, model_server: ModelServer, workspace: Path
) -> None:
    editor.decide = choosing("reject_once")
    model_server.enqueue(summarize())
    sid = await session(acp, workspace)
    result = await acp.prompt(session_id=sid, prompt=[text_block("summarise")])
    assert result.stop_reason == "end_turn"
    error = server_got(model_server)["error"]
    assert error["code"] == -1 and "declined" in error["message"]
    assert model_server.requests("sampling") == []


async def test_the_editors_own_server_is_served_and_a_cancel_stops_the_model(
    acp: Any, editor: EditorClient, bridge: EditorMcp, model_server: ModelServer, workspace: Path
) -> None:
    editor.decide = choosing("allow_once")
    bridge.servers["srv-1"] = lambda: test_server.build("acct")
    server = AcpMcpServer(type="acp", name="acct", server_id="srv-1")
    sid = await session(acp, workspace, server)
    # Served over the ACP connection as over stdio.
    model_server.enqueue(summarize())
    model_server.enqueue({"text": SUMMARY}, "sampling")
    await acp.prompt(session_id=sid, prompt=[text_block("summarise")])
    assert server_got(model_server)["result"]["content"]["text"] == SUMMARY
    # A cancel mid-stream closes the model stream; the server gets an error.
    model_server.enqueue(summarize())
    model_server.enqueue({"chunks": ["Half a summ", "ary"], "stallAfter": 1}, "sampling")
    before = {r["id"] for r in model_server.requests("sampling")}
    prompt = asyncio.ensure_future(acp.prompt(session_id=sid, prompt=[text_block("again")]))
    sent = await model_server.wait_for(
        lambda e: e["type"] == "request" and e["purpose"] == "sampling" and e["id"] not in before,
        30,
    )
    await model_server.wait_for(lambda e: e["type"] == "first_chunk" and e["id"] == sent["id"], 30)
    await acp.cancel(session_id=sid)
    assert (await prompt).stop_reason == "cancelled"
    await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == sent["id"], 30)

    def answered_error() -> bool:
        return any(isinstance(a, JSONRPCError) and a.error.code == -1 for a in bridge.answers)

    await bridge.wait(answered_error)
    assert "Half a summ" not in editor.text(sid)
