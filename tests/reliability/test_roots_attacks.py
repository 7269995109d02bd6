"""Hostile `additionalDirectories` on every request that takes them, over
both front ends (the real daemon over stdio, raw messages): what a fuzzing
client or a confused editor sends, and folders that change under a live
session."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import sessions_dir

pytestmark = pytest.mark.e2e

FIELD = "additionalDirectories"


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    root.mkdir()
    (root / "util.py").write_text("SHARED_ANSWER = 7\n")
    return root


def _new(acp: bool, workspace: Path, extra: Any) -> tuple[str, dict[str, Any]]:
    if acp:
        return "session/new", {"cwd": str(workspace), "mcpServers": [], FIELD: extra}
    return "agent/newSession", {"workspaceRoot": str(workspace), FIELD: extra}


def _requests(acp: bool, workspace: Path, sid: str, extra: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every request that takes the list, on the stored session `sid`."""
    if acp:
        base = {"cwd": str(workspace), "mcpServers": [], FIELD: extra}
        return [
            _new(acp, workspace, extra),
            ("session/load", {**base, "sessionId": sid}),
            ("session/resume", {**base, "sessionId": sid}),
            ("session/fork", {**base, "sessionId": sid}),
        ]
    return [
        _new(acp, workspace, extra),
        ("agent/loadSession", {"sessionId": sid, FIELD: extra}),
        ("agent/forkSession", {"sessionId": sid, FIELD: extra}),
    ]


def _prompt(d: RawDaemon, msg_id: int, sid: str, text: str) -> None:
    if d.framing == "acp":
        d.request(
            msg_id, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})


