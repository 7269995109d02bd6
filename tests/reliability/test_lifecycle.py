"""Lifecycle cases not covered by tests/e2e: a closed stdout, and a background
task that ignores cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from agentd.tasks import Supervisor
from agentd.testing.daemon import daemon_env, spawn_agentd
from agentd.testing.framing import frame, initialize_params, request
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon


@pytest.mark.e2e
async def test_a_closed_stdout_exits_quietly(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    out_r, out_w = os.pipe()
    env = daemon_env(model_server.openai_base_url, tmp_path)
    proc = await spawn_agentd(env, stdout=out_w, stderr=asyncio.subprocess.PIPE)
    os.close(out_w)
    try:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(frame(request(1, "initialize", initialize_params())))
        # The editor's end of stdout goes away while the daemon has things to say.
        os.close(out_r)
        out_r = -1
        proc.stdin.write(frame(request(2, "agent/newSession", {"workspaceRoot": str(workspace)})))
        await proc.stdin.drain()
        code = await asyncio.wait_for(proc.wait(), 20)
        stderr = (await proc.stderr.read()).decode()
        assert code == 0
        assert "Traceback" not in stderr
        assert "BrokenPipe" not in stderr
    finally:
        if out_r >= 0:
            os.close(out_r)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_task_ignoring_cancellation_cannot_hold_shutdown() -> None:
    sup = Supervisor("test")
    release = asyncio.Event()
    started = asyncio.Event()

    async def stubborn() -> None:
        started.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    task = sup.spawn(stubborn(), name="stubborn")
    await started.wait()
    await sup.aclose(timeout=0.05)
    # aclose returned although the task is still alive: it was abandoned, not awaited.
    assert not task.done()
    # A closed supervisor takes no new work.
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        sup.spawn(coro)
    release.set()
    await task


async def test_an_editor_that_stops_reading_is_given_up_on(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Unread output is bounded: past the limit the daemon treats the editor as gone
    instead of buffering without end."""
    env = daemon_env(
        model_server.openai_base_url, tmp_path, AGENTD_MAX_STDOUT_BUFFER=str(256 * 1024)
    )
    d = await RawDaemon.spawn(env, stderr=asyncio.subprocess.PIPE)
    proc = d.proc
    try:
        await d.initialize()
        d.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await d.response(1))["result"]["sessionId"]
        # About 4 MB of chunks, and the test stops reading stdout.
        model_server.enqueue({"chunks": ["x" * 4096] * 1000})
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "flood"})
        assert proc.stderr is not None and proc.stdout is not None
        while b"the editor stopped reading" not in await asyncio.wait_for(
            proc.stderr.readline(), 60
        ):
            pass
        # Only now read again: a daemon that had not given up would keep the
        # pipe open and stream on; this one has closed it.
        while await asyncio.wait_for(proc.stdout.read(65536), 60):
            pass
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        await d.close()


@pytest.mark.e2e
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_an_editor_that_stops_reading_can_still_cancel_and_stop_the_daemon(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """Well under the unread-output limit: the editor stops reading stdout (its
    pipe full) while a turn streams, yet its cancel ends the model stream and
    SIGTERM ends the process, exit 0, before it reads another byte."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        # About 12 MB of chunks, far more than a pipe holds; stdout is not read again.
        model_server.enqueue({"chunks": ["x" * 4096] * 3000, "chunkDelay": 0.001})
        if acp:
            text = [{"type": "text", "text": "flood"}]
            d.request(2, "session/prompt", {"sessionId": sid, "prompt": text})
        else:
            d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "flood"})
        main = await model_server.wait_for(lambda e: e["type"] == "first_chunk", timeout=30)
        if acp:
            d.notify("session/cancel", {"sessionId": sid})
        else:
            d.notify("$/cancelRequest", {"id": 2})
        ended = await model_server.wait_for(
            lambda e: e["type"] in ("disconnect", "complete") and e["id"] == main["id"], timeout=30
        )
        assert ended["type"] == "disconnect"  # cut by the cancel, not streamed to its end
        d.proc.send_signal(signal.SIGTERM)

        async def exited() -> None:
            # `proc.wait()` would also wait for the unread pipe to be read: the
            # exit itself shows in the return code, which nothing announces.
            while d.proc.returncode is None:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(exited(), 60)
        assert d.proc.returncode == 0
    finally:
        await d.close()
