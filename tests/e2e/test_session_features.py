"""Modes, the model choice, plans, slash commands and images over the LSP-framed
protocol: the real daemon driven by pytest-lsp, the bundled model server."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

PIXEL = base64.b64encode(bytes.fromhex("89504e470d0a1a0a")).decode()
PLAN = {
    "entries": [
        {"content": "Find the bug", "priority": "high", "status": "in_progress"},
        {"content": "Write a test", "priority": "low", "status": "pending"},
    ]
}


def tool_prompt(name: str, **arguments: Any) -> str:
    return f"!tool {name} {json.dumps(arguments)}"


def bad_fields(error: JsonRpcException) -> list[dict[str, Any]]:
    assert error.code == -32602 and isinstance(error.data, dict)
    return list(error.data["fields"])


def updates(client: AgentdClient, sid: str, kind: str) -> list[dict[str, Any]]:
    return [
        u["update"] for u in client.updates if u["sessionId"] == sid and u["update"]["kind"] == kind
    ]


async def test_new_session_says_how_it_runs_and_list_commands_lists_the_commands(
    client: AgentdClient, workspace: Path
) -> None:
    result = await client.request("agent/newSession", {"workspaceRoot": str(workspace)})
    assert result["mode"] == "code"
    assert [m["id"] for m in result["modes"]] == ["ask", "code", "auto-edit"]
    assert result["model"] == "test-model"
    assert result["models"] == [{"id": "test-model", "name": "test-model", "supportsImages": False}]
    listed = await client.request("agent/listCommands", {"sessionId": result["sessionId"]})
    assert [c["name"] for c in listed["commands"]] == ["compact", "init", "memory", "reset"]
    assert listed["commands"][0]["hint"] == "what to keep (optional)"
    assert "hint" not in listed["commands"][2]
    with pytest.raises(JsonRpcException) as info:
        await client.request("agent/listCommands", {"sessionId": "nope"})
    assert info.value.code == -32001


async def test_set_mode_switches_tools_and_approval_and_is_kept_with_the_session(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env, {"clientTools": ["edit_file", "run_command"]})
    c.tool_handler = lambda update: ("done",)
    try:
        sid = await c.new_session(workspace)
        assert await c.request("agent/setMode", {"sessionId": sid, "mode": "ask"}) == {
            "mode": "ask"
        }
        assert updates(c, sid, "mode") == [{"kind": "mode", "mode": "ask"}]
        await c.prompt(sid, tool_prompt("edit_file", path="app.py", old_text="4", new_text="5"))
        first, _ = model_server.requests("main")
        offered = {t["function"]["name"] for t in first["body"]["tools"]}
        assert offered == {"read_file", "list_dir", "search", "glob", "update_plan"}
        # Refused by the daemon: the editor was told of the attempt, never asked to run it.
        (call,) = updates(c, sid, "tool_call")
        assert "autoApprove" not in call
        assert call["executor"] == "daemon"  # "client" would tell the editor to run it
        (done,) = updates(c, sid, "tool_call_update")
        assert done["status"] == "failed"
        assert done["content"].startswith("edit_file is not available in Ask mode")

        await c.request("agent/setMode", {"sessionId": sid, "mode": "auto-edit"})
        await c.prompt(sid, tool_prompt("edit_file", path="app.py", old_text="4", new_text="5"))
        await c.prompt(sid, tool_prompt("run_command", command="true"))
        edit, command = updates(c, sid, "tool_call")[1:]
        assert edit["autoApprove"] is True and edit["executor"] == "client"
        assert "autoApprove" not in command

        with pytest.raises(JsonRpcException) as info:
            await c.request("agent/setMode", {"sessionId": sid, "mode": "plan"})
        assert info.value.code == -32602
        assert bad_fields(info.value)[0]["field"] == "mode"
    finally:
        await c.lsp.shutdown_session()
    c2 = await start_client(env, {"clientTools": ["edit_file", "run_command"]})
    try:
        loaded = await c2.request("agent/loadSession", {"sessionId": sid})
        assert loaded["mode"] == "auto-edit"
    finally:
        await c2.lsp.shutdown_session()


async def test_set_model_picks_among_the_configured_models(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env, {"models": ["big-model", {"id": "small-model", "name": "Small"}]})
    try:
        result = await c.request("agent/newSession", {"workspaceRoot": str(workspace)})
        sid = result["sessionId"]
        assert [m["id"] for m in result["models"]] == ["test-model", "big-model", "small-model"]
        assert await c.request("agent/setModel", {"sessionId": sid, "model": "small-model"}) == {
            "model": "small-model"
        }
        await c.prompt(sid, "hi")
        assert model_server.requests("main")[-1]["body"]["model"] == "small-model"
        with pytest.raises(JsonRpcException) as info:
            await c.request("agent/setModel", {"sessionId": sid, "model": "gpt-99"})
        assert bad_fields(info.value) == [
            {
                "field": "model",
                "message": "'gpt-99' is not one of test-model, big-model, small-model",
            }
        ]
    finally:
        await c.lsp.shutdown_session()


async def test_the_plan_is_an_update_kind_and_comes_back_with_the_session(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, tool_prompt("update_plan", **PLAN))
        assert updates(c, sid, "plan") == [{"kind": "plan", **PLAN}]
        assert updates(c, sid, "tool_call") == []
    finally:
        await c.lsp.shutdown_session()
    c2 = await start_client(env)
    try:
        loaded = await c2.request("agent/loadSession", {"sessionId": sid})
        assert loaded["plan"] == PLAN["entries"]
        assert updates(c2, sid, "plan") == [{"kind": "plan", **PLAN}]
        await c2.request("agent/resetSession", {"sessionId": sid})
    finally:
        await c2.lsp.shutdown_session()
    c3 = await start_client(env)
    try:
        # A reset clears the plan with the conversation.
        assert (await c3.request("agent/loadSession", {"sessionId": sid}))["plan"] == []
    finally:
        await c3.lsp.shutdown_session()


async def test_slash_commands_run_the_same_code_over_lsp(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "/memory")
    assert result["stopReason"] == "end_turn"
    assert "Memory of this project" in client.text(sid)
    await client.prompt(sid, "remember 7")
    await client.prompt(sid, "/reset")
    await client.prompt(sid, "again")
    users = [
        m for m in model_server.requests("main")[-1]["body"]["messages"] if m["role"] == "user"
    ]
    # A cleared history is told today's date again, ahead of the prompt.
    assert [m["content"].split("</system-reminder>\n\n")[-1] for m in users] == ["again"]


async def test_image_content_parts_reach_the_model_and_replay(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env, {"supportsImages": True})
    assert c.init_result is not None
    caps = c.init_result.capabilities.experimental["agentd"]  # type: ignore[index]
    assert "image" in caps["promptContent"]
    try:
        sid = await c.new_session(workspace)
        content = [
            {"type": "text", "text": "look"},
            {"type": "image", "data": PIXEL, "mimeType": "image/png"},
        ]
        await c.request("agent/prompt", {"sessionId": sid, "prompt": content})
        last = model_server.requests("main")[-1]["body"]["messages"][-1]
        assert last["content"][-1] == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{PIXEL}"},
        }
        with pytest.raises(JsonRpcException) as info:
            await c.request(
                "agent/prompt",
                {"sessionId": sid, "prompt": [{"type": "image", "data": PIXEL, "mimeType": "x"}]},
            )
        assert bad_fields(info.value)[0]["field"] == "prompt.0.mimeType"
    finally:
        await c.lsp.shutdown_session()
    c2 = await start_client(env, {"supportsImages": True})
    try:
        await c2.request("agent/loadSession", {"sessionId": sid})
        assert updates(c2, sid, "user_image") == [
            {"kind": "user_image", "mimeType": "image/png", "data": PIXEL}
        ]
    finally:
        await c2.lsp.shutdown_session()


async def test_images_of_a_removed_transcript_are_collected_at_start_up(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    c = await start_client(env, {"supportsImages": True})
    try:
        sid = await c.new_session(workspace)
        image = {"type": "image", "data": PIXEL, "mimeType": "image/png"}
        await c.request("agent/prompt", {"sessionId": sid, "prompt": [image]})
        kept = await c.new_session(workspace)
        await c.request("agent/prompt", {"sessionId": kept, "prompt": [image]})
    finally:
        await c.lsp.shutdown_session()
    assert (folder / f"{sid}.images").is_dir()
    (folder / f"{sid}.jsonl").unlink()
    c2 = await start_client(env, {"supportsImages": True})
    try:
        # A prompt is answered once start-up is done, collection included.
        await c2.prompt(await c2.new_session(workspace), "hello")
        assert not (folder / f"{sid}.images").exists()
        assert (folder / f"{kept}.images").is_dir()
    finally:
        await c2.lsp.shutdown_session()


async def test_no_image_content_is_advertised_for_a_model_without_images(
    client: AgentdClient,
) -> None:
    assert client.init_result is not None
    caps = client.init_result.capabilities.experimental["agentd"]  # type: ignore[index]
    assert caps["promptContent"] == ["text", "resource_link", "resource"]
