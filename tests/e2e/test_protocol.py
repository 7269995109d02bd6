"""The wire itself: lifecycle, errors, broken frames, exit codes, editor death."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e


@pytest_asyncio.fixture
async def raw(model_server: ModelServer, tmp_path: Path) -> AsyncIterator[RawDaemon]:
    d = await RawDaemon.spawn(
        daemon_env(model_server.openai_base_url, tmp_path, AGENTD_TEST_FAULTS="1")
    )
    yield d
    await d.close()


async def test_requests_before_initialize_get_32002(raw: RawDaemon) -> None:
    raw.request(1, "agent/newSession", {"workspaceRoot": "/"})
    reply = await raw.response(1)
    assert reply["error"]["code"] == -32002
    await raw.initialize()


async def test_errors_name_the_field_and_the_daemon_keeps_serving(
    raw: RawDaemon, workspace: Path
) -> None:
    await raw.initialize()
    raw.request(1, "agent/newSession", {})
    err = (await raw.response(1))["error"]
    assert err["code"] == -32602
    assert "workspaceRoot" in err["message"]
    assert err["data"]["fields"][0]["field"] == "workspaceRoot"
    raw.request(2, "agent/prompt", {"sessionId": 5, "prompt": "x"})
    err = (await raw.response(2))["error"]
    assert err["code"] == -32602 and "sessionId" in err["message"]
    raw.request(3, "agent/nope", {})
    assert (await raw.response(3))["error"]["code"] == -32601
    raw.request(4, "agentd/_fail", {})
    assert (await raw.response(4))["error"]["code"] == -32603
    raw.request(5, "agent/prompt", {"sessionId": "missing", "prompt": "x"})
    assert (await raw.response(5))["error"]["code"] == -32001
    # Params omitted entirely, keys that are not identifiers: still a reply.
    raw.send({"jsonrpc": "2.0", "id": 6, "method": "agent/newSession"})
    assert (await raw.response(6))["error"]["code"] == -32602
    raw.request(
        7,
        "agent/newSession",
        {"workspaceRoot": str(workspace), "class": 1, "_x": {"jsonrpc": "2.0"}},
    )
    assert "sessionId" in (await raw.response(7))["result"]


async def test_ids_keep_their_type(raw: RawDaemon, workspace: Path) -> None:
    await raw.initialize()
    raw.request("7", "agent/newSession", {"workspaceRoot": str(workspace)})
    assert (await raw.response("7"))["id"] == "7"
    raw.request(0, "agent/newSession", {"workspaceRoot": str(workspace)})
    reply = await raw.response(0)
    assert reply["id"] == 0 and "result" in reply


@pytest.mark.parametrize(
    ("garbage", "code", "reply_id"),
    [
        (b"Content-Length: 9\r\n\r\n{bad json", -32700, None),
        (b"Content-Length: 2\r\n\r\n[]", -32600, None),
        (b'Content-Length: 5\r\n\r\n"str"', -32600, None),
        # The id is readable, so the error carries it: the client's request completes.
        (b'Content-Length: 38\r\n\r\n{"jsonrpc":"2.0","id":9,"method":1}   ', -32600, 9),
        (b'Content-Length: 39\r\n\r\n{"jsonrpc":"2.0","id":[1],"method":"x"}', -32600, None),
        (b"Content-Length: 4\r\n\r\n\xff\xfe\xfd\xfc", -32700, None),
    ],
)
async def test_malformed_messages_get_an_error(
    raw: RawDaemon, workspace: Path, garbage: bytes, code: int, reply_id: int | None
) -> None:
    await raw.initialize()
    raw.write_raw(garbage)
    reply = await raw.response(reply_id)
    assert reply["error"]["code"] == code
    raw.request(2, "agent/newSession", {"workspaceRoot": str(workspace)})
    assert "result" in await raw.response(2)


@pytest.mark.parametrize(
    "frame",
    [
        b"Content-Length: abc\r\n\r\n{}",
        b"Content-Length: -5\r\n\r\n{}",
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"X-Nothing: 1\r\n\r\n{}",
        b"Content-Length: 9999999999999999\r\n\r\n",
        # Declared too long: the next message's header shows up inside the "body".
        b'Content-Length: 500\r\n\r\n{"jsonrpc":"2.0","method":"initialized","params":{}}',
        b"complete garbage without any header at all\r\n\r\n",
    ],
)
async def test_broken_frames_never_leave_the_daemon_deaf(
    raw: RawDaemon, workspace: Path, frame: bytes
) -> None:
    await raw.initialize()
    raw.write_raw(frame)
    raw.request(2, "agent/newSession", {"workspaceRoot": str(workspace)})
    assert "result" in await raw.response(2)


async def test_shutdown_then_exit_exits_0(raw: RawDaemon) -> None:
    await raw.initialize()
    raw.request(1, "shutdown")
    assert (await raw.response(1))["result"] is None
    raw.request(2, "agent/newSession", {"workspaceRoot": "/"})
    assert (await raw.response(2))["error"]["code"] == -32600
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert await raw.wait_exit() == 0


async def test_exit_without_shutdown_exits_1(raw: RawDaemon) -> None:
    await raw.initialize()
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert await raw.wait_exit() == 1


async def test_stdin_eof_cancels_and_exits_1(
    raw: RawDaemon, model_server: ModelServer, workspace: Path
) -> None:
    await raw.initialize()
    raw.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
    sid = (await raw.response(1))["result"]["sessionId"]
    model_server.enqueue({"chunks": ["x "] * 500, "chunkDelay": 0.05})
    raw.request(2, "agent/prompt", {"sessionId": sid, "prompt": "long"})
    await model_server.wait_for(lambda e: e["type"] == "first_chunk")
    assert raw.proc.stdin is not None
    raw.proc.stdin.close()
    assert await raw.wait_exit() == 1
    await model_server.wait_for(lambda e: e["type"] == "disconnect")


async def test_daemon_exits_when_the_editor_dies(model_server: ModelServer, tmp_path: Path) -> None:
    editor = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
    )
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path))
    try:
        await d.initialize(pid=editor.pid)
        editor.kill()
        await editor.wait()
        assert await d.wait_exit() == 1
    finally:
        await d.close()


async def test_logs_reach_the_editor_at_its_level_never_as_popups(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    from tests.lsp_client import start_client

    model_server.enqueue({"status": 400, "errorBody": {"error": {"message": "bad request"}}})
    c = await start_client(
        daemon_env(model_server.openai_base_url, tmp_path), {"logLevel": "warning"}
    )
    try:
        sid = await c.new_session(workspace)
        logged = asyncio.ensure_future(c.lsp.wait_for_notification("window/logMessage"))
        assert (await c.prompt(sid, "x"))["stopReason"] == "error"
        await asyncio.wait_for(logged, 20)
        assert any("failed" in m.message for m in c.lsp.log_messages)
        assert all(m.type.value <= 2 for m in c.lsp.log_messages)  # warning and above only
        assert c.lsp.messages == []  # no window/showMessage
    finally:
        await c.lsp.shutdown_session()
