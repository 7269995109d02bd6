"""The fuzz harness over the daemon's input stream, shared by
tests/reliability/test_fuzz.py (bounded, CI) and bench/fuzz.py (longer).

A real daemon is spawned once (`python -m agentd serve`, or the ACP entry
point; memory off) and many inputs are pushed through it. After each input
the harness writes a blank line and three probe requests; the input passes
when one of them is answered, the process is alive and its RSS (from /proc)
stays under a bound. With LSP framing the probes follow enough filler
(spaces) to complete any body the input declared and left open: the daemon
cuts an overlong body at the next header only while the body is still
short, so a length the probes themselves would complete swallowed them (a
flake, depending on whether they arrived in one read).

The hostile-value inputs (`hostile_input`: numbers of more than 4,300
digits, nesting up to 100,000 levels, lone surrogates in prompts, tool
results and the model's tool-call arguments) are bodies to be framed by the
daemon's own framing, LSP or ACP. They may name the harness's session
(`@SESSION@`) and carry prompt requests (id `"@PROMPT@"`): each prompt's
reply is awaited and must not be an internal error (-32603), so a poisoned
session shows up at the next prompt. Prompts go to a live model server.

Inputs never contain `exit` or `shutdown` requests: they end the daemon by
design (tests/e2e/test_protocol.py covers them).
"""

from __future__ import annotations

import itertools
import json
import queue
import re
import subprocess
import threading
from pathlib import Path
from typing import Any, Literal

from hypothesis import strategies as st

from agentd.testing.daemon import daemon_command, daemon_env, rss_mib
from agentd.testing.framing import (
    frame,
    initialize_params,
    line,
    notification,
    read_frame_blocking,
    request,
)

Framing = Literal["lsp", "acp"]

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
# Methods that end the session they name (hostile inputs name the harness's own).
ENDS_SESSION = {"agent/closeSession", "session/close", "_agentd/session/close"}
SESSION = b"@SESSION@"
PROMPT_ID = b'"@PROMPT@"'
INTERNAL_ERROR = -32603
# Any digits after a Content-Length header name, as the daemon reads it (case and
# spaces aside): over-approximating is harmless, the filler only gets longer.
DECLARED = re.compile(rb"content-length\s*:\s*(\d+)", re.IGNORECASE)
# More digits than MAX_BODY has: the daemon refuses such a length outright.
LONGEST_LENGTH = 12


def filler_for(data: bytes, after: int) -> int:
    """How many filler bytes complete every body `data` may leave open, when
    `after` more bytes (the probes) follow the filler.

    A declared length longer than all that is written after its header can't
    be completed by the probes: the daemon cuts it at the first probe's header.
    Shorter ones must be completed by the filler, before the probes.
    """
    filler = 0
    lengths = {int(d) for d in DECLARED.findall(data) if len(d) <= LONGEST_LENGTH}
    for length in sorted(lengths):
        if length > len(data) + after + filler:
            break
        filler = length
    return filler


