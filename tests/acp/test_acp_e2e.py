"""agentd over ACP, end to end: the real daemon, the real model server, the ACP
package's client. Synchronisation is by messages received and the model
server's log; no sleeps, no durations asserted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block
from acp.helpers import embedded_text_resource, resource_block

from agentd.testing.daemon import daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, capabilities, check_golden, connect_acp

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


async def start(conn: Any, fs: bool = True, terminal: bool = True, **meta: Any) -> Any:
    return await conn.initialize(
        protocol_version=1,
        client_capabilities=capabilities(fs, terminal),
        client_info=CLIENT_INFO,
        **meta,
    )


async def new_session(conn: Any, workspace: Path) -> str:
    return str((await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)


def last_response(editor: EditorClient, method: str) -> dict[str, Any]:
    ids = [i for i, m in editor.sent_methods.items() if m == method]
    return [m for m in editor.received if "method" not in m and m.get("id") == ids[-1]][-1]


def main_requests(model_server: ModelServer) -> list[dict[str, Any]]:
    return model_server.requests("main")


def tool_message(request: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in request["body"]["messages"] if m["role"] == "tool")


def tool(name: str, **arguments: Any) -> list[Any]:
    return [text_block(f"!tool {name} {json.dumps(arguments)}")]


# --- initialization and a plain prompt -----------------------------------------------------


async def test_initialize_and_new_session(
    daemon: Any, editor: EditorClient, workspace: Path
) -> None:
    result = await start(daemon)
    assert result.protocol_version == 1
    assert result.agent_capabilities.prompt_capabilities.embedded_context is True
    raw = dict(last_response(editor, "initialize"))
    caps = raw["result"]["agentCapabilities"]
    # What depends on the core's features is checked here, the rest against the golden file.
    assert caps.pop("loadSession") is True
    ext = caps["_meta"]["agentd"].pop("extMethods")
    assert {"_agentd/session/reset", "_agentd/session/close"} <= set(ext)
    assert caps["_meta"]["agentd"]["clientTools"] == [
        "read_file",
        "edit_file",
        "write_file",
        "run_command",
    ]
    check_golden("initialize_response", raw)

    sid = await new_session(daemon, workspace)
    assert sid
    check_golden("session_new_response", last_response(editor, "session/new"))


async def test_a_client_without_fs_or_terminal_gets_no_client_tools(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    result = await start(daemon, fs=False, terminal=False)
    assert result.field_meta is None
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=[text_block("hi")])
    offered = {t["function"]["name"] for t in main_requests(model_server)[0]["body"]["tools"]}
    assert offered == {"read_file", "list_dir", "search", "glob", "update_plan"}


async def test_streamed_prompt(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    result = await daemon.prompt(session_id=sid, prompt=[text_block("!chunks 5")])
    assert result.stop_reason == "end_turn"
    chunks = editor.updates(sid, "agent_message_chunk")
    assert len(chunks) > 1
    assert editor.text(sid) == "w1 w2 w3 w4 w5"
    first = next(
        m
        for m in editor.received
        if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )
    check_golden("session_update_agent_message_chunk", first)
    check_golden("session_prompt_response_end_turn", last_response(editor, "session/prompt"))


async def test_embedded_context_reaches_the_model(
    daemon: Any, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    uri = (workspace / "app.py").as_uri()
    prompt = [
        text_block("explain"),
        resource_block(embedded_text_resource(uri, "def main(): ...", mime_type="text/x-python")),
    ]
    await daemon.prompt(session_id=sid, prompt=prompt)
    user = main_requests(model_server)[0]["body"]["messages"][-1]["content"]
    assert "explain" in user
    assert f'<context uri="{uri}">\ndef main(): ...\n</context>' in user


async def test_thought_chunks(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    model_server.enqueue({"thinking": "Let me think.", "text": "Done."})
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=[text_block("think")])
    thoughts = editor.updates(sid, "agent_thought_chunk")
    assert "".join(u["content"]["text"] for u in thoughts) == "Let me think."
    first = next(
        m
        for m in editor.received
        if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] == "agent_thought_chunk"
    )
    check_golden("session_update_agent_thought_chunk", first)


# --- tools through the editor ---------------------------------------------------------------


async def test_edit_allowed_reads_the_unsaved_buffer_and_writes_through_the_editor(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    path = str(workspace / "app.py")
    editor.buffers[path] = "def main():\n    return 41  # unsaved\n"
    await start(daemon)
    sid = await new_session(daemon, workspace)
    result = await daemon.prompt(
        session_id=sid, prompt=tool("edit_file", path="app.py", old_text="41", new_text="43")
    )
    assert result.stop_reason == "end_turn"
    assert editor.writes == [(path, "def main():\n    return 43  # unsaved\n")]
    assert (workspace / "app.py").read_text() == "def main():\n    return 42\n"  # the editor's job

    (permission,) = editor.requests("session/request_permission")
    assert [o["kind"] for o in permission["params"]["options"]] == [
        "allow_once",
        "allow_always",
        "reject_once",
    ]
    check_golden("session_request_permission_edit", permission, workspace)
    check_golden("fs_read_text_file", editor.requests("fs/read_text_file")[0], workspace)
    check_golden("fs_write_text_file", editor.requests("fs/write_text_file")[0], workspace)

    updates = [u for u in editor.updates(sid) if u["sessionUpdate"].startswith("tool_call")]
    assert [(u["sessionUpdate"], u["status"]) for u in updates] == [
        ("tool_call", "pending"),
        ("tool_call_update", "in_progress"),
        ("tool_call_update", "completed"),
    ]
    assert updates[0]["kind"] == "edit"
    assert updates[2]["content"][0]["type"] == "diff"  # the diff stays shown
    check_golden("session_update_tool_call_edit", _update_message(editor, updates[0]), workspace)
    check_golden(
        "session_update_tool_call_update_diff", _update_message(editor, updates[2]), workspace
    )

    second = main_requests(model_server)[1]
    assert tool_message(second)["content"] == "Edited app.py: replaced 1 occurrence."


async def test_edit_rejected_is_not_written_and_the_model_is_told(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    async def reject(request: dict[str, Any]) -> str:
        return "reject_once"

    editor.decide = reject
    await start(daemon)
    sid = await new_session(daemon, workspace)
    result = await daemon.prompt(
        session_id=sid, prompt=tool("edit_file", path="app.py", old_text="42", new_text="43")
    )
    assert result.stop_reason == "end_turn"
    assert editor.writes == []
    final = editor.updates(sid, "tool_call_update")[-1]
    assert final["status"] == "failed"
    check_golden("session_update_tool_call_update_failed", _update_message(editor, final))
    assert tool_message(main_requests(model_server)[1])["content"] == "The user rejected the edit."


async def test_write_file_creates_a_new_file_through_the_editor(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(
        session_id=sid, prompt=tool("write_file", path="notes/new.md", content="# New\n")
    )
    path = str(workspace / "notes" / "new.md")
    assert editor.writes == [(path, "# New\n")]
    (permission,) = editor.requests("session/request_permission")
    assert permission["params"]["toolCall"]["content"] == [
        {"type": "diff", "path": path, "oldText": None, "newText": "# New\n"}
    ]
    assert editor.updates(sid, "tool_call_update")[-1]["status"] == "completed"
    assert tool_message(main_requests(model_server)[1])["content"] == (
        "Wrote notes/new.md (6 characters)."
    )


async def test_paths_outside_the_workspace_are_refused_without_asking(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(
        session_id=sid, prompt=tool("write_file", path="../outside.txt", content="x")
    )
    assert editor.requests("session/request_permission") == []
    assert editor.writes == []
    assert "outside the workspace" in tool_message(main_requests(model_server)[1])["content"]


async def test_allow_always_is_remembered_per_session_and_kind(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    async def always(request: dict[str, Any]) -> str:
        return "allow_always"

    editor.decide = always
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(
        session_id=sid, prompt=tool("edit_file", path="app.py", old_text="42", new_text="43")
    )
    await daemon.prompt(
        session_id=sid, prompt=tool("edit_file", path="app.py", old_text="43", new_text="44")
    )
    assert len(editor.requests("session/request_permission")) == 1
    assert editor.buffers[str(workspace / "app.py")] == "def main():\n    return 44\n"
    # Another kind (a command) still asks; another session starts with nothing allowed.
    await daemon.prompt(session_id=sid, prompt=tool("run_command", command="true"))
    assert len(editor.requests("session/request_permission")) == 2
    other = await new_session(daemon, workspace)
    await daemon.prompt(
        session_id=other, prompt=tool("edit_file", path="README.md", old_text="42", new_text="7")
    )
    assert len(editor.requests("session/request_permission")) == 3


async def test_read_file_round_trip_sees_the_unsaved_buffer(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    path = str(workspace / "README.md")
    editor.buffers[path] = "# Demo\nThe answer is 43 (unsaved).\n"
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=tool("read_file", path="README.md"))
    (read,) = editor.requests("fs/read_text_file")
    assert read["params"]["path"] == path
    assert editor.requests("session/request_permission") == []  # reading asks nobody
    assert tool_message(main_requests(model_server)[1])["content"] == (
        "1  # Demo\n2  The answer is 43 (unsaved)."
    )
    started = editor.updates(sid, "tool_call")[0]
    assert (started["kind"], started["title"]) == ("read", "Read README.md")
    check_golden("session_update_tool_call_read", _update_message(editor, started), workspace)


async def test_run_command_in_an_editor_terminal(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=tool("run_command", command="echo hello-acp"))
    (create,) = editor.requests("terminal/create")
    assert create["params"]["args"] == ["-c", "echo hello-acp"]
    assert create["params"]["cwd"] == str(workspace)
    for method in (
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ):
        check_golden(method.replace("/", "_"), editor.requests(method)[0], workspace)
    check_golden(
        "session_request_permission_execute",
        editor.requests("session/request_permission")[0],
        workspace,
    )
    embedded = editor.updates(sid, "tool_call_update")[0]
    assert embedded["content"] == [{"type": "terminal", "terminalId": "term-1"}]
    assert tool_message(main_requests(model_server)[1])["content"] == "hello-acp\n[exit code 0]"


async def test_daemon_tools_are_reported_with_their_progress(
    daemon: Any, editor: EditorClient, workspace: Path
) -> None:
    await start(daemon, fs=False, terminal=False)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=tool("search", query="answer"))
    updates = [u for u in editor.updates(sid) if u["sessionUpdate"].startswith("tool_call")]
    assert [u["status"] for u in updates] == ["pending", "in_progress", "completed"]
    assert updates[0]["kind"] == "search"
    assert updates[2]["content"][0]["content"]["text"] == "README.md\n2:The answer is 42.\n"
    # Where the hits are, as ACP locations: editors can jump there.
    assert updates[2]["locations"] == [{"path": str(workspace / "README.md"), "line": 2}]
    check_golden("session_update_tool_call_update_in_progress", _update_message(editor, updates[1]))
    check_golden(
        "session_update_tool_call_update_completed", _update_message(editor, updates[2]), workspace
    )


def _update_message(editor: EditorClient, update: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in editor.received if m.get("params", {}).get("update") is update)


# --- cancellation ------------------------------------------------------------------------------


async def test_cancel_mid_stream_ends_the_turn_cancelled_and_closes_the_model_stream(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    turn = asyncio.create_task(
        daemon.prompt(session_id=sid, prompt=[text_block("!delay 0.05\n!chunks 400")])
    )
    await editor.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        )
    )
    await daemon.cancel(session_id=sid)
    result = await turn
    assert result.stop_reason == "cancelled"
    check_golden("session_prompt_response_cancelled", last_response(editor, "session/prompt"))
    request = main_requests(model_server)[0]
    await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == request["id"])
    # The session takes the next prompt normally.
    again = await daemon.prompt(session_id=sid, prompt=[text_block("still there?")])
    assert again.stop_reason == "end_turn"
    assert editor.text(sid).endswith("Echo: still there?")


async def test_cancel_while_asking_permission(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    asked = asyncio.Event()
    cancelled = asyncio.Event()

    async def wait_for_cancel(request: dict[str, Any]) -> str:
        asked.set()
        await cancelled.wait()
        return "cancelled"  # what ACP requires of a client after session/cancel

    editor.decide = wait_for_cancel
    await start(daemon)
    sid = await new_session(daemon, workspace)
    turn = asyncio.create_task(
        daemon.prompt(
            session_id=sid, prompt=tool("edit_file", path="app.py", old_text="42", new_text="0")
        )
    )
    await asked.wait()
    await daemon.cancel(session_id=sid)
    cancelled.set()
    result = await turn
    assert result.stop_reason == "cancelled"
    assert editor.writes == []
    final = editor.updates(sid, "tool_call_update")[-1]
    assert (final["status"], final["_meta"]) == ("failed", {"agentd": {"cancelled": True}})
    check_golden("session_update_tool_call_update_cancelled", _update_message(editor, final))
    # The reply came after the permission request was answered "cancelled".
    reply = last_response(editor, "session/prompt")
    answered = editor.log.index(("answered", final["toolCallId"]))
    assert answered < editor.log.index(("in", reply))
    # No model request followed the cancel.
    assert len(main_requests(model_server)) == 1


async def test_reset_while_a_prompt_runs_ends_it_cancelled_and_clears_the_session(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    turn = asyncio.create_task(
        daemon.prompt(session_id=sid, prompt=[text_block("!delay 0.05\n!chunks 400")])
    )
    await editor.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        )
    )
    assert await daemon.ext_method("agentd/session/reset", {"sessionId": sid}) == {}
    assert (await turn).stop_reason == "cancelled"
    await daemon.prompt(session_id=sid, prompt=[text_block("fresh")])
    # The history was cleared: the next request carries only the new prompt.
    messages = main_requests(model_server)[-1]["body"]["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"][-1].endswith("fresh")
    assert not any("chunks 400" in str(m.get("content")) for m in messages)
    assert await daemon.ext_method("agentd/session/close", {"sessionId": sid}) == {}
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id=sid, prompt=[text_block("gone?")])
    assert info.value.code == -32002


# --- errors ------------------------------------------------------------------------------------


async def test_a_model_error_is_an_error_reply_and_the_session_goes_on(
    daemon: Any, editor: EditorClient, workspace: Path
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id=sid, prompt=[text_block("!status 400")])
    assert info.value.code == -32603
    assert info.value.data is not None
    assert info.value.data["agentd"]["kind"] == "http_error"
    assert info.value.data["agentd"]["status"] == 400
    reply = last_response(editor, "session/prompt")
    reply["error"]["message"] = "<message>"
    reply["error"]["data"]["agentd"]["message"] = "<message>"
    check_golden("session_prompt_error_model", reply)
    again = await daemon.prompt(session_id=sid, prompt=[text_block("retry")])
    assert again.stop_reason == "end_turn"


async def test_unknown_session_and_bad_params(daemon: Any, workspace: Path) -> None:
    await start(daemon)
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id="nope", prompt=[text_block("hi")])
    assert info.value.code == -32002
    with pytest.raises(RequestError) as info:
        await daemon.new_session(cwd="relative/path", mcp_servers=[])
    assert info.value.code == -32602
    assert info.value.data == {"fields": [{"field": "cwd", "message": "must be an absolute path"}]}
    with pytest.raises(RequestError) as info:
        await daemon.ext_method("agentd/unknown", {})
    assert info.value.code == -32601
    await daemon.ext_notification("agentd/unknown", {})  # ignored
    sid = await new_session(daemon, workspace)
    assert (
        await daemon.prompt(session_id=sid, prompt=[text_block("ok")])
    ).stop_reason == "end_turn"


# --- session/load and memory (core features, detected) --------------------------------------------


async def test_session_load_replays_the_history(
    editor: EditorClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        sid = await new_session(conn, workspace)
        await conn.prompt(session_id=sid, prompt=[text_block("remember 7")])
    replayed = EditorClient()
    async with connect_acp(replayed, env, tmp_path / "stderr.log") as conn:
        result = await start(conn)
        assert result.agent_capabilities.load_session is True
        await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        kinds = [u["sessionUpdate"] for u in replayed.updates(sid)]
        assert kinds[0] == "user_message_chunk"
        assert replayed.updates(sid)[0]["content"]["text"] == "remember 7"
        assert replayed.text(sid) == "Echo: remember 7"
        check_golden("session_update_user_message_chunk", replayed.received[1])
        again = await conn.prompt(session_id=sid, prompt=[text_block("and now?")])
        assert again.stop_reason == "end_turn"
    assert replayed.schema_problems == []


async def test_memory_is_delivered_through_the_same_core(
    editor: EditorClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    topic = memory_folder(workspace, tmp_path) / "deploy-checklist.md"
    topic.write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases to production\n"
        "type: project\n---\n\nRun the smoke tests, then deploy with make ship.\n"
    )
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn, agentd={"memory": {"modelTier": False}})
        sid = await new_session(conn, workspace)
        status = await conn.ext_method("agentd/memory/status", {"workspaceRoot": str(workspace)})
        assert status["docCount"] == 1  # the index is ready
        await conn.prompt(session_id=sid, prompt=[text_block("how do we deploy a release?")])
        (delivery,) = editor.notifications("_agentd/memory")
        assert delivery["params"] == {
            "sessionId": sid,
            "point": "user_query",
            "tier": "local",
            "docs": [str(topic)],
        }
        delivery["params"]["docs"] = ["<memory>/deploy-checklist.md"]
        check_golden("agentd_memory", delivery)
        listed = await conn.ext_method("agentd/memory/list", {"workspaceRoot": str(workspace)})
        assert [d["name"] for d in listed["docs"]] == ["Deploy checklist"]
        user = main_requests(model_server)[0]["body"]["messages"][-1]["content"]
        assert "make ship" in user
    assert editor.schema_problems == []


@pytest.mark.parametrize("notes", [3, 100])
async def test_a_prompt_sent_the_instant_its_session_exists_gets_the_local_tier(
    editor: EditorClient, model_server: ModelServer, workspace: Path, tmp_path: Path, notes: int
) -> None:
    """As an editor that opens a thread with text: `session/prompt` written the
    moment the `session/new` reply is read, before the project's first index
    is built; its first model request still carries the matching note."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = memory_folder(workspace, tmp_path)
    for i in range(notes):
        name, about, fact = (
            ("Deploy checklist", "How we ship releases to production", "deploy with make ship")
            if i == 0
            else (f"Filler {i}", f"Counters of subsystem {i}", f"svc{i} counts requests")
        )
        (folder / f"note-{i:03d}.md").write_text(
            f"---\nname: {name}\ndescription: {about}\ntype: project\n---\n\n{fact}.\n"
        )
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        # A bound no machine reaches: the test is that the prompt waits for the
        # first index, not how fast this machine builds it.
        await start(conn, agentd={"memory": {"modelTier": False, "firstIndexWait": 60}})
        sid = await new_session(conn, workspace)
        await conn.prompt(session_id=sid, prompt=[text_block("how do we deploy a release?")])
        user = main_requests(model_server)[0]["body"]["messages"][-1]["content"]
        assert user.startswith("<system-reminder>") and "make ship" in user
        (delivery,) = editor.notifications("_agentd/memory")
        assert delivery["params"]["docs"] == [str(folder / "note-000.md")]
    assert editor.schema_problems == []


