"""The model client's connection pool: httpcore's HTTP/1.1 connections
(`httpcore.AsyncHTTP11Connection`, h11 doing the HTTP) on `network.py`'s
streams, kept and handed out by plain asyncio bookkeeping.

httpcore's own pool (`AsyncConnectionPool`) costs a kept-alive request about
0.2 ms after the daemon sat idle, before its head is written, none of it
HTTP: a queue entry with an `anyio.Event` (set at once, made through
`sniffio`), the whole pool's state walked, a shielded cancel scope entered
with nothing to close, and an `AsyncHTTPConnection` around the HTTP/1.1
connection, whose `anyio.Lock` yields to the event loop once per request
though no one else holds it. Here a request takes the most
recently used idle connection of its origin (checked as httpcore checks it:
`has_expired`, a keep-alive expiry or a server that closed it while idle) or
opens one, as httpcore does (connect, then TLS with the pool's context and
ALPN `http/1.1`), and sends on it through the connection's public
`handle_async_request`. The response's stream hands the connection back
when closed: kept while idle (at most `max_keepalive_connections`),
dropped when closed. `max_connections` bounds connections open and opening;
a request over it waits for one (httpcore's `PoolTimeout` after the pool
timeout). A request whose kept-alive connection dies before any byte of the
answer is sent once more on a new connection (`_resend`). The HTTP/1.1
connection's own `anyio.Lock` (`_state_lock`) yields to the loop too; where
httpcore keeps it so, it is swapped for an asyncio lock, which does not
yield when free (`_quick_state_lock`). The connections are `head.HeadConnection`s:
a model stream request's head is written from kept bytes.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import types
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Iterable

import httpcore

from agentd.providers.head import HeadConnection


class ModelPool:
    """What httpx's transport sends through (`handle_async_request`, `aclose`)."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int | None,
        max_keepalive_connections: int | None,
        keepalive_expiry: float | None,
        network_backend: httpcore.AsyncNetworkBackend,
    ) -> None:
        self._ssl_context = ssl_context
        self._max_connections = max_connections if max_connections is not None else 1 << 30
        keep = max_keepalive_connections if max_keepalive_connections is not None else 1 << 30
        self._max_idle = min(keep, self._max_connections)
        self._keepalive_expiry = keepalive_expiry
        self._backend = network_backend
        # Idle connections, the most recently used last; those sending or
        # streaming a response; how many are being opened.
        self._idle: list[httpcore.AsyncHTTP11Connection] = []
        self._busy: set[httpcore.AsyncHTTP11Connection] = set()
        self._opening = 0
        # Requests waiting for room under `max_connections`: all woken when a
        # connection goes idle or away, each then looks again.
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # Set by `aclose`: a request its close cut short is not sent again.
        self._closed = False
        # Each connection's network stream, asked how much it has received.
        self._streams: weakref.WeakKeyDictionary[
            httpcore.AsyncHTTP11Connection, httpcore.AsyncNetworkStream
        ] = weakref.WeakKeyDictionary()
        # How many bytes each idle connection had received when it went idle
        # (any byte since makes it unusable: `has_expired`); kept there, off
        # the path from a request to its head's write.
        self._received_idle: weakref.WeakKeyDictionary[httpcore.AsyncHTTP11Connection, int] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def connections(self) -> list[httpcore.AsyncHTTP11Connection]:
        """The open connections, busy ones first (as httpcore's pool's `connections`)."""
        return [*self._busy, *self._idle]

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        if request.url.scheme not in (b"http", b"https"):
            scheme = request.url.scheme.decode("ascii", "replace")
            raise httpcore.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{scheme}://'."
            )
        connection, reused = await self._acquire(request)
        try:
            response = await connection.handle_async_request(request)
        except BaseException as exc:
            # The connection closed itself (httpcore closes it on any failure
            # before the response); given back all the same, or it would count.
            await self._release(connection)
            if self._closed or not reused:
                raise
            # Bytes received then and now: the same, nothing of an answer came.
            quiet = self._received_idle.get(connection)
            if not _died_unanswered(exc, quiet, self._received(connection)):
                raise
            response, connection = await self._resend(request)
        assert isinstance(response.stream, AsyncIterable)
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_PooledStream(response.stream, self, connection),
            extensions=response.extensions,
        )

    def _received(self, connection: httpcore.AsyncHTTP11Connection) -> int | None:
        stream = self._streams.get(connection)
        received = stream.get_extra_info("received_bytes") if stream is not None else None
        return received if isinstance(received, int) else None

    async def _resend(
        self, request: httpcore.Request
    ) -> tuple[httpcore.Response, httpcore.AsyncHTTP11Connection]:
        """`request` once more, on a new connection: its kept-alive one died
        before a byte of the answer came. The server most likely closed it
        idle as the request went out (its keep-alive timeout is its own), so
        the request was never read: browsers and the OpenAI SDK send it
        again, httpcore does not. The idle ones are left: each is checked
        when taken."""
        connection, _ = await self._acquire(request, fresh=True)
        try:
            response = await connection.handle_async_request(request)
        except BaseException:
            await self._release(connection)
            raise
        return response, connection

    async def _acquire(
        self, request: httpcore.Request, *, fresh: bool = False
    ) -> tuple[httpcore.AsyncHTTP11Connection, bool]:
        """A connection for `request` (a new one if `fresh`), and whether it
        was kept alive from an earlier request."""
        origin = request.url.origin
        deadline: float | None = None
        while True:
            connection, stale = (None, []) if fresh else self._take_idle(origin)
            if stale:
                try:
                    await _close(stale)
                except BaseException:
                    if connection is not None:
                        self._idle.append(connection)  # not lost with the request
                    raise
            if connection is not None:
                self._busy.add(connection)
                return connection, True
            if len(self._busy) + len(self._idle) + self._opening < self._max_connections:
                return await self._connect(request), False
            if self._idle:
                # Full, and an idle connection is to another origin: it makes room.
                await _close([self._idle.pop(0)])
                continue
            if deadline is None:
                timeout = request.extensions.get("timeout", {}).get("pool")
                if timeout is not None:
                    deadline = asyncio.get_running_loop().time() + timeout
            await self._wait(deadline)

    def _take_idle(
        self, origin: httpcore.Origin
    ) -> tuple[httpcore.AsyncHTTP11Connection | None, list[httpcore.AsyncHTTP11Connection]]:
        """The most recently used idle connection to `origin` still usable, and
        those found unusable on the way (out of the pool, to be closed)."""
        idle = self._idle
        stale: list[httpcore.AsyncHTTP11Connection] = []
        for i in range(len(idle) - 1, -1, -1):
            connection = idle[i]
            if not connection.can_handle_request(origin):
                continue
            del idle[i]
            # Keep-alive expiry passed, or the server closed it while idle.
            if connection.has_expired() or not connection.is_available():
                stale.append(connection)
                continue
            return connection, stale
        return None, stale

    async def _wait(self, deadline: float | None) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except TimeoutError:
            raise httpcore.PoolTimeout("no connection came free in time") from None
        finally:
            if not waiter.done():
                waiter.cancel()
            self._waiters.remove(waiter)

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _connect(self, request: httpcore.Request) -> httpcore.AsyncHTTP11Connection:
        """A new connection for `request`, as httpcore's `AsyncHTTPConnection`
        makes one (no retries: the pool httpx builds has none)."""
        origin = request.url.origin
        timeout = request.extensions.get("timeout", {}).get("connect")
        host = origin.host.decode("ascii")
        self._opening += 1
        try:
            stream = await self._backend.connect_tcp(host, origin.port, timeout=timeout)
            if origin.scheme == b"https":
                self._ssl_context.set_alpn_protocols(["http/1.1"])
                server_hostname = request.extensions.get("sni_hostname") or host
                try:
                    stream = await stream.start_tls(self._ssl_context, server_hostname, timeout)
                except BaseException:
                    await stream.aclose()
                    raise
        except BaseException:
            self._opening -= 1
            self._wake()
            raise
        self._opening -= 1
        connection = HeadConnection(
            origin=origin, stream=stream, keepalive_expiry=self._keepalive_expiry
        )
        _quick_state_lock(connection)
        self._streams[connection] = stream
        self._busy.add(connection)
        return connection

    async def _release(self, connection: httpcore.AsyncHTTP11Connection) -> None:
        """`connection`'s request is over: kept if idle, else closed; the idle
        ones past the keep-alive limit or expired are closed too."""
        self._busy.discard(connection)
        closing: list[httpcore.AsyncHTTP11Connection] = []
        if connection.is_idle():
            received = self._received(connection)
            if received is not None:
                self._received_idle[connection] = received
            self._idle.append(connection)
            kept: list[httpcore.AsyncHTTP11Connection] = []
            for other in self._idle:
                (closing if other.has_expired() else kept).append(other)
            if len(kept) > self._max_idle:
                closing += kept[: len(kept) - self._max_idle]  # the least recently used
                kept = kept[len(kept) - self._max_idle :]
            self._idle = kept
        elif not connection.is_closed():
            closing.append(connection)  # its close was interrupted: finished here
        self._wake()
        await _close(closing)

    async def aclose(self) -> None:
        self._closed = True
        closing = [*self._busy, *self._idle]
        self._busy.clear()
        self._idle.clear()
        self._wake()
        await _close(closing)

    async def __aenter__(self) -> ModelPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: types.TracebackType | None = None,
    ) -> None:
        await self.aclose()


