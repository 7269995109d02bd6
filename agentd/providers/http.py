"""HTTP machinery shared by the providers: client, retries, deadlines, errors.

    ModelHTTP.stream()        request -> retries -> SSE events -> provider parser
      _open()                 send; retry 408/409/429/5xx and connect failures
      _send()                 the request to the connection pool (past httpx's
                              client and transport where nothing of theirs applies)
      _sse()                  read the body under the total deadline, decode SSE
    to_model_error()          THE one place httpx failures and error statuses
                              become `agentd.errors.ModelError`s

Retries happen only before the first byte of a successful response is read:
once a stream has started, a failure is final (replaying it would duplicate
text the user has already seen). Under these, the connection pool sends a
request once more when its kept-alive connection died before any byte of
the answer (`pool.ModelPool._resend`). Every error message names the host and is
scrubbed of credentials, including text copied from a response body.

"Sent": a caller's `on_sent` fires once the request body has been written to
the connection, reported by httpcore's `trace` extension
(`http11.send_request_body.complete`, `http2.send_request_body.complete`),
never from the response: several OpenAI-compatible servers send the headers
only with the first token. A transport that does not trace (a mock, a custom
one) falls back to the response's arrival, so it never fires later than that.

Timeouts: `connect_timeout` and `read_idle_timeout` are httpx's own (httpx's
read timeout applies to each read, which is the idle gap of a stream);
`total_timeout` is a deadline on the event loop clock, applied to each await
separately because an `asyncio.timeout` must never stay open across a
`yield` (it would cancel whatever the consumer is awaiting at the time).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import errno
import json
import logging
import math
import operator
import random
import re
import ssl
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Hashable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import httpcore
import httpx

from agentd import __version__
from agentd.errors import (
    ContextOverflow,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamInterrupted,
    ModelTimeout,
    describe_os_error,
)
from agentd.jsonenc import compact
from agentd.messages import ToolSpec
from agentd.providers.base import Purpose, StreamEvent
from agentd.providers.body import RequestBody
from agentd.providers.config import ProviderConfig
from agentd.providers.head import PlainHead
from agentd.providers.network import model_pool, model_transport
from agentd.providers.overflow import is_context_overflow, overflow_limit
from agentd.providers.pool import ModelPool
from agentd.providers.sse import SSEDecoder, SSEError, SSEEvent

log = logging.getLogger(__name__)
# httpx's own logger: its client logs each request it sends at INFO, and so
# does `ModelHTTP._send` for the requests it sends past the client.
_HTTPX_LOG = logging.getLogger("httpx")

Sleep = Callable[[float], Awaitable[None]]
Rand = Callable[[], float]

BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
RETRY_STATUSES = frozenset({408, 409, 429})
ERROR_BODY_LIMIT = 64 * 1024
MODELS_BODY_LIMIT = 8 * 1024 * 1024  # a model list (OpenRouter's is a few MB)
DETAIL_LIMIT = 500  # characters of a provider's error message kept in ours
# A pre-connect reads at most this much of its answer (an error page): more,
# and the connection is dropped rather than read further.
PRECONNECT_BODY_LIMIT = 64 * 1024
# A pre-connect is skipped when the client sent something this recently: its
# connection is in the pool (or on its way there). 5 s is the shortest idle
# time common servers keep a connection open for (uvicorn's default).
PRECONNECT_FRESH = 5.0

_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+")


class StreamParser(Protocol):
    """Turns one provider's SSE events into `StreamEvent`s."""

    @property
    def done(self) -> bool:
        """The provider said the stream is over; stop reading."""
        ...

    def feed(self, event: SSEEvent) -> list[StreamEvent]: ...

    def finish(self) -> list[StreamEvent]:
        """The body ended: the final events, or raise if it ended too early."""
        ...


