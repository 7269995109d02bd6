"""LSP base-protocol framing over byte streams, hardened.

pygls' own reader trusts `Content-Length`: a wrong value leaves it waiting
for bytes that never come (deaf), and a huge one makes it try to allocate.
This reader:

- caps header blocks (64 KiB) and bodies (`MAX_BODY`, 256 MiB) and refuses
  bigger ones before allocating;
- on a missing, non-numeric, negative or conflicting `Content-Length`, logs
  one error and resynchronises on the next `Content-Length:` header;
- when the declared length is too long, notices the next message's header
  inside the pending body and cuts the body there instead of waiting forever;
- yields each body as bytes; JSON decoding and JSON-RPC validation are done
  by the caller (see `server.py`), so a bad body never desynchronises framing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

from agentd.stdio import ReadFn

log = logging.getLogger(__name__)

MAX_HEADER = 64 * 1024
MAX_BODY = 256 * 1024 * 1024
READ_SIZE = 64 * 1024

_HEADER_START = re.compile(rb"Content-Length:", re.IGNORECASE)
# A complete header block inside a body that was declared too long.
_EMBEDDED_HEADER = re.compile(
    rb"Content-Length: *\d+\r\n(?:[A-Za-z-]+: *[^\r\n]*\r\n)*\r\n", re.IGNORECASE
)


class FrameError(Exception):
    pass


def _content_length(header_block: bytes) -> int:
    lengths: set[int] = set()
    for raw in header_block.split(b"\r\n"):
        if not raw.strip():
            continue
        name, sep, value = raw.partition(b":")
        if not sep:
            raise FrameError(f"malformed header line {raw[:80]!r}")
        if name.strip().lower() == b"content-length":
            text = value.strip()
            if not text.isdigit():
                raise FrameError(f"Content-Length is not a non-negative integer: {text[:40]!r}")
            lengths.add(int(text))
    if not lengths:
        raise FrameError("header block without Content-Length")
    if len(lengths) > 1:
        raise FrameError(f"conflicting Content-Length headers: {sorted(lengths)}")
    return lengths.pop()


async def read_frames(read: ReadFn) -> AsyncIterator[bytes]:
    """Yield message bodies until EOF."""
    buf = bytearray()
    eof = False

    async def fill() -> bool:
        nonlocal eof
        if eof:
            return False
        data = await read(READ_SIZE)
        if not data:
            eof = True
            return False
        buf.extend(data)
        return True

    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEADER:
                log.error("header block over %d bytes; resynchronising", MAX_HEADER)
                _resync(buf, 1)
                continue
            if not await fill():
                if buf.strip():
                    log.error("input ended inside a message header")
                return
            continue
        try:
            # Bytes before the first Content-Length (garbage between messages) are skipped.
            first = _HEADER_START.search(buf, 0, end)
            if first is None:
                raise FrameError("header block without Content-Length")
            if first.start() > 0 and buf[: first.start()].strip():
                log.error("skipped %d bytes of garbage between messages", first.start())
                del buf[: first.start()]
                continue
            length = _content_length(bytes(buf[:end]))
        except FrameError as exc:
            # Skip this whole header block (and whatever body it had) up to the
            # next header: resyncing inside it could land on one of its own lines.
            log.error("bad frame: %s; resynchronising", exc)
            _resync(buf, end + 4)
            continue
        start = end + 4
        if length > MAX_BODY:
            log.error("message of %d bytes refused (limit %d); resynchronising", length, MAX_BODY)
            _resync(buf, start)
            continue
        scanned = start
        cut: int | None = None
        while len(buf) < start + length:
            # Declared length too long? The next header shows up inside the body.
            m = _EMBEDDED_HEADER.search(buf, max(start, scanned - 64))
            if m is not None:
                cut = m.start()
                break
            scanned = len(buf)
            if not await fill():
                log.error("input ended inside a message body")
                return
        if cut is not None:
            log.error("Content-Length %d overran the message; cut at the next header", length)
            body = bytes(buf[start:cut])
            del buf[:cut]
        else:
            body = bytes(buf[start : start + length])
            del buf[: start + length]
        yield body


def _resync(buf: bytearray, skip_from: int) -> None:
    """Drop bytes up to the next `Content-Length:` at or after `skip_from`."""
    m = _HEADER_START.search(buf, skip_from)
    if m is None:
        # Keep a short tail in case a header is split across reads, but always
        # drop at least `skip_from` bytes: every resync must make progress.
        tail = len(b"Content-Length:") - 1
        del buf[: max(skip_from, len(buf) - tail)]
    else:
        del buf[: m.start()]


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class PipeWriter:
    """pygls writer interface over an asyncio write transport.

    Writes never block the event loop; asyncio buffers. A closed stdout makes
    `closed` true and further writes are dropped quietly (the editor is gone).
    """

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed or self._transport.is_closing():
            self.closed = True
            return
        self._transport.write(data)

    def close(self) -> None:
        self.closed = True
        self._transport.close()
