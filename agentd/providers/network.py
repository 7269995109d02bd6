"""httpcore's network backend on plain asyncio (a transport and a protocol per
connection), for the model client's connection pool.

httpx keeps doing HTTP (h11 through httpcore's pool); only the socket I/O
under it is ours, through httpcore's documented extension point
(`httpcore.AsyncNetworkBackend` / `AsyncNetworkStream`). Its default on
asyncio goes through anyio, which on a kept-alive connection cost 0.1-0.2 ms
per request after the daemon sat idle: the pool's "is the idle connection
still usable?" check rebuilt anyio's socket attribute table and called
`getpeername` every time, and each read and write opened a cancel scope
(`anyio.fail_after`) and went round the event loop once more than needed.
Here the check is the protocol's own state and one `poll` of the socket,
a write hands the bytes to the transport at once (which sends them then and
there) and a timeout is one timer handle.

Errors are httpcore's (`ConnectError`, `ReadTimeout`, ...), as its own
backends raise them, so httpx maps them to its exceptions as usual.
`model_transport` builds the httpx transport whose pool (`pool.ModelPool`:
httpcore's HTTP/1.1 connections) uses it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import select
import ssl
import urllib.request
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from agentd.providers.pool import ModelPool

log = logging.getLogger(__name__)

# A connection's unread bytes above this stop its reading until they are
# read: a consumer that falls behind holds a bounded buffer, not a stream.
READ_BUFFER_LIMIT = 256 * 1024

# httpcore's SOCKET_OPTION: the arguments of a `setsockopt`.
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class _Protocol(asyncio.Protocol):
    """What one connection received, and whether it can still be written to."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        # Bytes received in all (the pool's test of "died before any answer").
        self.received = 0
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.paused_reading = False
        # A reader (or a writer waiting for the buffer to drain) parks here:
        # one at a time, as HTTP/1.1 reads and writes a connection in turn.
        self.waiter: asyncio.Future[bool] | None = None
        self.writable = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # A write is done once the kernel has all of it (as with anyio): the
        # write timeout then means what httpx says it means.
        transport.set_write_buffer_limits(0)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        self.received += len(data)
        if self.buffered > READ_BUFFER_LIMIT and not self.paused_reading:
            assert self.transport is not None
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return True  # half-closed: httpcore may still write (and then fails)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self.writable = True
        self._wake()

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self._wake()

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(False)

    async def wait(self, deadline: float | None, timeout_error: type[Exception]) -> None:
        """Until the next event (data, EOF, loss, drained); `timeout_error` at
        `deadline` (the loop's clock). One timer handle, no task or cancel scope."""
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = None
        if deadline is not None:
            timer = loop.call_at(deadline, _expire, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self.waiter is waiter:
                self.waiter = None
        if waiter.result():
            raise timeout_error()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(True)  # timed out


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection (plain or TLS) as httpcore reads and writes it."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False
        raw = transport.get_extra_info("socket")
        self._fd: int = raw.fileno() if raw is not None else -1

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        deadline = None
        while not protocol.chunks:
            if self._closed:
                raise httpcore.ReadError("the connection is closed")
            if protocol.error is not None:
                raise httpcore.ReadError(str(protocol.error) or type(protocol.error).__name__)
            if protocol.eof or protocol.lost:
                return b""
            if deadline is None and timeout is not None:
                deadline = asyncio.get_running_loop().time() + timeout
            await protocol.wait(deadline, httpcore.ReadTimeout)
        chunks = protocol.chunks
        data = chunks.popleft()
        if chunks and len(data) + len(chunks[0]) <= max_bytes:
            # All that came since the last read, up to max_bytes: one pass of
            # h11 and the SSE decoder instead of one per packet.
            parts, size = [data], len(data)
            while chunks and size + len(chunks[0]) <= max_bytes:
                size += len(chunks[0])
                parts.append(chunks.popleft())
            data = b"".join(parts)
        if len(data) > max_bytes:
            data, rest = data[:max_bytes], data[max_bytes:]
            chunks.appendleft(rest)
        protocol.buffered -= len(data)
        if protocol.paused_reading and protocol.buffered <= READ_BUFFER_LIMIT // 2:
            protocol.paused_reading = False
            self._transport.resume_reading()  # the one paused (the TLS one after start_tls)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self._protocol
        self._check_writable()
        # Sent at once when the socket takes it (the usual case); what it does
        # not take is sent by the loop, and the write waits for that.
        self._transport.write(buffer)
        if not protocol.writable and timeout is not None:
            deadline: float | None = asyncio.get_running_loop().time() + timeout
        else:
            deadline = None
        while not protocol.writable:
            await protocol.wait(deadline, httpcore.WriteTimeout)
            self._check_writable()
        self._check_writable()

    def _check_writable(self) -> None:
        protocol = self._protocol
        if self._closed:
            raise httpcore.WriteError("the connection is closed")
        if protocol.lost or self._transport.is_closing():
            # A failed send closes the transport at once and tells the
            # protocol a loop turn later: either way this write failed.
            error = protocol.error
            raise httpcore.WriteError(str(error) if error else "the connection was lost")

    async def aclose(self) -> None:
        # As httpcore's anyio backend does: no TLS goodbye, no lingering, and
        # one loop turn, in which the transport closes its socket (a loop
        # stopped before that would find an unclosed transport).
        self._closed = True
        self._transport.abort()
        await asyncio.sleep(0)

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                )
        except TimeoutError as exc:
            await self.aclose()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError, RuntimeError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        if transport is None:  # the connection went while shaking hands
            await self.aclose()
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        # The protocol now hears from the TLS transport: reading is paused and
        # the writes' buffer bounded there. Its pause is at "size >= high"
        # (the socket's at "size > high"): 1, or it would pause when empty.
        self._protocol.transport = transport
        transport.set_write_buffer_limits(high=1, low=0)
        return AsyncioStream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self._is_readable()
        if info == "received_bytes":
            return self._protocol.received
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None

    def _is_readable(self) -> bool:
        """httpcore's test of an idle kept-alive connection: True when it must
        not be used (the server closed it, or sent something unasked)."""
        protocol = self._protocol
        if protocol.chunks or protocol.eof or protocol.lost or self._fd < 0:
            return True
        # What arrived since the loop last polled, not yet delivered.
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(0))


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Connections as asyncio transports (happy eyeballs as anyio's)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=local, happy_eyeballs_delay=0.25
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return _stream(transport, protocol, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(_Protocol, path)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return _stream(transport, protocol, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _stream(
    transport: asyncio.BaseTransport,
    protocol: _Protocol,
    socket_options: Iterable[SocketOption] | None,
) -> AsyncioStream:
    assert isinstance(transport, asyncio.Transport)
    raw = transport.get_extra_info("socket")
    for option in socket_options or ():
        # asyncio's TransportSocket takes setsockopt (asyncio sets TCP_NODELAY).
        raw.setsockopt(*option)
    return AsyncioStream(transport, protocol)


def model_transport(
    verify: ssl.SSLContext | bool, limits: httpx.Limits
) -> httpx.AsyncBaseTransport | None:
    """An `httpx.AsyncHTTPTransport` whose connection pool is a `ModelPool`
    on `AsyncioBackend`, with the TLS context, limits and settings httpx's
    own default transport would get (HTTP/1.1, no connect retries); None
    when the client must build its own (the stock one):

    - a proxy is configured in the environment (`HTTPS_PROXY` and the like):
      httpx honours those only for a client without a transport of ours;
    - this httpx keeps its connection pool elsewhere than `_pool`, the one
      attribute (not public) this relies on: httpx's transport does the
      request, response and exception mapping, and its pool is replaced
      by ours, with the same settings.
    """
    if any(urllib.request.getproxies().get(k) for k in ("http", "https", "all")):
        return None
    # The context httpx would make (certifi, or SSL_CERT_FILE / SSL_CERT_DIR).
    ssl_context = httpx.create_ssl_context(verify=verify, trust_env=True)
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, limits=limits)
    if type(getattr(transport, "_pool", None)) is not httpcore.AsyncConnectionPool:
        log.warning("httpx's transport has no connection pool where expected; using its own")
        return None
    transport._pool = ModelPool(  # type: ignore[assignment]  # httpx calls two methods
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=AsyncioBackend(),
    )
    return transport


def model_pool(transport: httpx.AsyncBaseTransport | None) -> ModelPool | None:
    """The `ModelPool` under a transport `model_transport` made (None for any
    other): the model client sends its stream requests to it directly
    (`http.ModelHTTP._send`)."""
    if type(transport) is not httpx.AsyncHTTPTransport:
        return None
    pool = transport.__dict__.get("_pool")
    return pool if isinstance(pool, ModelPool) else None