def _tool_result(model_server: ModelServer) -> str:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    return str([m for m in messages if m["role"] == "tool"][-1]["content"])


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_unusable_directories_are_refused_naming_the_entry(
    model_server: ModelServer, tmp_path: Path, workspace: Path, shared: Path, acp: bool
) -> None:
    home = agentd_home(tmp_path)
    memory = memory_folder(workspace, tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    (tmp_path / "into-home").symlink_to(home)
    hostile = {
        "dangling symlink": str(tmp_path / "dangling"),
        "symlink loop": str(tmp_path / "loop-a"),
        "very long": "/" + "/".join(["d" * 255] * 40),
        "a component too long": str(tmp_path / ("x" * 300)),
        "lone low surrogate": str(tmp_path) + "/\udcff",
        "NUL in a URI": "file://" + str(tmp_path) + "/a%00b",
        "agentd home": str(home),
        "agentd home by a symlink": str(tmp_path / "into-home"),
        "a memory folder": str(memory),
        "inside agentd home": str(home / "projects"),
        "agentd config": str(tmp_path / "agentd-config"),
    }
    (tmp_path / "agentd-config").mkdir(exist_ok=True)
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        _prompt(d, 2, sid, "hello")
        assert "result" in await d.response(2)
        n = 10
        for why, bad in hostile.items():
            for method, params in _requests(acp, workspace, sid, [str(shared), bad]):
                n += 1
                d.request(n, method, params)
                reply = await d.response(n)
                assert "error" in reply, (why, method, reply)
                error = reply["error"]
                assert error["code"] == -32602, (why, method, error)
                assert error["data"]["fields"][0]["field"] == f"{FIELD}.1", (why, method, error)
        # 10,000 entries: refused by their count, naming the list.
        for method, params in _requests(acp, workspace, sid, [str(shared)] * 10_000):
            n += 1
            d.request(n, method, params)
            error = (await d.response(n))["error"]
            assert error["code"] == -32602 and error["data"]["fields"][0]["field"] == FIELD
        _prompt(d, 3, sid, "still here")
        assert "result" in await d.response(3)
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_the_root_again_and_a_root_inside_another_are_taken(
    model_server: ModelServer, tmp_path: Path, workspace: Path, shared: Path, acp: bool
) -> None:
    (tmp_path / "root-link").symlink_to(workspace)
    again = [
        str(workspace),
        str(workspace) + "/",
        str(tmp_path / "root-link"),
        "file://" + str(workspace),
    ]
    inner = shared / "inner"
    inner.mkdir()
    (inner / "deep.txt").write_text("DEEP 3\n")
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        await d.open_session(workspace)
        method, params = _new(acp, workspace, [*again, str(shared), str(inner), str(shared)])
        d.request(5, method, params)
        sid = (await d.response(5))["result"]["sessionId"]
        _prompt(d, 6, sid, f'!tool read_file {{"path": "{inner / "deep.txt"}"}}')
        assert (await d.response(6))["result"]["stopReason"] == "end_turn"
        assert "DEEP 3" in _tool_result(model_server)
        listed = "session/list" if acp else "agent/listSessions"
        key = "cwd" if acp else "workspaceRoot"
        d.request(7, listed, {key: str(workspace)})
        (entry,) = [s for s in (await d.response(7))["result"]["sessions"] if s["sessionId"] == sid]
        assert entry[FIELD] == [str(shared), str(inner)]
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_directory_removed_under_a_session(
    model_server: ModelServer, tmp_path: Path, workspace: Path, shared: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        await d.open_session(workspace)
        method, params = _new(acp, workspace, [str(shared)])
        d.request(5, method, params)
        sid = (await d.response(5))["result"]["sessionId"]
        _prompt(d, 6, sid, "hello")
        assert "result" in await d.response(6)
        for f in shared.iterdir():
            f.unlink()
        shared.rmdir()
        for n, (tool, args) in enumerate(
            [
                ("read_file", {"path": str(shared / "util.py")}),
                ("list_dir", {"path": str(shared)}),
                ("search", {"query": "x", "path": str(shared)}),
                ("glob", {"pattern": "*.py", "path": str(shared)}),
            ],
            start=10,
        ):
            _prompt(d, n, sid, f"!tool {tool} {json.dumps(args)}")
            reply = await d.response(n)
            assert reply["result"]["stopReason"] == "end_turn", reply
            # A failed result the model reads, naming what is missing.
            assert "No such file or directory" in _tool_result(model_server), tool
        # A FIFO put where the folder was: refused as a folder, never opened.
        os.mkfifo(shared)
        _prompt(d, 15, sid, f'!tool list_dir {{"path": "{shared}"}}')
        assert (await d.response(15))["result"]["stopReason"] == "end_turn"
        assert "Not a directory" in _tool_result(model_server)
        os.unlink(shared)
        listed = "session/list" if acp else "agent/listSessions"
        key = "cwd" if acp else "workspaceRoot"
        d.request(20, listed, {key: str(workspace)})
        (entry,) = [
            s for s in (await d.response(20))["result"]["sessions"] if s["sessionId"] == sid
        ]
        assert entry[FIELD] == [str(shared)]
    finally:
        await d.close()
    # A second daemon loads it (the stored list as it is), and prompts.
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(0)
            d.request(
                1, "session/load", {"sessionId": sid, "cwd": str(workspace), "mcpServers": []}
            )
        else:
            await d.initialize()
            d.request(1, "agent/loadSession", {"sessionId": sid})
        assert "result" in await d.response(1)
        _prompt(d, 2, sid, f'!tool read_file {{"path": "{shared / "util.py"}"}}')
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
    finally:
        await d.close()


async def test_a_stored_list_is_checked_again_when_a_session_is_restored(
    model_server: ModelServer, tmp_path: Path, workspace: Path, shared: Path
) -> None:
    """A transcript whose list names agentd's home or a relative path (an
    older agentd wrote it, or a hand did): a session loaded or forked from
    it without a list of the request's (LSP: the stored one is kept) leaves
    those out, and its tools never read agentd's files."""
    home = agentd_home(tmp_path)
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "agent/newSession", {"workspaceRoot": str(workspace), FIELD: [str(shared)]})
        sid = (await d.response(1))["result"]["sessionId"]
        _prompt(d, 2, sid, "hello")
        assert "result" in await d.response(2)
    finally:
        await d.close()
    transcript = sessions_dir(workspace, home) / f"{sid}.jsonl"
    text = transcript.read_text()
    hostile = [str(home), "relative/dir", str(shared)]
    transcript.write_text(text.replace(json.dumps([str(shared)]), json.dumps(hostile)))
    secret = home / "secret.txt"
    secret.write_text("AGENTD STATE\n")
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "agent/forkSession", {"sessionId": sid})
        forked = (await d.response(1))["result"]
        d.request(2, "agent/loadSession", {"sessionId": sid})
        loaded = (await d.response(2))["result"]
        for n, session in enumerate((forked, loaded)):
            target = session.get("sessionId", sid)
            assert session[FIELD] == [str(shared)], session
            _prompt(d, 10 + n, target, f'!tool read_file {{"path": "{secret}"}}')
            assert (await d.response(10 + n))["result"]["stopReason"] == "end_turn"
            assert "AGENTD STATE" not in _tool_result(model_server)
            _prompt(d, 20 + n, target, f'!tool read_file {{"path": "{shared / "util.py"}"}}')
            assert (await d.response(20 + n))["result"]["stopReason"] == "end_turn"
            assert "SHARED_ANSWER" in _tool_result(model_server)
    finally:
        await d.close()
