"""session/fork and session/delete (ACP), agent/forkSession and
agent/deleteSession (LSP) attacked: ids that are paths, NUL, 10 KB, another
project's session, a session being prompted, a fork of a fork 200 deep, a
delete racing a prompt. The real daemon over stdio, raw messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import sessions_dir

pytestmark = pytest.mark.e2e


def _fork(acp: bool, sid: str, cwd: Path) -> tuple[str, dict[str, Any]]:
    if acp:
        return "session/fork", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []}
    return "agent/forkSession", {"sessionId": sid}


def _delete(acp: bool, sid: str) -> tuple[str, dict[str, Any]]:
    return ("session/delete" if acp else "agent/deleteSession"), {"sessionId": sid}


def _load(acp: bool, sid: str, cwd: Path) -> tuple[str, dict[str, Any]]:
    if acp:
        return "session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []}
    return "agent/loadSession", {"sessionId": sid}


def _prompt(d: RawDaemon, msg_id: Any, sid: str, text: str) -> None:
    if d.framing == "acp":
        blocks = [{"type": "text", "text": text}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})


async def _replies(d: RawDaemon, *ids: Any) -> list[dict[str, Any]]:
    """The replies to `ids`, in whatever order they come."""
    got: dict[Any, dict[str, Any]] = {}
    while len(got) < len(ids):
        msg = await d.read_message()
        if msg.get("id") in ids and ("result" in msg or "error" in msg):
            assert msg["id"] not in got, msg  # one reply per request
            got[msg["id"]] = msg
    return [got[i] for i in ids]


HOSTILE_IDS = {
    "dot-dot": "../../etc/passwd",
    "absolute": "/etc/passwd",
    "NUL": "abc\x00def",
    "10 KB": "a" * 10_240,
    "lone surrogate": "\ud800abc",
    "a glob": "*",
    "empty": "",
}


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_ids_that_are_not_ids_are_refused_naming_session_id(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        _prompt(d, 2, sid, "hello")
        assert "result" in await d.response(2)
        n = 10
        for why, bad in HOSTILE_IDS.items():
            for method, params in (
                _fork(acp, bad, workspace),
                _delete(acp, bad),
                _load(acp, bad, workspace),
            ):
                n += 1
                d.request(n, method, params)
                error = (await d.response(n))["error"]
                assert error["code"] == -32602, (why, method, error)
                assert error["data"]["fields"][0]["field"] == "sessionId", (why, method, error)
                assert len(error["message"]) < 1000, (why, method)
        _prompt(d, 3, sid, "still here")
        assert "result" in await d.response(3)
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_fork_and_delete_of_a_session_being_prompted(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        _prompt(d, 2, sid, "first")
        assert "result" in await d.response(2)
        model_server.enqueue({"text": "slow answer", "ttft": 600})
        _prompt(d, 3, sid, "second")
        await model_server.wait_for(lambda e: e["type"] == "request" and "second" in str(e["body"]))
        # A fork now copies the finished turn only, and runs on its own.
        method, params = _fork(acp, sid, workspace)
        d.request(4, method, params)
        fork = (await d.response(4))["result"]["sessionId"]
        _prompt(d, 5, fork, "in the fork")
        assert "result" in await d.response(5)
        texts = str(model_server.requests("main")[-1]["body"]["messages"])
        assert "first" in texts and "second" not in texts
        # A delete racing the prompt: the prompt ends cancelled, once; the
        # session's files are gone and stay gone.
        method, params = _delete(acp, sid)
        d.request(6, method, params)
        deleted, prompt = await _replies(d, 6, 3)
        assert "result" in deleted, deleted
        assert prompt.get("result", {}).get("stopReason") == "cancelled" or (
            prompt.get("error", {}).get("code") == -32800
        ), prompt
        folder = sessions_dir(workspace, agentd_home(tmp_path))
        assert not list(folder.glob(f"{sid}*"))
        _prompt(d, 7, sid, "after the delete")
        assert "error" in await d.response(7)
        _prompt(d, 8, fork, "the fork goes on")
        assert "result" in await d.response(8)
        assert not list(folder.glob(f"{sid}*"))
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_another_project_s_session_is_forked_into_this_one_and_deleted(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        theirs = await d.open_session(other)
        _prompt(d, 2, theirs, "in the other project")
        assert "result" in await d.response(2)
        d.request(3, *_fork(acp, theirs, workspace))
        fork = (await d.response(3))["result"]["sessionId"]
        _prompt(d, 4, fork, "PING")
        assert "result" in await d.response(4)
        assert "in the other project" in str(model_server.requests("main")[-1]["body"])
        d.request(5, *_delete(acp, theirs))
        assert "result" in await d.response(5)
        assert not list(sessions_dir(other, agentd_home(tmp_path)).glob(f"{theirs}*"))
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_fork_of_a_fork_200_deep(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        _prompt(d, 2, sid, "the root turn")
        assert "result" in await d.response(2)
        chain = [sid]
        for n in range(200):
            d.request(f"f{n}", *_fork(acp, chain[-1], workspace))
            chain.append((await d.response(f"f{n}", timeout=60))["result"]["sessionId"])
        _prompt(d, 3, chain[-1], "at the bottom")
        assert "result" in await d.response(3)
        assert "the root turn" in str(model_server.requests("main")[-1]["body"])
        # Deleting a middle link leaves the others whole.
        d.request(4, *_delete(acp, chain[100]))
        assert "result" in await d.response(4)
    finally:
        await d.close()
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(0)
        else:
            await d.initialize()
        d.request(1, *_load(acp, chain[-1], workspace))
        assert "result" in await d.response(1, timeout=60)
        _prompt(d, 2, chain[-1], "again")
        assert "result" in await d.response(2)
        assert "the root turn" in str(model_server.requests("main")[-1]["body"])
        listed = "session/list" if acp else "agent/listSessions"
        key = "cwd" if acp else "workspaceRoot"
        d.request(3, listed, {key: str(workspace)})
        ids = {s["sessionId"] for s in (await d.response(3, timeout=60))["result"]["sessions"]}
        assert chain[-1] in ids and chain[100] not in ids
    finally:
        await d.close()
