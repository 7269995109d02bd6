"""The ACP server in-process: dispatch, errors, cancel races, and the raw wire over stdio.

The in-process tests feed lines to `AcpServer.handle_line` and read what it
writes; the App is the real one (pointed at an unreachable model: no test here
reaches the model), except where a core feature is added to show detection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentd.acp import handlers
from agentd.acp.params import NewSessionParams
from agentd.acp.server import AcpServer
from agentd.messages import Message, TextPart
from agentd.testing.daemon import daemon_env, spawn_agentd
from agentd.testing.model_server import ModelServer
from tests.acp.harness import check_golden, schema_errors

pytestmark = pytest.mark.asyncio


class Wire:
    """An in-process server and what it wrote, parsed."""

    def __init__(self, server: AcpServer, out: list[dict[str, Any]]) -> None:
        self.server = server
        self.out = out
        self._next = 100

    def send(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if msg_id is not None:
            message["id"] = msg_id
        self.server.handle_line(json.dumps(message).encode())
        return msg_id

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        self._next += 1
        msg_id = self.send(method, params, self._next)
        return await self.reply(msg_id)

    async def reply(self, msg_id: Any) -> dict[str, Any]:
        async with asyncio.timeout(10):  # a hang guard
            while True:
                for message in self.out:
                    if message.get("id") == msg_id and "method" not in message:
                        return message
                await asyncio.sleep(0)


@pytest_asyncio.fixture
async def wire(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Wire]:
    monkeypatch.setenv("AGENTD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENTD_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("AGENTD_BASE_URL", "http://127.0.0.1:9/v1")
    out: list[dict[str, Any]] = []
    server = AcpServer(lambda data: out.append(json.loads(data)))
    w = Wire(server, out)
    yield w
    app = server.warmup.get()
    await server.aclose()
    if app is not None:
        # App.aclose leaves session transcripts open (reported to the core's owners);
        # close them so that the in-process test leaks no file.
        for writer in app.core.writers.values():
            writer.close()


async def initialized(wire: Wire) -> dict[str, Any]:
    return await wire.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})


async def test_requests_before_initialize_and_bad_initialize(wire: Wire) -> None:
    early = await wire.call("session/new", {"cwd": "/"})
    assert early["error"]["code"] == -32600
    bad = await wire.call("initialize", {"protocolVersion": "1"})
    assert bad["error"]["code"] == -32602
    assert bad["error"]["data"] == {
        "fields": [
            {"field": "protocolVersion", "message": "must be an integer between 0 and 65535"}
        ]
    }
    # Another version than ours is answered with ours (1), not refused.
    ok = await wire.call("initialize", {"protocolVersion": 7})
    assert ok["result"]["protocolVersion"] == 1
    again = await wire.call("initialize", {"protocolVersion": 1})
    assert again["error"]["code"] == -32600


async def test_a_failing_handler_is_answered_and_the_server_keeps_serving(
    wire: Wire, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await initialized(wire)

    async def broken(server: Any, app: Any, request: Any, p: NewSessionParams) -> Any:
        raise RuntimeError("injected failure")

    monkeypatch.setitem(handlers.HANDLERS, "session/new", broken)
    failed = await wire.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert failed["error"]["code"] == -32603
    assert "injected failure" in failed["error"]["message"]
    assert schema_errors(failed["error"], "Error") == []
    assert (await wire.call("authenticate", {"methodId": "x"}))["result"] == {}


async def test_invalid_params_name_the_field(wire: Wire, tmp_path: Path) -> None:
    await initialized(wire)
    missing = await wire.call("session/new", {"mcpServers": []})
    assert missing["error"]["code"] == -32602
    assert missing["error"]["data"]["fields"] == [{"field": "cwd", "message": "Field required"}]
    check_golden("error_invalid_params", missing)
    sid = (await wire.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"][
        "sessionId"
    ]
    audio = await wire.call(
        "session/prompt",
        {"sessionId": sid, "prompt": [{"type": "audio", "data": "", "mimeType": "audio/wav"}]},
    )
    assert audio["error"]["code"] == -32602
    assert audio["error"]["data"]["fields"][0]["field"] == "prompt.0.type"
    image = await wire.call(
        "session/prompt",
        {"sessionId": sid, "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]},
    )
    assert image["error"]["data"]["fields"][0]["field"] == "prompt.0.data"
    bmp = await wire.call(
        "session/prompt",
        {"sessionId": sid, "prompt": [{"type": "image", "data": "Qk0=", "mimeType": "image/bmp"}]},
    )
    assert bmp["error"]["data"]["fields"][0]["field"] == "prompt.0.mimeType"
    wrong = await wire.call("session/prompt", {"sessionId": sid, "prompt": "not a list"})
    assert wrong["error"]["data"]["fields"][0]["field"] == "prompt"
    unknown = await wire.call("_agentd/nope", {})
    assert unknown["error"]["code"] == -32601
    check_golden("error_method_not_found", unknown)


async def test_a_cancel_that_races_the_prompt_start_still_cancels_it(
    wire: Wire, tmp_path: Path
) -> None:
    await initialized(wire)
    sid = (await wire.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"][
        "sessionId"
    ]
    # Both lines arrive in one read: the prompt's task has not started when the cancel is handled.
    wire.send("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}, 1)
    wire.send("session/cancel", {"sessionId": sid})
    reply = await wire.reply(1)
    # Cancelled before it started: it used nothing, and says so.
    unused = {"stopReason": "cancelled", "usage": {"inputTokens": 0, "outputTokens": 0}}
    assert reply["result"] == {"stopReason": "cancelled", "_meta": {"agentd": unused}}
    # A second prompt while one runs is refused at once (prompts are not queued).
    wire.send("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "a"}]}, 2)
    busy = await wire.call("session/prompt", {"sessionId": sid, "prompt": []})
    assert busy["error"]["code"] == -32003
    wire.send("session/cancel", {"sessionId": sid})
    assert (await wire.reply(2))["result"]["stopReason"] == "cancelled"
    # Cancels for unknown sessions, or without a session id, do nothing.
    wire.send("session/cancel", {"sessionId": "nope"})
    wire.send("session/cancel", {})
    wire.send("_agentd/whatever", {"x": 1})


async def test_shutdown_answers_requests_still_running_even_unstarted_ones(
    wire: Wire, tmp_path: Path
) -> None:
    await initialized(wire)
    sid = (await wire.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"][
        "sessionId"
    ]
    wire.send("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}, 7)
    await wire.server.aclose()  # as on stdin EOF: the prompt's task never ran
    reply = await wire.reply(7)
    assert reply["error"]["code"] == -32800
    assert wire.server.prompts == {}


async def test_session_load_replays_through_the_acp_mapping(wire: Wire, tmp_path: Path) -> None:
    init = await initialized(wire)
    assert init["result"]["agentCapabilities"]["loadSession"] is True
    sid = (await wire.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"][
        "sessionId"
    ]
    app = await wire.server.warmup.wait()
    session = app.core.get(sid)
    session.append(Message("user", [TextPart("remember 7")]))
    session.append(Message("assistant", [TextPart("Noted: 7.")]))
    before = len(wire.out)
    result = await wire.call(
        "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
    )
    assert result["result"]["modes"]["currentModeId"] == "code"
    assert schema_errors(result["result"], "LoadSessionResponse") == []
    replayed = [
        m["params"]
        for m in wire.out[before:]
        if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] != "available_commands_update"
    ]
    assert [(p["update"]["sessionUpdate"], p["update"]["content"]["text"]) for p in replayed] == [
        ("user_message_chunk", "remember 7"),
        ("agent_message_chunk", "Noted: 7."),
    ]
    check_golden(
        "session_update_user_message_chunk",
        {"jsonrpc": "2.0", "method": "session/update", "params": replayed[0]},
    )
    for params in replayed:
        assert schema_errors(params, "SessionNotification") == []
    listed = await wire.call("_agentd/session/list", {"workspaceRoot": str(tmp_path)})
    assert [s["sessionId"] for s in listed["result"]["sessions"]] == [sid]
    unknown = await wire.call(
        "session/load", {"sessionId": "nope", "cwd": str(tmp_path), "mcpServers": []}
    )
    assert unknown["error"]["code"] == -32002


# --- the raw wire over real stdio ---------------------------------------------------------


async def test_garbage_on_stdin_is_answered_and_the_daemon_keeps_reading(
    tmp_path: Path,
) -> None:
    async with ModelServer() as model:
        process = await spawn_agentd(daemon_env(model.openai_base_url, tmp_path), acp=True)
        assert process.stdin is not None and process.stdout is not None
        lines = [
            b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n',
            b"this is not json\n",
            b"[1, 2]\n",
            b'{"jsonrpc":"2.0","id":1,"method":"no/such/method"}\n',
            b'{"jsonrpc":"2.0","method":"_unknown/notification","params":{}}\n',
            b'{"jsonrpc":"2.0","id":"two","method":"session/new","params":{"cwd":"relative"}}\n',
        ]
        # One message split across writes, two in one write.
        process.stdin.write(lines[0][:20])
        await process.stdin.drain()
        process.stdin.write(lines[0][20:] + lines[1])
        process.stdin.write(b"".join(lines[2:]))
        await process.stdin.drain()
        replies = [json.loads(await process.stdout.readline()) for _ in range(5)]
        process.stdin.close()
        assert await process.wait() == 0
    assert replies[0]["id"] == 0 and "result" in replies[0]
    assert [(r["id"], r["error"]["code"]) for r in replies[1:]] == [
        (None, -32700),
        (None, -32600),
        (1, -32601),
        ("two", -32602),
    ]
    parse_error = dict(replies[1], error={**replies[1]["error"], "message": "<message>"})
    check_golden("error_parse", parse_error)
