"""A lone surrogate (a JSON `\\ud83d` escape) in an MCP server's command,
arguments, environment, URL or headers, from the editor.

None of these can be encoded for `exec` or an HTTP request: ACP's
`session/new` used to take such a server and leave it failing at every
start, restarted by its backoff for ever. Over ACP the request is refused
`-32602` naming the entry and the field; over LSP (`initializationOptions`)
the server is left out and the configuration problem says why, and the
session goes on without it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.framing import frame
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

# Where the message's JSON text gets the escape `\ud83d`, which the daemon's
# decoder turns into a lone surrogate (Python's encoder would never write one).
HALF = "@HALF@"
STDIO = {"name": "s", "command": sys.executable, "args": [], "env": []}
HTTP = {"type": "http", "name": "s", "url": "http://127.0.0.1:9/", "headers": []}
SERVERS: dict[str, dict[str, Any]] = {
    "command": {**STDIO, "command": f"/bin/{HALF}"},
    "args": {**STDIO, "args": [HALF]},
    "env": {**STDIO, "env": [{"name": "A", "value": HALF}]},
    "url": {**HTTP, "url": f"http://127.0.0.1:9/{HALF}"},
    "headers": {**HTTP, "headers": [{"name": f"X{HALF}", "value": "v"}]},
}


def _raw(d: RawDaemon, msg_id: int, method: str, params: dict[str, Any]) -> None:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
    data = json.dumps(message).replace(HALF, "\\ud83d").encode()
    d.write_raw(data + b"\n" if d.framing == "acp" else frame(data))


async def test_acp_refuses_the_server_naming_the_field(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=True)
    try:
        d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        await d.response(0)
        for n, (field, server) in enumerate(SERVERS.items(), start=1):
            _raw(d, n, "session/new", {"cwd": str(workspace), "mcpServers": [server]})
            error = (await d.response(n))["error"]
            assert error["code"] == -32602, error
            (named,) = error["data"]["fields"]
            assert named["field"] == "mcpServers.0", error
            assert f"{field}: not valid Unicode (a lone surrogate)" in named["message"], error
        # The daemon goes on.
        d.request(9, "session/new", {"cwd": str(workspace), "mcpServers": []})
        assert "sessionId" in (await d.response(9))["result"]
    finally:
        await d.close()


@pytest.mark.parametrize("field", list(SERVERS))
async def test_lsp_leaves_the_server_out_and_says_why(
    model_server: ModelServer, tmp_path: Path, workspace: Path, field: str
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    log = tmp_path / "agentd-stderr.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, stderr=stderr)
    try:
        options = {"mcpServers": [SERVERS[field]]}
        init = {"processId": None, "capabilities": {}, "initializationOptions": options}
        _raw(d, 1, "initialize", init)
        assert "result" in await d.response(1)
        d.notify("initialized", {})
        d.request(2, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await d.response(2))["result"]["sessionId"]
        d.request(3, "agent/prompt", {"sessionId": sid, "prompt": "hello"})
        assert (await d.response(3))["result"]["stopReason"] == "end_turn"
        d.request(4, "mcp/status", {})
        status: dict[str, Any] = (await d.response(4))["result"]
        assert status["servers"] == [], status
        d.request(5, "shutdown")
        await d.response(5)
        d.notify("exit")
        assert await d.wait_exit(30) == 0
    finally:
        await d.close()
    said = [line for line in log.read_text().splitlines() if "MCP server 's' ignored" in line]
    assert any(f"{field}: not valid Unicode (a lone surrogate)" in line for line in said), said
