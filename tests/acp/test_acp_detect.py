"""`agentd serve` with no flag tells ACP from LSP by the client's first byte."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


async def spawn(tmp_path: Path, *args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(AGENTD_HOME=str(tmp_path / "home"), AGENTD_CONFIG_DIR=str(tmp_path / "cfg"))
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", "serve", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip


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
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
    ).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    header = await asyncio.wait_for(proc.stdout.readuntil(b"\r\n\r\n"), 30)
    length = int(header.split(b":")[1].split(b"\r\n")[0])
    reply = json.loads(await proc.stdout.readexactly(length))
    assert reply["result"]["capabilities"]["experimental"]["agentd"]["protocolVersion"] == 1
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 1  # EOF without shutdown


async def test_eof_before_any_byte_exits_1(tmp_path: Path) -> None:
    proc = await spawn(tmp_path)
    assert proc.stdin is not None
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 1
