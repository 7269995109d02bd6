"""Shared provider machinery: retries, timeouts, error mapping, cancellation, SSE."""

from __future__ import annotations

import asyncio
import importlib.machinery
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentd.errors import (
    ConfigError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamInterrupted,
    ModelTimeout,
)
from agentd.providers import (
    ModelRequest,
    ProviderConfig,
    StreamEnd,
    StreamEvent,
    TextDelta,
    Usage,
    make_provider,
)
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.http import parse_retry_after, provider_message, scrub
from agentd.providers.openai import OpenAIProvider
from agentd.providers.sse import SSEDecoder, SSEError, SSEEvent

KEY = "sk-test-SECRET-0123456789"
HOST = "api.example.com"

# --- helpers ----------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    """A response body: some reads, then a failure or a stall that never ends."""

    def __init__(
        self, reads: list[bytes], *, fail: Exception | None = None, stall: bool = False
    ) -> None:
        self.reads = reads
        self.fail = fail
        self.stall = stall
        self.stalled = asyncio.Event()
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.reads:
            yield chunk
        if self.fail is not None:
            raise self.fail
        if self.stall:
            self.stalled.set()
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


Reply = httpx.Response | Exception


class Server:
    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


class Sleeps:
    """An injected sleep: records the delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def ok(*reads: bytes, **body: Any) -> httpx.Response:
    stream = Body(list(reads) or [TEXT_OK], **body)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


TEXT = sse({"choices": [{"index": 0, "delta": {"content": "hi"}}]})
TEXT_OK = TEXT + sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
OK_EVENTS: list[StreamEvent] = [TextDelta("hi"), StreamEnd("end_turn", Usage())]


def status(code: int, body: Any = None, **headers: str) -> httpx.Response:
    content = json.dumps(body).encode() if not isinstance(body, str | None) else (body or "")
    return httpx.Response(code, headers=headers, content=content)


def make(
    server: Server, sleeps: Sleeps | None = None, rand: float = 0.5, **cfg: Any
) -> OpenAIProvider:
    config = ProviderConfig(base_url=f"https://{HOST}/v1", api_key=KEY, model="m", **cfg)
    return OpenAIProvider(
        config,
        transport=httpx.MockTransport(server),
        sleep=sleeps or Sleeps(),
        rand=lambda: rand,
    )


def request() -> ModelRequest:
    from agentd.messages import user_text

    return ModelRequest("m", "", [user_text("hi")])


async def collect(p: OpenAIProvider) -> tuple[list[StreamEvent], ModelError | None]:
    events: list[StreamEvent] = []
    try:
        async for event in p.stream(request()):
            events.append(event)
    except ModelError as exc:
        return events, exc
    finally:
        await p.aclose()
    return events, None


def assert_no_key(error: ModelError) -> None:
    assert KEY not in error.message
    assert KEY not in str(error)
    assert KEY not in repr(error)
    assert KEY not in json.dumps(error.to_json())


# --- retries ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_429_retry_after_2_waits_and_succeeds() -> None:
    server = Server(status(429, {"error": {"message": "slow down"}}, **{"Retry-After": "2"}), ok())
    sleeps = Sleeps()
    events, error = await collect(make(server, sleeps))
    assert error is None
    assert events == OK_EVENTS
    assert sleeps.delays == [2.0]
    assert len(server.requests) == 2


@pytest.mark.asyncio
async def test_retry_after_3600_fails_fast() -> None:
    server = Server(status(429, {"error": {"message": "quota"}}, **{"Retry-After": "3600"}))
    sleeps = Sleeps()
    _, error = await collect(make(server, sleeps))
    assert isinstance(error, ModelHTTPError)
    assert error.status == 429
    assert error.message == (
        f"rate limited by {HOST}: retry after 3600 s exceeds the 30 s limit (quota)"
    )
    assert sleeps.delays == []
    assert len(server.requests) == 1


@pytest.mark.asyncio
async def test_retry_after_as_http_date_far_away_fails_fast() -> None:
    later = "Wed, 21 Oct 2099 07:28:00 GMT"
    server = Server(status(503, None, **{"Retry-After": later}))
    _, error = await collect(make(server))
    assert error is not None
    assert error.message.startswith(f"503 Service Unavailable from {HOST}: retry after ")
    assert error.message.endswith("exceeds the 30 s limit")


@pytest.mark.asyncio
async def test_retry_after_as_past_http_date_retries_at_once() -> None:
    server = Server(status(503, None, **{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), ok())
    sleeps = Sleeps()
    _, error = await collect(make(server, sleeps))
    assert error is None
    assert sleeps.delays == [0.0]


@pytest.mark.asyncio
async def test_500_503_then_200_with_jittered_backoff() -> None:
    server = Server(status(500, "boom"), status(503, {"error": "busy"}), ok())
    sleeps = Sleeps()
    events, error = await collect(make(server, sleeps, rand=0.5))
    assert error is None
    assert events == OK_EVENTS
    # full jitter: rand * min(8, 0.5 * 2**attempt)
    assert sleeps.delays == [0.25, 0.5]


@pytest.mark.asyncio
async def test_backoff_is_capped_and_retries_bounded() -> None:
    server = Server(*[status(502) for _ in range(7)])
    sleeps = Sleeps()
    _, error = await collect(make(server, sleeps, rand=1.0, max_retries=6))
    assert sleeps.delays == [0.5, 1, 2, 4, 8, 8]
    assert error is not None
    assert error.message == f"502 Bad Gateway from {HOST} (gave up after 7 attempts)"


@pytest.mark.asyncio
@pytest.mark.parametrize("code", [408, 409, 429, 500, 529])
async def test_retryable_statuses(code: int) -> None:
    server = Server(status(code), ok())
    _, error = await collect(make(server))
    assert error is None
    assert len(server.requests) == 2


@pytest.mark.asyncio
async def test_retry_that_would_pass_total_timeout_is_not_attempted() -> None:
    server = Server(status(429, None, **{"Retry-After": "20"}))
    sleeps = Sleeps()
    _, error = await collect(make(server, sleeps, total_timeout=10))
    assert sleeps.delays == []
    assert error is not None
    assert "(gave up: a retry would pass the 10 s limit)" in error.message


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (400, f"400 Bad Request from {HOST}: bad model name ***"),
        (
            401,
            f"401 Unauthorized from {HOST}: invalid api key *** (invalid_request_error)"
            " — check AGENTD_API_KEY",
        ),
        (
            404,
            f"404 Not Found from {HOST}: model not found ***"
            " — check AGENTD_BASE_URL and AGENTD_MODEL",
        ),
    ],
)
async def test_client_errors_no_retry_and_key_never_echoed(code: int, expected: str) -> None:
    words = {400: "bad model name", 401: "invalid api key", 404: "model not found"}[code]
    error_obj: dict[str, Any] = {"message": f"{words} {KEY}"}
    if code == 401:
        error_obj["type"] = "invalid_request_error"
    server = Server(status(code, {"error": error_obj}))
    sleeps = Sleeps()
    _, error = await collect(make(server, sleeps))
    assert isinstance(error, ModelHTTPError)
    assert error.status == code
    assert error.message == expected
    assert_no_key(error)
    assert len(server.requests) == 1
    assert sleeps.delays == []


@pytest.mark.asyncio
async def test_plain_text_and_html_error_bodies() -> None:
    server = Server(status(400, f"Authorization: Bearer {KEY} rejected\nmore"))
    _, error = await collect(make(server))
    assert error is not None
    assert error.message == f"400 Bad Request from {HOST}: Authorization: Bearer *** rejected"
    server = Server(status(403, "<html><body>Forbidden</body></html>"))
    _, error = await collect(make(server))
    assert error is not None
    assert error.message == f"403 Forbidden from {HOST} — check AGENTD_API_KEY"


@pytest.mark.asyncio
async def test_401_without_a_key_says_so() -> None:
    server = Server(status(401, {"error": {"message": "missing key"}}))
    p = OpenAIProvider(
        ProviderConfig(base_url=f"https://{HOST}/v1"), transport=httpx.MockTransport(server)
    )
    _, error = await collect(p)
    assert error is not None
    assert error.message.endswith("— AGENTD_API_KEY is not set")


@pytest.mark.asyncio
async def test_connect_error_retried_then_clear_error() -> None:
    server = Server(*[httpx.ConnectError("[Errno 111] Connection refused") for _ in range(4)])
    sleeps = Sleeps()
    _, error = await collect(make(server, sleeps))
    assert isinstance(error, ModelConnectionError)
    assert error.message == (
        f"cannot connect to {HOST}: [Errno 111] Connection refused (gave up after 4 attempts)"
    )
    assert len(sleeps.delays) == 3
    assert len(server.requests) == 4


@pytest.mark.asyncio
async def test_connect_error_then_success() -> None:
    server = Server(httpx.ConnectError("refused"), ok())
    events, error = await collect(make(server))
    assert error is None
    assert events == OK_EVENTS


@pytest.mark.asyncio
async def test_connect_timeout_retried_then_timeout_error() -> None:
    server = Server(*[httpx.ConnectTimeout("timed out") for _ in range(2)])
    _, error = await collect(make(server, max_retries=1, connect_timeout=5))
    assert isinstance(error, ModelTimeout)
    assert error.message == f"connecting to {HOST} timed out after 5 s (gave up after 2 attempts)"


@pytest.mark.asyncio
async def test_json_instead_of_event_stream() -> None:
    reply = httpx.Response(200, json={"error": {"message": "streaming unsupported"}})
    _, error = await collect(make(Server(reply)))
    assert error is not None
    assert error.message == (
        f"{HOST} answered with JSON instead of an event stream: streaming unsupported"
    )


# --- failures after headers -------------------------------------------------


@pytest.mark.asyncio
async def test_idle_stream_before_output_is_a_timeout() -> None:
    server = Server(ok(b": ping\n\n", fail=httpx.ReadTimeout("timed out")))
    events, error = await collect(make(server, read_idle_timeout=7))
    assert events == []
    assert isinstance(error, ModelTimeout)
    assert error.message == f"{HOST} sent nothing for 7 s"
    assert len(server.requests) == 1  # never retried once the response started


@pytest.mark.asyncio
async def test_idle_stream_after_output_is_interrupted() -> None:
    server = Server(ok(TEXT, fail=httpx.ReadTimeout("timed out")))
    events, error = await collect(make(server))
    assert events == [TextDelta("hi")]
    assert isinstance(error, ModelStreamInterrupted)
    assert error.message == f"{HOST} sent nothing for 60 s"


@pytest.mark.asyncio
async def test_total_deadline_bounds_a_stalled_stream() -> None:
    # The stall never ends by itself: only the total deadline can stop it.
    server = Server(ok(TEXT, stall=True))
    events, error = await collect(make(server, total_timeout=0.05))
    assert events == [TextDelta("hi")]
    assert isinstance(error, ModelStreamInterrupted)
    assert error.message == f"request to {HOST} took longer than the 0.05 s limit"


@pytest.mark.asyncio
async def test_total_deadline_before_output_is_a_timeout() -> None:
    server = Server(ok(b": ping\n\n", stall=True))
    events, error = await collect(make(server, total_timeout=0.05))
    assert events == []
    assert isinstance(error, ModelTimeout)


@pytest.mark.asyncio
async def test_protocol_error_mid_stream() -> None:
    fail = httpx.RemoteProtocolError("peer closed connection without sending complete body")
    server = Server(ok(TEXT, fail=fail))
    events, error = await collect(make(server))
    assert events == [TextDelta("hi")]
    assert isinstance(error, ModelStreamInterrupted)
    assert error.message.startswith(f"connection to {HOST} lost: peer closed")


# --- cancellation -----------------------------------------------------------


@pytest.mark.asyncio
async def test_aclose_closes_the_response() -> None:
    body = Body([TEXT], stall=True)
    server = Server(httpx.Response(200, stream=body))
    p = make(server)
    stream = p.stream(request())
    assert await anext(stream) == TextDelta("hi")
    assert not body.closed
    await stream.aclose()
    assert body.closed
    await p.aclose()


@pytest.mark.asyncio
async def test_cancelling_the_consumer_closes_the_response() -> None:
    body = Body([TEXT], stall=True)
    server = Server(httpx.Response(200, stream=body))
    p = make(server)

    async def consume() -> None:
        async for _ in p.stream(request()):
            pass

    task = asyncio.create_task(consume())
    await body.stalled.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert body.closed
    await p.aclose()


@pytest.mark.asyncio
async def test_cancel_during_backoff_is_not_swallowed() -> None:
    sleeping = asyncio.Event()

    async def sleep_forever(delay: float) -> None:
        sleeping.set()
        await asyncio.Event().wait()

    server = Server(status(503))
    config = ProviderConfig(base_url=f"https://{HOST}/v1", api_key=KEY)
    p = OpenAIProvider(config, transport=httpx.MockTransport(server), sleep=sleep_forever)

    async def consume() -> None:
        async for _ in p.stream(request()):
            pass

    task = asyncio.create_task(consume())
    await sleeping.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await p.aclose()


@pytest.mark.asyncio
async def test_stops_reading_after_done() -> None:
    body = Body([TEXT_OK + b"data: [DONE]\n\n"], stall=True)
    # The deadline only turns a regression into a failure instead of a hang.
    events, error = await collect(make(Server(httpx.Response(200, stream=body)), total_timeout=30))
    assert error is None
    assert events == OK_EVENTS
    assert body.closed


# --- when a request counts as sent -----------------------------------------------


def sent_request(on_sent: Any) -> ModelRequest:
    from agentd.messages import user_text

    return ModelRequest("m", "", [user_text("hi")], on_sent=on_sent)


@pytest.mark.asyncio
async def test_on_sent_fires_once_the_body_is_written_not_at_the_headers() -> None:
    """A server that holds its headers until a first token that never comes:
    on_sent still fires, as soon as the body is out, exactly once."""
    from agentd.testing.model_server import ModelServer

    async with ModelServer(hold_headers=True) as server:
        server.enqueue({"text": "late", "ttft": 600})
        config = ProviderConfig(base_url=server.openai_base_url, api_key=KEY, model="m")
        p = OpenAIProvider(config)
        sent = asyncio.Event()
        calls: list[str] = []

        def on_sent() -> None:
            calls.append("sent")
            sent.set()

        async def consume() -> None:
            async for _ in p.stream(sent_request(on_sent)):
                pass

        task = asyncio.create_task(consume())
        try:
            # The timeout only turns a regression (firing at the headers, 600 s
            # away) into a failure instead of a hang.
            await asyncio.wait_for(sent.wait(), 30)
            req = await server.wait_for(lambda e: e["type"] == "request")
            assert not [e for e in server.log if e["type"] == "first_chunk"]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await p.aclose()
        await server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == req["id"])
        assert calls == ["sent"]


@pytest.mark.asyncio
async def test_on_sent_fires_once_over_retries_and_a_whole_stream() -> None:
    from agentd.testing.model_server import ModelServer

    async with ModelServer() as server:
        server.enqueue({"status": 503})
        server.enqueue({"text": "hi there"})
        config = ProviderConfig(base_url=server.openai_base_url, api_key=KEY, model="m")
        p = OpenAIProvider(config, sleep=Sleeps())
        calls: list[str] = []
        try:
            async for event in p.stream(sent_request(lambda: calls.append("sent"))):
                calls.append(type(event).__name__)
        finally:
            await p.aclose()
        # Sent at the first attempt's body, never again, and before any event.
        assert calls == ["sent", "TextDelta", "TextDelta", "StreamEnd"]
        assert len(server.requests()) == 2


@pytest.mark.asyncio
async def test_on_sent_falls_back_to_the_response_without_a_tracing_transport() -> None:
    # MockTransport reports no trace events: the response's arrival is the fallback.
    server = Server(status(503), ok())
    calls: list[str] = []
    p = make(server)
    try:
        async for event in p.stream(sent_request(lambda: calls.append("sent"))):
            calls.append(type(event).__name__)
    finally:
        await p.aclose()
    assert calls == ["sent", "TextDelta", "StreamEnd"]


# --- pieces -----------------------------------------------------------------


def test_parse_retry_after() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("inf") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_provider_message_shapes() -> None:
    assert provider_message(b'{"error": {"message": "m", "type": "t"}}') == "m (t)"
    assert provider_message(b'{"error": "plain"}') == "plain"
    assert provider_message(b'{"detail": "d"}') == "d"
    assert provider_message(b'{"message": "x"}') == "x"
    assert provider_message(b"<!doctype html>") == ""
    assert provider_message(b"") == ""
    assert len(provider_message(b"y" * 5000)) == 500


def test_scrub() -> None:
    assert scrub(f"key={KEY}", [KEY]) == "key=***"
    assert scrub("Bearer abc.def", []) == "Bearer ***"
    assert scrub("x marks", ["x"]) == "x marks"  # placeholders are not secrets


def test_config_repr_hides_credentials() -> None:
    config = ProviderConfig(api_key=KEY, extra_headers=(("X-Api-Token", "t0ken!"), ("X-Org", "o")))
    text = repr(config)
    assert KEY not in text
    assert "t0ken!" not in text
    assert "api_key='***'" in text
    assert "('X-Org', 'o')" in text
    assert "t0ken!" in config.secrets()


def test_config_defaults_and_models() -> None:
    assert ProviderConfig().effective_base_url() == "https://api.openai.com/v1"
    assert ProviderConfig(kind="anthropic").effective_base_url() == "https://api.anthropic.com"
    assert ProviderConfig(base_url="http://h:1/v1/").effective_base_url() == "http://h:1/v1"
    config = ProviderConfig(model="big", fast_model="small")
    assert config.model_for("main") == "big"
    assert config.model_for("recall") == "small"
    assert ProviderConfig(model="big").model_for("extract") == "big"


def test_config_validation() -> None:
    with pytest.raises(ConfigError):
        ProviderConfig(kind="gemini")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        ProviderConfig(total_timeout=0)
    with pytest.raises(ConfigError):
        ProviderConfig(max_retries=-1)


@pytest.mark.asyncio
async def test_make_provider() -> None:
    openai = make_provider(ProviderConfig())
    anthropic = make_provider(ProviderConfig(kind="anthropic"))
    assert isinstance(openai, OpenAIProvider)
    assert openai.name == "openai"
    assert isinstance(anthropic, AnthropicProvider)
    assert anthropic.name == "anthropic"
    await openai.aclose()
    await anthropic.aclose()


# --- SSE decoder ------------------------------------------------------------


def decode(*reads: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [e for r in reads for e in decoder.feed(r)]
    return events + decoder.close()


def test_sse_basic_fields_and_comments() -> None:
    raw = b": hello\nevent: delta\nid: 7\ndata: a\ndata:b\nretry: 10\nweird\n\ndata: c\n\n"
    assert decode(raw) == [SSEEvent("delta", "a\nb", "7"), SSEEvent("message", "c", "7")]


def test_sse_line_endings_split_anywhere() -> None:
    raw = b"\xef\xbb\xbfdata: one\r\n\r\ndata: two\r\rdata: three\n\ndata: caf\xc3\xa9\r\n\r\n"
    expected = [
        SSEEvent("message", "one"),
        SSEEvent("message", "two"),
        SSEEvent("message", "three"),
        SSEEvent("message", "café"),
    ]
    assert decode(raw) == expected
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == expected
    for cut in range(len(raw)):
        assert decode(raw[:cut], raw[cut:]) == expected


def test_sse_blank_lines_without_data_dispatch_nothing() -> None:
    assert decode(b"event: x\n\n\n\ndata: y\n\n") == [SSEEvent("message", "y")]


def test_sse_end_of_stream() -> None:
    # Complete lines lacking only the final blank line are dispatched...
    assert decode(b"data: [DONE]\n") == [SSEEvent("message", "[DONE]")]
    # ...but an unterminated line is most likely cut off and dropped.
    assert decode(b'data: {"a": 1}\n\ndata: {"b"') == [SSEEvent("message", '{"a": 1}')]


def test_sse_very_long_line_in_many_reads() -> None:
    payload = b"z" * 3_000_000
    raw = b"data: " + payload + b"\n\n"
    events = decode(*[raw[i : i + 1000] for i in range(0, len(raw), 1000)])
    assert events == [SSEEvent("message", payload.decode())]


def test_sse_line_limit() -> None:
    decoder = SSEDecoder(max_line=100)
    decoder.feed(b"data: " + b"a" * 90)
    with pytest.raises(SSEError):
        decoder.feed(b"a" * 20)


def test_a_plain_http_endpoint_loads_no_ca_bundle_and_tls_still_fails_closed() -> None:
    """Local servers (Ollama, vLLM) are plain http: the client then skips the CA
    bundle (megabytes resident for nothing) with a context that verifies and
    trusts nothing, so no TLS connection could ever pass unverified; an https
    endpoint keeps httpx's verified default."""

    from agentd.providers.http import _tls_context

    local = _tls_context("http://127.0.0.1:11434/v1")
    assert isinstance(local, ssl.SSLContext)
    assert local.verify_mode == ssl.CERT_REQUIRED and local.check_hostname
    assert local.get_ca_certs() == []
    assert _tls_context("HTTPS://api.openai.com/v1") is True