class ModelHTTP:
    """One keep-alive `httpx.AsyncClient` and the request policy of a provider."""

    def __init__(
        self,
        config: ProviderConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Rand = random.random,
    ) -> None:
        self.config = config
        self.host = host_of(config.effective_base_url())
        self._transport = transport
        self._sleep = sleep
        self._rand = rand
        # Created on first use: building the SSL context costs tens of
        # milliseconds that the daemon's cold start should not pay.
        self._client: httpx.AsyncClient | None = None
        # Each endpoint URL parsed once: httpx parses a `str` on every request
        # (about half of `build_request`'s 0.17 ms), an `httpx.URL` it takes as is.
        self._urls: dict[str, httpx.URL] = {}
        # When the client last sent a request or a pre-connect (monotonic clock).
        self._used_at: float | None = None
        # A request's head but its Content-Length (Host, the client's default
        # headers merged with the request's), by URL and request headers: `_request`.
        self._headers: dict[tuple[str, tuple[tuple[str, str], ...]], httpx.Headers] = {}
        # " through the proxy HOST:PORT set in the environment" when requests
        # go through one: said in errors, where the proxy may be what failed.
        self._via = ""
        # `_core_request`'s kept parts (`_CoreHead`), by URL and request headers.
        self._core_heads: dict[tuple[str, tuple[tuple[str, str], ...]], _CoreHead | None] = {}
        # A response set a cookie (httpx's client keeps it): requests then
        # look in the client's jar, and go through the client if it holds one.
        self._cookies_set = False
        # The client's pool when `model_transport` made its transport: requests
        # are handed to it directly (`_send`).
        self._pool: ModelPool | None = None
        # The client's timeouts as a request's extension (`_timeouts`).
        self._timeout_dict: tuple[httpx.Timeout, dict[str, float | None]] | None = None

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            c = self.config
            verify = _tls_context(c.effective_base_url())
            limits = httpx.Limits(
                max_connections=32, max_keepalive_connections=8, keepalive_expiry=30.0
            )
            transport = self._transport
            if transport is None:
                # httpx's transport over our asyncio network backend (None:
                # httpx's own, e.g. for a proxy set in the environment).
                transport = model_transport(verify, limits)
            self._client = _client(
                self.host,
                transport=transport,
                verify=verify,
                timeout=httpx.Timeout(
                    connect=c.connect_timeout,
                    read=c.read_idle_timeout,
                    write=c.read_idle_timeout,
                    pool=c.connect_timeout,
                ),
                limits=limits,
                headers={"User-Agent": f"agentd/{__version__}"},
                # Never follow a redirect: the key goes only to the configured host.
                follow_redirects=False,
                event_hooks={"response": [self._saw_response]},
            )
            self._pool = model_pool(transport)
            if transport is None:
                proxy = _proxy_of(self._client, c.effective_base_url())
                self._via = f" through the proxy {proxy} set in the environment" if proxy else ""
        return self._client

    async def _saw_response(self, response: httpx.Response) -> None:
        """httpx's client, for each response it got (the pre-connect, the
        model listing, a request through it): one that set a cookie, which
        the client keeps, makes `_send` look in the jar."""
        if "set-cookie" in response.headers:
            self._cookies_set = True

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._pool = None
        if client is not None:
            await client.aclose()

    def fail(self, message: str) -> ModelError:
        """A provider-level stream error (bad event, error event), scrubbed."""
        return ModelError(scrub(message, self.config.secrets()))

    def event_json(self, event: SSEEvent) -> dict[str, Any]:
        try:
            data = json.loads(event.data)
        except ValueError:
            snippet = event.data[:80] + ("..." if len(event.data) > 80 else "")
            raise self.fail(f"malformed event from {self.host}: not JSON: {snippet!r}") from None
        if not isinstance(data, dict):
            raise self.fail(f"malformed event from {self.host}: expected a JSON object")
        return data

    async def stream(
        self,
        url: str,
        body: Mapping[str, Any] | bytes | RequestBody,
        *,
        headers: Mapping[str, str],
        purpose: Purpose,
        parser: StreamParser,
        on_sent: Callable[[], None] | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """POST `body` and yield the parser's events, then its final ones."""
        started = False
        try:
            all_headers = {
                **headers,
                "Accept": "text/event-stream",
                "Content-Type": "application/json",
                **dict(self.config.extra_headers),
                "X-Agentd-Purpose": purpose,
            }
            # Bytes or chunks: encoded by the provider, from per-message caches.
            content: bytes | RequestBody
            if isinstance(body, RequestBody):
                content = body.parts[0] if len(body.parts) == 1 else body
            else:
                content = body if isinstance(body, bytes) else json_bytes(body)
            # aclosing: leaving this loop early (done, error, cancel, aclose)
            # closes the inner generator now, which closes the HTTP response.
            source = self._sse(url, content, all_headers, on_sent)
            async with contextlib.aclosing(source) as events:
                async for sse in events:
                    for out in parser.feed(sse):
                        started = True
                        yield out
                    if parser.done:
                        break
                for out in parser.finish():
                    started = True
                    yield out
                if parser.done:
                    await _drain(events)
        except ModelError as exc:
            if started and not isinstance(exc, ModelStreamInterrupted):
                raise rebuild(exc, ModelStreamInterrupted) from exc
            raise

    def warm(self) -> None:
        """Build the client (and its SSL context) now; safe off the event loop.
        A client that cannot be built is each request's error, not the start's."""
        with contextlib.suppress(ModelError):
            self._get_client()

    def preconnect(self) -> Coroutine[Any, Any, None] | None:
        """What opens a connection to the endpoint now and leaves it in the
        client's pool, so that the next model request does not pay TCP's (and
        TLS's) handshake; None when the client was used in the last
        `PRECONNECT_FRESH` seconds (its connection is in the pool already, or
        on its way). httpx has no connect-only call: this is a GET of the base
        URL, without credentials, whose answer (an error page, most likely) is
        read and ignored. It goes where requests go (proxies from the
        environment included) and is no model request. A request sent while
        it connects gets a connection of its own, as it would without it."""
        now = time.monotonic()
        if self._used_at is not None and now - self._used_at < PRECONNECT_FRESH:
            return None
        self._used_at = now
        return self._preconnect()

    async def _preconnect(self) -> None:
        # Never raises (a failure is logged at debug level); cancellable.
        url = self.config.effective_base_url()
        try:
            client = self._get_client()
            async with asyncio.timeout(self.config.connect_timeout):
                async with client.stream("GET", url, headers={"Accept": "*/*"}) as response:
                    size = 0
                    async for chunk in response.aiter_raw():
                        size += len(chunk)
                        if size > PRECONNECT_BODY_LIMIT:
                            break  # not worth reading: the connection is dropped
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError, OSError, ModelError) as exc:
            log.debug("pre-connect to %s failed: %s", self.host, type(exc).__name__)

    async def get_json(self, url: str, headers: Mapping[str, str], timeout: float) -> Any:
        """GET a small JSON document (no retries); None on any failure."""
        try:
            client = self._get_client()
            async with asyncio.timeout(timeout):
                # The configured headers too: a gateway may want its own on every request.
                extra = dict(self.config.extra_headers)
                sent = {**headers, **extra, "Accept": "application/json"}
                response = await client.get(url, headers=sent)
                if not response.is_success or len(response.content) > MODELS_BODY_LIMIT:
                    return None
                return response.json()
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError, ValueError, ModelError):
            return None

    async def _sse(
        self,
        url: str,
        content: bytes | RequestBody,
        headers: dict[str, str],
        on_sent: Callable[[], None] | None = None,
    ) -> AsyncGenerator[SSEEvent, None]:
        deadline = asyncio.get_running_loop().time() + self.config.total_timeout
        sent = _Once(on_sent) if on_sent is not None else None
        response = await self._open(url, content, headers, deadline, sent)
        if sent is not None:
            sent()  # the fallback: a no-op once the body's write was traced
        chunks = response.aiter_bytes()
        decoder = SSEDecoder()
        try:
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await anext(chunks, None)
                except (httpx.HTTPError, TimeoutError) as exc:
                    raise self._error(exc) from exc
                if chunk is None:
                    break
                for event in decoder.feed(chunk):
                    yield event
            for event in decoder.close():
                yield event
        except SSEError as exc:
            raise self._error(exc) from exc
        finally:
            await response.aclose()

    async def _open(
        self,
        url: str,
        content: bytes | RequestBody,
        headers: dict[str, str],
        deadline: float,
        sent: _Once | None = None,
    ) -> httpx.Response:
        """Send until a 2xx event stream starts, retrying what may be retried."""
        client = self._get_client()
        loop = asyncio.get_running_loop()
        self._used_at = time.monotonic()
        extensions = {"trace": sent.trace} if sent is not None else None
        attempt = 0
        while True:
            cause: BaseException | None = None
            try:
                async with asyncio.timeout_at(deadline):
                    response = await self._send(client, url, content, headers, extensions)
            except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as exc:
                cause, error = exc, self._error(exc)
            else:
                if response.is_success and not _is_json(response):
                    return response
                error = await self._error_response(response, deadline)
            if not error.retryable:
                raise error from cause
            if attempt >= self.config.max_retries:
                note = f"gave up after {attempt + 1} attempts" if attempt else ""
                raise rebuild(error, note=note) from cause
            if error.retry_after is not None:
                delay = error.retry_after
            else:
                delay = self._rand() * min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt)
            if loop.time() + delay >= deadline:
                note = (
                    f"gave up: a retry would pass the {_seconds(self.config.total_timeout)} s limit"
                )
                raise rebuild(error, note=note) from cause
            attempt += 1
            await self._sleep(delay)

    async def _send(
        self,
        client: httpx.AsyncClient,
        url: str,
        content: bytes | RequestBody,
        headers: dict[str, str],
        extensions: dict[str, Any] | None,
    ) -> httpx.Response:
        """POST `content`; the response with its body still to read.

        Straight to the client's connection pool (`ModelPool`) when the
        client sends through one `model_transport` made and nothing of the
        client's own applies to the request: no cookie held (httpx sends
        them; the jar is looked in once a response set one), no credentials
        in the URL (httpx makes them Basic auth); a
        proxy from the environment means httpx's own transport, so no
        `ModelPool`. The rest of what `client.send` does is nothing for these
        requests (no auth, no event hooks, redirects not followed, the
        timeouts set here), and its transport's work is done here the same
        way: the `httpcore.Request` (`_core_request`), httpcore's exceptions
        as httpx's (`_as_httpx`), the `httpx.Response` around httpcore's,
        the cookies a server sets taken into the client, its log line. Both
        steps took 0.15-0.2 ms of a prompt's way to its request's head once
        the daemon had idled: httpx's `Request`, then its client's auth flow
        (an async generator), hooks and mount lookup and its transport's
        conversion and exception-mapping context."""
        pool = self._pool
        core = None
        # The jar is looked in only once a response set a cookie (`_saw_response`).
        if pool is not None and not (self._cookies_set and client.cookies):
            core = self._core_request(client, url, content, headers, extensions)
        if core is None or pool is None:
            request = self._request(client, url, content, headers, extensions)
            return await client.send(request, stream=True)
        if client.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        try:
            answer = await pool.handle_async_request(core)
        except _HTTPCORE_ERRORS as exc:
            raise _as_httpx(exc) from exc
        response = httpx.Response(
            answer.status,
            headers=answer.headers,
            stream=_AnswerStream(answer.stream),
            extensions=answer.extensions,
        )
        if "set-cookie" in response.headers:
            # As `client.send` keeps them; the next requests then go through it.
            self._cookies_set = True
            response.request = httpx.Request("POST", self._parsed(url))
            client.cookies.extract_cookies(response)
        if _HTTPX_LOG.isEnabledFor(logging.INFO):
            _HTTPX_LOG.info(
                'HTTP Request: %s %s "%s %d %s"',
                "POST",
                self._parsed(url),
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )
        return response

    def _core_request(
        self,
        client: httpx.AsyncClient,
        url: str,
        content: bytes | RequestBody,
        headers: dict[str, str],
        extensions: dict[str, Any] | None,
    ) -> httpcore.Request | None:
        """The `httpcore.Request` httpx's transport makes of `_request`'s
        request: its URL's parts and its head (kept per URL and headers, as
        `_request` keeps its `httpx.Headers`), the Content-Length last; None
        for a URL with credentials (httpx's client makes them Basic auth)."""

        def make() -> _CoreHead | None:
            parsed = self._parsed(url)
            if parsed.userinfo:
                return None
            target = httpcore.URL(
                scheme=parsed.raw_scheme,
                host=parsed.raw_host,
                port=parsed.port,
                target=parsed.raw_path,
            )
            return _CoreHead(target, self._head(client, url, parsed, headers).raw)

        kept = _kept(self._core_heads, (url, tuple(headers.items())), make)
        if kept is None:
            return None
        plain = kept.plain
        if plain is None and kept.plain_due:
            kept.plain_due = False
            # Made once this request is out (the loop's next turn): h11's
            # first check of a head, the first run of that code in the
            # process, took 0.2 ms of a cold first prompt's way.
            asyncio.get_running_loop().call_soon(kept.make_plain)
        length, body = _body_stream(content)
        digits = str(length).encode()
        timeout = self._timeouts(client)
        return _CoreRequest(
            kept.url,
            [*kept.head, (b"Content-Length", digits)],
            body,
            {"timeout": timeout, **extensions} if extensions else {"timeout": timeout},
            (plain, digits) if plain is not None else None,
        )

    def _head(
        self, client: httpx.AsyncClient, url: str, parsed: httpx.URL, headers: dict[str, str]
    ) -> httpx.Headers:
        """A request's head but its Content-Length, kept by URL and headers:
        what `build_request` and `Request` make, the client's headers updated
        by these, behind the Host header."""

        def make() -> httpx.Headers:
            both = httpx.Headers(client.headers)
            both.update(headers)
            return httpx.Headers([(b"Host", parsed.netloc), *both.raw])

        return _kept(self._headers, (url, tuple(headers.items())), make)

    def _request(
        self,
        client: httpx.AsyncClient,
        url: str,
        content: bytes | RequestBody,
        headers: dict[str, str],
        extensions: dict[str, Any] | None,
    ) -> httpx.Request:
        """`client.build_request("POST", url, ...)`, the same request, made
        without httpx's per-request header work: the request's whole head but
        its Content-Length (Host, the client's headers merged with these) is
        kept by URL and headers as an `httpx.Headers`, and the body handed
        over as a stream, which httpx takes with the headers as they are
        (httpx's public `stream=` form: no Host, Content-Length or
        Transfer-Encoding added); the Content-Length goes last, where httpx
        puts it. `build_request` took 0.2-0.3 ms of a steady prompt's path,
        most of it that merging; a `Request` from a header list still
        normalised each header on every request (0.18 ms after idle, 0.08 ms
        this way). The client's timeouts as a request carries them are kept
        too (`_timeouts`). A client holding cookies (a server set one) goes
        through `build_request`, which sends them."""
        parsed = self._parsed(url)
        if client.cookies:
            if isinstance(content, RequestBody):
                # Stated, so that httpx does not send the chunks chunked.
                headers = {**headers, "Content-Length": str(content.length)}
            return client.build_request(
                "POST", parsed, content=content, headers=headers, extensions=extensions
            )
        base = self._head(client, url, parsed, headers)
        length, stream = _body_stream(content)
        timeout = self._timeouts(client)
        # `Request` copies the headers it is given: the kept ones stay as they are.
        request = httpx.Request(
            "POST",
            parsed,
            headers=base,
            stream=stream,
            extensions={"timeout": timeout, **extensions} if extensions else {"timeout": timeout},
        )
        request.headers["Content-Length"] = str(length)
        if isinstance(stream, httpx.ByteStream):
            request.read()  # `request.content`, as `Request(content=bytes)` has it
        return request

    def _timeouts(self, client: httpx.AsyncClient) -> dict[str, float | None]:
        """`client.timeout.as_dict()`, made once per `Timeout` object (httpx
        replaces it, never changes it); only read by the transports."""
        kept = self._timeout_dict
        if kept is None or kept[0] is not client.timeout:
            kept = self._timeout_dict = (client.timeout, client.timeout.as_dict())
        return kept[1]

    def _parsed(self, url: str) -> httpx.URL:
        return _kept(self._urls, url, lambda: httpx.URL(url))

    async def _error_response(self, response: httpx.Response, deadline: float) -> ModelError:
        body = b""
        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) >= ERROR_BODY_LIMIT:
                        break
        except (httpx.HTTPError, TimeoutError):
            pass  # the status alone still makes a clear error
        finally:
            await response.aclose()
        return self._error(response, body[:ERROR_BODY_LIMIT])

    def _error(self, failure: httpx.Response | Exception, body: bytes = b"") -> ModelError:
        return to_model_error(failure, host=self.host + self._via, config=self.config, body=body)


