"""`agentd serve` with no flag tells ACP from LSP by the client's first byte."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentd.testing.daemon import daemon_env, spawn_agentd
from agentd.testing.framing import frame, read_frame

# No test here reaches the model: an address nothing listens on.
NO_MODEL = "http://127.0.0.1:9/v1"


async def spawn(tmp_path: Path, *args: str) -> asyncio.subprocess.Process:
    return await spawn_agentd(daemon_env(NO_MODEL, tmp_path), *args)


async def test_acp_client_is_detected(tmp_path: Path) -> None:
    proc = await spawn(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    # Leading whitespace is skipped; `{` means newline-delimited JSON-RPC (ACP).
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    proc.stdin.write(b"\n" + json.dumps(init).encode() + b"\n")
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    reply = json.loads(line)
    assert reply["id"] == 1 and reply["result"]["protocolVersion"] == 1
    assert "agentCapabilities" in reply["result"]
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) is not None


async def test_lsp_client_is_detected(tmp_path: Path) -> None:
    proc = await spawn(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(
        frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
    )
    reply = await asyncio.wait_for(read_frame(proc.stdout), 30)
    assert reply["result"]["capabilities"]["experimental"]["agentd"]["protocolVersion"] == 1
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 1  # EOF without shutdown


async def test_eof_before_any_byte_exits_1(tmp_path: Path) -> None:
    proc = await spawn(tmp_path)
    assert proc.stdin is not None
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 1
