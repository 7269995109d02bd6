"""The fuzz harness over the daemon's input stream, shared by
tests/reliability/test_fuzz.py (bounded, CI) and bench/fuzz.py (longer).

A real daemon is spawned once (`python -m agentd serve`, memory off) and many
inputs are pushed through it. After each input the harness writes a blank
line and three probe requests; the input passes when one of them is answered,
the process is alive and its RSS (from /proc) stays under a bound.

Inputs never contain `exit` or `shutdown` requests: they end the daemon by
design (tests/e2e/test_protocol.py covers them).
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from agentd.testing.daemon import daemon_command, daemon_env, rss_mib
from agentd.testing.framing import (
    frame,
    initialize_params,
    notification,
    read_frame_blocking,
    request,
)

METHODS = [
    "initialize",
    "initialized",
    "agent/newSession",
    "agent/prompt",
    "agent/resetSession",
    "agent/closeSession",
    "agent/listSessions",
    "agent/loadSession",
    "agent/cancel",
    "agent/toolResult",
    "memory/list",
    "memory/recall",
    "memory/status",
    "$/cancelRequest",
    "$/setTrace",
    "textDocument/didOpen",
    "workspace/didChangeConfiguration",
]
FORBIDDEN = {"exit", "shutdown"}


class FuzzDaemon:
    def __init__(self, env: dict[str, str], workspace: Path) -> None:
        self.workspace = workspace
        self.proc = subprocess.Popen(
            daemon_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._ids = itertools.count()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.examples = 0

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while (message := read_frame_blocking(out)) is not None:
                self.messages.put(message)
        finally:
            self.messages.put(None)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def request(self, method: str, params: Any, timeout: float = 30.0) -> dict[str, Any]:
        msg_id = f"harness-{next(self._ids)}"
        self.write(frame(request(msg_id, method, params)))
        return self.wait_for({msg_id}, timeout)

    def wait_for(self, ids: set[str], timeout: float) -> dict[str, Any]:
        while True:
            msg = self.messages.get(timeout=timeout)
            if msg is None:
                raise AssertionError(f"the daemon closed stdout (exit code {self.proc.poll()})")
            if msg.get("id") in ids and "method" not in msg:
                return msg

    def initialize(self) -> None:
        assert "result" in self.request("initialize", initialize_params())
        self.write(frame(notification("initialized", {})))

    def feed(self, chunks: list[bytes], timeout: float = 30.0) -> None:
        """Push one input, then prove the daemon still answers."""
        self.examples += 1
        for chunk in chunks:
            self.write(chunk)
        probes = {f"probe-{self.examples}-{k}" for k in range(3)}
        data = b"\r\n\r\n"
        for pid in sorted(probes):
            data += frame(
                request(pid, "agent/listSessions", {"workspaceRoot": str(self.workspace)})
            )
        self.write(data)
        reply = self.wait_for(probes, timeout)
        assert "result" in reply, reply
        assert self.proc.poll() is None

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

    def finish(self) -> int:
        """`shutdown` is answered and `exit` ends the process with 0."""
        assert self.request("shutdown", None).get("result", "missing") is None
        self.write(frame(notification("exit")))
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def fuzz_env(home: Path, base_url: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    return daemon_env(base_url, home, AGENTD_MEMORY="off", AGENTD_LOG_LEVEL="critical")


# --- strategies -------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)

ids = st.one_of(
    st.integers(-(2**63), 2**63),
    st.text(max_size=12),
    st.none(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)

methods = st.one_of(
    st.sampled_from(METHODS), st.text(max_size=20), st.integers(), st.none()
).filter(lambda m: m not in FORBIDDEN)

params = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "sessionId": st.one_of(st.text(max_size=8), st.integers()),
            "workspaceRoot": st.sampled_from(["/", "/nonexistent", "file:///tmp", "", "rel"]),
            "prompt": st.one_of(st.text(max_size=30), json_values),
            "id": ids,
            "query": st.text(max_size=20),
            "limit": st.integers(-5, 50),
            "toolCallId": st.text(max_size=8),
            "content": json_values,
        },
    ),
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        msg["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]))
    if draw(st.booleans()):
        msg["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        msg["method"] = draw(methods)
    if draw(st.booleans()):
        msg["params"] = draw(params)
    if draw(st.integers(0, 9)) == 0:
        msg[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return msg


@st.composite
def chunked(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """`data` cut at random places (1..1024-byte slices)."""
    chunks, i = [], 0
    while i < len(data):
        n = draw(st.integers(1, 1024))
        chunks.append(data[i : i + n])
        i += n
    return chunks


@st.composite
def random_bytes_input(draw: st.DrawFn) -> list[bytes]:
    data = draw(st.binary(min_size=1, max_size=4096))
    if draw(st.booleans()):
        # Sprinkle framing tokens in: pure noise rarely reaches the interesting paths.
        tokens = [b"Content-Length: ", b"\r\n\r\n", b"\r\n", b"{", b"}", b"999999999999"]
        data = b"".join(
            draw(st.sampled_from(tokens)) + data[k : k + 64] for k in range(0, len(data), 64)
        )
    return draw(chunked(data))


@st.composite
def message_input(draw: st.DrawFn) -> list[bytes]:
    out = b""
    for msg in draw(st.lists(messages(), min_size=1, max_size=6)):
        body = json.dumps(msg).encode()
        length = len(body)
        if draw(st.integers(0, 9)) == 0:
            length = max(0, length + draw(st.integers(-5, 5)))
        out += b"Content-Length: %d\r\n\r\n%s" % (length, body)
    return draw(chunked(out))


REAL: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 1, "method": "agent/newSession", "params": {"workspaceRoot": "/"}},
    {
        "jsonrpc": "2.0",
        "id": "p",
        "method": "agent/prompt",
        "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]},
    },
    {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "p"}},
    {
        "jsonrpc": "2.0",
        "method": "agent/toolResult",
        "params": {"sessionId": "s", "toolCallId": "c", "content": "x", "isError": True},
    },
    {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "memory/recall",
        "params": {"workspaceRoot": "/", "query": "deploy", "limit": 3},
    },
]


@st.composite
def mutated_input(draw: st.DrawFn) -> list[bytes]:
    data = bytearray(
        b"".join(frame(m) for m in draw(st.lists(st.sampled_from(REAL), min_size=1, max_size=4)))
    )
    for _ in range(draw(st.integers(1, 8))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "delete", "insert", "duplicate"]))
        if op == "flip":
            data[at] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            data[at:at] = data[at : at + draw(st.integers(1, 64))]
    return draw(chunked(bytes(data)))
