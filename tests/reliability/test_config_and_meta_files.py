"""Files agentd reads that are not its own markdown: the user's config file
and the sessions folder's meta files, replaced by a FIFO, a device or a
file too large to be one.

`config.toml` was opened with a plain `open()`: a FIFO there held the
settings (and every session behind them) for ever, and a symlink to
`/dev/zero` read until memory ran out (7 GB in a few seconds). A
`<session>.meta.json` that was a FIFO held `session/list`, and the exit
behind the worker thread stuck in it; `/dev/zero` there read without end.
The real daemon over stdio, both front ends: each is reported or passed
over, the prompt reaches the model, the listing is answered (from the
transcript) and the daemon exits cleanly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentd.files import MAX_CONFIG_BYTES
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import sessions_dir

pytestmark = pytest.mark.e2e

KINDS = ["fifo", "dev-zero", "too-large"]


def _plant(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        with path.open("wb") as f:  # sparse: costs the disk nothing
            f.truncate(MAX_CONFIG_BYTES + 1)


async def _prompt(d: RawDaemon, msg_id: int, sid: str) -> dict[str, Any]:
    if d.framing == "acp":
        blocks = [{"type": "text", "text": "hello"}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": "hello"})
    return await d.response(msg_id)


async def _stop(d: RawDaemon) -> int:
    if d.framing == "acp":
        assert d.proc.stdin is not None
        d.proc.stdin.close()
    else:
        d.request("bye", "shutdown")
        await d.response("bye")
        d.notify("exit")
    return await d.wait_exit(30)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_config_file_that_is_no_file_is_reported_and_the_daemon_serves(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, kind: str
) -> None:
    _plant(tmp_path / "agentd-config" / "config.toml", kind)
    env = daemon_env(model_server.openai_base_url, tmp_path)
    log = tmp_path / "agentd-stderr.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, acp=acp, stderr=stderr)
    try:
        sid = await d.open_session(workspace)
        reply = await _prompt(d, 10, sid)
        assert reply["result"]["stopReason"] == "end_turn", reply
        assert model_server.requests("main")
        assert await _stop(d) == 0
    finally:
        await d.close()
    said = [line for line in log.read_text().splitlines() if "configuration:" in line]
    why = "larger than" if kind == "too-large" else "not a regular file"
    assert any("config.toml" in line and why in line for line in said), said


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_meta_file_that_is_no_file_is_passed_over_by_the_listing(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, kind: str
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        assert (await _prompt(d, 10, sid))["result"]["stopReason"] == "end_turn"
        folder = sessions_dir(workspace, agentd_home(tmp_path))
        # Another session of this workspace (a copy, under its own name)
        # whose meta file is no file.
        other = "0" * 32
        (folder / f"{other}.jsonl").write_bytes(
            (folder / f"{sid}.jsonl").read_bytes().replace(sid.encode(), other.encode())
        )
        _plant(folder / f"{other}.meta.json", kind)
        method = "session/list" if acp else "agent/listSessions"
        d.request(11, method, {"cwd": str(workspace), "workspaceRoot": str(workspace)})
        listed = (await d.response(11))["result"]["sessions"]
        # Read from its transcript instead: listed with its title.
        assert {s["sessionId"]: s["title"] for s in listed} == {sid: "hello", other: "hello"}
        assert await _stop(d) == 0
    finally:
        await d.close()
    assert (folder / f"{other}.meta.json").is_symlink() or kind == "fifo"


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_huge_file_without_a_header_among_the_transcripts_is_not_read(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A 2 GB file of zeros (sparse) named as a transcript: every listing
    and load read it whole as one line (27 s and 2.3 GB of memory here) to
    refuse it after. Its first line is looked at first now: the listing
    leaves it out, a load of it is an unknown session, and the session
    beside it is listed."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        assert (await _prompt(d, 10, sid))["result"]["stopReason"] == "end_turn"
        other = "1" * 32
        folder = sessions_dir(workspace, agentd_home(tmp_path))
        with (folder / f"{other}.jsonl").open("wb") as f:
            f.truncate(2 << 30)
        method = "session/list" if acp else "agent/listSessions"
        d.request(11, method, {"cwd": str(workspace), "workspaceRoot": str(workspace)})
        listed = (await d.response(11))["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]
        if acp:
            load = {"sessionId": other, "cwd": str(workspace), "mcpServers": []}
            d.request(12, "session/load", load)
        else:
            d.request(12, "agent/loadSession", {"sessionId": other})
        error = (await d.response(12))["error"]
        assert "no stored session" in error["message"], error
        assert await _stop(d) == 0
    finally:
        await d.close()


def _peak_rss_mib(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) / 1024
    raise AssertionError("no VmHWM")


# Past `agentd.transcript.MAX_LINE_BYTES`, which a test may shrink (the code
# before read such a line whole: 2 GB of memory and more).
HUGE_LINE = int(os.environ.get("AGENTD_TEST_HUGE_LINE", 2 << 30))


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_huge_line_in_a_transcript_is_skipped_and_the_rest_loads(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A transcript with a 2 GB line (zeros, sparse) between two turns, and
    no meta file: the listing shows it with its title, a load takes both
    turns and the next prompt's request carries them, the line is skipped
    with a warning naming the file, and the daemon's memory never holds the
    line (peak RSS under 1 GiB; agentd writes no line over 256 MiB)."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    log_path = tmp_path / "stderr.log"
    with log_path.open("wb") as log:
        d = await RawDaemon.spawn(env, acp=acp, stderr=log)
    try:
        sid = await d.open_session(workspace)
        for n, text in enumerate(["first", "second"]):
            if acp:
                blocks = [{"type": "text", "text": text}]
                d.request(10 + n, "session/prompt", {"sessionId": sid, "prompt": blocks})
            else:
                d.request(10 + n, "agent/prompt", {"sessionId": sid, "prompt": text})
            assert (await d.response(10 + n))["result"]["stopReason"] == "end_turn"
        folder = sessions_dir(workspace, agentd_home(tmp_path))
        lines = (folder / f"{sid}.jsonl").read_bytes().replace(sid.encode(), b"2" * 32)
        lines_kept = lines.splitlines(keepends=True)
        cut = next(i for i, x in enumerate(lines_kept) if b'"second"' in x)
        other = "2" * 32
        with (folder / f"{other}.jsonl").open("wb") as f:
            f.write(b"".join(lines_kept[:cut]))
            f.seek(HUGE_LINE, os.SEEK_CUR)  # a hole: zeros that cost the disk nothing
            f.write(b"\n" + b"".join(lines_kept[cut:]))
        method = "session/list" if acp else "agent/listSessions"
        d.request(20, method, {"cwd": str(workspace), "workspaceRoot": str(workspace)})
        listed = (await d.response(20, timeout=120))["result"]["sessions"]
        assert {s["sessionId"]: s["title"] for s in listed} == {sid: "first", other: "first"}
        if acp:
            load = {"sessionId": other, "cwd": str(workspace), "mcpServers": []}
            d.request(21, "session/load", load)
        else:
            d.request(21, "agent/loadSession", {"sessionId": other})
        assert "result" in await d.response(21, timeout=120)
        if acp:
            blocks = [{"type": "text", "text": "third"}]
            d.request(22, "session/prompt", {"sessionId": other, "prompt": blocks})
        else:
            d.request(22, "agent/prompt", {"sessionId": other, "prompt": "third"})
        assert (await d.response(22))["result"]["stopReason"] == "end_turn"
        sent = model_server.requests("main")[-1]["body"]["messages"]
        users = [m["content"] for m in sent if m["role"] == "user"]
        texts = [u if isinstance(u, str) else u[0]["text"] for u in users]
        # (The first turn's text carries the date reminder before it.)
        assert [t.rpartition("\n")[2] for t in texts] == ["first", "second", "third"]
        assert _peak_rss_mib(d.proc.pid) < 1024
        assert await _stop(d) == 0
    finally:
        await d.close()
    logged = log_path.read_text(errors="replace")
    assert f"{other}.jsonl: the line at byte" in logged and "skipped" in logged
