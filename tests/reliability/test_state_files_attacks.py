"""agentd's own files under `$AGENTD_HOME` replaced by something hostile
before the daemon starts: `live-sessions.lock`, a memory folder's
`.cursors.lock` and the memory index cache folder, each a FIFO, a
directory, a symlink out of the home, a 2 GB sparse file or read-only. The
daemon must start, answer prompts, delete a session, shut down, and never
hang or write through a symlink to elsewhere."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import pytest

from agentd.layout import memory_index_cache_dir
from agentd.memory.extraction.cursor import CURSOR_LOCK
from agentd.memory.extraction.lock import GUARD_FILE
from agentd.session_files import LIVE_FILE
from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

NOTE = "---\nname: deploy\ndescription: how we deploy\ntype: project\n---\n\nWith make deploy.\n"
KINDS = ["fifo", "directory", "symlink-out", "sparse-2GB", "read-only"]


def _plant(path: Path, kind: str, outside: Path, *, folder: bool) -> None:
    """Put `kind` where `path` (a file, or a `folder`) should be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink-out":
        path.symlink_to(outside)
    elif kind == "sparse-2GB":
        with path.open("wb") as f:
            f.truncate(2 << 30)
    elif folder:
        path.mkdir()
        path.chmod(0o500)
    else:
        path.write_bytes(b"")
        path.chmod(0o400)


def _outside(tmp_path: Path, folder: bool) -> Path:
    if folder:
        out = tmp_path / "outside-folder"
        out.mkdir()
    else:
        out = tmp_path / "outside-file"
        out.write_text("not agentd's\n")
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", ["live", "cursors", "cache"])
async def test_the_daemon_serves_with_a_hostile_state_file(
    model_server: ModelServer, tmp_path: Path, workspace: Path, target: str, kind: str
) -> None:
    home = agentd_home(tmp_path)
    memory = memory_folder(workspace, tmp_path)
    (memory / "deploy.md").write_text(NOTE)
    folder = target == "cache"
    path = {
        "live": home / LIVE_FILE,
        "cursors": memory / CURSOR_LOCK,
        "cache": memory_index_cache_dir(home),
    }[target]
    outside = _outside(tmp_path, folder)
    _plant(path, kind, outside, folder=folder)
    env = daemon_env(model_server.openai_base_url, tmp_path)
    log = tmp_path / "agentd-stderr.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, stderr=stderr)
    try:
        await d.initialize()
        root = {"workspaceRoot": str(workspace)}
        for n in range(2):
            d.request(10 + n, "agent/newSession", root)
            sid = (await d.response(10 + n))["result"]["sessionId"]
            for m in range(2):
                d.request(20 + 2 * n + m, "agent/prompt", {"sessionId": sid, "prompt": "deploy?"})
                reply = await d.response(20 + 2 * n + m, timeout=30)
                assert reply["result"]["stopReason"] == "end_turn", reply
            if n == 0:
                d.request(30, "agent/deleteSession", {"sessionId": sid})
                assert (await d.response(30))["result"] == {"deleted": True}
        d.request(31, "memory/status", root)
        assert (await d.response(31))["result"]["docCount"] == 1
        d.request(40, "shutdown")
        await d.response(40, timeout=30)
        d.notify("exit")
        assert await d.wait_exit(30) == 0
    finally:
        await d.close()
    if target == "cursors" and kind in ("fifo", "directory", "symlink-out"):
        # Extraction cannot take the lock: each run says why, naming the file.
        said = [line for line in log.read_text().splitlines() if "memory extraction" in line]
        assert said and all(CURSOR_LOCK in line for line in said), said
    elif target == "cursors":
        assert model_server.requests("extract"), "the extraction (which takes the lock) never ran"
    # Nothing went through the symlink, and what was planted is still there.
    if folder:
        assert list(outside.iterdir()) == []
    else:
        assert outside.read_text() == "not agentd's\n"
    st = path.lstat()
    expected = {
        "fifo": stat.S_ISFIFO,
        "directory": stat.S_ISDIR,
        "symlink-out": stat.S_ISLNK,
        "sparse-2GB": stat.S_ISREG,
        "read-only": stat.S_ISDIR if folder else stat.S_ISREG,
    }[kind]
    assert expected(st.st_mode)


@pytest.mark.parametrize("lock", [CURSOR_LOCK, GUARD_FILE])
async def test_a_lock_held_for_ever_elsewhere_holds_no_reply_and_no_exit(
    model_server: ModelServer, tmp_path: Path, workspace: Path, lock: str
) -> None:
    """Another process takes `.cursors.lock` (or the extraction lock's
    guard) and never lets go (a hung daemon, a hostile one): a delete is
    still answered (the entry goes at that file's next write), and the
    daemon still exits."""
    memory = memory_folder(workspace, tmp_path)
    (memory / "deploy.md").write_text(NOTE)
    holder = os.open(memory / lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env)
    try:
        sid = await d.open_session(workspace)
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "deploy?"})
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
        d.request(3, "agent/deleteSession", {"sessionId": sid})
        assert (await d.response(3, timeout=60))["result"] == {"deleted": True}
        d.request(4, "shutdown")
        await d.response(4, timeout=60)
        d.notify("exit")
        assert await d.wait_exit(60) == 0
    finally:
        await d.close()
        os.close(holder)
