"""A live session's folders replaced behind the daemon, over both front ends
(the real daemon over stdio, raw messages): its `<sid>.images` folder by a
symlink, a FIFO or a file; its sessions folder by a file while its transcript
is open. Nothing is followed or hung on; what cannot be saved is said in the
chat as it is found, once per session, a cancelled prompt included."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import MAX_STORED_IMAGE_BYTES, sessions_dir

pytestmark = pytest.mark.e2e

WARNING = "agentd cannot save this session"
# Two different images (PNG signatures with a byte of their own).
IMAGES = [bytes.fromhex("89504e470d0a1a0a") + bytes([i]) for i in range(2)]


def _image(raw: bytes) -> dict[str, str]:
    return {"type": "image", "data": base64.b64encode(raw).decode(), "mimeType": "image/png"}


def _prompt(d: RawDaemon, msg_id: int, sid: str, blocks: list[dict[str, Any]]) -> None:
    if d.framing == "acp":
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": blocks})


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _chunks(notifications: list[dict[str, Any]]) -> list[str]:
    """The agent's message chunks shown, in order (either front end)."""
    out = []
    for m in notifications:
        update = m.get("params", {}).get("update", {})
        if m["method"] == "session/update" and update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"]["text"])
        elif m["method"] == "agent/update" and update.get("kind") == "message_chunk":
            out.append(update["text"])
    return out


def _plant(path: Path, kind: str, outside: Path) -> None:
    if kind == "symlink":
        path.symlink_to(outside, target_is_directory=True)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("not a folder")


