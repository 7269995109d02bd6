"""MCP servers end to end over LSP: the real daemon, real MCP servers over stdio,
the bundled model server calling their tools."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.daemon import TEST_API_KEY, daemon_env
from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient, start_client
from tests.mcp.conftest import StartClient, stdio_server
from tests.mcp.server import PNG

pytestmark = pytest.mark.e2e


def call(name: str, arguments: dict[str, Any] | None = None, call_id: str = "m1") -> dict[str, Any]:
    return {"toolCalls": [{"id": call_id, "name": name, "arguments": arguments or {}}]}


def updates(client: AgentdClient, sid: str, kind: str) -> list[dict[str, Any]]:
    return [
        u["update"] for u in client.updates if u["sessionId"] == sid and u["update"]["kind"] == kind
    ]


def tool_names(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request["body"].get("tools", [])}


def last_tool_message(model_server: ModelServer) -> dict[str, Any]:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    return next(m for m in reversed(messages) if m["role"] == "tool")


async def test_a_read_only_tool_runs_and_its_result_reaches_the_model(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(call("mcp__calc__add", {"a": 2, "b": 40}))
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "add them")
    assert result["stopReason"] == "end_turn"
    first = model_server.requests("main")[0]
    assert {"mcp__calc__add", "mcp__calc__echo", "read_file"} <= tool_names(first)
    add = next(t for t in first["body"]["tools"] if t["function"]["name"] == "mcp__calc__add")
    assert add["function"]["description"] == "Add two integers."
    assert add["function"]["parameters"]["required"] == ["a", "b"]
    (started,) = updates(client, sid, "tool_call")
    assert started["server"] == "calc" and started["executor"] == "daemon"
    statuses = [u["status"] for u in updates(client, sid, "tool_call_update")]
    assert statuses == ["running", "completed"]
    assert updates(client, sid, "tool_call_update")[-1]["content"] == "42"
    assert last_tool_message(model_server)["content"] == "42"
    # Its stderr reached the daemon's log, under the server's name.
    await client.wait_for_log("[calc] CALL add")
    status = await client.request("mcp/status", {})
    (calc,) = status["servers"]
    assert calc["name"] == "calc" and calc["state"] == "ready" and calc["transport"] == "stdio"
    assert "add" in calc["tools"] and calc["toolCount"] == len(calc["tools"])
    assert status["sdkLoaded"] is True


async def test_is_error_is_a_failed_result(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(call("mcp__calc__fail", {"message": "the disk is full"}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "try it")
    done = updates(client, sid, "tool_call_update")[-1]
    assert done["status"] == "failed" and "the disk is full" in done["content"]
    assert "the disk is full" in last_tool_message(model_server)["content"]


async def test_huge_output_is_capped(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, limits={"toolResultMaxChars": 1000})
    model_server.enqueue(call("mcp__calc__huge", {"chars": 200_000}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "big")
    content = last_tool_message(model_server)["content"]
    assert content.startswith("x" * 1000)
    assert "[output truncated: 200,000 characters, showing the first 1,000]" in content


async def test_structured_content_and_images_reach_the_model_as_text(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(
        {
            "toolCalls": [
                {"id": "w", "name": "mcp__calc__weather", "arguments": {"city": "Oslo"}},
                {"id": "p", "name": "mcp__calc__picture", "arguments": {}},
            ]
        }
    )
    sid = await client.new_session(workspace)
    await client.prompt(sid, "both")
    messages = model_server.requests("main")[-1]["body"]["messages"]
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert json.loads(results["w"]) == {"city": "Oslo", "celsius": 21}
    assert "[image image/png" in results["p"] and "a picture" in results["p"]
    # Chat Completions takes no image in a tool message: the model is told.
    assert "1 image(s) not shown" in results["p"]


async def test_an_image_reaches_a_model_that_takes_images_in_tool_results(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client(
        {"calc": stdio_server()},
        env={"AGENTD_PROVIDER": "anthropic", "AGENTD_BASE_URL": model_server.base_url},
    )
    model_server.enqueue(call("mcp__calc__picture", call_id="p"))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "look")
    last = model_server.requests("main")[-1]
    assert last["api"] == "anthropic"
    (result,) = [b for b in last["body"]["messages"][-1]["content"] if b["type"] == "tool_result"]
    text, image = result["content"]
    assert "[image image/png, 72 bytes]" in text["text"] and "a picture" in text["text"]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }


async def test_a_call_that_never_answers_times_out_and_is_cancelled_at_the_server(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    slow = {**stdio_server(), "timeout": 0.5}
    client = await mcp_client({"calc": slow})
    model_server.enqueue(call("mcp__calc__hang"))
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "wait forever")
    assert result["stopReason"] == "end_turn"
    done = updates(client, sid, "tool_call_update")[-1]
    assert done["status"] == "failed" and "did not answer within 0.5 s" in done["content"]
    await client.wait_for_log("[calc] CANCELLED hang")


async def test_cancel_during_a_call_reaches_the_server(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(call("mcp__calc__hang"))
    sid = await client.new_session(workspace)
    task = asyncio.ensure_future(client.prompt(sid, "wait", msg_id="p-mcp"))
    await client.wait_for_log("[calc] CALL hang")
    client.cancel("p-mcp")
    with pytest.raises(JsonRpcException) as info:
        await task
    assert info.value.code == -32800
    assert updates(client, sid, "tool_call_update")[-1]["status"] == "cancelled"
    await client.wait_for_log("[calc] CANCELLED hang")
    # The server stays usable.
    model_server.enqueue(call("mcp__calc__add", {"a": 1, "b": 1}))
    assert (await client.prompt(sid, "again"))["stopReason"] == "end_turn"
    assert last_tool_message(model_server)["content"] == "2"


async def test_a_server_that_crashes_mid_call_is_reported_and_restarted(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(call("mcp__calc__crash"))
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "crash it")
    assert result["stopReason"] == "end_turn"
    done = updates(client, sid, "tool_call_update")[-1]
    assert done["status"] == "failed" and "calc" in done["content"]
    await client.wait_for_log("MCP server 'calc': the server closed the connection")
    await client.wait_for_log("MCP server 'calc' ready", count=2, timeout=60)
    status = await client.request("mcp/status", {})
    assert status["servers"][0]["restarts"] >= 1
    model_server.enqueue(call("mcp__calc__add", {"a": 3, "b": 4}))
    await client.prompt(sid, "again")
    assert last_tool_message(model_server)["content"] == "7"


async def test_a_server_slow_to_start_does_not_hold_up_the_first_prompt(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "start-now"
    client = await mcp_client(
        {"calc": stdio_server(), "slow": stdio_server(MCP_TEST_START_AFTER=str(gate))},
        startup_wait=30.0,
    )
    sid = await client.new_session(workspace)
    await client.wait_for_log("[slow] WAITING to start")
    # The slow server cannot start until the gate opens: the prompt ends without it.
    result = await client.prompt(sid, "hello")
    assert result["stopReason"] == "end_turn"
    first = tool_names(model_server.requests("main")[0])
    assert "mcp__calc__add" in first
    assert not any(n.startswith("mcp__slow__") for n in first)
    gate.touch()
    await client.wait_for_log("MCP server 'slow' ready", timeout=60)
    await client.prompt(sid, "again")
    assert "mcp__slow__add" in tool_names(model_server.requests("main")[-1])


async def test_tools_list_changed_adds_the_new_tool_at_the_next_step(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(call("mcp__calc__grow"))
    model_server.enqueue(call("mcp__calc__extra", call_id="m2"))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "grow")
    requests = model_server.requests("main")
    assert "mcp__calc__extra" not in tool_names(requests[0])
    assert "mcp__calc__extra" in tool_names(requests[1])
    assert last_tool_message(model_server)["content"] == "extra tool ran"


async def test_the_api_key_never_reaches_a_server(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server(GIVEN="by the user")})
    model_server.enqueue(call("mcp__calc__environment"))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "env")
    content = last_tool_message(model_server)["content"]
    env = json.loads(content)
    assert env["GIVEN"] == "by the user"
    assert TEST_API_KEY not in content
    assert not any(k.startswith("AGENTD_") for k in env)


# --- permission -------------------------------------------------------------------------------


def answer_with(client: AgentdClient, option: str | None, seen: list[dict[str, Any]]) -> None:
    async def on_request(params: Any) -> Any:
        seen.append(params)
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}

    client.lsp.feature("agent/requestPermission")(on_request)


async def test_permission_allowed_over_lsp(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "echo")
    assert last_tool_message(model_server)["content"] == "echo: hi"
    (asked,) = seen
    assert asked["sessionId"] == sid and asked["toolCallId"] == "m1"
    assert asked["tool"] == "mcp__calc__echo" and asked["server"] == "calc"
    assert asked["serverTool"] == "echo" and asked["arguments"] == {"text": "hi"}
    assert [o["optionId"] for o in asked["options"]] == [
        "allow_once",
        "allow_always",
        "reject_once",
    ]
    # A read-only tool is not asked about.
    model_server.enqueue(call("mcp__calc__add", {"a": 1, "b": 2}, "m2"))
    await client.prompt(sid, "add")
    assert len(seen) == 1


async def test_allow_always_is_remembered_for_the_session(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_always", seen)
    sid = await client.new_session(workspace)
    for i in range(2):
        model_server.enqueue(call("mcp__calc__echo", {"text": str(i)}, f"e{i}"))
        await client.prompt(sid, "echo")
        assert last_tool_message(model_server)["content"] == f"echo: {i}"
    assert len(seen) == 1


@pytest.mark.parametrize("option", ["reject_once", None])
async def test_permission_rejected_over_lsp(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path, option: str | None
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, option, seen)
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "echo")
    done = updates(client, sid, "tool_call_update")[-1]
    assert done["status"] == "failed"
    assert "was not run" in last_tool_message(model_server)["content"]
    assert "CALL echo" not in json.dumps(client.lsp.log_messages, default=str)


async def test_a_client_without_permission_support_fails_closed(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "echo"))["stopReason"] == "end_turn"
    content = last_tool_message(model_server)["content"]
    assert "needs the user's permission" in content and "trusted" in content
    assert "running" not in [u["status"] for u in updates(client, sid, "tool_call_update")]


async def test_a_trusted_server_runs_without_asking(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": {**stdio_server(), "trust": True}})
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "echo")
    assert last_tool_message(model_server)["content"] == "echo: hi"


async def test_ask_mode_offers_only_tools_annotated_read_only(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    # Trusted, so that only the mode can stop `echo` (no readOnlyHint).
    client = await mcp_client({"calc": {**stdio_server(), "trust": True}})
    sid = await client.new_session(workspace)
    await client.request("agent/setMode", {"sessionId": sid, "mode": "ask"})
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    await client.prompt(sid, "echo")
    offered = tool_names(model_server.requests("main")[0])
    assert "mcp__calc__add" in offered and "mcp__calc__echo" not in offered
    # Called anyway, it is refused without running and without asking.
    content = last_tool_message(model_server)["content"]
    assert "not available in Ask mode" in content and "was not made" in content
    (started,) = updates(client, sid, "tool_call")
    assert started["executor"] == "daemon"
    assert updates(client, sid, "tool_call_update")[-1]["status"] == "failed"
    # The read-only tool runs in Ask mode.
    model_server.enqueue(call("mcp__calc__add", {"a": 1, "b": 2}, "m2"))
    await client.prompt(sid, "add")
    assert last_tool_message(model_server)["content"] == "3"
    assert "CALL echo" not in json.dumps(client.lsp.log_messages, default=str)


async def test_a_declared_client_that_errors_fails_closed(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    # Declares support but has no handler: its -32601 refuses the call.
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "echo")
    assert "was not run" in last_tool_message(model_server)["content"]


# --- none configured --------------------------------------------------------------------------


async def test_no_server_configured_never_loads_the_sdk(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({})
    sid = await client.new_session(workspace)
    await client.prompt(sid, "hello")
    status = await client.request("mcp/status", {})
    assert status == {"servers": [], "sdkLoaded": False}
    assert not any(n.startswith("mcp__") for n in tool_names(model_server.requests("main")[0]))


async def test_an_unanswered_permission_request_times_out_closed_and_is_withdrawn(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client(
        {"calc": stdio_server()}, permission=True, mcp={"startupWait": 60, "permissionTimeout": 0.5}
    )
    never = asyncio.Event()
    withdrawn = asyncio.Event()
    asked: list[Any] = []

    async def on_request(params: Any) -> Any:
        asked.append(params)
        try:
            await never.wait()
        except asyncio.CancelledError:  # the daemon's $/cancelRequest
            withdrawn.set()
            raise

    client.lsp.feature("agent/requestPermission")(on_request)
    model_server.enqueue(call("mcp__calc__echo", {"text": "hi"}))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "echo"))["stopReason"] == "end_turn"
    assert len(asked) == 1
    content = last_tool_message(model_server)["content"]
    assert "was not run" in content and "no answer within 0.5 s" in content
    await asyncio.wait_for(withdrawn.wait(), 30)


# --- shutdown ---------------------------------------------------------------------------------


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_shutdown_kills_a_server_that_does_not_exit(
    model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "server.pid"
    # Ignores SIGTERM and outlives the end of its stdin: only a kill ends it.
    server = stdio_server(MCP_TEST_STUBBORN="1", MCP_TEST_PIDFILE=str(pidfile))
    # Its own client (not the fixture's, which shuts its clients down at the end).
    client = await start_client(
        daemon_env(model_server.openai_base_url, tmp_path),
        {"mcpServers": {"calc": server}, "mcp": {"startupWait": 60}},
    )
    model_server.enqueue(call("mcp__calc__add", {"a": 1, "b": 2}))
    sid = await client.new_session(workspace)
    await client.prompt(sid, "add")
    assert last_tool_message(model_server)["content"] == "3"
    pid = int(pidfile.read_text())
    assert running(pid)
    try:
        # shutdown + exit, and the daemon's process has ended (within the default grace).
        await client.lsp.shutdown_session()
        assert not running(pid)
    finally:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