def _client(host: str, **settings: Any) -> httpx.AsyncClient:
    """`httpx.AsyncClient(**settings)`; a proxy from the environment that
    this httpx cannot use (SOCKS without its optional package: an
    ImportError) is a `ModelConnectionError` saying so, raised again by each
    request, never a failed start of the daemon."""
    try:
        return httpx.AsyncClient(**settings)
    except ImportError as exc:
        raise ModelConnectionError(
            f"cannot reach {host} through the proxy set in the environment: {exc}"
        ) from exc


def _proxy_of(client: httpx.AsyncClient, url: str) -> str | None:
    """HOST:PORT of the proxy `client` sends `url` through (one set in the
    environment: httpx's choice, NO_PROXY included), never its credentials;
    None without one. httpx does not say so publicly: read from its
    transport for the URL and that transport's httpcore proxy pool, and None
    where those have moved (the errors then name only the endpoint)."""
    try:
        transport = client._transport_for_url(httpx.URL(url))
        proxy = getattr(getattr(transport, "_pool", None), "_proxy_url", None)
        if not isinstance(proxy, httpcore.URL):
            return None
        host = proxy.host.decode("ascii")
    except (AttributeError, httpx.InvalidURL, UnicodeDecodeError):
        return None
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{proxy.port}" if proxy.port is not None else host


