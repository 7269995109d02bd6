"""SIGTERM (or SIGINT) with stdin left open: the same graceful shutdown as the end of stdin.

Editors end agent processes with SIGTERM and may never close stdin
(CodeCompanion.nvim does on exit). In each transport (LSP over stdio, ACP
over stdio, LSP over `--tcp`) the signal arrives while a prompt streams and
an extraction request is out: the prompt is cancelled and answered, its
model stream closed and its partial answer kept in the transcript; the
extraction is drained (it finishes within `memory.shutdownGrace` and its
cursor is written); the process exits 0.
"""

from __future__ import annotations

import asyncio
import functools
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentd.layout import memory_dir
from agentd.testing.daemon import agentd_home, daemon_env, spawn_agentd
from agentd.testing.framing import frame, initialize_params, line, notification, read_frame
from agentd.testing.framing import read_line as read_acp_line
from agentd.testing.framing import request as rpc_request
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir

pytestmark = pytest.mark.e2e

LONG = "please stream a long answer"
FACT = "remember that releases ship on tuesdays"


@dataclass
class Peer:
    """The editor's end of one connection, over stdio or TCP, LSP or ACP framing."""

    proc: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: Any  # the daemon's stdin or a socket's StreamWriter
    acp: bool
    first_headers: bytes = b""

    def send(self, message: dict[str, Any]) -> None:
        if self.acp:
            self.writer.write(line(message))
            return
        self.writer.write(frame(message, self.first_headers))
        self.first_headers = b""

    async def response(self, msg_id: Any) -> dict[str, Any]:
        read = read_acp_line if self.acp else read_frame
        async with asyncio.timeout(60):  # a hang guard, not a synchronisation
            while True:
                msg = await read(self.reader)
                if msg.get("id") == msg_id and ("result" in msg or "error" in msg):
                    return msg


@pytest.fixture(params=["lsp", "acp", "tcp"])
async def peer(
    request: pytest.FixtureRequest, model_server: ModelServer, tmp_path: Path
) -> AsyncIterator[Peer]:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    mode = request.param
    if mode == "tcp":
        token_file = tmp_path / "token"
        proc = await spawn_agentd(
            env,
            "--tcp",
            "--port",
            "0",
            "--token-file",
            str(token_file),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stderr is not None
        announced = (await proc.stderr.readline()).decode()
        assert announced.startswith("agentd listening on 127.0.0.1:"), announced
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", int(announced.rsplit(":", 1)[1])
        )
        token = token_file.read_text().strip().encode()
        p = Peer(
            proc, reader, writer, acp=False, first_headers=b"Authorization: Bearer %s\r\n" % token
        )
    else:
        proc = await spawn_agentd(env, acp=mode == "acp")
        assert proc.stdin is not None and proc.stdout is not None
        p = Peer(proc, proc.stdout, proc.stdin, acp=mode == "acp")
    try:
        yield p
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if mode == "tcp":
            p.writer.close()


def start(peer: Peer, workspace: Path) -> None:
    options = {"memory": {"modelTier": False, "shutdownGrace": 60}}
    if peer.acp:
        params = {"protocolVersion": 1, "_meta": {"agentd": options}}
        peer.send(rpc_request("init", "initialize", params))
    else:
        peer.send(rpc_request("init", "initialize", initialize_params(options)))


async def new_session(peer: Peer, msg_id: str, workspace: Path) -> str:
    if peer.acp:
        peer.send(rpc_request(msg_id, "session/new", {"cwd": str(workspace), "mcpServers": []}))
    else:
        peer.send(rpc_request(msg_id, "agent/newSession", {"workspaceRoot": str(workspace)}))
    return str((await peer.response(msg_id))["result"]["sessionId"])


def prompt(peer: Peer, msg_id: str, sid: str, text: str) -> None:
    if peer.acp:
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        peer.send(rpc_request(msg_id, "session/prompt", params))
    else:
        peer.send(rpc_request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text}))