@pytest.mark.parametrize("kind", ["symlink", "fifo", "file"])
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_an_images_folder_replaced_is_never_followed_nor_hung_on(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, kind: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    # What a load would show if it read through a symlink.
    planted = outside / hashlib.sha256(IMAGES[0]).hexdigest()
    planted.write_bytes(b"PLANTED-BYTES")
    (tmp_path / "agentd-config").mkdir()
    (tmp_path / "agentd-config" / "config.toml").write_text("supports_images = true\n")
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        images = sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.images"
        _prompt(d, 3, sid, [*_text("first"), _image(IMAGES[0])])
        assert (await d.response(3))["result"]["stopReason"] == "end_turn"
        assert images.is_dir()
        shutil.rmtree(images)
        _plant(images, kind, outside)
        _prompt(d, 4, sid, [*_text("second"), _image(IMAGES[1])])
        assert (await d.response(4))["result"]["stopReason"] == "end_turn"
        # Made again as a folder of its own; nothing written where it pointed.
        assert images.is_dir() and not images.is_symlink()
        assert [p.name for p in images.iterdir()] == [hashlib.sha256(IMAGES[1]).hexdigest()]
        assert [p.name for p in outside.iterdir()] == [planted.name]
    finally:
        await d.close()
    # Replaced again while no daemon runs: a load shows the images missing,
    # never reads through it, never waits on it.
    shutil.rmtree(images)
    _plant(images, kind, outside)
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(0)
            load = {"sessionId": sid, "cwd": str(workspace), "mcpServers": []}
            d.request(1, "session/load", load)
        else:
            await d.initialize()
            d.request(1, "agent/loadSession", {"sessionId": sid})
        assert "result" in await d.response(1)
        shown = json.dumps(d.notifications)
        assert "second" in shown and "its stored copy is missing" in shown, shown
        assert base64.b64encode(b"PLANTED-BYTES").decode() not in shown
        _prompt(d, 2, sid, _text("after"))
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
    finally:
        await d.close()


@pytest.mark.parametrize("kind", ["file", "symlink"])
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_sessions_folder_replaced_is_said_then_written_again(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, kind: str
) -> None:
    """The sessions folder removed while the transcript is open and a file
    (or a symlink to another folder) put in its place: the next prompt's
    check finds it (ENOTDIR is not "the file is there"; a symlink put there
    is not written through), the chat says so at once, once; no line goes
    to the unlinked file; once the place is a folder again the transcript
    is written again whole, the prompts between included."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        said: list[list[str]] = []
        for n, text in enumerate(["alpha-1", "bravo-2", "charlie-3", "delta-4"], start=3):
            if text == "bravo-2":
                shutil.rmtree(folder)
                if kind == "file":
                    folder.write_text("a file where the sessions folder was")
                else:
                    folder.symlink_to(elsewhere, target_is_directory=True)
            if text == "delta-4":
                folder.unlink()
            d.notifications.clear()
            _prompt(d, n, sid, _text(text))
            assert (await d.response(n, timeout=30))["result"]["stopReason"] == "end_turn"
            said.append(_chunks(d.notifications))
        warned = [[c for c in chunks if WARNING in c] for chunks in said]
        assert [len(w) for w in warned] == [0, 1, 0, 0], said
        # Found at the prompt's start: before the answer, naming the cause.
        cause = "Not a directory" if kind == "file" else "replaced by a symlink"
        assert said[1][0] == warned[1][0] and cause in warned[1][0], said
        assert list(elsewhere.iterdir()) == []
        rebuilt = (folder / f"{sid}.jsonl").read_text()
        for text in ("bravo-2", "charlie-3", "delta-4"):
            assert text in rebuilt, (text, rebuilt)
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_cancelled_prompt_still_says_the_session_cannot_be_saved(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """The failure is found as the prompt starts and the prompt is then
    cancelled: the warning reached the chat before the cancel (it no longer
    waits for a prompt that ends normally), and is not said again."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    folder.parent.mkdir(parents=True)
    folder.write_text("not a folder")
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        # The model takes its time: the prompt is still running when cancelled.
        _prompt(d, 3, sid, _text("!ttft 60\nslow"))
        while not any(WARNING in c for c in _chunks(d.notifications)):
            msg = await d.read_message()
            assert msg.get("id") != 3, msg  # answered before the warning came
            if "method" in msg and "id" not in msg:
                d.notifications.append(msg)
        if acp:
            d.notify("session/cancel", {"sessionId": sid})
            assert (await d.response(3))["result"]["stopReason"] == "cancelled"
        else:
            d.notify("$/cancelRequest", {"id": 3})
            assert (await d.response(3))["error"]["code"] == -32800
        d.notifications.clear()
        _prompt(d, 4, sid, _text("again"))
        assert (await d.response(4))["result"]["stopReason"] == "end_turn"
        assert [c for c in _chunks(d.notifications) if WARNING in c] == []
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_new_sessions_folder_replaced_before_its_meta_file_is_not_followed(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A brand-new project's session: its sessions folder is not there at
    `session/new`, and its meta file cannot be written (a folder at its
    temporary name stands for a failed write, or a swap before the request
    went out). Which folder the transcript was made in is still known: the
    folder replaced by a symlink to another is not written through; the
    chat says so."""
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        # Answered after the new session's file was made ahead (or not: no folder).
        if acp:
            d.request(2, "session/list", {})
        else:
            d.request(2, "agent/listSessions", {"workspaceRoot": str(workspace)})
        assert "result" in await d.response(2)
        assert not folder.exists()
        folder.mkdir(parents=True)
        (folder / f".{sid}.meta.json.tmp").mkdir()
        _prompt(d, 3, sid, _text("alpha-1"))
        assert (await d.response(3))["result"]["stopReason"] == "end_turn"
        assert not (folder / f"{sid}.meta.json").exists()
        shutil.rmtree(folder)
        folder.symlink_to(elsewhere, target_is_directory=True)
        d.notifications.clear()
        _prompt(d, 4, sid, _text("bravo-2"))
        assert (await d.response(4))["result"]["stopReason"] == "end_turn"
        warned = [c for c in _chunks(d.notifications) if WARNING in c]
        assert len(warned) == 1 and "replaced by a symlink" in warned[0], d.notifications
        assert list(elsewhere.iterdir()) == []
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_stored_image_replaced_by_a_huge_file_is_not_read_at_a_load(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A stored image's file replaced, while no daemon runs, by a file
    larger than any image stored (sparse: it costs the disk nothing): a
    load read it whole and replayed it base64'd. It shows as missing now,
    and the session goes on."""
    (tmp_path / "agentd-config").mkdir()
    (tmp_path / "agentd-config" / "config.toml").write_text("supports_images = true\n")
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        _prompt(d, 3, sid, [*_text("with an image"), _image(IMAGES[0])])
        assert (await d.response(3))["result"]["stopReason"] == "end_turn"
    finally:
        await d.close()
    stored = sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.images"
    stored /= hashlib.sha256(IMAGES[0]).hexdigest()
    with stored.open("r+b") as f:
        f.truncate(MAX_STORED_IMAGE_BYTES + 1)
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(0)
            load = {"sessionId": sid, "cwd": str(workspace), "mcpServers": []}
            d.request(1, "session/load", load)
        else:
            await d.initialize()
            d.request(1, "agent/loadSession", {"sessionId": sid})
        assert "result" in await d.response(1)
        shown = json.dumps(d.notifications)
        assert "with an image" in shown and "its stored copy is missing" in shown, shown[:2000]
        assert len(shown) < MAX_STORED_IMAGE_BYTES // 4
        _prompt(d, 2, sid, _text("after"))
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
    finally:
        await d.close()
