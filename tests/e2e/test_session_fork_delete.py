"""`agent/forkSession` and `agent/deleteSession` over the LSP-framed protocol:
the real daemon driven by pytest-lsp, the bundled model server."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir
from tests.e2e.test_compaction import main_requests, new_client, request_text, turn_text
from tests.e2e.test_extraction import body_text, wait_caught_up
from tests.e2e.test_extraction import new_client as extraction_client
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

REMINDER = re.compile(r"^(<system-reminder>.*?</system-reminder>\n\n)+", re.S)


def contents(request: dict[str, Any]) -> list[str]:
    """A model request's messages after the system prompt, less the reminders."""
    return [REMINDER.sub("", str(m.get("content"))) for m in request["body"]["messages"][1:]]


def bad_field(error: JsonRpcException) -> str:
    assert error.code == -32602 and isinstance(error.data, dict)
    return str(error.data["fields"][0]["field"])


async def test_a_fork_goes_on_from_the_source_which_stays_as_it_was(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env, {"models": ["other-model"]})
    try:
        assert c.init_result is not None
        experimental = c.init_result.capabilities.experimental
        assert isinstance(experimental, dict)
        caps = experimental["agentd"]
        assert caps["forkSession"] is True and caps["deleteSession"] is True
        source = await c.new_session(workspace)
        await c.prompt(source, "alpha")
        await c.request("agent/setMode", {"sessionId": source, "mode": "ask"})

        forked = await c.request("agent/forkSession", {"sessionId": source})
        fork = forked["sessionId"]
        assert fork != source
        assert (forked["mode"], forked["model"], forked["plan"]) == ("ask", "test-model", [])
        # What the request says wins over the source's.
        other = await c.request(
            "agent/forkSession",
            {
                "sessionId": source,
                "workspaceRoot": str(workspace),
                "mode": "code",
                "model": "other-model",
            },
        )
        assert (other["mode"], other["model"]) == ("code", "other-model")

        await c.prompt(fork, "beta")
        assert contents(model_server.requests("main")[-1]) == ["alpha", "Echo: alpha", "beta"]
        await c.prompt(other["sessionId"], "delta")
        last = model_server.requests("main")[-1]
        assert last["body"]["model"] == "other-model"
        assert contents(last) == ["alpha", "Echo: alpha", "delta"]
        await c.prompt(source, "gamma")
        assert contents(model_server.requests("main")[-1]) == ["alpha", "Echo: alpha", "gamma"]

        listed = await c.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert {s["sessionId"] for s in listed["sessions"]} == {source, fork, other["sessionId"]}
        assert {s["title"] for s in listed["sessions"]} == {"alpha"}

        for params, field in [
            ({"sessionId": source, "mode": "plan"}, "mode"),
            ({"sessionId": source, "model": "gpt-99"}, "model"),
            ({"sessionId": source, "workspaceRoot": "relative"}, "workspaceRoot"),
            ({"workspaceRoot": str(workspace)}, "sessionId"),
        ]:
            with pytest.raises(JsonRpcException) as info:
                await c.request("agent/forkSession", params)
            assert bad_field(info.value) == field
        with pytest.raises(JsonRpcException) as info:
            await c.request("agent/forkSession", {"sessionId": "no-such"})
        assert info.value.code == -32001
    finally:
        await c.lsp.shutdown_session()