def json_bytes(value: Any) -> bytes:
    """The one JSON form requests are sent in (compact, UTF-8 as is), from one
    kept encoder (`agentd.jsonenc`)."""
    return compact(value).encode()


# Each tool definition's JSON, by ToolSpec object: tool sets are built once
# (module constants, a client's declaration, an MCP server's listing per
# generation) and never changed in place, and their definitions (several KB)
# took about 0.1 ms to encode on every step. Holding the spec keeps its id
# from being reused; cleared whole when full.
_TOOL_JSON: dict[tuple[int, str], tuple[ToolSpec, bytes]] = {}
_TOOL_JSON_MAX = 512


def tools_json(
    tools: Sequence[ToolSpec], shape: Callable[[ToolSpec, bool], dict[str, Any]], kind: str
) -> bytes:
    """`json_bytes([shape(t, t is the last) for t in tools])`, each tool's JSON
    encoded once per spec object (`kind` names the shape)."""
    out: list[bytes] = []
    last = len(tools) - 1
    for i, tool in enumerate(tools):
        key = (id(tool), f"{kind}/last" if i == last else kind)
        hit = _TOOL_JSON.get(key)
        if hit is None:
            if len(_TOOL_JSON) >= _TOOL_JSON_MAX:
                _TOOL_JSON.clear()
            hit = _TOOL_JSON[key] = (tool, json_bytes(shape(tool, i == last)))
        out.append(hit[1])
    return b"[" + b",".join(out) + b"]"


