"""Helpers shared by the reliability tests: a raw framed peer over any stream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any


def frame(message: dict[str, Any], extra_headers: bytes = b"") -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n%s\r\n%s" % (len(body), extra_headers, body)


def request(msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def initialize_params(options: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"processId": None, "capabilities": {}, "initializationOptions": options or {}}


async def read_message(reader: asyncio.StreamReader, timeout: float = 20.0) -> dict[str, Any]:
    """The next message, skipping window/logMessage (the daemon logs bad frames to the editor)."""

    async def read() -> dict[str, Any]:
        while True:
            header = await reader.readuntil(b"\r\n\r\n")
            length = int(header.split(b":")[1].split(b"\r\n")[0])
            msg = dict(json.loads(await reader.readexactly(length)))
            if msg.get("method") != "window/logMessage":
                return msg

    return await asyncio.wait_for(read(), timeout)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")
