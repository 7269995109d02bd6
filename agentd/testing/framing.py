"""JSON-RPC messages as an editor writes and reads them, for tests and benchmarks.

LSP-style frames (`Content-Length` header, blank line, body) for `agentd
serve`; one JSON value per line for ACP. The daemon's own readers are in
`agentd/lsp/transport.py` and `agentd/acp/rpc.py`; this is the client side,
kept simple on purpose (a test that needs a malformed frame writes its bytes).
"""

from __future__ import annotations

import asyncio
import json
from typing import IO, Any


def request(msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def initialize_params(
    options: dict[str, Any] | None = None, pid: int | None = None
) -> dict[str, Any]:
    """LSP `initialize` params of an editor with no capabilities."""
    return {"processId": pid, "capabilities": {}, "initializationOptions": options or {}}


def frame(message: dict[str, Any] | bytes, extra_headers: bytes = b"") -> bytes:
    """One LSP frame; `extra_headers` (each ending in CRLF) go after Content-Length."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return b"Content-Length: %d\r\n%s\r\n%s" % (len(body), extra_headers, body)


def line(message: dict[str, Any]) -> bytes:
    """One ACP message (newline-delimited JSON)."""
    return json.dumps(message).encode() + b"\n"


def _content_length(header: bytes) -> int:
    for field in header.split(b"\r\n"):
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise ValueError(f"no Content-Length in {header!r}")


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next LSP frame's message; `asyncio.IncompleteReadError` at end of stream."""
    header = await reader.readuntil(b"\r\n\r\n")
    return dict(json.loads(await reader.readexactly(_content_length(header))))


async def read_line(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next ACP message; `asyncio.IncompleteReadError` at end of stream."""
    data = await reader.readline()
    if not data:
        raise asyncio.IncompleteReadError(b"", None)
    return dict(json.loads(data))


def read_frame_blocking(stream: IO[bytes]) -> dict[str, Any] | None:
    """`read_frame` for a blocking pipe (a reader thread); None at end of stream."""
    header = b""
    while not header.endswith(b"\r\n\r\n"):
        byte = stream.read(1)
        if not byte:
            return None
        header += byte
    return dict(json.loads(stream.read(_content_length(header))))
