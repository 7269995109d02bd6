"""The model client's stream requests handed to its `ModelPool` directly
(`ModelHTTP._send`), past httpx's client and transport: over real loopback,
the request is byte for byte the one httpx sends, the client's own
behaviour still applies where it has any (cookies, credentials in the URL,
a proxy from the environment), and failures, retries and a cancel are
what they were through httpx."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterable
from typing import Any

import httpcore
import httpx
import pytest

from agentd.errors import ModelConnectionError, ModelStreamInterrupted
from agentd.messages import user_text
from agentd.providers import ModelRequest, ProviderConfig, StreamEnd, TextDelta
from agentd.providers.body import RequestBody
from agentd.providers.http import ModelHTTP, _as_httpx
from agentd.providers.openai import OpenAIProvider
from agentd.testing.model_server import ModelServer
from tests.unit.http_recorder import Recorder

HEADERS = {
    "Authorization": "Bearer sk-x",
    "Accept": "text/event-stream",
    "Content-Type": "application/json",
    "X-Agentd-Purpose": "main",
}
ANSWER = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'


def header(raw: bytes, name: bytes) -> bytes | None:
    for line in raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def read_all(response: httpx.Response) -> bytes:
    try:
        return b"".join([chunk async for chunk in response.aiter_bytes()])
    finally:
        await response.aclose()


async def test_the_direct_request_is_the_one_httpx_sends() -> None:
    """Bytes and parts, each purpose's headers: what reaches the server
    through `_send` (straight to the pool) equals what `client.send` of
    `client.build_request`'s request sends, byte for byte, and through
    the one kept-alive connection."""
    async with Recorder(ANSWER) as server:
        http = ModelHTTP(ProviderConfig(base_url=server.base, api_key="sk-x", model="m"))
        client = http._get_client()
        assert http._pool is not None
        url = f"{server.base}/chat/completions"
        sent_past: list[str] = []
        send = client.send

        async def through_client(request: httpx.Request, **kw: Any) -> httpx.Response:
            sent_past.append(request.method)
            return await send(request, **kw)

        client.send = through_client  # type: ignore[method-assign]
        try:
            bodies: list[bytes | RequestBody] = [
                b'{"a":1}',
                RequestBody([b'{"a":', b"[1,2]}"]),
            ]
            for purpose in ("main", "recall"):
                for body in bodies:
                    headers = {**HEADERS, "X-Agentd-Purpose": purpose}
                    assert await read_all(await http._send(client, url, body, headers, None)) == (
                        ANSWER
                    )
                    ours = server.requests[-1]
                    explicit = dict(headers)
                    if isinstance(body, RequestBody):
                        explicit["Content-Length"] = str(body.length)
                    theirs_request = client.build_request(
                        "POST", url, content=bytes(body), headers=explicit
                    )
                    await read_all(await send(theirs_request, stream=True))
                    assert ours == server.requests[-1]
            assert sent_past == []  # none of ours went through the client
            assert server.accepted == 1
        finally:
            await http.aclose()


class Recording:
    """A pool that keeps the `httpcore.Request`s it is handed, and fails them."""

    def __init__(self) -> None:
        self.requests: list[httpcore.Request] = []

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        self.requests.append(request)
        raise httpcore.ConnectError("recorded")

    async def aclose(self) -> None:
        pass


async def body_of(request: httpcore.Request) -> bytes:
    assert isinstance(request.stream, AsyncIterable)
    return b"".join([part async for part in request.stream])


async def test_the_core_request_is_the_one_httpx_s_transport_hands_its_pool() -> None:
    """`_core_request` beside httpx's transport converting `_request`'s
    request: the same attributes (none missing: a new one in httpcore fails
    here), method, URL parts, head, extensions and body."""
    http = ModelHTTP(ProviderConfig(base_url="https://example.test/v1", model="m"))
    client = http._get_client()
    url = "https://example.test/v1/chat/completions"
    transport = httpx.AsyncHTTPTransport()
    recorded = Recording()
    transport._pool = recorded  # type: ignore[assignment]
    ext = {"trace": lambda *a: None}
    try:
        for body in (b'{"a":1}', RequestBody([b'{"a":', b"[1,2]}"])):
            for purpose in ("main", "recall"):
                headers = {**HEADERS, "X-Agentd-Purpose": purpose}
                ours = http._core_request(client, url, body, dict(headers), ext)
                assert ours is not None
                with pytest.raises(httpx.ConnectError):
                    await transport.handle_async_request(
                        http._request(client, url, body, dict(headers), ext)
                    )
                theirs = recorded.requests[-1]
                # And the head as kept for the pool's connections (`head.py`).
                assert set(vars(ours)) == {*vars(theirs), "kept_head"}
                assert (ours.method, ours.headers) == (theirs.method, theirs.headers)
                assert (ours.url.scheme, ours.url.host, ours.url.port, ours.url.target) == (
                    theirs.url.scheme,
                    theirs.url.host,
                    theirs.url.port,
                    theirs.url.target,
                )
                assert ours.extensions == theirs.extensions
                assert await body_of(ours) == await body_of(theirs) == bytes(body)
    finally:
        await http.aclose()


async def test_a_cookie_the_server_sets_is_kept_and_sent_through_the_client() -> None:
    async with Recorder(ANSWER, extra=b"set-cookie: lb=7; Path=/\r\n") as server:
        http = ModelHTTP(ProviderConfig(base_url=server.base, api_key="sk-x", model="m"))
        client = http._get_client()
        url = f"{server.base}/chat/completions"
        try:
            await read_all(await http._send(client, url, b"{}", dict(HEADERS), None))
            assert header(server.requests[0], b"cookie") is None
            assert client.cookies.get("lb") == "7"  # taken in, as httpx's client does
            await read_all(await http._send(client, url, b"{}", dict(HEADERS), None))
            assert header(server.requests[1], b"cookie") == b"lb=7"
        finally:
            await http.aclose()


async def test_a_cookie_the_pre_connect_got_is_sent_with_the_next_request() -> None:
    """A cookie set on a response of httpx's client (the pre-connect's GET)
    is in its jar: the model request after it goes through the client,
    which sends it."""
    async with Recorder(ANSWER, extra=b"set-cookie: lb=9; Path=/\r\n") as server:
        http = ModelHTTP(ProviderConfig(base_url=server.base, api_key="sk-x", model="m"))
        client = http._get_client()
        url = f"{server.base}/chat/completions"
        try:
            preconnect = http.preconnect()
            assert preconnect is not None
            await preconnect
            assert server.requests[0].startswith(b"GET ")
            await read_all(await http._send(client, url, b"{}", dict(HEADERS), None))
            assert header(server.requests[1], b"cookie") == b"lb=9"
        finally:
            await http.aclose()


async def test_credentials_in_the_url_are_httpx_s_basic_auth() -> None:
    async with Recorder(ANSWER) as server:
        base = server.base.replace("http://", "http://user:pw@")
        p = OpenAIProvider(ProviderConfig(base_url=base, model="m"))
        try:
            events = [e async for e in p.stream(ModelRequest("m", "", [user_text("hi")]))]
            assert events[0] == TextDelta("hi")
        finally:
            await p.aclose()
        expected = b"Basic " + base64.b64encode(b"user:pw")
        assert header(server.requests[0], b"authorization") == expected


async def test_each_request_is_logged_as_httpx_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    async with Recorder(ANSWER) as server:
        http = ModelHTTP(ProviderConfig(base_url=server.base, model="m"))
        client = http._get_client()
        url = f"{server.base}/chat/completions"
        try:
            with caplog.at_level(logging.INFO, logger="httpx"):
                await read_all(await http._send(client, url, b"{}", dict(HEADERS), None))
        finally:
            await http.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines == [f'HTTP Request: POST {url} "HTTP/1.1 200 OK"']


class Failing:
    """A pool that fails every request with `exc`."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        raise self.exc

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    "exc",
    [
        httpcore.ConnectError("refused"),
        httpcore.ConnectTimeout("slow"),
        httpcore.ReadTimeout("idle"),
        httpcore.WriteTimeout("stalled"),
        httpcore.PoolTimeout("full"),
        httpcore.ReadError("reset"),
        httpcore.WriteError("broken pipe"),
        httpcore.RemoteProtocolError("bad status line"),
        httpcore.LocalProtocolError("bad header"),
        httpcore.UnsupportedProtocol("ftp"),
        httpcore.ProxyError("407"),
        httpcore.NetworkError("gone"),
        httpcore.TimeoutException("late"),
        ValueError("not httpcore's"),
    ],
)
async def test_a_pool_failure_is_the_exception_httpx_s_transport_raises(exc: Exception) -> None:
    """The same class and message as httpx's transport maps it to."""
    transport = httpx.AsyncHTTPTransport()
    transport._pool = Failing(exc)  # type: ignore[assignment]
    with pytest.raises(Exception) as theirs:
        await transport.handle_async_request(httpx.Request("POST", "http://x/"))
    ours = _as_httpx(exc)
    assert type(ours) is type(theirs.value) and str(ours) == str(theirs.value)