class HeadCache:
    """A request body's head (its JSON before the messages, with the tool
    definitions) by what it is made of, for the few heads a daemon sends
    (the main request's, a side query's each): a session's steps and prompts
    send the same head, whose assembly (the traits, the tools' dicts, the
    JSON around the kept tool encodings) took 0.1-0.15 ms per request.

    `key` holds the request's plain values; `refs` the objects it is built
    from that are compared by identity (the provider's config, which settings
    replace and never change in place, and each `ToolSpec`, frozen): an entry
    is used only while every one of them is the very object it was built
    from, and holding them keeps their ids from being reused. Cleared whole
    when full."""

    MAX = 16

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[tuple[object, ...], Any]] = {}

    def get(self, key: Hashable, refs: tuple[object, ...]) -> Any:
        hit = self._entries.get((key, tuple(map(id, refs))))
        if hit is None or len(hit[0]) != len(refs):
            return None
        # Pairs compared in C (`map`), not by a generator's frame.
        return hit[1] if all(map(operator.is_, hit[0], refs)) else None

    def put(self, key: Hashable, refs: tuple[object, ...], value: Any) -> None:
        if len(self._entries) >= self.MAX:
            self._entries.clear()
        self._entries[(key, tuple(map(id, refs)))] = (refs, value)


def json_with(body: Mapping[str, Any], key: str, raw: bytes) -> bytes:
    """`json_bytes(body)` with the JSON of `body[key]` given already encoded
    (`raw`): the same bytes, the rest encoded as usual."""
    keys = list(body)
    at = keys.index(key)
    before = json_bytes({k: body[k] for k in keys[:at]})[:-1]
    out = [before, b"," if at else b"", json_bytes(key), b":", raw]
    after = keys[at + 1 :]
    out.append(b"," + json_bytes({k: body[k] for k in after})[1:] if after else b"}")
    return b"".join(out)


def _tls_context(base_url: str) -> ssl.SSLContext | bool:
    """What the client verifies TLS with. An `https` endpoint gets httpx's
    default (the certifi bundle, verified). A plain `http` one (Ollama, vLLM,
    llama.cpp on the machine or the LAN) never makes a TLS connection: the
    client talks to no other host and follows no redirect. It gets a context
    that still verifies but trusts no certificate, so a TLS connection would
    fail closed, without loading the CA bundle (about 2.5 MB resident and
    tens of milliseconds of the warm-up, for nothing).
    """
    if urlsplit(base_url).scheme.lower() == "https":
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