class FuzzDaemon:
    def __init__(self, env: dict[str, str], workspace: Path, framing: Framing = "lsp") -> None:
        self.workspace = workspace
        self.framing: Framing = framing
        self.proc = subprocess.Popen(
            daemon_command(acp=framing == "acp"),
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
        self.session = ""
        self.prompts = 0
        self._kept: dict[str, dict[str, Any]] = {}

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while (message := self._read_one(out)) is not None:
                self.messages.put(message)
        finally:
            self.messages.put(None)

    def _read_one(self, out: Any) -> dict[str, Any] | None:
        if self.framing == "lsp":
            return read_frame_blocking(out)
        while raw := out.readline():
            if raw.strip():
                return dict(json.loads(raw))
        return None

    def framed(self, message: dict[str, Any] | bytes) -> bytes:
        if self.framing == "lsp":
            return frame(message)
        return message + b"\n" if isinstance(message, bytes) else line(message)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def request(self, method: str, params: Any, timeout: float = 30.0) -> dict[str, Any]:
        msg_id = f"harness-{next(self._ids)}"
        self.write(self.framed(request(msg_id, method, params)))
        return self.wait_for({msg_id}, timeout)

    def wait_for(self, ids: set[str], timeout: float) -> dict[str, Any]:
        """The first reply to one of `ids`; replies to ids of the harness's
        prompts met meanwhile are kept for their own `wait_for`."""
        for wanted in ids:
            if wanted in self._kept:
                return self._kept.pop(wanted)
        while True:
            msg = self.messages.get(timeout=timeout)
            if msg is None:
                raise AssertionError(f"the daemon closed stdout (exit code {self.proc.poll()})")
            if "method" in msg:
                continue
            key = msg.get("id")
            if key in ids:
                return msg
            if isinstance(key, str) and key.startswith("prompt-"):
                self._kept[key] = msg

    def initialize(self) -> None:
        """The lifecycle's start, and one session for inputs that name `@SESSION@`."""
        root = str(self.workspace)
        if self.framing == "lsp":
            assert "result" in self.request("initialize", initialize_params())
            self.write(self.framed(notification("initialized", {})))
            reply = self.request("agent/newSession", {"workspaceRoot": root})
        else:
            params = {"protocolVersion": 1, "clientCapabilities": {}}
            assert "result" in self.request("initialize", params)
            reply = self.request("session/new", {"cwd": root, "mcpServers": []})
        self.session = reply["result"]["sessionId"]

    def probe(self) -> tuple[str, dict[str, Any]]:
        root = str(self.workspace)
        if self.framing == "lsp":
            return "agent/listSessions", {"workspaceRoot": root}
        return "_agentd/session/list", {"cwd": root}

    def feed(self, chunks: list[bytes], timeout: float = 30.0) -> None:
        """Push one input, then prove the daemon still answers."""
        self.examples += 1
        for chunk in chunks:
            self.write(chunk)
        probes = {f"probe-{self.examples}-{k}" for k in range(3)}
        method, params = self.probe()
        data = b"".join(self.framed(request(pid, method, params)) for pid in sorted(probes))
        if self.framing == "lsp":
            # Ends an open header block; the filler then completes an open body.
            end = b"\r\n\r\n"
            data = end + b" " * filler_for(b"".join(chunks), len(end) + len(data)) + data
        else:
            data = b"\n" + data
        self.write(data)
        reply = self.wait_for(probes, timeout)
        assert "result" in reply, reply
        assert self.proc.poll() is None

    def feed_bodies(self, bodies: list[bytes], sizes: list[int], timeout: float = 60.0) -> None:
        """Frame `bodies` (naming the harness's session and prompt ids), push them in
        slices of `sizes` (cycled), prove the daemon answers, and that every prompt
        among them was answered without an internal error."""
        prompts: set[str] = set()
        data = b""
        for body in bodies:
            body = body.replace(SESSION, self.session.encode())
            while PROMPT_ID in body:
                self.prompts += 1
                pid = f"prompt-{self.prompts}"
                prompts.add(pid)
                body = body.replace(PROMPT_ID, json.dumps(pid).encode(), 1)
            data += self.framed(body)
        chunks, i = [], 0
        for size in itertools.cycle(sizes):
            if i >= len(data):
                break
            chunks.append(data[i : i + size])
            i += size
        self.feed(chunks, timeout)
        while prompts:
            reply = self.wait_for(prompts, timeout)
            prompts.discard(reply["id"])
            error = reply.get("error") or {}
            assert error.get("code") != INTERNAL_ERROR, reply

    def prompt(self, text: str, timeout: float = 60.0) -> dict[str, Any]:
        """A prompt on the harness's session, answered (a poisoned session fails here)."""
        if self.framing == "lsp":
            params: dict[str, Any] = {"sessionId": self.session, "prompt": text}
            return self.request("agent/prompt", params, timeout)
        blocks = [{"type": "text", "text": text}]
        return self.request("session/prompt", {"sessionId": self.session, "prompt": blocks})

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

    def finish(self) -> int:
        """LSP: `shutdown` is answered and `exit` ends the process with 0.
        ACP: the end of stdin does."""
        if self.framing == "lsp":
            assert self.request("shutdown", None).get("result", "missing") is None
            self.write(self.framed(notification("exit")))
        else:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
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


# --- hostile values (issue 14, items 5 and 6) ----------------------------------------------

# Half an emoji, either half, and a whole one for contrast.
SURROGATES = ["\ud83d", "\ude00", "\udfff", "\ud800", "\U0001f600"]


def _dumps(value: Any) -> bytes:
    # ensure_ascii writes a lone surrogate as its JSON escape, as a buggy client does.
    return json.dumps(value).encode()


@st.composite
def surrogate_text(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(st.text(max_size=8), st.sampled_from(SURROGATES)), max_size=6))
    return "".join(parts) + draw(st.sampled_from(SURROGATES))