async def test_a_refused_connection_is_retried_then_a_clear_error() -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with Recorder(ANSWER) as server:
        base = server.base
    # The port is free now: nothing listens.
    p = OpenAIProvider(
        ProviderConfig(base_url=base, model="m", max_retries=2), sleep=sleep, rand=lambda: 0.5
    )
    try:
        with pytest.raises(ModelConnectionError) as caught:
            [e async for e in p.stream(ModelRequest("m", "", [user_text("hi")]))]
    finally:
        await p.aclose()
    assert caught.value.message.startswith("cannot connect to 127.0.0.1:")
    assert "gave up after 3 attempts" in caught.value.message
    assert len(sleeps) == 2


async def test_an_answer_that_stalls_is_a_read_timeout_and_an_interrupted_stream() -> None:
    async with ModelServer() as server:
        server.enqueue({"chunks": ["a", "b"], "stallAfter": 1})
        config = ProviderConfig(base_url=server.openai_base_url, model="m", read_idle_timeout=0.2)
        p = OpenAIProvider(config)
        got: list[Any] = []
        try:
            with pytest.raises(ModelStreamInterrupted) as caught:
                async for event in p.stream(ModelRequest("m", "", [user_text("hi")])):
                    got.append(event)
        finally:
            await p.aclose()
    assert got == [TextDelta("a")]
    assert caught.value.message.endswith("sent nothing for 0.2 s")


async def test_a_cancel_while_sending_closes_the_connection_and_the_next_request_works() -> None:
    async with ModelServer(hold_headers=True) as server:
        server.enqueue({"text": "late", "ttft": 600})
        p = OpenAIProvider(ProviderConfig(base_url=server.openai_base_url, model="m"))
        sent = asyncio.Event()

        async def consume() -> None:
            request = ModelRequest("m", "", [user_text("hi")], on_sent=sent.set)
            async for _ in p.stream(request):
                pass

        task = asyncio.create_task(consume())
        try:
            await sent.wait()  # the body is out; the answer never comes
            first = await server.wait_for(lambda e: e["type"] == "request")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == first["id"])
            server.enqueue({"text": "fine"})
            events = [e async for e in p.stream(ModelRequest("m", "", [user_text("hi")]))]
            assert isinstance(events[-1], StreamEnd)
            assert server.accepted == 2
        finally:
            await p.aclose()
