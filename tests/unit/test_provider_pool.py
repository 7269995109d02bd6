"""The model client's connection pool (`agentd.providers.pool`) against the
bundled model server over loopback: what httpcore's pool did (connections
for concurrent requests, the keep-alive limit and expiry, the connection
limit and the pool timeout, a cancel or a failed connect freeing its place,
room made by an idle connection to another origin) and what it no longer
does (a turn of the event loop before a kept-alive request's head)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpcore
import httpx
import pytest

from agentd.providers.http import _tls_context
from agentd.providers.network import model_transport
from agentd.providers.pool import ModelPool, _QuickLock
from agentd.testing.model_server import ModelServer

BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def make_client(
    max_connections: int = 4,
    max_keepalive: int = 2,
    expiry: float = 30.0,
    pool_timeout: float = 10.0,
) -> tuple[httpx.AsyncClient, ModelPool]:
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive,
        keepalive_expiry=expiry,
    )
    transport = model_transport(_tls_context("http://x"), limits)
    assert isinstance(transport, httpx.AsyncHTTPTransport)
    pool: object = transport._pool
    assert isinstance(pool, ModelPool)  # not httpcore's: see test_provider_network
    client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(10, pool=pool_timeout))
    return client, pool


@contextlib.asynccontextmanager
async def opened(client: httpx.AsyncClient, url: str) -> AsyncIterator[httpx.Response]:
    """A response whose body is read only on leaving: its connection stays
    busy until then (and is kept: a body left unread closes it)."""
    async with client.stream("POST", url, content=BODY) as response:
        assert response.status_code == 200
        yield response
        await response.aread()


async def post(client: httpx.AsyncClient, url: str) -> bytes:
    response = await client.post(url, content=BODY)
    assert response.status_code == 200
    return response.content


async def test_concurrent_requests_get_connections_and_the_idle_are_kept_to_the_limit() -> None:
    async with ModelServer() as server:
        url = f"{server.openai_base_url}/chat/completions"
        client, pool = make_client(max_connections=4, max_keepalive=2)
        async with client:
            async with contextlib.AsyncExitStack() as stack:
                for _ in range(3):
                    await stack.enter_async_context(opened(client, url))
                assert server.accepted == 3 and len(pool.connections) == 3
            # Three idle, two kept: the least recently used closed.
            await server.wait_closed(1)
            assert len(pool.connections) == 2
            for _ in range(3):
                assert b"data:" in await post(client, url)
            assert server.accepted == 3  # the kept ones reused
        await server.wait_closed(3)  # the client's close closes them


async def test_a_request_over_the_limit_waits_for_a_connection_or_the_pool_timeout() -> None:
    async with ModelServer() as server:
        url = f"{server.openai_base_url}/chat/completions"
        client, pool = make_client(max_connections=1, pool_timeout=0.2)
        async with client:
            async with opened(client, url):
                with pytest.raises(httpx.PoolTimeout):
                    await post(client, url)
                assert not pool._waiters
                waiting = asyncio.create_task(
                    client.post(url, content=BODY, timeout=httpx.Timeout(10))
                )
                for _ in range(100):  # the task's way to the pool: a few steps
                    if pool._waiters:
                        break
                    await asyncio.sleep(0)
                assert len(pool._waiters) == 1 and not waiting.done()
            response = await waiting  # given the connection the first let go
            assert response.status_code == 200
            assert server.accepted == 1 and not pool._waiters


async def test_a_cancelled_request_closes_its_connection_and_frees_its_place() -> None:
    async with ModelServer(hold_headers=True) as server:
        url = f"{server.openai_base_url}/chat/completions"
        client, pool = make_client(max_connections=1, pool_timeout=1.0)
        async with client:
            server.enqueue({"text": "late", "ttft": 30})
            task = asyncio.create_task(post(client, url))
            await server.wait_for(lambda e: e["type"] == "request")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await server.wait_for(lambda e: e["type"] == "disconnect")
            assert pool.connections == []
            assert b"data:" in await post(client, url)  # its place was free
            assert server.accepted == 2


async def test_a_failed_connect_frees_its_place() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}/v1/chat/completions"
    async with ModelServer() as server:
        client, pool = make_client(max_connections=1, pool_timeout=0.5)
        async with client:
            with pytest.raises(httpx.ConnectError):
                await post(client, refused)
            assert pool.connections == [] and pool._opening == 0
            assert b"data:" in await post(client, f"{server.openai_base_url}/chat/completions")


async def test_an_expired_idle_connection_is_closed_and_replaced() -> None:
    async with ModelServer() as server:
        url = f"{server.openai_base_url}/chat/completions"
        client, _ = make_client(expiry=0.0)  # expired as soon as it is idle
        async with client:
            await post(client, url)
            await post(client, url)
            assert server.accepted == 2
            await server.wait_closed(1)


async def test_a_full_pool_closes_an_idle_connection_to_another_origin() -> None:
    async with ModelServer() as first, ModelServer() as second:
        client, pool = make_client(max_connections=1)
        async with client:
            await post(client, f"{first.openai_base_url}/chat/completions")
            await post(client, f"{second.openai_base_url}/chat/completions")
            await first.wait_closed(1)
            assert second.accepted == 1 and len(pool.connections) == 1


async def test_a_kept_alive_request_writes_its_head_without_a_loop_turn() -> None:
    """httpcore's pool went round the event loop three times before a kept-alive
    request's head was written (its locks' checkpoints and a shielded scope);
    this pool takes its connection and the connection's state lock (an
    asyncio lock, `_state_lock`, not public: if httpcore moves it, the swap
    is skipped and this test fails) without yielding."""
    async with ModelServer() as server:
        url = f"{server.openai_base_url}/chat/completions"
        client, pool = make_client()
        async with client:
            await post(client, url)  # connects (connecting yields, of course)
            assert all(isinstance(c._state_lock, _QuickLock) for c in pool.connections)
            seen: list[str] = []

            async def trace(event: str, info: dict[str, Any]) -> None:
                if event == "http11.send_request_headers.complete":
                    seen.append("head written")

            asyncio.get_running_loop().call_soon(seen.append, "loop turned")
            response = await client.post(url, content=BODY, extensions={"trace": trace})
            assert response.status_code == 200
            assert seen == ["head written", "loop turned"]
            assert server.accepted == 1


async def test_a_closed_pool_closes_its_connections_busy_or_idle() -> None:
    async with ModelServer(hold_headers=True) as server:
        url = f"{server.openai_base_url}/chat/completions"
        client, pool = make_client()
        await post(client, url)
        server.enqueue({"text": "late", "ttft": 30})
        busy = asyncio.create_task(post(client, url))
        await server.wait_for(lambda e: e["type"] == "request" and e["id"] == 2)
        await server.wait_accepted(1)
        assert len(pool.connections) == 1  # the same connection, busy now
        await client.aclose()
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await busy
        await server.wait_closed(1)
        assert pool.connections == []


async def test_an_unsupported_scheme_is_httpx_s_error() -> None:
    client, pool = make_client()
    async with client:
        request = httpcore.Request("GET", "ftp://127.0.0.1/")
        with pytest.raises(httpcore.UnsupportedProtocol):
            await pool.handle_async_request(request)
