"""Quieter gaps (issue 14, item 13, second and third parts).

`session/load` with another `cwd` for a live session answered `{}` and
ignored the cwd: it is refused now (-32602 naming the field), and the
session stays bound to its own workspace. After the memory folder was
deleted, `memory/status` kept the old doc count and listed no problem: the
deletion now shows within the watcher's debounce (a `memory/changed` for the
notes that went, and the status says what happened).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import sessions_dir

pytestmark = pytest.mark.e2e

NOTE = "---\nname: {0}\ndescription: about {0}\ntype: project\n---\n\nThe {0} note.\n"


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_loading_a_live_session_with_another_cwd_is_refused(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    root_field = "cwd" if acp else "workspaceRoot"
    try:
        sid = await d.open_session(workspace)
        load = "session/load" if acp else "agent/loadSession"
        params: dict[str, Any] = {"sessionId": sid, "mcpServers": []}
        d.request(3, load, {**params, root_field: str(other)})
        error = (await d.response(3))["error"]
        assert error["code"] == -32602, error
        assert error["data"]["fields"][0]["field"] == root_field
        assert str(workspace) in error["message"]
        # Its own workspace still loads it, and it still runs there.
        d.request(4, load, {**params, root_field: str(workspace)})
        loaded = await d.response(4)
        assert "error" not in loaded and "modes" in loaded["result"], loaded
        if acp:  # resuming is loading without the replay: refused the same way
            d.request(6, "session/resume", {**params, "cwd": str(other)})
            error = (await d.response(6))["error"]
            assert error["code"] == -32602 and error["data"]["fields"][0]["field"] == "cwd"
        if acp:
            blocks = [{"type": "text", "text": '!tool read_file {"path": "README.md"}'}]
            d.request(5, "session/prompt", {"sessionId": sid, "prompt": blocks})
        else:
            prompt = '!tool read_file {"path": "README.md"}'
            d.request(5, "agent/prompt", {"sessionId": sid, "prompt": prompt})
        assert (await d.response(5))["result"]["stopReason"] == "end_turn"
        last = model_server.requests("main")[-1]
        assert "The answer is 42" in str(last["body"])  # read in the session's own root
    finally:
        await d.close()


async def test_a_deleted_memory_folder_shows_in_memory_status(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    folder = memory_folder(workspace, tmp_path)
    for name in ("deploy", "style"):
        (folder / f"{name}.md").write_text(NOTE.format(name))
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env)
    root = {"workspaceRoot": str(workspace)}
    try:
        await d.initialize({"memory": {"extraction": False, "modelTier": False}})
        d.request(1, "memory/status", root)
        assert (await d.response(1))["result"]["docCount"] == 2
        shutil.rmtree(folder)
        # The watcher's batch: the notes that went are announced.
        gone: set[str] = set()
        while gone != {"deploy.md", "style.md"}:
            msg = await d.read_message(30)
            if msg.get("method") == "memory/changed":
                gone |= {Path(p).name for p in msg["params"]["paths"]}
        d.request(2, "memory/status", root)
        status = (await d.response(2))["result"]
        assert status["docCount"] == 0, status
        assert any("deleted" in p["problem"] for p in status["problems"]), status
        d.request(3, "memory/list", root)
        assert (await d.response(3))["result"]["docs"] == []
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_workspace_folder_replaced_by_a_symlink_is_refused_not_followed(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A session's tools stay in the folder its workspace resolved to. If
    that folder is moved away and a symlink to another folder put in its
    place (all it takes is write access to the parent: a command run in the
    workspace has it), the tools refuse the workspace: they neither read
    the link's target nor anything else outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret is 7\n")
    (outside / "README.md").write_text("an impostor README\n")
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)

        def prompt(n: int, text: str) -> None:
            if acp:
                blocks = [{"type": "text", "text": text}]
                d.request(n, "session/prompt", {"sessionId": sid, "prompt": blocks})
            else:
                d.request(n, "agent/prompt", {"sessionId": sid, "prompt": text})

        def last_tool_result() -> str:
            messages = model_server.requests("main")[-1]["body"]["messages"]
            return str([m["content"] for m in messages if m["role"] == "tool"][-1])

        prompt(3, '!tool read_file {"path": "README.md"}')
        assert (await d.response(3))["result"]["stopReason"] == "end_turn"
        assert "The answer is 42" in last_tool_result()
        workspace.rename(tmp_path / "moved-away")
        workspace.symlink_to(outside, target_is_directory=True)
        for n, call in enumerate(
            (
                '!tool read_file {"path": "secret.txt"}',
                '!tool read_file {"path": "README.md"}',
                '!tool list_dir {"path": "."}',
                '!tool search {"query": "secret"}',
            ),
            start=4,
        ):
            prompt(n, call)
            assert (await d.response(n))["result"]["stopReason"] == "end_turn"
            result = last_tool_result()
            assert "impostor" not in result and "is 7" not in result, result
            assert "secret.txt" not in result, result
            assert f"now leads to {outside}" in result and "refused" in result, result
    finally:
        await d.close()


async def test_a_workspace_named_by_a_symlink_stays_where_it_led_when_re_pointed(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The editor names the workspace by a symlink: the session is bound to
    the folder the link led to then. Re-pointing the link later (to another
    folder, here one holding a secret) moves nothing: the tools go on in the
    session's folder and never read the link's new target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "README.md").write_text("the secret is 7\n")
    link = tmp_path / "current"
    link.symlink_to(workspace, target_is_directory=True)
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "agent/newSession", {"workspaceRoot": str(link)})
        sid = (await d.response(1))["result"]["sessionId"]
        link.unlink()
        link.symlink_to(outside, target_is_directory=True)
        prompt = '!tool read_file {"path": "README.md"}'
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": prompt})
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
        messages = model_server.requests("main")[-1]["body"]["messages"]
        (result,) = [m["content"] for m in messages if m["role"] == "tool"]
        assert "The answer is 42" in result and "is 7" not in result
    finally:
        await d.close()


@pytest.mark.parametrize("blocker", ["file", "fifo"])
async def test_a_sessions_folder_that_cannot_be_made_costs_no_turn_and_is_said_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path, blocker: str
) -> None:
    """A file or a FIFO where the sessions folder should be (what a full or
    read-only disk looks like to a daemon run as root): each prompt still
    runs, the failure is said once (not announced as mended by a write that
    wrote none of the kept lines), and once the folder can be made every kept
    line is written, nothing skipped."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    folder.parent.mkdir(parents=True)
    if blocker == "fifo":
        os.mkfifo(folder)
    else:
        folder.write_text("not a folder")
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path))
    try:
        sid = await d.open_session(workspace)
        for n, text in enumerate(["one", "two"], start=3):
            d.request(n, "agent/prompt", {"sessionId": sid, "prompt": text})
            assert (await d.response(n, timeout=30))["result"]["stopReason"] == "end_turn"

        def logged(text: str) -> list[str]:
            return [
                m["params"]["message"]
                for m in d.notifications
                if m["method"] == "window/logMessage" and text in m["params"]["message"]
            ]

        assert len(logged("cannot write the transcript")) == 1
        assert logged("is written again") == []
        folder.unlink()
        folder.mkdir()
        d.request(5, "agent/prompt", {"sessionId": sid, "prompt": "three"})
        assert (await d.response(5, timeout=30))["result"]["stopReason"] == "end_turn"
        assert len(logged("is written again")) == 1
        lines = [json.loads(x) for x in (folder / f"{sid}.jsonl").read_text().splitlines()]
        said = [
            r["message"]["parts"][-1]["text"].rsplit("\n", 1)[-1]
            for r in lines
            if r["type"] == "message" and r["message"]["role"] == "user"
        ]
        assert said == ["one", "two", "three"]
    finally:
        await d.close()


