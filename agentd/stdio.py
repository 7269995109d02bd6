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


async def open_reader(loop: asyncio.AbstractEventLoop, stdin: BinaryIO) -> ReadFn:
    try:
        reader = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        return reader.read
    except (ValueError, OSError):

        async def read(n: int) -> bytes:
            return await asyncio.to_thread(os.read, stdin.fileno(), n)

        return read


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
