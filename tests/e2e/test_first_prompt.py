"""A new session's first prompt, written the instant its session exists, over
both front ends: its transcript (created by that prompt) holds the prompt
before the model request goes out, so a daemon killed then keeps it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import load, meta_path, sessions_dir

pytestmark = pytest.mark.e2e


async def _new_session(d: RawDaemon, acp: bool, workspace: Path, msg_id: int) -> str:
    if acp:
        d.request(msg_id, "session/new", {"cwd": str(workspace), "mcpServers": []})
    else:
        d.request(msg_id, "agent/newSession", {"workspaceRoot": str(workspace)})
    return str((await d.response(msg_id))["result"]["sessionId"])


def _prompt(d: RawDaemon, acp: bool, sid: str, text: str, msg_id: int) -> None:
    if acp:
        blocks = [{"type": "text", "text": text}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
@pytest.mark.parametrize("earlier", [False, True], ids=["first-session", "later-session"])
async def test_a_prompt_sent_the_instant_its_session_exists_is_on_disk_before_its_request(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, earlier: bool
) -> None:
    """Default settings (memory on). `earlier`: another session of the project
    was prompted first, so its sessions folder exists; else the folder is
    made with the first session's file ahead (either way the file is made
    ahead, empty, once `session/new` is answered). The model holds its answer; once the
    request has arrived the daemon is killed, and the transcript has the
    session's header and the prompt, with no second header. A session that
    was never prompted has no meta file, at most an empty transcript, which
    the next daemon's start removes: it lists the prompted sessions only."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(1, "initialize", {"protocolVersion": 1})
            await d.response(1)
        else:
            await d.initialize()
        folder = sessions_dir(workspace, agentd_home(tmp_path))
        if earlier:
            first = await _new_session(d, acp, workspace, 2)
            _prompt(d, acp, first, "an earlier question", 3)
            assert "result" in await d.response(3)
        unprompted = await _new_session(d, acp, workspace, 4)
        model_server.enqueue({"text": "never read", "ttft": 600})
        sid = await _new_session(d, acp, workspace, 5)
        _prompt(d, acp, sid, "the question the daemon must keep", 6)
        await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and _asks(e, "must keep")
        )
        d.proc.kill()
        assert await d.wait_exit() == -signal.SIGKILL
    finally:
        await d.close()
    records = [json.loads(line) for line in (folder / f"{sid}.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "message"]
    assert records[0]["sessionId"] == sid
    assert records[0]["workspaceRoot"] == str(workspace)
    texts = [p["text"] for p in records[1]["message"]["parts"] if p["type"] == "text"]
    assert texts == ["the question the daemon must keep"]
    left = folder / f"{unprompted}.jsonl"
    assert not left.exists() or left.stat().st_size == 0
    assert not meta_path(left).exists()
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        listed = await _listed(d, acp, workspace)
    finally:
        await d.close()
    assert sid in listed and unprompted not in listed
    assert not left.exists()


async def _listed(d: RawDaemon, acp: bool, workspace: Path) -> list[str]:
    """The session ids the daemon lists for `workspace` (initialising it first)."""
    if acp:
        d.request(90, "initialize", {"protocolVersion": 1})
        await d.response(90)
        d.request(91, "session/list", {"cwd": str(workspace)})
    else:
        await d.initialize()
        d.request(91, "agent/listSessions", {"workspaceRoot": str(workspace)})
    return [s["sessionId"] for s in (await d.response(91))["result"]["sessions"]]


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_session_never_prompted_is_listed_by_no_daemon_and_leaves_no_file(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """Sessions made and never prompted (their files made ahead, empty) are
    not listed, neither by their daemon nor by a second one started beside
    it, whose start leaves the first daemon's files alone: the first
    daemon's prompt then goes to its file, and both list that session. A
    closed session's file and, at a clean exit, every unprompted one's are
    removed; nothing but the prompted session is left."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    first = await RawDaemon.spawn(env, acp=acp)
    second: RawDaemon | None = None
    try:
        if acp:
            first.request(1, "initialize", {"protocolVersion": 1})
            await first.response(1)
        else:
            await first.initialize()
        # A prompted session first, so that the sessions folder exists.
        earlier = await _new_session(first, acp, workspace, 2)
        _prompt(first, acp, earlier, "an earlier question", 3)
        assert "result" in await first.response(3)
        waiting = await _new_session(first, acp, workspace, 4)
        closed = await _new_session(first, acp, workspace, 5)
        never = await _new_session(first, acp, workspace, 6)
        assert waiting not in await _listed_by(first, acp, workspace, 7)
        second = await RawDaemon.spawn(env, acp=acp)
        assert await _listed(second, acp, workspace) == [earlier]
        # Made ahead, and left alone by the second daemon's start.
        assert (folder / f"{waiting}.jsonl").exists() and (folder / f"{never}.jsonl").exists()
        if acp:
            first.request(8, "session/close", {"sessionId": closed})
        else:
            first.request(8, "agent/closeSession", {"sessionId": closed})
        assert "result" in await first.response(8)
        assert not (folder / f"{closed}.jsonl").exists()
        _prompt(first, acp, waiting, "asked after the second daemon started", 9)
        assert "result" in await first.response(9)
        second.request(92, *_list_call(acp, workspace))
        listed = [s["sessionId"] for s in (await second.response(92))["result"]["sessions"]]
        assert sorted(listed) == sorted([earlier, waiting])
        # A clean exit: SIGTERM, as ACP editors end their agents (stdin left
        # open), or LSP's shutdown and exit.
        if acp:
            first.proc.send_signal(signal.SIGTERM)
        else:
            first.request(10, "shutdown")
            await first.response(10)
            first.notify("exit")
        await first.wait_exit()
    finally:
        await first.close()
        if second is not None:
            await second.close()
    loaded = load(folder / f"{waiting}.jsonl")
    assert loaded is not None
    assert loaded.history[0].text == "asked after the second daemon started"
    assert not (folder / f"{never}.jsonl").exists()
    assert sorted(p.name for p in folder.glob("*.jsonl")) == sorted(
        [f"{earlier}.jsonl", f"{waiting}.jsonl"]
    )


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_projects_first_session_gets_its_folder_ahead_and_unprompted_leaves_none(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A project's first session finds no sessions folder: the folder and
    the empty file in it are made once `session/new` is answered (its first
    prompt then only writes). Closed unprompted, it takes both away; a
    prompted session's folder stays, and the clean exit takes away only the
    files of the sessions never prompted."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(1, "initialize", {"protocolVersion": 1})
            await d.response(1)
        else:
            await d.initialize()
        # The warm-up over (a listing waits for it): the App makes files ahead.
        assert await _listed_by(d, acp, workspace, 10) == []
        first = await _new_session(d, acp, workspace, 2)
        # A round trip: the new session's after-reply work is done.
        assert await _listed_by(d, acp, workspace, 3) == []
        assert os.listdir(folder) == [f"{first}.jsonl"]
        assert (folder / f"{first}.jsonl").stat().st_size == 0
        d.request(4, "session/close" if acp else "agent/closeSession", {"sessionId": first})
        assert "result" in await d.response(4)
        assert not folder.exists()
        prompted = await _new_session(d, acp, workspace, 5)
        _prompt(d, acp, prompted, "the first question of the project", 6)
        assert "result" in await d.response(6)
        never = await _new_session(d, acp, workspace, 7)
        assert await _listed_by(d, acp, workspace, 8) == [prompted]
        assert (folder / f"{never}.jsonl").exists()
        if acp:
            d.proc.send_signal(signal.SIGTERM)
        else:
            d.request(9, "shutdown")
            await d.response(9)
            d.notify("exit")
        assert await d.wait_exit() == 0
    finally:
        await d.close()
    assert sorted(os.listdir(folder)) == [f"{prompted}.jsonl", f"{prompted}.meta.json"]


def _list_call(acp: bool, workspace: Path) -> tuple[str, dict[str, Any]]:
    if acp:
        return "session/list", {"cwd": str(workspace)}
    return "agent/listSessions", {"workspaceRoot": str(workspace)}


async def _listed_by(d: RawDaemon, acp: bool, workspace: Path, msg_id: int) -> list[str]:
    d.request(msg_id, *_list_call(acp, workspace))
    return [s["sessionId"] for s in (await d.response(msg_id))["result"]["sessions"]]


def _asks(entry: dict[str, Any], words: str) -> bool:
    return words in json.dumps(entry["body"]["messages"][-1])
