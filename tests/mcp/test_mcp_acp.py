"""MCP servers end to end over ACP: `mcpServers` of `session/new`, stdio and
streamable HTTP (an in-process server on loopback), permission through
`session/request_permission`, cancel, `_agentd/mcp/status`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import uvicorn
from acp import text_block
from acp.schema import EnvVariable, HttpMcpServer, McpServerStdio, SseMcpServer

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, capabilities, check_golden, connect_acp
from tests.mcp import server as test_server
from tests.mcp.conftest import SERVER

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


@pytest_asyncio.fixture
async def acp(
    editor: EditorClient, model_server: ModelServer, tmp_path: Path
) -> AsyncIterator[Any]:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as conn:
        await conn.initialize(
            protocol_version=1,
            client_capabilities=capabilities(),
            client_info=CLIENT_INFO,
            agentd={"mcp": {"startupWait": 60}},
        )
        yield conn
    assert editor.schema_problems == []


@pytest.fixture
def editor() -> EditorClient:
    return EditorClient()


class HttpServer:
    """tests/mcp/server.py over streamable HTTP, on loopback, in this process."""

    def __init__(self, sse: bool = False) -> None:
        self.cancelled = asyncio.Event()
        self.url = ""
        self.sse = sse

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[HttpServer]:
        app = test_server.build("web", on_cancel=lambda tool: self.cancelled.set())
        asgi = app.sse_app() if self.sse else app.streamable_http_app()
        config = uvicorn.Config(asgi, host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:  # uvicorn has no event for it
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/{'sse' if self.sse else 'mcp'}"
        try:
            yield self
        finally:
            server.should_exit = True
            await task


def stdio(name: str = "calc") -> McpServerStdio:
    return McpServerStdio(
        name=name,
        command=sys.executable,
        args=[str(SERVER)],
        env=[EnvVariable(name="MCP_TEST_NAME", value=name)],
    )


def tool(name: str, **arguments: Any) -> list[Any]:
    return [text_block(f"!tool {name} {json.dumps(arguments)}")]


def tool_result(model_server: ModelServer) -> str:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    return str(next(m for m in reversed(messages) if m["role"] == "tool")["content"])


async def test_mcp_servers_of_session_new_are_used(
    acp: Any, editor: EditorClient, model_server: ModelServer, workspace: Path
) -> None:
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[stdio()])).session_id
    result = await acp.prompt(session_id=sid, prompt=tool("mcp__calc__add", a=20, b=22))
    assert result.stop_reason == "end_turn"
    assert tool_result(model_server) == "42"
    (started,) = editor.updates(sid, "tool_call")
    raw = next(
        m for m in editor.notifications("session/update") if m["params"]["update"] is started
    )
    check_golden("session_update_tool_call_mcp", raw, workspace)
    assert started["title"] == "calc: add"
    assert started["_meta"]["agentd"]["server"] == "calc"
    assert editor.updates(sid, "tool_call_update")[-1]["status"] == "completed"
    status = await acp.ext_method("agentd/mcp/status", {})
    (calc,) = status["servers"]
    assert calc["state"] == "ready" and calc["sessions"] == 1


@pytest.mark.parametrize("choice", ["allow_once", "reject_once"])
async def test_permission_over_acp(
    acp: Any, editor: EditorClient, model_server: ModelServer, workspace: Path, choice: str
) -> None:
    async def decide(request: dict[str, Any]) -> str:
        return choice

    editor.decide = decide
    sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[stdio()])).session_id
    await acp.prompt(session_id=sid, prompt=tool("mcp__calc__echo", text="hi"))
    (asked,) = editor.requests("session/request_permission")
    check_golden("session_request_permission_mcp", asked, workspace)
    assert asked["params"]["toolCall"]["title"] == "calc: echo"
    assert asked["params"]["toolCall"]["rawInput"] == {"text": "hi"}
    final = editor.updates(sid, "tool_call_update")[-1]
    if choice == "allow_once":
        assert tool_result(model_server) == "echo: hi"
        assert final["status"] == "completed"
    else:
        assert "rejected" in tool_result(model_server)
        assert final["status"] == "failed"


async def test_streamable_http_server_and_cancel_during_a_call(
    acp: Any, editor: EditorClient, model_server: ModelServer, workspace: Path
) -> None:
    async with HttpServer().running() as web:
        entry = HttpMcpServer(type="http", name="web", url=web.url, headers=[])
        sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[entry])).session_id
        await acp.prompt(session_id=sid, prompt=tool("mcp__web__add", a=1, b=2))
        assert tool_result(model_server) == "3"
        prompt = asyncio.ensure_future(acp.prompt(session_id=sid, prompt=tool("mcp__web__hang")))
        await editor.wait_for(
            lambda m: (
                m.get("method") == "session/update"
                and m["params"]["update"].get("title") == "web: hang"
            )
        )
        await acp.cancel(session_id=sid)
        assert (await prompt).stop_reason == "cancelled"
        await asyncio.wait_for(web.cancelled.wait(), 30)
        status = await acp.ext_method("agentd/mcp/status", {})
        assert status["servers"][0]["transport"] == "http"
        await acp.ext_method("agentd/session/close", {"sessionId": sid})


async def test_an_sse_server(
    acp: Any, editor: EditorClient, model_server: ModelServer, workspace: Path
) -> None:
    async with HttpServer(sse=True).running() as web:
        entry = SseMcpServer(type="sse", name="old", url=web.url, headers=[])
        sid = (await acp.new_session(cwd=str(workspace), mcp_servers=[entry])).session_id
        await acp.prompt(session_id=sid, prompt=tool("mcp__old__add", a=5, b=6))
        assert tool_result(model_server) == "11"
        status = await acp.ext_method("agentd/mcp/status", {})
        assert status["servers"][0]["transport"] == "sse"
        await acp.ext_method("agentd/session/close", {"sessionId": sid})


async def test_an_unusable_entry_is_refused_naming_it(acp: Any, workspace: Path) -> None:
    from acp import RequestError

    bad = HttpMcpServer(type="http", name="bad", url="ftp://nowhere", headers=[])
    with pytest.raises(RequestError) as info:
        await acp.new_session(cwd=str(workspace), mcp_servers=[bad])
    assert info.value.code == -32602 and "mcpServers.0" in str(info.value)