_K = TypeVar("_K")
_V = TypeVar("_V")


def _kept(cache: dict[_K, _V], key: _K, make: Callable[[], _V]) -> _V:
    """`cache[key]`, made by `make` the first time: the per-URL kept parts of
    a client's requests. A client talks to a URL or two; past 16 keys
    (something builds URLs per request) the cache starts again rather than grow."""
    try:
        return cache[key]
    except KeyError:
        pass
    if len(cache) >= 16:
        cache.clear()
    value = cache[key] = make()
    return value


def _body_stream(content: bytes | RequestBody) -> tuple[int, httpx.ByteStream | _BodyStream]:
    """A request body's length and the stream httpx (or the pool) reads it from."""
    if isinstance(content, RequestBody):
        return content.length, _BodyStream(content)
    return len(content), httpx.ByteStream(content)


class _BodyStream(httpx.AsyncByteStream):
    """A `RequestBody` as httpx streams it (`AsyncIteratorByteStream` does the
    same for `content=`): its parts, afresh on each iteration (a retry)."""

    __slots__ = ("_body",)

    def __init__(self, body: RequestBody) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._body:
            yield part


# httpcore's exceptions as httpx's transport raises them (its
# `map_httpcore_exceptions`): the same class names, the same message.
_HTTPX_ERRORS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
}
_HTTPCORE_ERRORS = tuple(_HTTPX_ERRORS)


def _as_httpx(exc: Exception) -> Exception:
    """httpx's exception for httpcore's `exc` (its most specific class), or
    `exc` itself when httpx has none."""
    for cls in type(exc).__mro__:
        mapped = _HTTPX_ERRORS.get(cls)
        if mapped is not None:
            return mapped(str(exc))
    return exc


class _CoreHead:
    """A direct request's kept parts (`ModelHTTP._core_request`): the URL as
    httpcore takes it, the head's raw headers but the Content-Length, and
    the head made once by h11 for the pool's connections (`PlainHead`; None
    until `make_plain` ran, or when the head is not plain)."""

    __slots__ = ("head", "plain", "plain_due", "url")

    def __init__(self, url: httpcore.URL, head: list[tuple[bytes, bytes]]) -> None:
        self.url = url
        self.head = head
        self.plain: PlainHead | None = None
        self.plain_due = True

    def make_plain(self) -> None:
        self.plain = PlainHead.of(self.url.target, self.head)


class _CoreRequest(httpcore.Request):
    """An `httpcore.Request` of parts already as httpcore keeps them (bytes,
    a header list, an `httpcore.URL`, an async stream), its documented
    attributes set as they are: `Request.__init__` checks and converts each
    header, the URL and the body (0.04 ms of a prompt's way to its request
    once the daemon had idled, 0.01 ms this way).
    `test_provider_send.py` fails if httpcore's requests gain an attribute."""

    def __init__(
        self,
        url: httpcore.URL,
        headers: list[tuple[bytes, bytes]],
        stream: AsyncIterable[bytes],
        extensions: dict[str, Any],
        kept_head: tuple[PlainHead, bytes] | None = None,
    ) -> None:
        self.method = b"POST"
        self.url = url
        self.headers = headers
        self.stream = stream
        self.extensions = extensions
        # The head as `pool.ModelPool`'s connections write it (`head.py`),
        # and the Content-Length's digits: the same bytes as `headers` make.
        self.kept_head = kept_head


