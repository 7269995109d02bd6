"""The model client's network backend (`agentd.providers.network`) over real
loopback sockets: that httpx's pool really uses it (a guard on the one
non-public attribute it relies on), keep-alive reuse and a stale connection
left alone, TLS with the configured trust, the timeouts, a dropped stream,
flow control of a large answer, and the stock transport kept for proxies."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from agentd.errors import ModelConnectionError, ModelStreamInterrupted
from agentd.messages import user_text
from agentd.providers import ModelRequest, ProviderConfig, StreamEnd, TextDelta
from agentd.providers.http import ModelHTTP, _tls_context
from agentd.providers.network import AsyncioStream, model_transport
from agentd.providers.openai import OpenAIProvider
from agentd.testing.model_server import ModelServer

KEY = "sk-test-SECRET-0123456789"
LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=2, keepalive_expiry=30.0)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def sse(text: str, finish: bool = False) -> bytes:
    delta: dict[str, Any] = {"index": 0, "delta": {} if finish else {"content": text}}
    if finish:
        delta["finish_reason"] = "stop"
    return b"data: " + json.dumps({"choices": [delta]}).encode() + b"\n\n"


ANSWER = sse("hi") + sse("", finish=True)


def request() -> ModelRequest:
    return ModelRequest("m", "", [user_text("hi")])


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":", 1)[1]))
    return head


def answer(body: bytes = ANSWER) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


class Loopback:
    """An asyncio server on 127.0.0.1 that counts its connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.accepted = 0
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went, or the test is over (`stop`)
        finally:
            writer.close()

    async def start(self, **kwargs: Any) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, **kwargs)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()


@pytest_asyncio.fixture
async def loopback() -> AsyncIterator[Callable[[Handler], Loopback]]:
    servers: list[Loopback] = []

    def make(handler: Handler) -> Loopback:
        servers.append(Loopback(handler))
        return servers[-1]

    yield make
    for server in servers:
        await server.stop()


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        await read_request(reader)
        writer.write(answer())
        await writer.drain()


