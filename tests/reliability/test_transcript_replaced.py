"""A live session's transcript replaced behind the daemon by something
hostile: a FIFO, a symlink to a file outside agentd's folders (standing for
/etc/passwd: the test must not risk the machine's), a symlink to another
session's transcript. Whether the daemon still holds the file open or had
closed it (pushed out by 32 newer ones), the prompt is answered, nothing
is written through the link, and the session's own file is a whole,
loadable transcript again."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentd.agent.core import OPEN_TRANSCRIPTS
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir
from tests.e2e.test_session_taken_away import goes_on_in_a_second_daemon
from tests.lsp_client import start_client

pytestmark = pytest.mark.e2e

VICTIM = "root:x:0:0:root:/root:/bin/bash\n"


@pytest.mark.parametrize("held", [True, False], ids=["held-open", "closed"])
@pytest.mark.parametrize("kind", ["fifo", "symlink-out", "symlink-to-another-session"])
async def test_a_replaced_transcript_is_written_again_never_through(
    model_server: ModelServer, tmp_path: Path, workspace: Path, kind: str, held: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    victim = tmp_path / "passwd"
    victim.write_text(VICTIM)
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "alpha")
        other = await c.new_session(workspace)
        await c.prompt(other, "the other one")
        other_file = folder / f"{other}.jsonl"
        other_bytes = other_file.read_bytes()
        if not held:
            for n in range(OPEN_TRANSCRIPTS):
                filler = await c.new_session(workspace)
                await c.prompt(filler, f"filler {n}")
        path = folder / f"{sid}.jsonl"
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink-out":
            path.symlink_to(victim)
        else:
            path.symlink_to(other_file)
        await c.prompt(sid, "beta")
        assert victim.read_text() == VICTIM
        assert other_file.read_bytes() == other_bytes
        assert stat.S_ISREG(path.lstat().st_mode)
    finally:
        await c.lsp.shutdown_session()
    assert victim.read_text() == VICTIM
    assert other_file.read_bytes() == other_bytes
    await goes_on_in_a_second_daemon(model_server, env, workspace, sid, ["alpha", "beta"], "alpha")


@pytest.mark.parametrize("held", [True, False], ids=["held-open", "closed"])
async def test_a_folder_in_the_transcript_s_place_costs_the_prompt_nothing(
    model_server: ModelServer, tmp_path: Path, workspace: Path, held: bool
) -> None:
    """A folder cannot be renamed over: the session's lines wait (logged),
    the prompts are answered, and nothing is written into the folder."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "alpha")
        if not held:
            for n in range(OPEN_TRANSCRIPTS):
                filler = await c.new_session(workspace)
                await c.prompt(filler, f"filler {n}")
        path = folder / f"{sid}.jsonl"
        path.unlink()
        path.mkdir()
        for text in ("beta", "gamma"):
            assert (await c.prompt(sid, text))["stopReason"] == "end_turn"
        # (a chat line saying the session cannot be saved may come between them)
        assert "Echo: beta" in c.text(sid) and c.text(sid).endswith("Echo: gamma")
        assert list(path.iterdir()) == []
    finally:
        await c.lsp.shutdown_session()


@pytest.mark.parametrize("kind", ["fifo", "symlink-out"])
async def test_a_stand_in_at_the_meta_file_s_temporary_name_is_never_written_through(
    model_server: ModelServer, tmp_path: Path, workspace: Path, kind: str
) -> None:
    """The listing's meta file is written under a temporary name, then
    renamed: a FIFO there must not hold the write (and the daemon's loop),
    a symlink there must not carry it to the file it points at."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    folder = sessions_dir(workspace, agentd_home(tmp_path))
    victim = tmp_path / "passwd"
    victim.write_text(VICTIM)
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{sid}.meta.json.tmp"
        if kind == "fifo":
            os.mkfifo(tmp)
        else:
            tmp.symlink_to(victim)
        assert (await c.prompt(sid, "alpha"))["stopReason"] == "end_turn"
        assert (await c.prompt(sid, "beta"))["stopReason"] == "end_turn"
        assert victim.read_text() == VICTIM
        listed = await c.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert [s["title"] for s in listed["sessions"]] == ["alpha"]
    finally:
        await c.lsp.shutdown_session()
    assert victim.read_text() == VICTIM