@st.composite
def hostile_body(draw: st.DrawFn, framing: Framing) -> bytes:
    """One message body carrying a value items 5 and 6 of issue 14 are about."""
    kind = draw(st.sampled_from(["long_id", "long_number", "deep", "prompt", "tool_call", "any"]))
    head = b'{"jsonrpc":"2.0",'
    method = draw(st.sampled_from([*METHODS, "session/prompt", "_agentd/memory/recall"]))
    if kind in ("long_id", "long_number"):
        digits = b"9" * draw(st.integers(4301, 6000))
        if kind == "long_id":
            return head + b'"id":' + digits + b',"method":' + _dumps(method) + b"}"
        tail = b',"params":{"limit":' + digits + b"}}"
        return head + b'"id":"n","method":' + _dumps(method) + tail
    if kind == "deep":
        depth = draw(st.sampled_from([990, 1000, 5000, 100_000]))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        nested = opener * depth + b"1" + closer * depth
        where = draw(st.sampled_from(["params", "top", "notification"]))
        if where == "top":
            return nested
        if where == "notification":
            return head + b'"method":' + _dumps(method) + b',"params":' + nested + b"}"
        return head + b'"id":"d","method":' + _dumps(method) + b',"params":{"x":' + nested + b"}}"
    text = draw(surrogate_text())
    if kind == "tool_call":
        # The model server's default reply calls the tool a prompt line names, with
        # these arguments as written: a lone surrogate escape reaches the daemon as one.
        arg = draw(st.sampled_from(["\\ud83d", "x\\udc00.md", "\\ud83d\\ude00"]))
        text = f'!tool read_file {{"path": "{arg}"}}\n{text}'
    if kind in ("prompt", "tool_call"):
        if framing == "lsp":
            params: dict[str, Any] = {"sessionId": "@SESSION@", "prompt": text}
            body = _dumps({"jsonrpc": "2.0", "id": 0, "method": "agent/prompt", "params": params})
        else:
            blocks = [{"type": "text", "text": text}]
            params = {"sessionId": "@SESSION@", "prompt": blocks}
            body = _dumps({"jsonrpc": "2.0", "id": 0, "method": "session/prompt", "params": params})
        return body.replace(b'"id": 0', b'"id": ' + PROMPT_ID, 1)
    # A lone surrogate in any string of any message, a tool result among them.
    # It names the harness's session, so never with a method that ends it: the
    # session must still answer the prompt the fixture sends after the inputs.
    value = draw(st.sampled_from(["sessionId", "toolCallId", "content", "query", "workspaceRoot"]))
    params = {"sessionId": "@SESSION@", "toolCallId": "c", value: text}
    method = draw(st.sampled_from(["agent/toolResult", "memory/recall", method]))
    if method in ENDS_SESSION:
        method = "memory/recall"
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if draw(st.booleans()):
        msg["id"] = text if draw(st.booleans()) else "s"
    return _dumps(msg)


@st.composite
def hostile_input(draw: st.DrawFn, framing: Framing) -> tuple[list[bytes], list[int]]:
    """Bodies for `FuzzDaemon.feed_bodies`, and the slice sizes to write them in."""
    bodies = draw(st.lists(hostile_body(framing), min_size=1, max_size=3))
    sizes = draw(st.lists(st.integers(1, 65536), min_size=1, max_size=8))
    return bodies, sizes
