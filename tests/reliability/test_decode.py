"""Messages that are well-formed JSON but cannot be decoded (issue 14, item 5).

A 5,000-digit number (Python refuses to convert more than 4,300 digits) and
params nested 100,000 levels (the decoder's recursion limit) used to end the
LSP daemon with exit code 1 and the log line "stdin closed"; the ACP daemon
survived but gave no reply to the deep nesting. Both front ends, the real
daemon over stdio: each gets its error reply (to the request's id when that
is readable, else to null; a notification gets none), and the daemon keeps
serving, then exits cleanly.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

DIGITS = b"9" * 5000
DEPTH = 100_000


def deep(open_: bytes, close: bytes, inner: bytes = b"1") -> bytes:
    return open_ * DEPTH + inner + close * DEPTH


def bodies(probe: str) -> list[tuple[bytes, Any]]:
    """(body, the id its reply must carry, or `None` for no reply expected at all)."""
    head = b'{"jsonrpc":"2.0",'
    method = b'"method":"%s","params":{"cwd":"/","workspaceRoot":"/","x":' % probe.encode()
    return [
        # The id itself is the number too long to read: answered to null.
        (head + b'"id":' + DIGITS + b"," + method + b"1}}", "null"),
        # A readable id, the long number in the params.
        (head + b'"id":"big",' + method + DIGITS + b"}}", "big"),
        # A readable id after params nested 100,000 levels (lists, then objects).
        (head + method + deep(b"[", b"]") + b'},"id":41}', 41),
        (head + b'"id":42,' + method + deep(b'{"a":', b"}") + b"}}", 42),
        # Not an object at all: answered to null, as `[]` is.
        (deep(b"[", b"]", b""), "null"),
        # A notification: nothing to answer.
        (head + b'"method":"x/y","params":' + deep(b"[", b"]") + b"}", None),
    ]


async def exchange(d: RawDaemon, acp: bool, probe: str, workspace: Path) -> None:
    n = 0
    for body, reply_id in bodies(probe):
        n += 1
        d.write_raw(body + b"\n" if acp else b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        # A probe after each: it is answered, so the daemon still reads and serves.
        d.request(f"probe-{n}", probe, {"cwd": str(workspace), "workspaceRoot": str(workspace)})
        replies: list[dict[str, Any]] = []
        while True:
            msg = await d.read_message()
            if "method" in msg:
                continue
            replies.append(msg)
            if msg.get("id") == f"probe-{n}":
                break
        assert "result" in replies[-1], replies[-1]
        errors = replies[:-1]
        if reply_id is None:
            assert errors == [], errors
            continue
        assert len(errors) == 1, errors
        expected = None if reply_id == "null" else reply_id
        assert errors[0]["id"] == expected, errors[0]
        assert errors[0]["error"]["code"] == -32600, errors[0]
        assert len(errors[0]["error"]["message"]) < 200


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_undecodable_messages_are_answered_and_the_daemon_keeps_serving(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env, acp=acp, stderr=asyncio.subprocess.PIPE)
    try:
        if acp:
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            assert "result" in await d.response(0)
            await exchange(d, True, "_agentd/session/list", workspace)
            assert d.proc.stdin is not None
            d.proc.stdin.close()
            assert await d.wait_exit() == 0
        else:
            await d.initialize()
            await exchange(d, False, "agent/listSessions", workspace)
            d.request("bye", "shutdown")
            await d.response("bye")
            d.notify("exit")
            assert await d.wait_exit() == 0
        assert d.proc.stderr is not None
        log = (await d.proc.stderr.read()).decode()
        assert "Traceback" not in log
        assert "stdin closed" not in log or acp  # ACP logs it at its real EOF
    finally:
        await d.close()


async def test_a_content_length_too_long_to_read_is_skipped_and_the_daemon_keeps_serving(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The same 5,000 digits as the header's length: the frame reader gave
    them to `int`, whose refusal left the block in its buffer, raised again
    by every later read (the daemon read nothing more). Now the block is
    skipped as a length over the limit, and the next message is read."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env, stderr=asyncio.subprocess.PIPE)
    try:
        await d.initialize()
        for digits in (DIGITS, b"0" * 5000 + b"2"):
            d.write_raw(b"Content-Length: " + digits + b"\r\n\r\n{}")
            d.request("probe", "agent/listSessions", {"workspaceRoot": str(workspace)})
            reply = await d.response("probe")
            assert "result" in reply, reply
        d.request("bye", "shutdown")
        await d.response("bye")
        d.notify("exit")
        assert await d.wait_exit() == 0
        assert d.proc.stderr is not None
        assert "Traceback" not in (await d.proc.stderr.read()).decode()
    finally:
        await d.close()