@pytest.mark.parametrize("transport", ["stock", "model"])
async def test_a_request_through_the_connection_pool_imports_nothing(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    # httpcore asks sniffio which async library runs, three times a request: a
    # module that is not installed would be searched for on sys.path each time
    # (about 0.2 ms each, on every model request). Both httpx's own transport
    # and the model client's (httpcore's pool on `providers.network`).
    from agentd.providers.network import model_transport

    model = None
    if transport == "model":
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
        model = model_transport(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), limits)
        assert model is not None, "the model client's transport was not built"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    searched: list[str] = []
    search = importlib.machinery.PathFinder.find_spec

    def counting(cls: type, name: str, path: Any = None, target: Any = None) -> Any:
        searched.append(name)
        return search(name, path, target)

    try:
        async with httpx.AsyncClient(transport=model) as client:
            assert (await client.get(url)).text == "ok"  # the backends' first imports
            monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", classmethod(counting))
            assert (await client.get(url)).text == "ok"
            monkeypatch.undo()
    finally:
        server.close()
        await server.wait_closed()
    assert searched == []


# --- pre-connect ------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_preconnect_leaves_the_connection_the_next_request_goes_over() -> None:
    """Over real loopback: the pre-connect opens one connection and sends no
    model request; the request that follows goes over that connection. A
    second pre-connect right after is not made (the pool has one)."""
    from agentd.testing.model_server import ModelServer

    async with ModelServer() as server:
        config = ProviderConfig(base_url=server.openai_base_url, api_key=KEY, model="m")
        p = OpenAIProvider(config)
        try:
            connect = p.preconnect()
            assert connect is not None
            await connect
            assert server.accepted == 1 and server.requests() == []
            assert p.preconnect() is None
            events = [e async for e in p.stream(request())]
            assert isinstance(events[-1], StreamEnd)
            (main,) = server.requests()
            assert main["connection"] == 1 and server.accepted == 1
        finally:
            await p.aclose()