class _AnswerStream(httpx.AsyncByteStream):
    """httpcore's response body as httpx's transport hands it over
    (`AsyncResponseStream`): its failures as httpx's exceptions."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Iterable[bytes] | AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._stream
        assert isinstance(stream, AsyncIterable)
        try:
            async for part in stream:
                yield part
        except _HTTPCORE_ERRORS as exc:
            raise _as_httpx(exc) from exc

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


class _Once:
    """A callback run at most once: by the `trace` of the body's write, else later
    by the caller as a fallback."""

    __slots__ = ("_callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback: Callable[[], None] | None = callback

    def __call__(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        # httpcore prefixes its events with the protocol: "http11." or "http2.".
        if event.endswith(".send_request_body.complete"):
            self()


def to_model_error(
    failure: httpx.Response | Exception,
    *,
    host: str,
    config: ProviderConfig,
    body: bytes = b"",
) -> ModelError:
    """Map an httpx exception, an error response (with its body) or our own
    deadline / SSE failure to a clear, credential-free `ModelError`."""
    err: ModelError
    if isinstance(failure, httpx.Response):
        err = _status_error(failure, body, host, config)
    elif (exhausted := _out_of_descriptors(failure)) is not None:
        # Said as what it is: the daemon's file descriptors, not the endpoint.
        err = ModelConnectionError(
            f"agentd has no file descriptor left to reach {host}: "
            f"{describe_os_error(exhausted)}; too many files or connections are open"
        )
    elif isinstance(failure, httpx.ConnectTimeout):
        err = ModelTimeout(
            f"connecting to {host} timed out after {_seconds(config.connect_timeout)} s",
            retryable=True,
        )
    elif isinstance(failure, httpx.PoolTimeout):
        err = ModelTimeout(
            f"no free connection to {host} within {_seconds(config.connect_timeout)} s"
        )
    elif isinstance(failure, httpx.TimeoutException):
        err = ModelTimeout(f"{host} sent nothing for {_seconds(config.read_idle_timeout)} s")
    elif isinstance(failure, httpx.ConnectError):
        err = ModelConnectionError(f"cannot connect to {host}: {_reason(failure)}", retryable=True)
    elif isinstance(failure, httpx.NetworkError | httpx.RemoteProtocolError):
        err = ModelConnectionError(f"connection to {host} lost: {_reason(failure)}")
    elif isinstance(failure, TimeoutError):
        err = ModelTimeout(
            f"request to {host} took longer than the {_seconds(config.total_timeout)} s limit"
        )
    elif isinstance(failure, SSEError):
        err = ModelError(f"malformed event stream from {host}: {failure}")
    else:  # invalid URL, proxy failure, unsupported scheme, decoding error...
        err = ModelConnectionError(f"request to {host} failed: {_reason(failure)}")
    return rebuild(err, message=scrub(err.message, config.secrets()))


def _status_error(
    response: httpx.Response, body: bytes, host: str, config: ProviderConfig
) -> ModelError:
    status = response.status_code
    detail = provider_message(body)
    tail = f": {detail}" if detail else ""
    if response.is_success:  # a JSON answer where an event stream was expected
        return ModelHTTPError(
            f"{host} answered with JSON instead of an event stream{tail}", status=status
        )
    head = f"{status} {httpx.codes.get_reason_phrase(status) or 'error'} from {host}"
    raw = body.decode("utf-8", "replace")
    if is_context_overflow(status, raw):
        # Not a dead end: the turn engine compacts the history and retries.
        return ContextOverflow(
            f"the conversation does not fit the model's context window ({head}{tail})",
            status=status,
            limit=overflow_limit(raw),
        )
    retryable = status in RETRY_STATUSES or status >= 500
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if retryable and retry_after is not None and retry_after > config.max_retry_after:
        who = f"rate limited by {host}" if status == 429 else head
        return ModelHTTPError(
            f"{who}: retry after {_seconds(retry_after)} s exceeds the "
            f"{_seconds(config.max_retry_after)} s limit{f' ({detail})' if detail else ''}",
            status=status,
            retry_after=retry_after,
        )
    return ModelHTTPError(
        head + tail + _hint(status, config, body, detail),
        status=status,
        retryable=retryable,
        retry_after=retry_after,
    )


def _hint(status: int, config: ProviderConfig, body: bytes = b"", detail: str = "") -> str:
    if config.set_by and (status in (401, 403) or status == 404 or 300 <= status < 400):
        # The endpoint and its credentials are not the settings': naming
        # AGENTD_* would send the user to the wrong place.
        if status in (401, 403):
            return f" — check the headers {config.set_by} set for the provider"
        return f" — check the base URL {config.set_by} set for the provider, and AGENTD_MODEL"
    if status in (401, 403):
        return " — check AGENTD_API_KEY" if config.api_key else " — AGENTD_API_KEY is not set"
    if status == 404 or 300 <= status < 400:
        return " — check AGENTD_BASE_URL and AGENTD_MODEL"
    if status in (400, 422):
        advice = _parameter_advice(rejected_parameter(body, detail), config, detail)
        return f" — {advice}" if advice else ""
    return ""


# How endpoints name the request field they refuse: OpenAI's `error.param`,
# or the words of OpenAI ("Unsupported parameter: 'max_tokens'"), of vLLM and
# other compatible servers ("Unrecognized request argument supplied: x",
# "Extra inputs are not permitted" at a field) and of Anthropic
# ("thinking.budget_tokens: Input should be ...").
_PARAM_PATTERNS = (
    re.compile(r"[Uu]nsupported (?:parameter|value): '([\w.]+)'"),
    re.compile(r"[Uu]nrecognized request arguments? supplied: ([\w.]+)"),
    re.compile(r"^([a-z_]+(?:\.[a-z_]+)*): "),
    re.compile(r"`([a-z_]+(?:\.[a-z_]+)*)`"),
    re.compile(r"'([a-z_]+)'"),
)


def rejected_parameter(body: bytes, detail: str) -> str | None:
    """The request field a 400 names, if any."""
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    if isinstance(param, str) and param:
        return param
    for pattern in _PARAM_PATTERNS:
        match = pattern.search(detail)
        if match:
            return match.group(1)
    return None


_REASONING_TEXT_ADVICE = (
    "this endpoint is particular about reasoning text in the history: "
    "set replayReasoning = true (or false) in the agentd config"
)
# (provider kind, refused field) -> what to change in agentd's settings.
_PARAMETER_ADVICE = {
    ("openai", "max_tokens"): (
        "this model takes max_completion_tokens, not max_tokens: "
        "set reasoningModel = true in the agentd config"
    ),
    ("openai", "max_completion_tokens"): (
        "this endpoint takes max_tokens: set reasoningModel = false in the agentd config"
    ),
    ("openai", "reasoning_effort"): (
        "set reasoningEffort to a level this model takes, or remove it from the agentd config"
    ),
    ("anthropic", "thinking"): (
        "check thinking.budgetTokens (at least 1024 and below maxOutputTokens) in the "
        "agentd config, or turn thinking off for a model that cannot think"
    ),
    ("anthropic", "max_tokens"): (
        "check maxOutputTokens in the agentd config against this model's output limit"
    ),
    ("anthropic", "cache_control"): (
        "this endpoint takes no cache_control: set promptCaching = false in the agentd config"
    ),
}


def _parameter_advice(param: str | None, config: ProviderConfig, detail: str) -> str:
    """What to change in agentd's settings when an endpoint refuses a field it sent."""
    if "reasoning_content" in detail:
        # DeepSeek's thinking models require it back after a tool call; other
        # servers refuse it in the history.
        return _REASONING_TEXT_ADVICE
    if param is None:
        return ""
    leaf = param.rsplit(".", 1)[-1]
    if "thinking" in param or leaf == "budget_tokens":
        leaf = "thinking"
    return _PARAMETER_ADVICE.get((config.kind, leaf), "")


