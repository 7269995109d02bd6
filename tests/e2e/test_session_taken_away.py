"""A live session's transcript taken away behind the daemon (removed or
renamed by hand, by an older agentd, by a sync tool): the session goes on,
and its file is again a loadable transcript holding the whole conversation
(`TranscriptWriter._rebuild`). The real daemon over stdio, the bundled model
server; a second daemon loads what the first left."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentd.agent.core import OPEN_TRANSCRIPTS
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import load, sessions_dir
from tests.e2e.test_extraction import body_text, status, wait_caught_up
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

REMINDER = re.compile(r"^(<system-reminder>.*?</system-reminder>\n\n)+", re.S)


def contents(request: dict[str, Any]) -> list[str]:
    """A model request's messages after the system prompt, less the reminders."""
    return [REMINDER.sub("", str(m.get("content"))) for m in request["body"]["messages"][1:]]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def goes_on_in_a_second_daemon(
    model_server: ModelServer,
    env: dict[str, str],
    workspace: Path,
    sid: str,
    said: list[str],
    title: str,
) -> None:
    """A new daemon lists `sid` with `title`, loads it, and its next request
    carries the whole conversation: `said`, each with its echo."""
    c = await start_client(env)
    try:
        listed = await c.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        titles = {s["sessionId"]: s["title"] for s in listed["sessions"]}
        assert titles[sid] == title
        await c.request("agent/loadSession", {"sessionId": sid})
        await c.prompt(sid, "and now?")
        echoed = [m for text in said for m in (text, f"Echo: {text}")]
        assert contents(model_server.requests("main")[-1]) == [*echoed, "and now?"]
    finally:
        await c.lsp.shutdown_session()


