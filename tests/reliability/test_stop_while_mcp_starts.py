"""SIGTERM while an MCP server is still starting (it never answers
`initialize`), stdin left open, over both front ends.

The connection waited out its startup timeout before it looked at the
stop; shutdown's grace ran out first, the task was cancelled with the SDK's
shielded cleanup (close stdin, wait, terminate) half-way, and the server
process outlived the daemon. Now the start is given up on at the stop: the
daemon exits 0 and the server is gone when it has.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

# A server that says its pid through a FIFO, then never answers.
SILENT_SERVER = (
    "import os, sys, time\n"
    "with open(sys.argv[1], 'w') as f: f.write(str(os.getpid()))\n"
    "time.sleep(3600)\n"
)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaps counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_sigterm_while_an_mcp_server_starts_exits_and_takes_the_server_with_it(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    said_pid = tmp_path / "pid.fifo"
    os.mkfifo(said_pid)
    command, args = sys.executable, ["-c", SILENT_SERVER, str(said_pid)]
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    pid = 0
    try:
        server_pid = asyncio.create_task(asyncio.to_thread(said_pid.read_text))
        if acp:
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(0)
            server = {"name": "silent", "command": command, "args": args, "env": []}
            d.request(1, "session/new", {"cwd": str(workspace), "mcpServers": [server]})
        else:
            await d.initialize({"mcpServers": {"silent": {"command": command, "args": args}}})
            d.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        assert "result" in await d.response(1)
        pid = int(await asyncio.wait_for(server_pid, 60))
        assert _alive(pid)
        d.proc.send_signal(signal.SIGTERM)
        assert await d.wait_exit(30) == 0
        assert not _alive(pid), "the MCP server outlived the daemon"
    finally:
        await d.close()
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
