"""FIFOs where the daemon expects files of its own (issue 14, item 4).

`open()` of a FIFO waits for a writer forever. A FIFO named `MEMORY.md` in
the team memory folder (`.agentd/memory/`, anyone who can commit to the
repository puts files there) or in the personal memory folder, or named
`AGENTS.md` in the workspace, used to hang the daemon: the event loop (or a
worker thread that shutdown then waits for) blocked in `open()`. The real
daemon over stdio, with FIFOs for every file it reads on its own: it keeps
answering (prompts, memory requests, extraction), lists what it skipped, and
exits cleanly.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentd.testing.daemon import daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

NOTE = "---\nname: deploy\ndescription: how we deploy\ntype: project\n---\n\nShip with make.\n"


def fifos(workspace: Path, home: Path) -> list[Path]:
    team = workspace / ".agentd" / "memory"
    team.mkdir(parents=True)
    (team / "deploy.md").write_text(NOTE)
    personal = memory_folder(workspace, home)
    (personal / "style.md").write_text(NOTE.replace("deploy", "style"))
    # AGENTD.md is a file, and imports a FIFO.
    (workspace / "AGENTD.md").write_text("Be brief.\n@pipe.md\n")
    paths = [
        team / "MEMORY.md",
        personal / "MEMORY.md",
        workspace / "AGENTS.md",
        workspace / "pipe.md",
        # Files extraction reads: a topic, its cursor and its lock.
        personal / "stuck.md",
        personal / ".cursors.json",
        personal / ".extract.lock",
    ]
    for path in paths:
        os.mkfifo(path)
    return paths


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_fifos_where_files_are_expected_never_hang_the_daemon(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    pipes = fifos(workspace, tmp_path)
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env, acp=acp, stderr=asyncio.subprocess.PIPE)
    root = str(workspace)
    try:
        if acp:
            d.request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(1)
            d.request(2, "session/new", {"cwd": root, "mcpServers": []})
        else:
            await d.initialize()
            d.request(2, "agent/newSession", {"workspaceRoot": root})
        sid = (await d.response(2))["result"]["sessionId"]
        for n in range(2):
            # Two prompts: the second runs while the first's extraction is under way.
            if acp:
                blocks = [{"type": "text", "text": "how do we deploy?"}]
                d.request(10 + n, "session/prompt", {"sessionId": sid, "prompt": blocks})
            else:
                d.request(10 + n, "agent/prompt", {"sessionId": sid, "prompt": "how do we deploy?"})
            reply = await d.response(10 + n)
            assert reply["result"]["stopReason"] == "end_turn", reply
        main = model_server.requests("main")[0]
        system = main["body"]["messages"][0]["content"]
        assert "Be brief." in system  # the instruction file that is a file still counts
        status_method = "_agentd/memory/status" if acp else "memory/status"
        d.request(20, status_method, {"cwd": root, "workspaceRoot": root})
        status = (await d.response(20))["result"]
        skipped = {Path(p["path"]).name for p in status["problems"]}
        assert {"stuck.md"} <= skipped, status["problems"]
        assert status["docCount"] == 2  # deploy.md (team) and style.md
        list_method = "_agentd/memory/list" if acp else "memory/list"
        d.request(21, list_method, {"cwd": root, "workspaceRoot": root})
        docs = (await d.response(21))["result"]["docs"]
        assert sorted(Path(doc["path"]).name for doc in docs) == ["deploy.md", "style.md"]
        if acp:
            assert d.proc.stdin is not None
            d.proc.stdin.close()
        else:
            d.request(30, "shutdown")
            await d.response(30)
            d.notify("exit")
        assert await d.wait_exit(30) == 0
        assert d.proc.stderr is not None
        log = (await d.proc.stderr.read()).decode()
        assert "Traceback" not in log
    finally:
        await d.close()
    # Nothing was written through or over them either. (A FIFO where the
    # extraction lock goes is a lock without an owner: broken as stale.)
    for path in pipes:
        assert path.is_fifo() or path.name == ".extract.lock", path