class _PooledStream:
    """A response's body; closing it hands its connection back to the pool."""

    def __init__(
        self,
        stream: AsyncIterable[bytes],
        pool: ModelPool,
        connection: httpcore.AsyncHTTP11Connection,
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._connection = connection
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            aclose = getattr(self._stream, "aclose", None)
            if aclose is not None:
                await aclose()  # the connection is idle again, or closed
        finally:
            await self._pool._release(self._connection)


_UNANSWERED = (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError)


def _died_unanswered(exc: BaseException, before: int | None, after: int | None) -> bool:
    """`exc` ended a request whose connection received nothing meanwhile
    (counted by the network stream; unknown for another backend's: no)."""
    return isinstance(exc, _UNANSWERED) and before is not None and before == after


async def _close(connections: Iterable[httpcore.AsyncHTTP11Connection]) -> None:
    """Close each, all of them even if one's close is interrupted."""
    failure: BaseException | None = None
    for connection in connections:
        try:
            await connection.aclose()
        except BaseException as exc:  # a cancel: the rest are closed first
            failure = failure or exc
    if failure is not None:
        raise failure


class _QuickLock:
    """httpcore's `AsyncLock` interface on an asyncio lock: taken at once
    when free (no loop turn), waited for in order when held."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> _QuickLock:
        await self._lock.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: types.TracebackType | None = None,
    ) -> None:
        self._lock.release()


def _quick_state_lock(connection: httpcore.AsyncHTTP11Connection) -> None:
    """Swap the connection's state lock (`_state_lock`, not public: an
    `anyio.Lock` whose every acquire yields to the loop, 0.05-0.1 ms of a
    prompt's request in the daemon) for a `_QuickLock`. Where httpcore keeps it elsewhere or
    otherwise, the connection keeps its own (and a test fails)."""
    lock = connection.__dict__.get("_state_lock")
    if type(lock).__name__ == "AsyncLock" and type(lock).__module__ == "httpcore._synchronization":
        connection._state_lock = _QuickLock()  # type: ignore[assignment]
