"""Non-blocking stdin/stdout for the daemons (LSP and ACP front ends alike).

stdin is read through an asyncio pipe (no thread per read); stdout is written
through an asyncio write transport, so a slow editor never blocks the event
loop (asyncio buffers). Regular files, which cannot be polled (for example
`agentd serve < messages.txt`), fall back to a thread for reads and to
blocking writes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import BinaryIO

ReadFn = Callable[[int], Awaitable[bytes]]


async def open_reader(
    loop: asyncio.AbstractEventLoop, stdin: BinaryIO, prefix: bytes = b""
) -> ReadFn:
    """`read(n)`; `prefix` (bytes already taken from stdin) comes out first."""
    try:
        reader = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        base: ReadFn = reader.read
    except (ValueError, OSError):

        async def base(n: int) -> bytes:
            return await asyncio.to_thread(os.read, stdin.fileno(), n)

    if not prefix:
        return base
    pending = [prefix]

    async def read(n: int) -> bytes:
        if pending:
            return pending.pop()
        return await base(n)

    return read


def sniff_framing(fd: int = 0, limit: int = 4096) -> tuple[str, bytes]:
    """Which protocol the client speaks, from its first bytes: ("acp" | "lsp" | "eof", bytes read).

    Unambiguous: an LSP message starts with a header name (a letter), an ACP
    message with `{` (JSON-RPC over newline-delimited JSON); whitespace before
    either is skipped. Blocks until the client has written its first byte,
    which it does at once after spawning the daemon.
    """
    seen = b""
    while len(seen) < limit:
        chunk = os.read(fd, 1)
        if not chunk:
            return "eof", seen
        seen += chunk
        if not chunk.isspace():
            return ("acp" if chunk == b"{" else "lsp"), seen
    return "lsp", seen


class _WriteProtocol(asyncio.Protocol):
    def __init__(self, on_lost: Callable[[], None]) -> None:
        self._on_lost = on_lost

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()


class StdoutWriter:
    """`write(bytes)` and `close()`; after the editor closed stdout, writes are
    dropped quietly and `on_lost` has been called once."""

    def __init__(self, stdout: BinaryIO, transport: asyncio.WriteTransport | None) -> None:
        self._stdout = stdout
        self._transport = transport
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self._transport is None:
            self._stdout.write(data)
            self._stdout.flush()
        elif self._transport.is_closing():
            self.closed = True
        else:
            self._transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()
        else:
            self._stdout.close()


async def open_writer(
    loop: asyncio.AbstractEventLoop, stdout: BinaryIO, on_lost: Callable[[], None]
) -> StdoutWriter:
    try:
        transport, _ = await loop.connect_write_pipe(lambda: _WriteProtocol(on_lost), stdout)
    except (ValueError, OSError):
        return StdoutWriter(stdout, None)
    return StdoutWriter(stdout, transport)