async def test_a_transcript_removed_after_its_descriptor_went_is_written_again_whole(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The daemon keeps 32 transcripts open: the session's descriptor is
    pushed out by 32 newer ones, its file and meta file are removed, and its
    next prompt writes it again (header, the state before the prompt, then
    the prompt's lines, offsets counting on) instead of a headless file."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "alpha")
        await c.request("agent/setMode", {"sessionId": sid, "mode": "ask"})
        for n in range(OPEN_TRANSCRIPTS):
            other = await c.new_session(workspace)
            await c.prompt(other, f"other {n}")
        (folder / f"{sid}.jsonl").unlink()
        (folder / f"{sid}.meta.json").unlink()
        await c.prompt(sid, "beta")

        written = records(folder / f"{sid}.jsonl")
        kinds = [r["type"] for r in written]
        fork = kinds.index("fork")
        assert kinds[0] == "session" and kinds[fork + 1] == "config"
        # Before the record, the lines memory extraction had not read yet
        # (none, or the first prompt's if its run had not ended).
        assert [r["offset"] for r in written[1:fork]] in ([], [0, 1])
        assert written[0]["sessionId"] == sid and written[fork]["from"] == sid
        assert written[fork]["offset"] == 2 and written[fork + 1]["mode"] == "ask"
        # The prompt after the rebuild: message lines, as extraction reads them.
        lines = [r for r in written[fork:] if r["type"] == "message"]
        assert [r["offset"] for r in lines] == [2, 3]
        assert json.loads((folder / f"{sid}.meta.json").read_text())["title"] == "alpha"
        loaded = load(folder / f"{sid}.jsonl")
        assert loaded is not None
        assert [m.text for m in loaded.history] == ["alpha", "Echo: alpha", "beta", "Echo: beta"]
        assert (loaded.mode, loaded.total, loaded.turns) == ("ask", 4, 2)
        assert not list(folder.glob(".*.tmp"))
    finally:
        await c.lsp.shutdown_session()
    await goes_on_in_a_second_daemon(
        model_server, env, workspace, sid, ["alpha", "beta"], title="alpha"
    )


async def test_a_transcript_unlinked_or_renamed_under_its_open_descriptor_is_written_again(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """With the descriptor still open, a removed file (its `st_nlink` 0) or a
    renamed one takes the daemon's lines where nobody finds them: the next
    prompt's start sees it and writes the file again under its name."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    c = await start_client(env)
    try:
        removed = await c.new_session(workspace)
        renamed = await c.new_session(workspace)
        for sid in (removed, renamed):
            await c.prompt(sid, f"first of {sid}")
        (folder / f"{removed}.jsonl").unlink()
        (folder / f"{renamed}.jsonl").rename(folder / "elsewhere.bak")
        for sid in (removed, renamed):
            await c.prompt(sid, f"second of {sid}")
        for sid in (removed, renamed):
            loaded = load(folder / f"{sid}.jsonl")
            assert loaded is not None and [m.text for m in loaded.history] == [
                f"first of {sid}",
                f"Echo: first of {sid}",
                f"second of {sid}",
                f"Echo: second of {sid}",
            ]
        # The renamed copy is left as it was when it went.
        assert [r["type"] for r in records(folder / "elsewhere.bak")] == [
            "session",
            "message",
            "message",
            "note",
            "note",
        ]
    finally:
        await c.lsp.shutdown_session()
    for sid in (removed, renamed):
        await goes_on_in_a_second_daemon(
            model_server,
            env,
            workspace,
            sid,
            [f"first of {sid}", f"second of {sid}"],
            title=f"first of {sid}",
        )


async def test_the_daemons_exit_writes_a_removed_transcript_again_but_never_a_deleted_one(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A file removed after the session's last prompt is written again as
    the daemon exits (it would otherwise be lost with the process); a
    session deleted through agentd (`agent/deleteSession`) never comes back."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    c: AgentdClient = await start_client(env)
    try:
        kept = await c.new_session(workspace)
        deleted = await c.new_session(workspace)
        for sid in (kept, deleted):
            await c.prompt(sid, f"hello {sid}")
        assert await c.request("agent/deleteSession", {"sessionId": deleted}) == {"deleted": True}
        (folder / f"{kept}.jsonl").unlink()
        (folder / f"{kept}.meta.json").unlink()
    finally:
        await c.lsp.shutdown_session()
    assert sorted(p.name for p in folder.iterdir()) == [f"{kept}.jsonl", f"{kept}.meta.json"]
    await goes_on_in_a_second_daemon(
        model_server, env, workspace, kept, [f"hello {kept}"], title=f"hello {kept}"
    )


@pytest.mark.parametrize("how", ["unlinked", "closed"])
async def test_messages_not_yet_extracted_when_the_file_went_are_still_extracted_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path, how: str
) -> None:
    """Memory on: the second prompt's extraction fails (the model answers
    400), so its messages are behind the cursor when the transcript is
    taken away (unlinked under its open descriptor, or removed after the
    descriptor went). The rebuilt file holds them as message lines before
    its fork record, so the next run extracts them, with the third
    prompt's, from the cursor on: the first prompt's never again, the
    cursor never back, and a load sees each message once."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    c = await start_client(env, {"memory": {"modelTier": False}})
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "first fact alpha")
        caught_up = await wait_caught_up(c, workspace, 1)
        assert caught_up["cursors"][0]["processedOffset"] == 2
        before = len(model_server.requests("extract"))
        model_server.enqueue({"status": 400, "errorBody": {"error": {"message": "no"}}}, "extract")
        await c.prompt(sid, "second fact bravo")
        await c.wait_for_log("extraction request failed")  # logged as the run ends
        ext = await status(c, workspace)
        assert "400" in ext["lastError"]
        assert ext["cursors"][0]["processedOffset"] == 2  # the failed run moved nothing
        if how == "closed":
            # Sessions of another project push the session's descriptor out
            # (theirs do not run this project's extraction again).
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            for n in range(OPEN_TRANSCRIPTS):
                other = await c.new_session(elsewhere)
                await c.prompt(other, f"other {n}")
        (folder / f"{sid}.jsonl").unlink()
        await c.prompt(sid, "third fact charlie")
        done = await wait_caught_up(c, workspace, 1)
        assert done["cursors"][0]["processedOffset"] == 6

        written = records(folder / f"{sid}.jsonl")
        kinds = [r["type"] for r in written]
        fork = kinds.index("fork")
        assert [r["offset"] for r in written[:fork] if r["type"] == "message"] == [2, 3]
        assert written[fork]["offset"] == 4
        assert [r["offset"] for r in written[fork:] if r["type"] == "message"] == [4, 5]
        loaded = load(folder / f"{sid}.jsonl")
        assert loaded is not None and loaded.total == 6
        assert [m.text for m in loaded.history] == [
            "first fact alpha",
            "Echo: first fact alpha",
            "second fact bravo",
            "Echo: second fact bravo",
            "third fact charlie",
            "Echo: third fact charlie",
        ]
        texts = [body_text(r) for r in model_server.requests("extract")[before:]]
        texts = [t for t in texts if "fact" in t]  # this project's
        # The failed request had it; the run after the rebuild has it again.
        assert "bravo" in texts[0] and sum("bravo" in t for t in texts) == 2, texts
        assert sum("charlie" in t for t in texts) == 1
        assert not any("alpha" in t for t in texts)  # extracted before, not again
    finally:
        await c.lsp.shutdown_session()