async def test_the_model_client_sends_through_the_asyncio_backend(
    loopback: Callable[[Handler], Loopback],
) -> None:
    """httpx keeps its pool in `AsyncHTTPTransport._pool` (not public): if an
    upgrade moves it, `model_transport` falls back to httpx's own transport
    and this test fails, rather than the backend silently going unused."""
    server = loopback(keep_alive)
    port = await server.start()
    http = ModelHTTP(ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    client = http._get_client()
    try:
        for _ in range(3):
            async with client.stream("POST", f"http://127.0.0.1:{port}/v1/x", content=b"{}") as r:
                assert isinstance(r.extensions["network_stream"], AsyncioStream)
                assert await r.aread() == ANSWER
        assert server.accepted == 1  # kept alive, reused
    finally:
        await http.aclose()


async def test_httpx_without_the_pool_attribute_falls_back_to_its_own_transport(
    monkeypatch: pytest.MonkeyPatch, loopback: Callable[[Handler], Loopback]
) -> None:
    class Moved(httpx.AsyncHTTPTransport):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._connections = self.__dict__.pop("_pool")

    # httpx's client keeps its own name for the class: only ours sees this one.
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", Moved)
    assert model_transport(True, LIMITS) is None
    server = loopback(keep_alive)
    port = await server.start()
    p = OpenAIProvider(ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    try:
        events = [e async for e in p.stream(request())]
        assert events[0] == TextDelta("hi") and isinstance(events[-1], StreamEnd)
    finally:
        await p.aclose()


async def test_a_kept_alive_connection_the_server_closed_is_not_reused(
    loopback: Callable[[Handler], Loopback],
) -> None:
    """The pool's readability check: a server that closed an idle connection
    (after its answer, without saying so) costs a new connection, not an error."""
    closed = asyncio.Event()

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer())
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        closed.set()

    server = loopback(once)
    port = await server.start()
    p = OpenAIProvider(ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    try:
        for _ in range(3):
            closed.clear()
            events = [e async for e in p.stream(request())]
            assert events[0] == TextDelta("hi")
            await closed.wait()
        assert server.accepted == 3
    finally:
        await p.aclose()


@pytest.mark.parametrize("second", ["reset", "partial_head"])
async def test_a_kept_alive_connection_that_dies_unanswered_is_sent_again_once(
    loopback: Callable[[Handler], Loopback], second: str
) -> None:
    """The pool's one resend: the second request, on the kept-alive
    connection, is read and met by a reset before any byte of an answer (it
    goes again, on a new connection), or by half a status line and a close
    (an answer had begun: a clear error, not sent again)."""
    heard = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal heard
        while True:
            await read_request(reader)
            heard += 1
            if heard == 2:
                if second == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    writer.write(b"HTTP/1.1 2")
                    await writer.drain()
                writer.close()
                return
            writer.write(answer())
            await writer.drain()

    server = loopback(handler)
    port = await server.start()
    config = ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    p = OpenAIProvider(config)
    try:
        first = [e async for e in p.stream(request())]
        assert first[0] == TextDelta("hi")
        if second == "reset":
            events = [e async for e in p.stream(request())]
            assert events[0] == TextDelta("hi") and isinstance(events[-1], StreamEnd)
            assert (heard, server.accepted) == (3, 2)
        else:
            with pytest.raises(ModelConnectionError) as caught:
                [e async for e in p.stream(request())]
            assert "lost" in caught.value.message
            assert (heard, server.accepted) == (2, 1)
    finally:
        await p.aclose()


async def test_a_dropped_stream_is_interrupted_and_the_next_request_reconnects() -> None:
    async with ModelServer() as server:
        config = ProviderConfig(base_url=server.openai_base_url, api_key=KEY, model="m")
        p = OpenAIProvider(config)
        try:
            server.enqueue({"chunks": ["a", "b", "c"], "dropAfter": 2})
            got: list[Any] = []
            with pytest.raises(ModelStreamInterrupted) as caught:
                async for event in p.stream(request()):
                    got.append(event)
            assert got == [TextDelta("a"), TextDelta("b")]
            assert "connection to" in caught.value.message and "lost" in caught.value.message
            server.enqueue({"text": "fine"})
            events = [e async for e in p.stream(request())]
            assert isinstance(events[-1], StreamEnd)
            assert server.accepted == 2
        finally:
            await p.aclose()


async def test_an_idle_stream_is_a_read_timeout_and_a_stalled_write_a_write_timeout(
    loopback: Callable[[Handler], Loopback],
) -> None:
    hold = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hold.wait()  # reads nothing, answers nothing

    server = loopback(silent)
    port = await server.start()
    transport = model_transport(_tls_context("http://x"), LIMITS)
    assert transport is not None
    timeout = httpx.Timeout(10, read=0.2, write=0.2)
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
        url = f"http://127.0.0.1:{port}/"
        with pytest.raises(httpx.ReadTimeout):
            await client.post(url, content=b"{}")
        # More than loopback's socket buffers take: the write waits, then times out.
        with pytest.raises(httpx.WriteTimeout):
            await client.post(url, content=b"x" * (32 * 1024 * 1024))
    hold.set()


async def test_a_large_answer_read_slowly_arrives_whole(
    loopback: Callable[[Handler], Loopback],
) -> None:
    """The connection's buffer pauses reading above its limit and resumes as
    it is read: nothing lost, nothing reordered."""
    body = b"".join(sse(f"{i:07d}" * 100) for i in range(4000))  # about 3 MB

    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(body))
        await writer.drain()

    server = loopback(big)
    port = await server.start()
    transport = model_transport(_tls_context("http://x"), LIMITS)
    assert transport is not None
    url = f"http://127.0.0.1:{port}/"
    async with (
        httpx.AsyncClient(transport=transport) as client,
        client.stream("POST", url, content=b"{}") as r,
    ):
        assert isinstance(r.extensions["network_stream"], AsyncioStream)
        got = bytearray()
        async for chunk in r.aiter_raw():
            got += chunk
            if len(got) < len(body) // 2:
                # Let the server fill the buffer before the next read.
                await asyncio.sleep(0)
        assert bytes(got) == body


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a server certificate for localhost / 127.0.0.1 (openssl's CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    folder = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=agentd test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (folder / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return folder


async def test_tls_verifies_with_the_configured_trust_and_keeps_the_connection(
    certificates: Path,
    monkeypatch: pytest.MonkeyPatch,
    loopback: Callable[[Handler], Loopback],
) -> None:
    """An https endpoint: TLS through the backend (`start_tls`), verified
    against the trust httpx would use (here `SSL_CERT_FILE`), one connection
    for several requests; a server the trust does not cover fails closed."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    server = loopback(keep_alive)
    port = await server.start(ssl=context)
    base = f"https://localhost:{port}/v1"

    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    p = OpenAIProvider(ProviderConfig(base_url=base, api_key=KEY, model="m"))
    try:
        for _ in range(2):
            events = [e async for e in p.stream(request())]
            assert events[0] == TextDelta("hi") and isinstance(events[-1], StreamEnd)
        assert server.accepted == 1
        client = p._http._get_client()
        async with client.stream("POST", f"{base}/x", content=b"{}") as r:
            assert isinstance(r.extensions["network_stream"], AsyncioStream)
            assert r.extensions["network_stream"].get_extra_info("ssl_object") is not None
    finally:
        await p.aclose()

    monkeypatch.delenv("SSL_CERT_FILE")
    config = ProviderConfig(base_url=base, api_key=KEY, model="m", max_retries=0)
    untrusting = OpenAIProvider(config)
    try:
        with pytest.raises(ModelConnectionError) as caught:
            [e async for e in untrusting.stream(request())]
        assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
    finally:
        await untrusting.aclose()


async def test_a_proxy_in_the_environment_keeps_httpx_s_own_transport(
    monkeypatch: pytest.MonkeyPatch, loopback: Callable[[Handler], Loopback]
) -> None:
    """httpx honours HTTP(S)_PROXY only without a transport of ours: with one
    set, the client is httpx's own and the request goes to the proxy."""
    targets: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_request(reader)
        targets.append(head.split(b" ")[1])
        writer.write(answer())
        await writer.drain()

    server = loopback(proxy)
    port = await server.start()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    assert model_transport(True, LIMITS) is None
    p = OpenAIProvider(ProviderConfig(base_url="http://model.invalid/v1", model="m"))
    try:
        events = [e async for e in p.stream(request())]
        assert events[0] == TextDelta("hi")
    finally:
        await p.aclose()
    assert targets == [b"http://model.invalid/v1/chat/completions"]
