"""File descriptors: transcripts are not one per session forever (issue 14, item 9).

Each session used to keep its transcript open. Standard ACP clients never
close sessions, so under `ulimit -n 256` a daemon failed after ~245
sessions: prompts ended with a misleading "cannot connect to 127.0.0.1" (no
descriptor left for the socket) and transcripts were lost. The real daemon
under a limit of 256 descriptors serves 300 sessions, a prompt each: every
prompt ends normally, every transcript holds its prompt, and the daemon's
open descriptors stay far below the limit. And when descriptors do run out,
the error says so.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
from pathlib import Path

import httpx
import pytest

from agentd.errors import describe_os_error
from agentd.messages import Message, TextPart
from agentd.providers.config import ProviderConfig
from agentd.providers.http import to_model_error
from agentd.testing.daemon import daemon_command, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import (
    OpenFiles,
    TranscriptWriter,
    load,
    meta_path,
    read_slice,
    sessions_dir,
)

LIMIT = 256
SESSIONS = 300


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


@pytest.mark.e2e
async def test_many_sessions_under_a_low_descriptor_limit(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    proc = await asyncio.create_subprocess_exec(
        *daemon_command(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        preexec_fn=_low_limit,
    )
    d = RawDaemon(proc)
    try:
        await d.initialize()
        sids: list[str] = []
        for n in range(SESSIONS):
            d.request(f"new-{n}", "agent/newSession", {"workspaceRoot": str(workspace)})
            sid = (await d.response(f"new-{n}"))["result"]["sessionId"]
            sids.append(sid)
            d.request(f"p-{n}", "agent/prompt", {"sessionId": sid, "prompt": f"hello {n}"})
            reply = await d.response(f"p-{n}")
            assert reply["result"]["stopReason"] == "end_turn", (n, reply)
        open_fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        assert open_fds < LIMIT // 2, open_fds
        folder = sessions_dir(workspace, tmp_path / "agentd-home")
        for n, sid in enumerate(sids):
            texts = [m.text for _, m in read_slice(folder / f"{sid}.jsonl", 0)]
            assert texts[0] == f"hello {n}" and texts[1].startswith("Echo"), (n, texts)
        d.request("bye", "shutdown")
        await d.response("bye")
        d.notify("exit")
        assert await d.wait_exit() == 0
    finally:
        await d.close()


def test_running_out_of_descriptors_is_named_as_such() -> None:
    exhausted = OSError(errno.EMFILE, os.strerror(errno.EMFILE))
    failure = httpx.ConnectError("[Errno 24] Too many open files")
    failure.__cause__ = exhausted
    err = to_model_error(failure, host="127.0.0.1:9", config=ProviderConfig(api_key="k"))
    assert "file descriptor" in err.message and "EMFILE" in err.message, err.message
    assert "cannot connect" not in err.message
    assert describe_os_error(exhausted) == "Too many open files (EMFILE)"


def test_a_refused_transcript_write_is_kept_and_written_later(tmp_path: Path) -> None:
    """The transcript lags while the disk refuses, never skips a message: a
    line that cannot be written is written before the next one."""

    class Refusing(OpenFiles):
        refuse = True

        def get(self, path: Path) -> object:  # type: ignore[override]
            if self.refuse:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return super().get(path)

    files = Refusing(limit=1)
    path = tmp_path / "s.jsonl"
    writer = TranscriptWriter(path, "s", tmp_path, files=files)
    with pytest.raises(OSError):
        writer.append(Message("user", [TextPart("one")]))
    assert writer.pending == 2  # the session line and the message
    files.refuse = False
    assert writer.append(Message("assistant", [TextPart("two")])) == 1
    assert writer.pending == 0
    assert [(o, m.text) for o, m in read_slice(path, 0)] == [(0, "one"), (1, "two")]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["session", "message", "message"]
    writer.close()


def test_settings_and_titles_go_through_the_shared_open_files(tmp_path: Path) -> None:
    """A mode chosen before the first prompt is kept (no file yet) and written
    with the first line, also when that write is refused once; a writer whose
    file another one's write closed opens it again; the listing's meta file
    follows the title."""
    refuse = [True]

    class Refusing(OpenFiles):
        def get(self, path: Path) -> object:  # type: ignore[override]
            if refuse[0]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().get(path)

    files = Refusing(limit=1)
    a = TranscriptWriter(tmp_path / "a.jsonl", "a", tmp_path, files=files)
    b = TranscriptWriter(tmp_path / "b.jsonl", "b", tmp_path, files=files)
    a.config(mode="ask")
    assert not a.path.exists() and a.pending == 0
    with pytest.raises(OSError):
        a.append(Message("user", [TextPart("the first question")]))
    assert a.pending == 3  # the session line, the mode, the message
    refuse[0] = False
    a.flush()
    b.append(Message("user", [TextPart("elsewhere")]))  # closes a's file
    assert len(files) == 1
    a.config(model="other-model")
    a.append(Message("assistant", [TextPart("the answer")]))
    records = [json.loads(line) for line in a.path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "config", "message", "config", "message"]
    loaded = load(a.path)
    assert loaded is not None
    assert (loaded.mode, loaded.model, loaded.title) == ("ask", "other-model", "the first question")
    a.write_due_meta()  # what the core does once the prompt's request is out
    assert json.loads(meta_path(a.path).read_text())["title"] == "the first question"
    a.close()
    b.close()
    assert len(files) == 0
