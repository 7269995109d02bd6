"""Non-blocking stdin/stdout for the daemons (LSP and ACP front ends alike).

stdin is read through an asyncio pipe (no thread per read) and its bytes are
pushed to the front end's framer from the pipe's read callback (`open_pump`),
so a message is dispatched in the callback that read it; stdout is written
through an asyncio write transport, so a slow editor never blocks the event
loop (asyncio buffers). Regular files, which cannot be polled (for example
`agentd serve < messages.txt`), fall back to a thread for reads and to
blocking writes.

`on_terminate` turns SIGTERM (and SIGINT) into the daemon's own stop: editors
end agent processes with SIGTERM and may never close stdin (CodeCompanion.nvim
does), and the default action would kill the daemon mid-write, with no
cancelled prompt answered, no extraction drained and no transcript closed.
SIGINT reaches it from a terminal's Ctrl-C when it is run by hand or shares
the editor's process group; Python's default would end it with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, BinaryIO

ReadFn = Callable[[int], Awaitable[bytes]]
# Takes the input's bytes as they come (a front end's framer).
Feed = Callable[[bytes], None]
# `await pump(feed)`: hands the input's bytes to `feed` in order, returns at its end.
Pump = Callable[[Feed], Coroutine[Any, Any, None]]

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024


class _PushProtocol(asyncio.Protocol):
    """stdin's bytes to the framer from the pipe's read callback.

    An `asyncio.StreamReader` between them would wake the reading task in
    the loop's next turn: 0.05-0.1 ms of every message's way to its handler
    (a prompt's included). Bytes that come before a framer is attached
    are held for it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._feed: Feed | None = None
        self._held: list[bytes] = []
        self.ended: asyncio.Future[None] = loop.create_future()

    def attach(self, feed: Feed | None) -> None:
        self._feed = feed
        held, self._held = self._held, []
        for chunk in held:
            self.data_received(chunk)

    def data_received(self, data: bytes) -> None:
        if self._feed is None:
            self._held.append(data)
        else:
            self._feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ended.done():
            return
        if exc is None:
            self.ended.set_result(None)
        else:
            self.ended.set_exception(exc)


async def open_pump(loop: asyncio.AbstractEventLoop, stdin: BinaryIO, prefix: bytes = b"") -> Pump:
    """stdin as a `Pump`; `prefix` (bytes already taken from stdin) comes first."""
    protocol = _PushProtocol(loop)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: protocol, stdin)
    except (ValueError, OSError):

        async def read(n: int) -> bytes:
            return await asyncio.to_thread(os.read, stdin.fileno(), n)

        return read_pump(read, prefix)

    async def pump(feed: Feed) -> None:
        if prefix:
            feed(prefix)
        protocol.attach(feed)
        try:
            await protocol.ended
        finally:
            # Stopped (the daemon shuts down): nothing more is handed over.
            protocol.attach(None)
            transport.pause_reading()

    return pump


def read_pump(read: ReadFn, prefix: bytes = b"") -> Pump:
    """A `Pump` over `read(n)` (b"" at the end): a socket, a file read in a thread."""

    async def pump(feed: Feed) -> None:
        if prefix:
            feed(prefix)
        while chunk := await read(READ_SIZE):
            feed(chunk)

    return pump


def sniff_framing(fd: int = 0, limit: int = 4096) -> tuple[str, bytes]:
    """Which protocol the client speaks, from its first bytes: ("acp" | "lsp" | "eof", bytes read).

    Unambiguous: an LSP message starts with a header name (a letter), an ACP
    message with `{` (JSON-RPC over newline-delimited JSON); whitespace before
    either is skipped. Blocks until the client has written its first byte,
    which it does at once after spawning the daemon.
    """
    log.debug("waiting for the client's first byte")
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


def max_buffered() -> int:
    """How much unread output may pile up before the editor counts as gone.

    An editor that stops reading stdout would otherwise make asyncio buffer
    without limit. `AGENTD_MAX_STDOUT_BUFFER` (bytes) exists for tests.
    """
    try:
        return int(os.environ.get("AGENTD_MAX_STDOUT_BUFFER", "")) or MAX_BUFFERED
    except ValueError:
        return MAX_BUFFERED


MAX_BUFFERED = 256 * 1024 * 1024


class StdoutWriter:
    """`write(bytes)` and `close()`; after the editor closed stdout, writes are
    dropped quietly and `on_lost` has been called once. An editor that stops
    reading while more than `max_buffered()` bytes wait is treated as gone."""

    def __init__(
        self,
        stdout: BinaryIO,
        transport: asyncio.WriteTransport | None,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._stdout = stdout
        self._transport = transport
        self._on_lost = on_lost
        self._limit = max_buffered()
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
            unread = self._transport.get_write_buffer_size()
            if unread > self._limit:
                # Closed first: the log line below would otherwise try to reach
                # the editor through this very writer.
                self.closed = True
                self._transport.abort()
                log.error("the editor stopped reading (%d bytes unread); giving up on it", unread)
                if self._on_lost is not None:
                    self._on_lost()

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
    return StdoutWriter(stdout, transport, on_lost)


# The signals that stop the daemon gracefully rather than by their default action.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_on_stop_signals() -> None:
    """Until an event loop takes them over (`on_terminate`), SIGTERM and SIGINT end
    the process with exit code 0 and nothing on stdout.

    Before the loop runs (waiting for the client's first byte, importing the
    server) nothing has been answered or started, so there is nothing to drain:
    a clean exit is the whole graceful shutdown. The defaults would kill the
    process (-15) or raise KeyboardInterrupt with a traceback.
    """

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)


@contextlib.contextmanager
def on_terminate(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT call `stop` on the loop (the
    same graceful shutdown as the end of stdin) instead of killing the process."""
    installed: list[signal.Signals] = []
    try:
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, stop)
            installed.append(signum)
    except (NotImplementedError, RuntimeError, ValueError):
        # Not the main thread, or no signals on this platform: keep the defaults.
        pass
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