def provider_message(payload: bytes | str | Mapping[str, Any]) -> str:
    """The provider's own words from an error body or error event, if any.

    Understands `{"error": {"message"}}` (OpenAI, Anthropic), `{"error": "..."}`,
    `{"message"}` and `{"detail"}`; otherwise a short plain-text body is used
    as is, and HTML error pages are skipped.
    """
    data: Any = payload
    if not isinstance(payload, Mapping):
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        try:
            data = json.loads(text)
        except ValueError:
            line = text.strip().split("\n", 1)[0].strip()
            return "" if line.startswith("<") else line[:DETAIL_LIMIT]
    message: Any = None
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, Mapping):
            message = error.get("message")
            kind = error.get("type") or error.get("code")
            if isinstance(message, str) and isinstance(kind, str) and kind not in message:
                message = f"{message} ({kind})"
        else:
            message = error or data.get("message") or data.get("detail")
    return message[:DETAIL_LIMIT] if isinstance(message, str) else ""


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait, from delta-seconds or an HTTP date; None if unusable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def scrub(text: str, secrets: list[str]) -> str:
    # Keys shorter than 4 characters are placeholders ("x"), not secrets;
    # replacing them would mangle every message.
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return _BEARER.sub(r"\1 ***", text)


def rebuild(
    err: ModelError,
    cls: type[ModelError] | None = None,
    *,
    message: str | None = None,
    note: str = "",
) -> ModelError:
    """A copy of `err` with another class and/or message (errors are immutable)."""
    text = err.message if message is None else message
    if note:
        text = f"{text} ({note})"
    kind = cls or type(err)
    if issubclass(kind, ContextOverflow):
        limit = err.limit if isinstance(err, ContextOverflow) else None
        return kind(text, status=err.status, limit=limit)
    return kind(text, status=err.status, retryable=err.retryable, retry_after=err.retry_after)


def host_of(url: str) -> str:
    try:
        netloc = httpx.URL(url).netloc.decode("ascii")
    except (httpx.InvalidURL, UnicodeDecodeError):
        netloc = ""
    return netloc or url or "the model endpoint"


def parse_tool_arguments(text: str) -> dict[str, Any] | None:
    """A tool call's arguments, or None unless they are one whole JSON object."""
    if not text.strip():
        return {}  # a call without parameters may stream no arguments at all
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def as_int(value: Any) -> int:
    """A token count from a provider's JSON; anything odd counts as 0."""
    return value if isinstance(value, int) else 0


def _is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("application/json")


def _out_of_descriptors(exc: BaseException) -> OSError | None:
    """The EMFILE / ENFILE behind an exception (httpx wraps httpcore wraps OSError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EMFILE, errno.ENFILE):
            return current
        current = current.__cause__ or current.__context__
    return None


def _reason(exc: BaseException) -> str:
    """What went wrong, for an error message (never empty)."""
    return str(exc) or type(exc).__name__


def _seconds(value: float) -> str:
    """`30`, `2.5`: seconds as people write them."""
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


DRAIN_SECONDS = 0.5


async def _drain(events: AsyncGenerator[SSEEvent, None]) -> None:
    """Read a finished stream to its end, so the connection goes back to the pool.

    Closing a response whose body was not fully read makes httpcore drop the
    connection: every model request would then pay a new TCP (and TLS)
    handshake. The end of the body follows the final event at once; the
    timeout only guards against a server that keeps the stream open.
    """
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass
    except (TimeoutError, ModelError):
        pass


class HTTPProvider:
    """What the HTTP providers share: a `ModelHTTP`, the endpoint URL, warm-up and close.

    Subclasses set `name` and `path` (appended to the configured base URL) and
    implement `stream`.
    """

    name = ""
    path = ""

    def __init__(
        self,
        config: ProviderConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Rand = random.random,
    ) -> None:
        self.config = config
        self._http = ModelHTTP(config, transport=transport, sleep=sleep, rand=rand)
        self._url = f"{config.effective_base_url()}{self.path}"

    def warm(self) -> None:
        self._http.warm()

    def preconnect(self) -> Coroutine[Any, Any, None] | None:
        return self._http.preconnect()

    async def aclose(self) -> None:
        await self._http.aclose()
