"""A request head's headers checked by h11 once per set (`agentd.providers.head`):
the same bytes on the wire as httpcore's own connection writes, the same
errors for headers h11 refuses, and h11's header check run once per set of
headers, not once per request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import h11._events
import httpx
import pytest

from agentd.providers import head
from agentd.providers.http import _tls_context
from agentd.providers.network import model_transport

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"
HEADERS = {
    "Authorization": "Bearer sk-test",
    "Accept": "text/event-stream",
    "Content-Type": "application/json",
    "X-Agentd-Purpose": "main",
}


class HeadServer:
    """Answers every request on a kept-alive connection, keeping each head's bytes."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head_bytes = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head_bytes)
                for line in head_bytes.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        await reader.readexactly(int(line.split(b":", 1)[1]))
                writer.write(ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def __aenter__(self) -> HeadServer:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


@pytest.fixture
async def server() -> AsyncIterator[HeadServer]:
    async with HeadServer() as s:
        yield s


def model_client() -> httpx.AsyncClient:
    transport = model_transport(_tls_context("http://x"), httpx.Limits())
    assert transport is not None
    return httpx.AsyncClient(transport=transport)


def test_the_pools_connections_check_each_set_of_headers_once() -> None:
    # Fails when httpcore's `_send_request_headers` / `_send_event` or h11's
    # `Headers` are no longer what `head.py` builds on.
    assert head.CONNECTION is head.CheckedHeadConnection


async def test_the_head_on_the_wire_is_the_one_httpcore_writes(server: HeadServer) -> None:
    bodies = [b"{}", b'{"a":"' + b"x" * 1000 + b'"}', b"[1,2]"]
    async with model_client() as ours, httpx.AsyncClient() as stock:
        for body in bodies:
            for client in (ours, stock):
                response = await client.post(server.url, content=body, headers=HEADERS)
                assert response.content == b"ok"
    assert len(server.heads) == 6
    for i in range(0, 6, 2):
        assert server.heads[i] == server.heads[i + 1]
    assert b"Content-Length: 1008\r\n" in server.heads[2]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Bad": "a\rb"},  # a value h11 refuses
        {"Bad Name": "v"},  # a name h11 refuses
        {"Content-Length": "2, 3"},  # lengths that disagree (checked whole, as before)
    ],
)
async def test_headers_h11_refuses_raise_as_they_do_with_httpcore(
    server: HeadServer, headers: dict[str, str]
) -> None:
    async with model_client() as ours, httpx.AsyncClient() as stock:
        # A good set first, so that a connection is kept and its checks cached.
        await ours.post(server.url, content=b"{}", headers=HEADERS)
        errors = []
        for client in (ours, stock):
            with pytest.raises(httpx.LocalProtocolError) as caught:
                await client.post(server.url, content=b"{}", headers={**HEADERS, **headers})
            errors.append(str(caught.value))
        assert errors[0] == errors[1]
        # The connection is usable after the refusal.
        response = await ours.post(server.url, content=b"{}", headers=HEADERS)
        assert response.content == b"ok"


async def test_h11_checks_a_set_of_headers_once_not_per_request(
    server: HeadServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[int] = []
    check: Any = h11._events.normalize_and_validate  # type: ignore[attr-defined]

    def counted(headers: object, _parsed: bool = False) -> object:
        if not _parsed:  # a request's, not a response's read by h11
            checks.append(1)
        return check(headers, _parsed=_parsed)

    monkeypatch.setattr(h11._events, "normalize_and_validate", counted)
    head._checked.clear()
    async with model_client() as ours:
        for body in (b"{}", b"[1]", b'{"b":2}'):
            await ours.post(server.url, content=body, headers=HEADERS)
        assert len(checks) == 1
        await ours.post(server.url, content=b"{}", headers={**HEADERS, "X-Agentd-Purpose": "side"})
        assert len(checks) == 2