def is_request(text: str, purpose: str, event: dict[str, Any]) -> bool:
    return bool(
        event["type"] == "request"
        and event["purpose"] == purpose
        and text in json.dumps(event["body"], ensure_ascii=False)
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
async def test_sigterm_with_stdin_open_shuts_down_gracefully(
    peer: Peer, model_server: ModelServer, tmp_path: Path, workspace: Path, signum: int
) -> None:
    start(peer, workspace)
    await peer.response("init")
    if not peer.acp:
        peer.send(notification("initialized", {}))
    streaming = await new_session(peer, "s1", workspace)
    fact = await new_session(peer, "s2", workspace)

    # A prompt that streams for a minute, running when the signal arrives.
    model_server.add_rule(LONG, {"chunks": ["part "] * 1200, "chunkDelay": 0.05}, times=1)
    prompt(peer, "long", streaming, LONG)
    main = await model_server.wait_for(functools.partial(is_request, LONG, "main"), timeout=30)
    await model_server.wait_for(lambda e: e["type"] == "first_chunk" and e["id"] == main["id"])

    # A finished prompt whose extraction request is out (answered 2 s later).
    model_server.set_latency("extract", 2.0)
    prompt(peer, "fact", fact, FACT)
    assert "result" in await peer.response("fact")
    extract = await model_server.wait_for(
        functools.partial(is_request, FACT, "extract"), timeout=30
    )

    peer.proc.send_signal(signum)  # stdin (or the socket) stays open

    # The running prompt is cancelled and answered; its model stream is closed.
    cancelled = await peer.response("long")
    assert cancelled["error"]["code"] == -32800
    await model_server.wait_for(
        lambda e: e["type"] == "disconnect" and e["id"] == main["id"], timeout=30
    )
    assert await asyncio.wait_for(peer.proc.wait(), 60) == 0
    # The extraction was drained, not cut: answered, then its cursor written.
    assert [e["type"] for e in model_server.log if e.get("id") == extract["id"]][-1] == "complete"
    home = agentd_home(tmp_path)
    cursors = json.loads((memory_dir(workspace, home) / ".cursors.json").read_text())
    assert [(c["sessionId"], c["processedOffset"]) for c in cursors["sessions"]] == [(fact, 2)]
    # The transcript of the cancelled prompt was closed whole: the user's words
    # and the partial answer, marked interrupted.
    raw = (sessions_dir(workspace, home) / f"{streaming}.jsonl").read_text()
    assert raw.endswith("\n")
    messages = [r["message"] for r in map(json.loads, raw.splitlines()) if r["type"] == "message"]
    assert LONG in json.dumps(messages[0])
    assert messages[-1]["role"] == "assistant" and messages[-1].get("interrupted") is True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_stop_signal_before_the_first_byte_exits_cleanly(
    signum: signal.Signals, tmp_path: Path
) -> None:
    """The signal arrives while `agentd serve` waits for the client's first byte
    (telling LSP from ACP), before any event loop: exit 0, stdout untouched."""
    env = daemon_env("http://127.0.0.1:9/v1", tmp_path, AGENTD_LOG_LEVEL="debug")
    proc = await spawn_agentd(env, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None and proc.stdout is not None
    async with asyncio.timeout(60):  # a hang guard, not a synchronisation
        while b"waiting for the client's first byte" not in (err := await proc.stderr.readline()):
            assert err, "stderr closed before the daemon waited for the first byte"
        proc.send_signal(signum)
        stdout = await proc.stdout.read()
        assert await proc.wait() == 0
    assert stdout == b""


async def test_sigterm_while_a_tool_request_is_out_to_the_editor_closes_the_turn(
    peer: Peer, model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The model's call is the editor's to run (an LSP client tool; ACP's
    `fs/read_text_file`) and the editor never answers: SIGTERM (stdin left
    open) answers the prompt cancelled, closes the call with a result in the
    transcript and exits 0."""
    if peer.acp:
        caps = {"fs": {"readTextFile": True, "writeTextFile": True}}
        peer.send(
            rpc_request("init", "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
        )
        call = {"id": "c1", "name": "read_file", "arguments": {"path": "README.md"}}
    else:
        peer.send(
            rpc_request("init", "initialize", initialize_params({"clientTools": ["run_command"]}))
        )
        call = {"id": "c1", "name": "run_command", "arguments": {"command": "make test"}}
    await peer.response("init")
    if not peer.acp:
        peer.send(notification("initialized", {}))
    sid = await new_session(peer, "s1", workspace)
    model_server.enqueue({"toolCalls": [call]})
    prompt(peer, "p1", sid, "run it")
    read = read_acp_line if peer.acp else read_frame
    async with asyncio.timeout(60):  # a hang guard, not a synchronisation
        while True:
            msg = await read(peer.reader)
            if msg.get("method") == "fs/read_text_file":
                break  # a request to the editor, left unanswered
            update = msg.get("params", {}).get("update", {}) if not peer.acp else {}
            if msg.get("method") == "agent/update" and update.get("kind") == "tool_call":
                break  # the client tool's call, its result never sent

    peer.proc.send_signal(signal.SIGTERM)

    assert (await peer.response("p1"))["error"]["code"] == -32800
    assert await asyncio.wait_for(peer.proc.wait(), 60) == 0
    raw = (sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl").read_text()
    assert raw.endswith("\n")
    records = [json.loads(x) for x in raw.splitlines()]
    parts = [p for r in records if r["type"] == "message" for p in r["message"]["parts"]]
    calls = [p["id"] for p in parts if p["type"] == "tool_call"]
    results = [p for p in parts if p["type"] == "tool_result"]
    assert calls == ["c1"] and [r["toolCallId"] for r in results] == ["c1"]
    assert results[0]["isError"] is True
    assert records[-1]["note"] == {"kind": "prompt_end", "stopReason": "cancelled"}
