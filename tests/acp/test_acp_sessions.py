"""Today's ACP session surface, end to end with the ACP package's client:
`session/list` (paging), `session/resume`, `session/close`, modes
(`session/set_mode`, the `mode` config option) and the model choice.
Every message agentd sends is checked against the ACP schema by the harness."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from agentd.messages import Message, TextPart
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import TranscriptWriter, sessions_dir
from tests.acp.harness import EditorClient, check_golden, connect_acp
from tests.acp.test_acp_e2e import last_response, main_requests, new_session, start, tool

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


def bad_field(error: RequestError) -> dict[str, Any]:
    """The first `{field, message}` of a -32602 reply."""
    assert error.code == -32602 and isinstance(error.data, dict)
    return dict(error.data["fields"][0])


def saved_session(home: Path, root: Path, sid: str, title: str, mtime: float) -> None:
    """A session transcript as an earlier daemon left it."""
    path = sessions_dir(root, agentd_home(home)) / f"{sid}.jsonl"
    writer = TranscriptWriter(path, sid, root)
    writer.append(Message("user", [TextPart(title)]))
    writer.append(Message("assistant", [TextPart(f"Echo: {title}")]))
    writer.close()
    os.utime(path, (mtime, mtime))


def updates_of(editor: EditorClient, sid: str, kind: str) -> list[dict[str, Any]]:
    return editor.updates(sid, kind)


def update_message(editor: EditorClient, sid: str, kind: str) -> dict[str, Any]:
    return next(
        m
        for m in editor.received
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == sid
        and m["params"]["update"]["sessionUpdate"] == kind
    )


# --- session/list, session/resume, session/close ------------------------------------------


async def test_session_list_pages_newest_first_and_filters_by_cwd(
    daemon: Any, editor: EditorClient, workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for i in range(60):
        saved_session(tmp_path, workspace, f"w{i:03d}", f"question {i}", 1_700_000_000 + i)
    for i in range(3):
        saved_session(tmp_path, other, f"o{i}", f"other {i}", 1_600_000_000 + i)
    result = await start(daemon)
    caps = result.agent_capabilities.session_capabilities
    assert caps is not None and caps.list is not None and caps.resume is not None

    first = await daemon.list_sessions(cwd=str(workspace))
    assert [s.session_id for s in first.sessions] == [f"w{i:03d}" for i in range(59, 9, -1)]
    assert first.sessions[0].title == "question 59"
    assert first.sessions[0].cwd == str(workspace)
    assert first.next_cursor is not None
    # A session of the second page is used meanwhile: this pass still lists it once.
    touched = sessions_dir(workspace, agentd_home(tmp_path)) / "w005.jsonl"
    os.utime(touched, (1_800_000_000, 1_800_000_000))
    second = await daemon.list_sessions(cwd=str(workspace), cursor=first.next_cursor)
    assert [s.session_id for s in second.sessions] == [f"w{i:03d}" for i in range(9, -1, -1)]
    assert second.next_cursor is None

    # A new pass sees it at the top.
    assert (await daemon.list_sessions(cwd=str(workspace))).sessions[0].session_id == "w005"
    everything: list[str] = []
    cursor = None
    while True:
        page = await daemon.list_sessions(cursor=cursor)
        everything += [s.session_id for s in page.sessions]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(everything) == len(set(everything)) == 63

    small = await daemon.list_sessions(cwd=str(other))
    assert [s.title for s in small.sessions] == ["other 2", "other 1", "other 0"]
    check_golden("session_list_response", last_response(editor, "session/list"), tmp_path)
    with pytest.raises(RequestError) as info:
        await daemon.list_sessions(cwd=str(workspace), cursor="not-a-cursor")
    assert info.value.code == -32602
    assert info.value.data == {
        "fields": [{"field": "cursor", "message": "not a cursor this agent gave out"}]
    }


async def test_resume_restores_without_replay_and_close_ends_the_session(
    daemon: Any, editor: EditorClient, workspace: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    saved_session(tmp_path, workspace, "earlier", "remember 7", 1_700_000_000)
    await start(daemon)
    resumed = await daemon.resume_session(session_id="earlier", cwd=str(workspace))
    assert resumed.modes is not None and resumed.modes.current_mode_id == "code"
    check_golden("session_resume_response", last_response(editor, "session/resume"), tmp_path)
    # No replay: the client already shows the conversation.
    assert updates_of(editor, "earlier", "user_message_chunk") == []
    assert updates_of(editor, "earlier", "agent_message_chunk") == []
    await daemon.prompt(session_id="earlier", prompt=[text_block("what was it?")])
    users = [m["content"] for m in main_requests(model_server)[0]["body"]["messages"][1:]]
    assert users[:2] == ["remember 7", "Echo: remember 7"]

    assert await daemon.close_session(session_id="earlier") is not None
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id="earlier", prompt=[text_block("still there?")])
    assert info.value.code == -32002


# --- modes ------------------------------------------------------------------------------


def offered_tools(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request["body"]["tools"]}


async def test_ask_mode_offers_read_only_tools_and_refuses_an_edit(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.set_session_mode(session_id=sid, mode_id="ask")
    check_golden("session_set_mode_response", last_response(editor, "session/set_mode"))
    check_golden(
        "session_update_current_mode_update",
        update_message(editor, sid, "current_mode_update"),
    )
    options = update_message(editor, sid, "config_option_update")
    check_golden("session_update_config_option_update", options)
    assert options["params"]["update"]["configOptions"][0]["currentValue"] == "ask"

    await daemon.prompt(
        session_id=sid, prompt=tool("edit_file", path="app.py", old_text="42", new_text="43")
    )
    first, second = main_requests(model_server)
    assert offered_tools(first) == {"read_file", "list_dir", "search", "glob", "update_plan"}
    assert "Ask mode (read-only)" in first["body"]["messages"][0]["content"]
    # The model called a tool it was not offered: refused, nobody asked, nothing written.
    assert editor.requests("session/request_permission") == []
    assert editor.writes == []
    result = next(m for m in second["body"]["messages"] if m["role"] == "tool")["content"]
    assert result.startswith("edit_file is not available in Ask mode")

    with pytest.raises(RequestError) as info:
        await daemon.set_session_mode(session_id=sid, mode_id="yolo")
    assert info.value.code == -32602
    assert bad_field(info.value)["field"] == "modeId"


async def test_auto_edit_applies_edits_without_asking_but_commands_still_ask_and_persists(
    editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        sid = await new_session(conn, workspace)
        result = await conn.set_config_option(config_id="mode", session_id=sid, value="auto-edit")
        check_golden(
            "session_set_config_option_response",
            last_response(editor, "session/set_config_option"),
        )
        assert result.config_options[0].current_value == "auto-edit"
        (mode_update,) = updates_of(editor, sid, "current_mode_update")
        assert mode_update["currentModeId"] == "auto-edit"
        await conn.prompt(
            session_id=sid, prompt=tool("edit_file", path="app.py", old_text="42", new_text="43")
        )
        assert editor.requests("session/request_permission") == []
        assert editor.writes == [(str(workspace / "app.py"), "def main():\n    return 43\n")]
        await conn.prompt(session_id=sid, prompt=tool("run_command", command="true"))
        (asked,) = editor.requests("session/request_permission")
        assert asked["params"]["toolCall"]["kind"] == "execute"
    # The mode is the session's: a new daemon loading it has it again.
    again = EditorClient()
    async with connect_acp(again, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        loaded = await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        assert loaded.modes is not None and loaded.modes.current_mode_id == "auto-edit"
        check_golden("session_load_response", last_response(again, "session/load"))
    assert again.schema_problems == []


# --- the model choice ---------------------------------------------------------------------


def config_with_models(tmp_path: Path) -> None:
    folder = tmp_path / "agentd-config"
    folder.mkdir(exist_ok=True)
    (folder / "config.toml").write_text(
        'models = ["other-model", { id = "vision-model", name = "Vision", '
        "supports_images = true }]\n"
    )


async def test_the_model_is_picked_among_the_configured_ones_and_persisted(
    editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    config_with_models(tmp_path)
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        sid = str(new.session_id)
        assert new.config_options is not None
        model_option = new.config_options[1]
        assert (model_option.id, model_option.category) == ("model", "model")
        assert [(o.value, o.name) for o in model_option.options] == [
            ("test-model", "test-model"),
            ("other-model", "other-model"),
            ("vision-model", "Vision"),
        ]
        await conn.prompt(session_id=sid, prompt=[text_block("one")])
        await conn.set_config_option(config_id="model", session_id=sid, value="other-model")
        await conn.prompt(session_id=sid, prompt=[text_block("two")])
        assert [r["body"]["model"] for r in main_requests(model_server)] == [
            "test-model",
            "other-model",
        ]
        with pytest.raises(RequestError) as info:
            await conn.set_config_option(config_id="model", session_id=sid, value="gpt-99")
        assert bad_field(info.value)["field"] == "value"
        with pytest.raises(RequestError) as info:
            await conn.set_config_option(config_id="speed", session_id=sid, value="fast")
        assert bad_field(info.value)["field"] == "configId"
    again = EditorClient()
    async with connect_acp(again, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        loaded = await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        assert loaded.config_options is not None
        assert loaded.config_options[1].current_value == "other-model"
        await conn.prompt(session_id=sid, prompt=[text_block("three")])
        assert main_requests(model_server)[-1]["body"]["model"] == "other-model"
    assert again.schema_problems == []
