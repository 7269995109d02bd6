"""HTTP/1.1 for the local model server: one connection, parsed by hand.

Just enough of RFC 9112 for API clients such as httpx: requests with
`Content-Length` bodies, persistent connections, responses with either a
`Content-Length` or `Transfer-Encoding: chunked`. Chunked request bodies are
refused (501) because no model API client sends them.

While a response is being produced, `Connection.watch()` keeps reading the
socket so that a client that goes away is noticed at once, even when the
server is not writing (a ttft pause, a stalled stream). Bytes read in that
time (a pipelined request) are kept for the next `read_request()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
_READ_SIZE = 64 * 1024
SERVER_NAME = "agentd-model-server"


class HTTPError(Exception):
    """The request cannot be served; answered with `status` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The peer closed or reset the connection while we were answering it."""


@dataclass(slots=True)
class Request:
    method: str
    target: str
    path: str
    query: str
    version: str
    # Lower-cased names; a repeated header's values are joined with ", ".
    headers: dict[str, str]
    body: bytes
    # time.time() when the request's first bytes were in hand: what a
    # benchmark of the client's side times, before the server reads the body.
    arrived: float = 0.0
    # time.time() when the whole body was in hand: what a model needs before
    # it can start on its answer, so a benchmark of a large body times both.
    complete: float = 0.0

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


# Statuses that model APIs use but the standard library does not name.
_EXTRA_PHRASES = {529: "Overloaded"}


def reason_phrase(status: int) -> str:
    if status in _EXTRA_PHRASES:
        return _EXTRA_PHRASES[status]
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    # latin-1 never fails to decode, so odd bytes become a 400 below, not a crash.
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        raise HTTPError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HTTPError(505, f"unsupported HTTP version {version!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            # Also rejects obsolete line folding (a line starting with a space).
            raise HTTPError(400, "malformed header line")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return method, target, version, headers


class Connection:
    """One accepted TCP connection: request reading and response writing."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._buf = bytearray()
        self._eof = False
        self._gone = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._chunked = True
        # The server's count of accepted connections when this one came (from 1).
        self.number = 0

    # --- reading ---------------------------------------------------------------

    async def _fill(self) -> bool:
        """Read more bytes into the buffer; False at end of stream."""
        if self._eof:
            return False
        try:
            data = await self._reader.read(_READ_SIZE)
        except OSError:
            data = b""
        if not data:
            self._eof = True
            self._gone.set()
            return False
        self._buf += data
        return True

    async def read_request(self) -> Request | None:
        """The next request, or None when the client closed between requests."""
        arrived = time.time() if self._buf.strip(b"\r\n") else 0.0
        while True:
            # RFC 9112 asks servers to ignore empty lines before a request line.
            while self._buf[:2] == b"\r\n":
                del self._buf[:2]
            end = self._buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self._buf) > MAX_HEAD_BYTES:
                raise HTTPError(431, "request head too large")
            if not await self._fill():
                if self._buf:
                    raise ClientGone("connection closed inside a request head")
                return None
            if not arrived:
                arrived = time.time()
        head = bytes(self._buf[:end])
        del self._buf[: end + 4]
        method, target, version, headers = _parse_head(head)
        if "transfer-encoding" in headers:
            raise HTTPError(501, "chunked request bodies are not supported")
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit():
            raise HTTPError(400, "invalid Content-Length")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            raise HTTPError(413, "request body too large")
        if length and headers.get("expect", "").lower() == "100-continue":
            await self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        while len(self._buf) < length:
            if not await self._fill():
                raise ClientGone("connection closed inside a request body")
        complete = time.time()
        body = bytes(self._buf[:length])
        del self._buf[:length]
        path, _, query = target.partition("?")
        return Request(method, target, path, query, version, headers, body, arrived, complete)

    # --- noticing a client that goes away ------------------------------------------

    def watch(self) -> None:
        """Start watching the socket for EOF while a response is produced."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while len(self._buf) <= MAX_HEAD_BYTES + MAX_BODY_BYTES:
            if not await self._fill():
                return
        # A client that pipelines this much while we answer is not one we serve.
        self._gone.set()

    async def unwatch(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            # Cancelling a pending StreamReader.read loses no data: bytes are only
            # taken from its buffer once the read completes.
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    @property
    def gone(self) -> bool:
        return self._gone.is_set()

    async def wait_gone(self) -> None:
        await self._gone.wait()

    async def pause(self, seconds: float) -> None:
        """Sleep, but raise ClientGone as soon as the client leaves."""
        if self._gone.is_set():
            raise ClientGone("client went away")
        if seconds <= 0:
            return
        try:
            async with asyncio.timeout(seconds):
                await self._gone.wait()
        except TimeoutError:
            return
        raise ClientGone("client went away")

    # --- writing ---------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        if self._gone.is_set() or self._writer.transport.is_closing():
            self._gone.set()
            raise ClientGone("client went away")
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as exc:
            self._gone.set()
            raise ClientGone(str(exc)) from exc

    def _head(self, status: int, headers: dict[str, str], *, keep_alive: bool) -> bytes:
        lines = [f"HTTP/1.1 {status} {reason_phrase(status)}", f"server: {SERVER_NAME}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append(f"connection: {'keep-alive' if keep_alive else 'close'}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(
        self, status: int, body: bytes, headers: dict[str, str], *, keep_alive: bool
    ) -> None:
        """A whole response with a Content-Length body."""
        all_headers = {**headers, "content-length": str(len(body))}
        await self.write(self._head(status, all_headers, keep_alive=keep_alive) + body)

    async def send_head(self, status: int, headers: dict[str, str], *, keep_alive: bool) -> None:
        await self.write(self._head(status, headers, keep_alive=keep_alive))

    async def start_stream(
        self, status: int, headers: dict[str, str], *, keep_alive: bool, chunked: bool
    ) -> None:
        """Start a body of unknown length: chunked, or (HTTP/1.0) ended by closing."""
        self._chunked = chunked
        if chunked:
            headers = {**headers, "transfer-encoding": "chunked"}
        await self.write(self._head(status, headers, keep_alive=keep_alive and chunked))

    async def write_chunk(self, data: bytes) -> None:
        # An empty chunk would end the body, so there is nothing to send.
        if data:
            await self.write(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)

    async def end_stream(self) -> None:
        if self._chunked:
            await self.write(b"0\r\n\r\n")

    # --- closing ---------------------------------------------------------------

    def abort(self) -> None:
        """Drop the connection at once, without finishing the response."""
        self._gone.set()
        self._writer.transport.abort()

    async def close(self) -> None:
        await self.unwatch()
        self._writer.close()
        # The peer may already have reset the connection; closing is best effort.
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