# --- compaction ------------------------------------------------------------------------------


async def test_compact_command_calls_the_core_compaction(
    daemon: Any, editor: EditorClient, model_server: ModelServer, workspace: Path
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    for n in range(3):
        text = f"Turn {n}. Always keep the answer short. " + "filler " * 400
        await daemon.prompt(session_id=sid, prompt=[text_block(text)])
    result = await daemon.prompt(session_id=sid, prompt=[text_block("/compact keep the rules")])
    assert result.stop_reason == "end_turn"
    raw = last_response(editor, "session/prompt")["result"]["_meta"]["agentd"]
    assert raw["stopReason"] == "end_turn"
    (compact,) = model_server.requests("compact")
    assert "keep the rules" in json.dumps(compact["body"])
    # The context meter and the compaction ride in agentd's extension notifications.
    statuses = [n["params"]["status"] for n in editor.notifications("_agentd/compaction")]
    assert statuses == ["started", "done"]
    done = editor.notifications("_agentd/compaction")[-1]
    done["params"]["summary"] = "<summary>"
    for key in ("tokensBefore", "tokensAfter"):
        done["params"][key] = f"<{key}>"
    check_golden("agentd_compaction", done)
    usage = editor.notifications("_agentd/usage")[-1]["params"]
    assert usage["contextWindow"] == 32_768 and usage["contextTokens"] > 0
    # The chat shows a line, for clients that do not know the notification.
    assert "Conversation compacted" in editor.text(sid)
    await daemon.prompt(session_id=sid, prompt=[text_block("and now?")])
    messages = main_requests(model_server)[-1]["body"]["messages"]
    assert "was compacted" in messages[1]["content"]
    assert "Turn 0." not in json.dumps(messages[2:])


async def test_the_editors_file_requests_never_follow_a_workspace_replaced_by_a_symlink(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    """The editor's fs requests are confined like the daemon's tools: once the
    session's folder is replaced by a symlink to another folder, an edit
    there is refused before the editor is asked to read or write anything."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "app.py").write_text("secret = 7\n")
    await start(daemon)
    sid = await new_session(daemon, workspace)
    workspace.rename(tmp_path / "moved-away")
    workspace.symlink_to(outside, target_is_directory=True)
    result = await daemon.prompt(
        session_id=sid, prompt=tool("edit_file", path="app.py", old_text="7", new_text="8")
    )
    assert result.stop_reason == "end_turn"
    assert editor.requests("fs/read_text_file") == editor.requests("fs/write_text_file") == []
    assert editor.writes == [] and (outside / "app.py").read_text() == "secret = 7\n"
    (failed,) = [u for u in editor.updates(sid) if u.get("status") == "failed"]
    assert "refused" in json.dumps(failed)