async def test_a_compacted_session_on_disk_is_forked_with_its_summary(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await new_client(model_server, tmp_path, 50_000)
    try:
        source = await c.new_session(workspace)
        for n in range(4):
            await c.prompt(source, turn_text(n))
        result = await c.request("agent/compact", {"sessionId": source})
        assert result["status"] == "done" and result["summarized"] > 0
    finally:
        await c.lsp.shutdown_session()
    c2 = await new_client(model_server, tmp_path, 50_000)
    try:
        fork = (await c2.request("agent/forkSession", {"sessionId": source}))["sessionId"]
        await c2.prompt(fork, "and now?")
        request = main_requests(model_server)[-1]
        assert "was compacted" in request["body"]["messages"][1]["content"]
        assert turn_text(3) in request_text(request)
        assert turn_text(0) not in request_text(request)
        # A replay of the fork shows what one of the source shows: the divider first.
        before = len(c2.updates)
        await c2.request("agent/loadSession", {"sessionId": fork})
        await c2.request("agent/loadSession", {"sessionId": source})
        replays = {
            sid: [u["update"] for u in c2.updates[before:] if u["sessionId"] == sid]
            for sid in (source, fork)
        }
        assert replays[source][0]["kind"] == "compaction"
        own = len(replays[fork]) - len(replays[source])
        assert replays[fork][:-own] == replays[source]
        assert replays[fork][-own] == {"kind": "user_message", "text": "and now?"}
    finally:
        await c2.lsp.shutdown_session()


async def test_delete_cancels_a_running_prompt_and_the_session_leaves_the_listing(
    client: AgentdClient, workspace: Path, tmp_path: Path
) -> None:
    sid = await client.new_session(workspace)
    await client.prompt(sid, "first")
    keep = await client.new_session(workspace)
    await client.prompt(keep, "kept")
    seen = len(client.updates)
    turn = asyncio.create_task(client.prompt(sid, "!delay 0.05\n!chunks 400"))
    await client.wait_for_update(
        lambda u: (
            client.updates.index(u) >= seen
            and u["sessionId"] == sid
            and u["update"]["kind"] == "message_chunk"
        )
    )
    assert await client.request("agent/deleteSession", {"sessionId": sid}) == {"deleted": True}
    with pytest.raises(JsonRpcException) as info:
        await turn
    assert info.value.code == -32800
    listed = await client.request("agent/listSessions", {"workspaceRoot": str(workspace)})
    assert [s["sessionId"] for s in listed["sessions"]] == [keep]
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    assert not [p for p in folder.iterdir() if p.name.startswith(sid)]
    with pytest.raises(JsonRpcException) as info:
        await client.prompt(sid, "still there?")
    assert info.value.code == -32001
    with pytest.raises(JsonRpcException) as info:
        await client.request("agent/loadSession", {"sessionId": sid})
    assert info.value.code == -32001
    assert await client.request("agent/deleteSession", {"sessionId": sid}) == {"deleted": False}
    for hostile in ["../" + keep, "..", "a/b", "x" * 100_000, "\ud800", ""]:
        with pytest.raises(JsonRpcException) as info:
            await client.request("agent/deleteSession", {"sessionId": hostile})
        assert bad_field(info.value) == "sessionId"
    assert (folder / f"{keep}.jsonl").is_file()


async def test_the_copied_turns_are_extracted_once_as_the_sources(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await extraction_client(model_server, tmp_path, modelTier=False)
    try:
        source = await c.new_session(workspace)
        await c.prompt(source, "remember the source fact alpha-77")
        await wait_caught_up(c, workspace, sessions=1)
        fork = (await c.request("agent/forkSession", {"sessionId": source}))["sessionId"]
        await c.prompt(fork, "remember the fork fact beta-88")
        ext = await wait_caught_up(c, workspace, sessions=2)
        assert {r["sessionId"]: r["processedOffset"] for r in ext["cursors"]} == {
            source: 2,
            fork: 2,  # the fork's own turn: its offsets count from 0
        }
        bodies = [body_text(r) for r in model_server.requests("extract")]
        assert sum("alpha-77" in b for b in bodies) == 1
        (forked,) = [b for b in bodies if "beta-88" in b]
        assert "alpha-77" not in forked
    finally:
        await c.lsp.shutdown_session()


OLDER_MERGED = Path(__file__).resolve().parents[1] / "data" / "older-merged-prompt.jsonl"


async def test_a_fork_of_an_older_transcript_keeps_the_turn_its_merged_prompt_closed(
    client: AgentdClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    """An older transcript (tests/data/older-merged-prompt.jsonl): the call of
    "fix it" a crash left unanswered, then "go on" written right after it,
    whose own turn had not ended. The fork goes on from "fix it", its call
    and the interrupted result; "go on" is not copied (main copied the first
    turn only)."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    folder.mkdir(parents=True)
    (folder / OLDER_MERGED.name).write_bytes(OLDER_MERGED.read_bytes())
    forked = await client.request(
        "agent/forkSession",
        {"sessionId": OLDER_MERGED.stem, "workspaceRoot": str(workspace)},
    )
    result = await client.prompt(forked["sessionId"], "and now?")
    assert result["stopReason"] == "end_turn", result
    messages = model_server.requests("main")[-1]["body"]["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "user",
        "user",
    ]
    assert contents({"body": {"messages": messages}})[2] == "fix it"
    assert messages[4]["tool_calls"][0]["id"] == "call_cut"
    assert messages[5]["tool_call_id"] == "call_cut"
    assert "interrupted" in messages[5]["content"]
    # The copied turn was cut short: closed as any such turn is on a load.
    assert "agentd stopped" in messages[6]["content"]
    assert REMINDER.sub("", messages[7]["content"]) == "and now?"
    assert "go on" not in json.dumps(messages)


def cursor_entries(folder: Path) -> dict[str, list[int]]:
    """`.cursors.json` of a memory folder: session id -> [processedOffset, byteOffset]."""
    data = json.loads((folder / ".cursors.json").read_text())
    return {e["sessionId"]: [e["processedOffset"], e["byteOffset"]] for e in data["sessions"]}


async def test_extraction_cursors_of_deleted_and_vanished_sessions_are_dropped(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Three sessions extracted; one deleted: its entry leaves the cursor file
    (and memory/status) at once. Another's transcript is removed while no
    daemon runs: the next daemon drops its entry when it first looks at the
    project. The third's entry stays as it was throughout."""
    c = await extraction_client(model_server, tmp_path, modelTier=False)
    try:
        sids = [await c.new_session(workspace) for _ in range(3)]
        for n, sid in enumerate(sids):
            await c.prompt(sid, f"remember the fact number {n}")
        ext = await wait_caught_up(c, workspace, sessions=3)
        memory = Path(
            (await c.request("memory/status", {"workspaceRoot": str(workspace)}))["directory"]
        )
        before = cursor_entries(memory)
        assert set(before) == set(sids)
        deleted, kept, vanished = sids
        assert await c.request("agent/deleteSession", {"sessionId": deleted}) == {"deleted": True}
        assert cursor_entries(memory) == {s: before[s] for s in (kept, vanished)}
        ext = (await c.request("memory/status", {"workspaceRoot": str(workspace)}))["extraction"]
        assert {r["sessionId"] for r in ext["cursors"]} == {kept, vanished}
    finally:
        await c.lsp.shutdown_session()
    for path in sessions_dir(workspace, agentd_home(tmp_path)).iterdir():
        if path.name.startswith(vanished):
            path.unlink()
    c2 = await extraction_client(model_server, tmp_path, modelTier=False)
    try:
        # The first memory/status builds extraction, which looks at the
        # project (`ExtractionService.resume`) in the background: asked again
        # until that look is done.
        while True:
            result = await c2.request("memory/status", {"workspaceRoot": str(workspace)})
            if {r["sessionId"] for r in result["extraction"]["cursors"]} == {kept}:
                break
            await asyncio.sleep(0.05)
        assert cursor_entries(memory) == {kept: before[kept]}
    finally:
        await c2.lsp.shutdown_session()


async def test_a_session_open_in_another_daemon_is_not_deleted_under_it(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Two daemons on one home (two editor windows): a session one has open
    (created there, or loaded) is refused deletion by the other, with
    -32004 saying why, and nothing of it is touched; it goes on where it is.
    Once closed there, or once that daemon is gone, the delete goes through."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    here, there = await start_client(env), await start_client(env)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    try:
        open_there = await there.new_session(workspace)
        await there.prompt(open_there, "alpha")
        files = sorted(p.name for p in folder.iterdir())
        with pytest.raises(JsonRpcException) as info:
            await here.request("agent/deleteSession", {"sessionId": open_there})
        assert info.value.code == -32004
        assert "open in another agentd process" in info.value.message
        assert sorted(p.name for p in folder.iterdir()) == files
        # It goes on there, its history whole.
        await there.prompt(open_there, "beta")
        assert contents(model_server.requests("main")[-1]) == ["alpha", "Echo: alpha", "beta"]
        listed = await here.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert [s["sessionId"] for s in listed["sessions"]] == [open_there]

        # Loaded there from disk: held the same way; closed there, it goes.
        assert await there.request("agent/closeSession", {"sessionId": open_there}) == {}
        await there.request("agent/loadSession", {"sessionId": open_there})
        with pytest.raises(JsonRpcException) as info:
            await here.request("agent/deleteSession", {"sessionId": open_there})
        assert info.value.code == -32004
        assert await there.request("agent/closeSession", {"sessionId": open_there}) == {}
        assert await here.request("agent/deleteSession", {"sessionId": open_there}) == {
            "deleted": True
        }
        assert not [p for p in folder.iterdir() if p.name.startswith(open_there)]
        with pytest.raises(JsonRpcException) as info:
            await there.request("agent/loadSession", {"sessionId": open_there})
        assert info.value.code == -32001

        # A daemon that exits lets go of its sessions, however it ends.
        left = await there.new_session(workspace)
        await there.prompt(left, "gamma")
    finally:
        await there.lsp.shutdown_session()
    try:
        assert await here.request("agent/deleteSession", {"sessionId": left}) == {"deleted": True}
    finally:
        await here.lsp.shutdown_session()