@pytest.mark.asyncio
async def test_a_request_does_not_wait_for_a_preconnect_that_is_not_answered() -> None:
    """A pre-connect whose answer never comes holds its own connection only: a
    model request sent meanwhile opens another and completes."""
    got_get = asyncio.Event()
    release = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET "):
            got_get.set()
            await release.wait()
        else:
            fields = dict(
                line.split(": ", 1) for line in head.decode().lower().split("\r\n")[1:] if line
            )
            await reader.readexactly(int(fields["content-length"]))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"connection: close\r\n\r\n" + TEXT_OK
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    p = OpenAIProvider(ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    connect = p.preconnect()
    assert connect is not None
    pending = asyncio.ensure_future(connect)
    try:
        await asyncio.wait_for(got_get.wait(), 30)
        events = [e async for e in p.stream(request())]
        assert events == OK_EVENTS
        assert not pending.done()
    finally:
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        release.set()
        await p.aclose()
        server.close()
        await server.wait_closed()


@pytest.mark.asyncio
async def test_a_preconnect_that_cannot_connect_says_nothing() -> None:
    # Port 9 (discard) is closed on a test machine: refused, never raised.
    p = OpenAIProvider(ProviderConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    try:
        connect = p.preconnect()
        assert connect is not None
        await connect
    finally:
        await p.aclose()


# --- the request object ----------------------------------------------------------


async def _read(request: httpx.Request) -> bytes:
    return b"".join([part async for part in request.stream])  # type: ignore[union-attr]


async def test_a_request_is_the_one_build_request_makes() -> None:
    """`ModelHTTP._request` keeps the client's headers merged with a request's
    instead of merging them for every request: the requests are the same,
    whatever the headers, the body's form and its length; with a cookie the
    server set, it is sent too."""
    from agentd.providers.body import RequestBody

    http = OpenAIProvider(
        ProviderConfig(base_url=f"https://{HOST}/v1", api_key=KEY, extra_headers=(("X-A", "1"),))
    )._http
    client = http._get_client()
    url = f"https://{HOST}/v1/chat/completions"
    bodies: list[bytes | RequestBody] = [
        b'{"a":1}',
        RequestBody([b'{"a":', b"[1,2]}"]),
        RequestBody([b'{"a":', b"[1,2,3]}"]),
        b'{"b":22}',
    ]
    for purpose in ("main", "recall", "main"):
        for body in bodies:
            headers = {"Accept": "text/event-stream", "X-Agentd-Purpose": purpose}
            ext = {"trace": lambda *a: None}
            ours = http._request(client, url, body, dict(headers), ext)
            if isinstance(body, RequestBody):
                # What makes httpx send a stream of known length unchunked.
                headers["Content-Length"] = str(body.length)
            theirs = client.build_request(
                "POST", url, content=body, headers=headers, extensions=ext
            )
            assert ours.method == theirs.method and ours.url == theirs.url
            assert ours.headers.raw == theirs.headers.raw
            assert ours.extensions == theirs.extensions
            assert await _read(ours) == await _read(theirs)
    client.cookies.set("lb", "7", domain=HOST)
    headers = {"Accept": "text/event-stream", "X-Agentd-Purpose": "main"}
    ours = http._request(client, url, b"{}", headers, None)
    assert ours.headers.get("Cookie") == "lb=7"
    chunks = RequestBody([b'{"a":', b"[1]}"])
    ours = http._request(client, url, chunks, headers, None)
    assert ours.headers.get("Cookie") == "lb=7"
    assert ours.headers.get("Content-Length") == str(chunks.length)
    assert "Transfer-Encoding" not in ours.headers
    assert await _read(ours) == b'{"a":[1]}'
    await http.aclose()
