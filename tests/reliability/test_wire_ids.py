"""Request ids and `_meta` at the edges, on every session request of both
front ends: ids past 64 bits, negative, empty or non-ASCII strings come back
as sent (the same JSON value and type); a fractional id is refused `-32600`
with a null id (JSON-RPC: an id is a string or an integer here) and the
daemon goes on; `_meta` nested far deeper than any client nests it is
refused with the request's id, not a crash or silence."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.framing import frame
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

IDS = [2**70, -(2**70), -1, "", "ïd-✓"]


def session_requests(acp: bool, sid: str, workspace: Path) -> list[tuple[str, dict[str, Any]]]:
    root = str(workspace)
    if acp:
        at = {"cwd": root, "mcpServers": []}
        return [
            ("session/new", at),
            ("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
            ("session/fork", {"sessionId": sid, **at}),
            ("session/list", {}),
            ("session/load", {"sessionId": sid, **at}),
            ("session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "ask"}),
            ("session/set_mode", {"sessionId": sid, "modeId": "code"}),
            ("session/delete", {"sessionId": "not-a-session"}),
        ]
    return [
        ("agent/newSession", {"workspaceRoot": root}),
        ("agent/prompt", {"sessionId": sid, "prompt": "hi"}),
        ("agent/forkSession", {"sessionId": sid}),
        ("agent/listSessions", {"workspaceRoot": root}),
        ("agent/loadSession", {"sessionId": sid}),
        ("agent/setMode", {"sessionId": sid, "mode": "ask"}),
        ("agent/setMode", {"sessionId": sid, "mode": "code"}),
        ("agent/deleteSession", {"sessionId": "not-a-session"}),
    ]


async def next_reply(d: RawDaemon) -> dict[str, Any]:
    """The next message that is no notification and no request to the editor."""
    while True:
        msg = await d.read_message()
        if "method" not in msg:
            return msg
        d.notifications.append(msg)


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_edge_ids_come_back_as_sent_on_every_session_request(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(workspace)
        for method, params in session_requests(acp, sid, workspace):
            for msg_id in IDS:
                d.request(msg_id, method, params)
                reply = await next_reply(d)
                assert "result" in reply, (method, msg_id, reply)
                assert reply["id"] == msg_id and type(reply["id"]) is type(msg_id)
            d.request(1.5, method, params)
            reply = await next_reply(d)
            assert reply["id"] is None and reply["error"]["code"] == -32600, (method, reply)
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_meta_nested_deeper_than_read_is_refused_with_the_request_s_id(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    depth = 100_000
    try:
        sid = await d.open_session(workspace)
        meta = '{"a":' * depth + "1" + "}" * depth
        if acp:
            params = '{"sessionId":"%s","prompt":[{"type":"text","text":"hi"}],"_meta":%s}'
            body = '{"jsonrpc":"2.0","id":"deep","method":"session/prompt","params":%s}'
            d.write_raw((body % (params % (sid, meta))).encode() + b"\n")
        else:
            params = '{"sessionId":"%s","prompt":"hi","_meta":%s}'
            body = '{"jsonrpc":"2.0","id":"deep","method":"agent/prompt","params":%s}'
            d.write_raw(frame((body % (params % (sid, meta))).encode()))
        reply = await d.response("deep")
        assert reply["error"]["code"] == -32600
        assert "nested deeper than agentd reads" in reply["error"]["message"]
        assert model_server.requests() == []
        # The daemon reads on: the same prompt without the nesting runs.
        if acp:
            d.request(
                2, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
            )
        else:
            d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "hi"})
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_huge_id_the_daemon_only_logs_is_logged_short(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """Responses to requests agentd never sent, with a 10 MB id, a
    notification whose method is 10 MB, an LSP tool result naming a 10 MB
    session or tool call, an ACP MCP server entry whose name and type are
    10 MB: the log named each whole on one line. Each is quoted short now."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    huge = "x" * 10_000_000
    log = tmp_path / "agentd-stderr.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, acp=acp, stderr=stderr)
    try:
        sid = await d.open_session(workspace)
        d.send({"jsonrpc": "2.0", "id": huge, "result": {}})
        d.send({"jsonrpc": "2.0", "id": huge, "error": "not an error object"})
        d.notify(huge, {})
        if not acp:
            result = {"sessionId": huge, "toolCallId": huge, "content": "x"}
            d.notify("agent/toolResult", result)
            d.notify("agent/toolResult", {**result, "sessionId": sid})
        if acp:
            entry = {"type": huge, "name": huge, "command": "x", "args": [], "env": []}
            d.request(2, "session/new", {"cwd": str(workspace), "mcpServers": [entry]})
        else:
            d.request(2, "agent/listSessions", {"workspaceRoot": str(workspace)})
        assert "result" in await d.response(2)
        d.proc.send_signal(signal.SIGTERM)
        assert await d.wait_exit(30) == 0
    finally:
        await d.close()
    assert log.stat().st_size < 1_000_000, max(map(len, log.read_text().splitlines()))