@pytest.mark.parametrize("blocker", ["file", "fifo"])
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_session_that_cannot_be_saved_says_so_in_the_chat_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path, blocker: str, acp: bool
) -> None:
    """A sessions folder that cannot be written: the user is told in the chat
    (ACP clients show nothing of the daemon's log), once per session, as
    the first prompt's first line fails; every prompt still runs. Over LSP the log says
    it once too, not once per prompt (the sync after each reply included)."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    folder.parent.mkdir(parents=True)
    if blocker == "fifo":
        os.mkfifo(folder)
    else:
        folder.write_text("not a folder")
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path), acp=acp)
    try:
        sid = await d.open_session(workspace)
        said: list[list[str]] = []
        for n, text in enumerate(["one", "two", "three"], start=3):
            d.notifications.clear()
            if acp:
                blocks = [{"type": "text", "text": text}]
                d.request(n, "session/prompt", {"sessionId": sid, "prompt": blocks})
            else:
                d.request(n, "agent/prompt", {"sessionId": sid, "prompt": text})
            assert (await d.response(n, timeout=30))["result"]["stopReason"] == "end_turn"
            if acp:
                chunks = [
                    m["params"]["update"]["content"]["text"]
                    for m in d.notifications
                    if m["method"] == "session/update"
                    and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                ]
            else:
                chunks = [
                    m["params"]["update"]["text"]
                    for m in d.notifications
                    if m["method"] == "agent/update"
                    and m["params"]["update"]["kind"] == "message_chunk"
                ]
            said.append(chunks)
            logged = [
                m["params"]["message"]
                for m in d.notifications
                if m["method"] == "window/logMessage" and sid in m["params"]["message"]
            ]
            # The first prompt's line fails; the sync after its reply says nothing more.
            assert len(logged) == (int(n == 3) if not acp else 0), logged
        # The warning when the failure is found (the prompt's first line),
        # before the answer, set apart from it; in that prompt only.
        warning = said[0][0]
        assert said[0][1:3] == ["Echo: ", "one"], said
        assert warning.startswith("agentd cannot save this session") and warning.endswith("\n\n")
        assert str(folder) in warning
        assert "Not a directory" in warning or "ENOTDIR" in warning
        assert [c for c in said[1] + said[2] if "cannot save" in c] == []
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_sessions_folder_gone_and_unmakeable_mid_session_is_said_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """The sessions folder removed behind a live session and a dangling
    symlink left in its place: the transcript cannot be written again at
    the next prompts' start. Each prompt runs; the log says it once, and the
    chat once, not at every prompt."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path), acp=acp)
    try:
        sid = await d.open_session(workspace)
        warned: list[int] = []
        for n, text in enumerate(["one", "two", "three"], start=3):
            if n == 4:
                shutil.rmtree(folder)
                folder.symlink_to(tmp_path / "nowhere" / "sessions")
            d.notifications.clear()
            if acp:
                blocks = [{"type": "text", "text": text}]
                d.request(n, "session/prompt", {"sessionId": sid, "prompt": blocks})
            else:
                d.request(n, "agent/prompt", {"sessionId": sid, "prompt": text})
            assert (await d.response(n, timeout=30))["result"]["stopReason"] == "end_turn"
            said = json.dumps(d.notifications)
            warned.append(said.count("cannot save this session"))
            if not acp:
                logged = said.count("cannot be written again")
                assert logged == (1 if n == 4 else 0), (n, logged)
        assert warned == [0, 1, 0]
    finally:
        await d.close()
