"""The editor's answers to agentd's own requests, at the edges (`agentd.answers`).

ACP: an answer whose id is the decimal string of agentd's integer id (`"0"`
for `0`) is that request's answer; `"00"`, `" 0"`, `0.0`, `true`, a huge
string are no request's. Both front ends: an answer that names a request
but cannot be read (an `error` that is no error object, no `"jsonrpc":
"2.0"`, a body nested too deep to decode) ends that request at once, with a
failed tool call the model reads, instead of leaving it waiting until the
prompt is cancelled (ACP) or the permission times out (LSP, 300 s by
default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from tests.mcp.conftest import stdio_server

pytestmark = pytest.mark.e2e

# Nested far deeper than JSON's decoder reads: the body cannot be decoded,
# though its id can (a flat scan finds it).
DEEP = "[" * 100_000 + "]" * 100_000


def last_tool_content(model_server: ModelServer) -> str:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    content: str = next(m for m in reversed(messages) if m["role"] == "tool")["content"]
    return content


async def next_request(d: RawDaemon, method: str) -> dict[str, Any]:
    """Read until agentd's request `method` (notifications and replies passed over)."""
    while True:
        msg = await d.read_message()
        if msg.get("method") == method and "id" in msg:
            return msg


async def prompt_reply(d: RawDaemon, msg_id: str) -> dict[str, Any]:
    while True:
        msg = await d.read_message()
        if "method" not in msg and msg.get("id") == msg_id:
            return msg


def answer(msg_id: Any, **members: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, **members}


def write(d: RawDaemon, message: dict[str, Any] | bytes) -> None:
    if isinstance(message, bytes):
        d.write_raw(message + (b"\n" if d.framing == "acp" else b""))
        return
    d.send(message)


def raw(d: RawDaemon, text: str) -> bytes:
    data = text.encode()
    return data if d.framing == "acp" else frame_bytes(data)


def frame_bytes(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


async def acp_session(d: RawDaemon, workspace: Path) -> str:
    caps = {"fs": {"readTextFile": True, "writeTextFile": True}}
    d.request("init", "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
    await d.response("init")
    d.request("new", "session/new", {"cwd": str(workspace), "mcpServers": []})
    sid: str = (await d.response("new"))["result"]["sessionId"]
    return sid


async def test_acp_takes_an_id_sent_back_as_its_decimal_string_and_nothing_else(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path), acp=True)
    try:
        sid = await acp_session(d, workspace)
        model_server.enqueue(
            {"toolCalls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}]}
        )
        d.request(
            "p1", "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "read"}]}
        )
        asked = await next_request(d, "fs/read_text_file")
        n = asked["id"]
        assert isinstance(n, int)
        decoys: list[Any] = [
            f"0{n}",
            f" {n}",
            f"{n} ",
            f"+{n}",
            f"{n}.0",
            float(n),
            True,
            "9" * 100_000,
        ]
        if n == 0:
            decoys += ["-0", False]
        for i, decoy in enumerate(decoys):
            write(d, answer(decoy, result={"content": f"decoy {i}"}))
        write(d, answer(str(n), result={"content": "the editor's text"}))
        assert (await prompt_reply(d, "p1"))["result"]["stopReason"] == "end_turn"
        content = last_tool_content(model_server)
        assert "the editor's text" in content and "decoy" not in content
    finally:
        await d.close()


# Answers that name the request but cannot be read, each given as the id the
# request went out with and (ACP) as its decimal string: case -> members.
UNREADABLE: dict[str, dict[str, Any]] = {
    "error-string": {"jsonrpc": "2.0", "error": "denied"},
    "error-without-code": {"jsonrpc": "2.0", "error": {"message": "denied"}},
    "error-code-boolean": {"jsonrpc": "2.0", "error": {"code": True, "message": "denied"}},
    "error-without-message": {"jsonrpc": "2.0", "error": {"code": 1}},
    "no-jsonrpc": {"result": {"content": "x"}},
    "too-deep": {"jsonrpc": "2.0", "result": DEEP},
}


def body(members: dict[str, Any], msg_id: Any) -> str:
    """The answer's JSON text (`DEEP` spliced in raw: no encoder writes it)."""
    text = json.dumps({"id": msg_id, **members})
    return text.replace(json.dumps(DEEP), DEEP)


@pytest.mark.parametrize("stringified", [False, True], ids=["int-id", "string-id"])
async def test_acp_an_unreadable_answer_ends_the_request_at_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path, stringified: bool
) -> None:
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path), acp=True)
    try:
        sid = await acp_session(d, workspace)
        for case, members in UNREADABLE.items():
            model_server.enqueue(
                {"toolCalls": [{"id": case, "name": "read_file", "arguments": {"path": "a.txt"}}]}
            )
            text = [{"type": "text", "text": case}]
            d.request(case, "session/prompt", {"sessionId": sid, "prompt": text})
            n = (await next_request(d, "fs/read_text_file"))["id"]
            write(d, raw(d, body(members, str(n) if stringified else n)))
            reply = await prompt_reply(d, case)
            assert reply["result"]["stopReason"] == "end_turn", (case, reply)
            assert "could not be read" in last_tool_content(model_server), case
    finally:
        await d.close()


async def test_lsp_an_unreadable_answer_to_a_permission_request_ends_it_at_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """pygls read each of these answers as nothing (its types refused them,
    or dispatch answered the answer) and the permission waited for its
    timeout; agentd's ids are never decimal strings, so an integer or a
    stringified number names none of them."""
    d = await RawDaemon.spawn(daemon_env(model_server.openai_base_url, tmp_path))
    try:
        await d.initialize(
            {
                "mcpServers": {"calc": stdio_server()},
                "mcp": {"startupWait": 60, "permissionTimeout": 120},
                "requestPermission": True,
            }
        )
        d.request("new", "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await d.response("new"))["result"]["sessionId"]
        allow = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
        readable = {"jsonrpc": "2.0", "result": allow}
        for case, members in {**UNREADABLE, "readable": readable}.items():
            call = {"id": case, "name": "mcp__calc__echo", "arguments": {"text": case}}
            model_server.enqueue({"toolCalls": [call]})
            d.request(case, "agent/prompt", {"sessionId": sid, "prompt": case})
            perm_id = (await next_request(d, "agent/requestPermission"))["id"]
            for decoy in (0, 1, "0"):
                write(d, answer(decoy, result=allow))
            write(d, raw(d, body(members, perm_id)))
            reply = await prompt_reply(d, case)
            assert reply["result"]["stopReason"] == "end_turn", (case, reply)
            content = last_tool_content(model_server)
            if case == "readable":
                assert content == "echo: readable"
            else:
                assert "could not be read" in content and "was not run" in content, (case, content)
    finally:
        await d.close()
