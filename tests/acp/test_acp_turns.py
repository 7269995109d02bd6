"""What a prompt turn shows in today's ACP editors, end to end: the agent's
plan, slash commands, images, the session's title, and a cancelled prompt's
usage. The real daemon, the real model server, the ACP package's client."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, image_block, text_block

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir
from tests.acp.harness import EditorClient, check_golden, connect_acp
from tests.acp.test_acp_e2e import last_response, main_requests, new_session, start, tool
from tests.acp.test_acp_sessions import bad_field, update_message
from tests.e2e.test_providers import READ_README, anthropic_env, openai_env

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

# A 1x1 transparent PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()

PLAN = {
    "entries": [
        {"content": "Read the failing test", "priority": "high", "status": "completed"},
        {"content": "Fix the parser", "priority": "medium", "status": "in_progress"},
    ]
}


# --- plans --------------------------------------------------------------------------------


async def test_the_plan_tool_is_shown_as_a_plan_and_restored_on_load(
    editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        sid = await new_session(conn, workspace)
        await conn.prompt(session_id=sid, prompt=tool("update_plan", **PLAN))
        (plan,) = editor.updates(sid, "plan")
        assert plan["entries"] == PLAN["entries"]
        check_golden("session_update_plan", update_message(editor, sid, "plan"))
        # The plan is what the user sees, not a tool call.
        assert editor.updates(sid, "tool_call") == []
        result = next(
            m for m in main_requests(model_server)[1]["body"]["messages"] if m["role"] == "tool"
        )
        assert result["content"] == "Plan updated: 2 entries, 1 completed."
        # A malformed plan is the model's to fix: it is told, the plan stays.
        bad = {"entries": [{"content": "x", "priority": "urgent", "status": "pending"}]}
        await conn.prompt(session_id=sid, prompt=tool("update_plan", **bad))
        assert len(editor.updates(sid, "plan")) == 1
        told = [
            m for m in main_requests(model_server)[3]["body"]["messages"] if m["role"] == "tool"
        ]
        assert "priority must be one of high, medium, low" in told[-1]["content"]
    again = EditorClient()
    async with connect_acp(again, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        (replayed,) = again.updates(sid, "plan")
        assert replayed["entries"] == PLAN["entries"]
        assert again.updates(sid, "tool_call") == []
    assert again.schema_problems == []


# --- slash commands -------------------------------------------------------------------------


async def test_commands_are_advertised_after_session_new_and_run_on_a_prompt(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    advertised = await editor.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "available_commands_update"
        )
    )
    # After the reply that gave the client the session id.
    assert editor.received.index(advertised) > editor.received.index(
        last_response(editor, "session/new")
    )
    names = [c["name"] for c in advertised["params"]["update"]["availableCommands"]]
    assert names == ["compact", "init", "memory", "reset"]
    check_golden("session_update_available_commands_update", advertised)

    result = await daemon.prompt(session_id=sid, prompt=[text_block("/memory")])
    assert result.stop_reason == "end_turn"
    home = agentd_home(tmp_path)
    assert str(home / "projects") in editor.text(sid)
    assert "0 notes" in editor.text(sid)
    assert main_requests(model_server) == []  # no model request

    await daemon.prompt(session_id=sid, prompt=[text_block("remember 7")])
    result = await daemon.prompt(session_id=sid, prompt=[text_block("/reset")])
    assert "cleared" in editor.text(sid)
    await daemon.prompt(session_id=sid, prompt=[text_block("fresh")])
    users = [m for m in main_requests(model_server)[-1]["body"]["messages"] if m["role"] == "user"]
    # A cleared history is told today's date again, ahead of the prompt.
    assert [m["content"].split("</system-reminder>\n\n")[-1] for m in users] == ["fresh"]

    await daemon.prompt(session_id=sid, prompt=[text_block("/init keep it short")])
    init = main_requests(model_server)[-1]["body"]["messages"][-1]["content"]
    assert init.startswith("Write an AGENTS.md file at the root of this workspace")
    assert init.endswith("The user adds: keep it short")

    before = len(main_requests(model_server))
    await daemon.prompt(session_id=sid, prompt=[text_block("/compact")])
    assert len(main_requests(model_server)) == before
    # A path is not a command: it is an ordinary prompt.
    await daemon.prompt(session_id=sid, prompt=[text_block("/etc/hosts: what is it?")])
    last = main_requests(model_server)[-1]["body"]["messages"][-1]["content"]
    assert last.split("</system-reminder>\n\n")[-1] == "/etc/hosts: what is it?"


async def test_the_session_title_is_sent_once_the_first_prompt_names_it(
    daemon: Any, editor: EditorClient, workspace: Path
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=[text_block("Why does test_x fail?\nmore")])
    await daemon.prompt(session_id=sid, prompt=[text_block("and then?")])
    (info,) = editor.updates(sid, "session_info_update")
    assert info["title"] == "Why does test_x fail?"
    check_golden(
        "session_update_session_info_update", update_message(editor, sid, "session_info_update")
    )


# --- images ---------------------------------------------------------------------------------


def vision_config(tmp_path: Path, limit: int | None = None) -> None:
    folder = tmp_path / "agentd-config"
    folder.mkdir(exist_ok=True)
    text = 'models = [{ id = "vision-model", supports_images = true }]\n'
    if limit is not None:
        text += f"[limits]\nmax_image_bytes = {limit}\n"
    (folder / "config.toml").write_text(text)


async def test_an_image_reaches_the_model_and_the_transcript_keeps_it_beside_it(
    editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    vision_config(tmp_path)
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        init = await start(conn)
        # Advertised: a model the user can pick takes images.
        assert init.agent_capabilities.prompt_capabilities.image is True
        sid = await new_session(conn, workspace)
        prompt = [text_block("what is this?"), image_block(PIXEL, "image/png")]
        # The session's model (test-model) takes no images: a clear error, nothing sent.
        with pytest.raises(RequestError) as info:
            await conn.prompt(session_id=sid, prompt=prompt)
        assert info.value.code == -32602
        assert "test-model cannot take images" in str(info.value)
        assert main_requests(model_server) == []

        await conn.set_config_option(config_id="model", session_id=sid, value="vision-model")
        await conn.prompt(session_id=sid, prompt=prompt)
        (request,) = main_requests(model_server)
        assert request["body"]["model"] == "vision-model"
        date, *content = request["body"]["messages"][-1]["content"]
        assert date["text"].startswith("<system-reminder>\nToday's date is")
        assert content == [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        ]
        # The next request still carries it (it is part of the conversation).
        await conn.prompt(session_id=sid, prompt=[text_block("and now?")])
        assert main_requests(model_server)[-1]["body"]["messages"][1]["content"][2]["type"] == (
            "image_url"
        )

    transcript = sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl"
    assert PIXEL not in transcript.read_text()
    (stored,) = transcript.with_suffix(".images").iterdir()
    assert stored.read_bytes() == base64.b64decode(PIXEL)

    again = EditorClient()
    async with connect_acp(again, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        image = next(
            m
            for m in again.received
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
            and m["params"]["update"]["content"]["type"] == "image"
        )
        assert image["params"]["update"]["content"]["data"] == PIXEL
        check_golden("session_update_user_message_chunk_image", image)
        await conn.prompt(session_id=sid, prompt=[text_block("still there?")])
        first_user = main_requests(model_server)[-1]["body"]["messages"][1]
        assert first_user["content"][2]["image_url"]["url"].endswith(PIXEL)  # after the date
    assert again.schema_problems == []


async def test_images_over_the_limit_or_of_another_type_are_refused_by_field(
    daemon: Any, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    vision_config(tmp_path, limit=2048)
    await start(daemon, agentd={"model": "vision-model"})
    sid = await new_session(daemon, workspace)
    big = base64.b64encode(b"\x89PNG" + bytes(4096)).decode()
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id=sid, prompt=[text_block("x"), image_block(big, "image/png")])
    assert bad_field(info.value)["field"] == "prompt.1.data"
    assert "limits.maxImageBytes" in bad_field(info.value)["message"]
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id=sid, prompt=[image_block(PIXEL, "image/tiff")])
    assert bad_field(info.value)["field"] == "prompt.0.mimeType"
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id=sid, prompt=[image_block("not base64!", "image/png")])
    assert bad_field(info.value)["field"] == "prompt.0.data"
    assert main_requests(model_server) == []


async def test_no_image_support_is_advertised_when_no_model_takes_images(daemon: Any) -> None:
    init = await start(daemon)
    assert init.agent_capabilities.prompt_capabilities.image is False


# --- a cancelled prompt's usage -----------------------------------------------------------


async def test_a_cancelled_prompt_reports_the_usage_of_its_finished_steps(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    model_server.enqueue(
        {
            "toolCalls": [{"id": "c1", "name": "list_dir", "arguments": {}}],
            "usage": {"input": 120, "output": 7},
        }
    )
    model_server.enqueue({"chunks": [f"w{i} " for i in range(400)], "chunkDelay": 0.05})
    await start(daemon)
    sid = await new_session(daemon, workspace)
    turn = asyncio.create_task(daemon.prompt(session_id=sid, prompt=[text_block("go")]))
    await editor.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        )
    )
    await daemon.cancel(session_id=sid)
    result = await turn
    assert result.stop_reason == "cancelled"
    assert result.field_meta == {
        "agentd": {
            "stopReason": "cancelled",
            # cacheReadTokens: the model server reports its cache, as OpenAI does.
            "usage": {"inputTokens": 120, "outputTokens": 7, "cacheReadTokens": 0},
        }
    }


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_usage_notifications_carry_the_cache_counts_as_the_lsp_update_does(
    api: str, editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    """`_agentd/usage` has the LSP `usage` update's `cacheReadTokens` and
    `cacheWriteTokens` (when the provider reported them), per model step."""
    model_server.configure_cache(min_tokens=0)  # agentd's prompt here is under 1,024 tokens
    env = (openai_env if api == "openai" else anthropic_env)(model_server, tmp_path)
    model_server.enqueue({"toolCalls": [READ_README]})
    model_server.enqueue({"text": "It is 42."})
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        sid = await new_session(conn, workspace)
        result = await conn.prompt(session_id=sid, prompt=[text_block("what is the answer?")])
        assert result.stop_reason == "end_turn"
    steps = [n["params"] for n in editor.notifications("_agentd/usage")]
    served = [r["cache"] for r in main_requests(model_server)]
    assert [u["sessionId"] for u in steps] == [sid, sid]
    assert [u["cacheReadTokens"] for u in steps] == [s["read"] for s in served]
    assert steps[0]["cacheReadTokens"] == 0 and steps[1]["cacheReadTokens"] > 0
    total = result.field_meta["agentd"]["usage"]
    assert total["cacheReadTokens"] == sum(u["cacheReadTokens"] for u in steps)
    if api == "anthropic":
        # Step 1 wrote its whole prompt; step 2 read all of it back.
        assert steps[0]["cacheWriteTokens"] == served[0]["input"]
        assert steps[1]["cacheReadTokens"] == steps[0]["cacheWriteTokens"]
        assert total["cacheWriteTokens"] == sum(u["cacheWriteTokens"] for u in steps)
    else:
        assert all("cacheWriteTokens" not in u for u in steps)  # OpenAI does not report writes
