"""Error replies are short and name their cause (issue 14, item 12).

An ACP -32603 message echoed a 1.6 MB request body (`{exc!r}` of an
exception that carried it); -32602 and "no session" messages quote the bad
value. Over both front ends, the real daemon: a handler failure whose
exception carries 1.6 MB (the test-only `_fail` method of
`AGENTD_TEST_FAULTS=1`), a 1.6 MB workspace path and a 1.6 MB session id are
each answered with a message of at most 1 KB that names the cause (the
exception's type, the field), and the daemon keeps serving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

BIG = "x" * 1_600_000
LIMIT = 1024


def small(reply: dict[str, Any], code: int, *names: str) -> None:
    error = reply["error"]
    assert error["code"] == code, error["code"]
    message = error["message"]
    assert len(message.encode()) <= LIMIT, len(message)
    for name in names:
        assert name in message, message
    # The whole reply, data included, stays small.
    assert len(json.dumps(reply)) <= 2 * LIMIT + 4096


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_error_replies_are_short_and_name_the_cause(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_TEST_FAULTS="1")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await d.response(1)
        else:
            await d.initialize()
        d.request(2, "_agentd/_fail" if acp else "agentd/_fail", {})
        small(await d.response(2), -32603, "RuntimeError", "injected handler failure")

        root = "/" + BIG
        if acp:
            d.request(3, "session/new", {"cwd": root, "mcpServers": []})
            small(await d.response(3), -32602, "cwd")
        else:
            d.request(3, "agent/newSession", {"workspaceRoot": root})
            small(await d.response(3), -32602, "workspaceRoot")

        if acp:
            blocks = [{"type": "text", "text": "hi"}]
            d.request(4, "session/prompt", {"sessionId": BIG, "prompt": blocks})
            small(await d.response(4), -32002)
        else:
            d.request(4, "agent/prompt", {"sessionId": BIG, "prompt": "hi"})
            small(await d.response(4), -32001)

        # A params object whose keys are megabytes long: the field names are cut too.
        d.request(5, "session/new" if acp else "agent/newSession", {BIG: 1})
        small(await d.response(5), -32602)

        # And the daemon still serves.
        if acp:
            d.request(6, "session/new", {"cwd": str(workspace), "mcpServers": []})
        else:
            d.request(6, "agent/newSession", {"workspaceRoot": str(workspace)})
        assert "sessionId" in (await d.response(6))["result"]
    finally:
        await d.close()
