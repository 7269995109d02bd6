"""`session/fork` and `session/delete`, end to end with the ACP package's client:
the real daemon over stdio, the bundled model server. Synchronisation is by
messages received; every message agentd sends is checked against the ACP
schema by the harness."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir
from tests.acp.harness import EditorClient, check_golden, connect_acp
from tests.acp.test_acp_e2e import last_response, main_requests, new_session, start
from tests.acp.test_acp_sessions import saved_session
from tests.lsp_client import start_client

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

LONG = "!delay 0.05\n!chunks 400"
REMINDER = re.compile(r"^(<system-reminder>.*?</system-reminder>\n\n)+", re.S)


def contents(request: dict[str, Any]) -> list[str]:
    """The text of a model request's messages after the system prompt, less
    the reminders (the date) a first prompt carries."""
    return [REMINDER.sub("", str(m.get("content"))) for m in request["body"]["messages"][1:]]


def transcript(home: Path, root: Path, sid: str) -> Path:
    return sessions_dir(root, agentd_home(home)) / f"{sid}.jsonl"


async def delete(conn: Any, sid: Any) -> Any:
    # The ACP package's client has no `delete_session` yet: the raw request.
    return await conn._conn.send_request("session/delete", {"sessionId": sid})


async def start_long_prompt(conn: Any, editor: EditorClient, sid: str) -> asyncio.Task[Any]:
    """A prompt that streams for a while, once its first chunk has arrived."""
    seen = len(editor.updates(sid, "agent_message_chunk"))
    turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block(LONG)]))
    await editor.wait_for(lambda m: len(editor.updates(sid, "agent_message_chunk")) > seen)
    return turn


# --- session/fork ---------------------------------------------------------------------------


async def test_a_fork_carries_the_history_mode_and_title_and_the_source_stays_as_it_was(
    daemon: Any, editor: EditorClient, workspace: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    result = await start(daemon)
    caps = result.agent_capabilities.session_capabilities
    assert caps is not None and caps.fork is not None and caps.delete is not None
    source = await new_session(daemon, workspace)
    await daemon.prompt(session_id=source, prompt=[text_block("alpha")])
    await daemon.set_session_mode(session_id=source, mode_id="ask")

    forked = await daemon.fork_session(session_id=source, cwd=str(workspace), mcp_servers=[])
    fork = str(forked.session_id)
    assert fork != source
    assert forked.modes is not None and forked.modes.current_mode_id == "ask"
    check_golden("session_fork_response", last_response(editor, "session/fork"))
    # As after session/new: the commands, and the title the fork already has.
    await editor.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["sessionId"] == fork
            and m["params"]["update"]["sessionUpdate"] == "session_info_update"
        )
    )
    (info,) = editor.updates(fork, "session_info_update")
    assert info["title"] == "alpha"
    assert editor.updates(fork, "available_commands_update")
    # Durable before the reply: its own transcript is there, holding the copy.
    path = transcript(tmp_path, workspace, fork)
    assert '"alpha"' in path.read_text(encoding="utf-8")

    await daemon.prompt(session_id=fork, prompt=[text_block("beta")])
    assert contents(main_requests(model_server)[-1]) == ["alpha", "Echo: alpha", "beta"]
    await daemon.prompt(session_id=source, prompt=[text_block("gamma")])
    assert contents(main_requests(model_server)[-1]) == ["alpha", "Echo: alpha", "gamma"]

    listed = {s.session_id: s.title for s in (await daemon.list_sessions()).sessions}
    assert listed == {source: "alpha", fork: "alpha"}
    # The copied turn is the source's for memory: the fork's transcript holds
    # it as its base, and only its own turn as a message line.
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["type"] for line in lines[:2]] == ["session", "fork"]
    messages = [line["message"] for line in lines if line["type"] == "message"]
    assert [m["parts"][0]["text"] for m in messages] == ["beta", "Echo: beta"]


async def test_a_fork_while_the_source_runs_a_prompt_copies_only_finished_turns(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    source = await new_session(daemon, workspace)
    await daemon.prompt(session_id=source, prompt=[text_block("one")])
    turn = await start_long_prompt(daemon, editor, source)

    forked = await daemon.fork_session(session_id=source, cwd=str(workspace), mcp_servers=[])
    fork = str(forked.session_id)
    await daemon.prompt(session_id=fork, prompt=[text_block("two")])
    fork_request = next(r for r in main_requests(model_server) if "two" in contents(r))
    assert contents(fork_request) == ["one", "Echo: one", "two"]

    # The source's prompt was not disturbed: it ran to its end.
    assert (await turn).stop_reason == "end_turn"
    assert editor.text(source).endswith("w400")
    await daemon.prompt(session_id=source, prompt=[text_block("three")])
    assert contents(main_requests(model_server)[-1])[:3] == ["one", "Echo: one", LONG]


async def test_a_session_only_on_disk_is_forked_after_a_restart(
    editor: EditorClient, workspace: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        source = await new_session(conn, workspace)
        await conn.prompt(session_id=source, prompt=[text_block("kept 7")])
        await conn.set_config_option(config_id="mode", session_id=source, value="auto-edit")
    before = transcript(tmp_path, workspace, source).read_bytes()
    other = tmp_path / "other-checkout"
    other.mkdir()
    again = EditorClient()
    async with connect_acp(again, env, tmp_path / "stderr.log") as conn:
        await start(conn)
        # Into another folder: the fork lives there, the source stays in its own.
        forked = await conn.fork_session(session_id=source, cwd=str(other), mcp_servers=[])
        fork = str(forked.session_id)
        assert forked.modes is not None and forked.modes.current_mode_id == "auto-edit"
        await conn.prompt(session_id=fork, prompt=[text_block("which number?")])
        assert contents(main_requests(model_server)[-1]) == [
            "kept 7",
            "Echo: kept 7",
            "which number?",
        ]
        assert transcript(tmp_path, other, fork).is_file()
        listed = await conn.list_sessions(cwd=str(other))
        assert [(s.session_id, s.cwd) for s in listed.sessions] == [(fork, str(other))]

        with pytest.raises(RequestError) as info:
            await conn.fork_session(session_id="no-such", cwd=str(workspace), mcp_servers=[])
        assert info.value.code == -32002
        assert "no stored session" in str(info.value)
        with pytest.raises(RequestError) as info:
            await conn.fork_session(session_id=source, cwd="relative", mcp_servers=[])
        assert info.value.code == -32602
        assert info.value.data == {
            "fields": [{"field": "cwd", "message": "must be an absolute path"}]
        }
        # mcpServers as session/new takes them: an entry it cannot use is refused.
        unusable = {"name": "db", "type": "http", "url": "ftp://db", "headers": []}
        with pytest.raises(RequestError) as info:
            await conn._conn.send_request(
                "session/fork",
                {"sessionId": source, "cwd": str(workspace), "mcpServers": [unusable]},
            )
        assert info.value.code == -32602
        assert isinstance(info.value.data, dict)
        assert info.value.data["fields"][0]["field"] == "mcpServers.0"
        # No fork was made by the refused requests.
        listed = await conn.list_sessions()
        assert sorted(s.session_id for s in listed.sessions) == sorted([source, fork])
    assert again.schema_problems == []
    # The source's transcript was read, never written.
    assert transcript(tmp_path, workspace, source).read_bytes() == before


# --- session/delete -------------------------------------------------------------------------


async def test_deleting_a_running_session_cancels_its_prompt_and_removes_it(
    daemon: Any, editor: EditorClient, workspace: Path, tmp_path: Path
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=[text_block("first")])
    keep = await new_session(daemon, workspace)
    await daemon.prompt(session_id=keep, prompt=[text_block("kept")])
    turn = await start_long_prompt(daemon, editor, sid)

    assert await delete(daemon, sid) == {"_meta": {"agentd": {"deleted": True}}}
    assert (await turn).stop_reason == "cancelled"
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    assert sorted(p.name for p in folder.iterdir()) == [f"{keep}.jsonl", f"{keep}.meta.json"]
    assert [s.session_id for s in (await daemon.list_sessions()).sessions] == [keep]
    with pytest.raises(RequestError) as info:
        await daemon.prompt(session_id=sid, prompt=[text_block("still there?")])
    assert info.value.code == -32002
    with pytest.raises(RequestError) as info:
        await daemon.load_session(session_id=sid, cwd=str(workspace), mcp_servers=[])
    assert info.value.code == -32002
    # Deleting again, or an id that never was, succeeds silently (ACP's rule).
    assert await delete(daemon, sid) == {"_meta": {"agentd": {"deleted": False}}}
    assert await delete(daemon, "never-was") == {"_meta": {"agentd": {"deleted": False}}}
    check_golden("session_delete_response", last_response(editor, "session/delete"))


async def test_a_stored_session_is_deleted_with_its_images_and_leaves_the_listing(
    daemon: Any, editor: EditorClient, workspace: Path, tmp_path: Path
) -> None:
    for i in range(3):
        saved_session(tmp_path, workspace, f"s{i}", f"question {i}", 1_700_000_000 + i)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    (folder / "s1.images").mkdir()
    (folder / "s1.images" / ("ab" * 32)).write_bytes(b"png")
    (folder / "s1.meta.json").write_text("{}")
    await start(daemon)
    first = await daemon.list_sessions(cwd=str(workspace))
    assert [s.session_id for s in first.sessions] == ["s2", "s1", "s0"]

    assert await delete(daemon, "s1") == {"_meta": {"agentd": {"deleted": True}}}
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("s1")) == []
    assert (folder / "s0.jsonl").is_file() and (folder / "s2.jsonl").is_file()
    listed = await daemon.list_sessions(cwd=str(workspace))
    assert [s.session_id for s in listed.sessions] == ["s2", "s0"]


async def test_hostile_ids_are_refused_and_nothing_outside_is_touched(
    daemon: Any, workspace: Path, tmp_path: Path
) -> None:
    saved_session(tmp_path, workspace, "real", "a real one", 1_700_000_000)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    victim = tmp_path / "victim.jsonl"
    victim.write_text("precious")
    (folder / "linked.jsonl").symlink_to(victim)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    (folder / "linked.images").symlink_to(outside, target_is_directory=True)
    await start(daemon)
    hostile = [
        "../real",
        "../../victim",
        "..",
        "a/b",
        str(victim),
        "real\x00",
        "x" * 100_000,
        "\ud800",
        "",
        "réal",
    ]
    for sid in hostile:
        with pytest.raises(RequestError) as info:
            await delete(daemon, sid)
        assert info.value.code == -32602, sid
        assert isinstance(info.value.data, dict)
        assert info.value.data["fields"][0]["field"] == "sessionId"
        assert len(str(info.value)) < 2000
        with pytest.raises(RequestError) as info:
            await daemon.fork_session(session_id=sid, cwd=str(workspace), mcp_servers=[])
        assert info.value.code == -32602, sid  # not an id: refused as a delete is
    # A transcript that is a symlink is removed as a link; what it points at stays.
    assert await delete(daemon, "linked") == {"_meta": {"agentd": {"deleted": True}}}
    assert victim.read_text() == "precious"
    assert (outside / "keep.txt").read_text() == "precious"
    assert not os.path.lexists(folder / "linked.jsonl")
    assert not os.path.lexists(folder / "linked.images")
    assert [s.session_id for s in (await daemon.list_sessions()).sessions] == ["real"]


def cursor_entries(folder: Path) -> dict[str, list[int]]:
    """`.cursors.json` of a memory folder: session id -> [processedOffset, byteOffset]."""
    data = json.loads((folder / ".cursors.json").read_text())
    return {e["sessionId"]: [e["processedOffset"], e["byteOffset"]] for e in data["sessions"]}


async def test_a_deleted_sessions_extraction_cursor_goes_with_it(
    daemon: Any, workspace: Path, tmp_path: Path
) -> None:
    """The cursor file keeps no entry of a deleted session, nor of one whose
    transcript was removed behind the daemon's back; the others stay as
    they were."""
    for i in range(3):
        saved_session(tmp_path, workspace, f"s{i}", f"question {i}", 1_700_000_000 + i)
    memory = memory_folder(workspace, tmp_path)
    entries = {"s0": [2, 310], "s1": [2, 320], "s2": [1, 150], "gone": [4, 900]}
    body = {
        "version": 2,
        "sessions": [
            {"sessionId": sid, "processedOffset": o, "byteOffset": b}
            for sid, (o, b) in entries.items()
        ],
    }
    (memory / ".cursors.json").write_text(json.dumps(body))
    await start(daemon)
    assert await delete(daemon, "s1") == {"_meta": {"agentd": {"deleted": True}}}
    assert cursor_entries(memory) == {"s0": [2, 310], "s2": [1, 150]}
    assert not [p for p in memory.iterdir() if p.name.startswith(".agentd-tmp-")]


async def test_a_session_open_in_another_daemon_is_refused_deletion(
    daemon: Any, workspace: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    """An LSP daemon on the same home (another editor window) has the session
    open: session/delete here is refused with -32004, nothing is removed;
    once it is closed there, the delete goes through."""
    other = await start_client(daemon_env(model_server.openai_base_url, tmp_path))
    try:
        sid = await other.new_session(workspace)
        await other.prompt(sid, "alpha")
        await start(daemon)
        with pytest.raises(RequestError) as info:
            await delete(daemon, sid)
        assert info.value.code == -32004
        assert "open in another agentd process" in str(info.value)
        assert transcript(tmp_path, workspace, sid).is_file()
        assert await other.request("agent/closeSession", {"sessionId": sid}) == {}
        assert await delete(daemon, sid) == {"_meta": {"agentd": {"deleted": True}}}
        assert not transcript(tmp_path, workspace, sid).exists()
    finally:
        await other.lsp.shutdown_session()
