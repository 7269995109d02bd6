"""A model stream request's head made once (`agentd.providers.head`): the
kept bytes are h11's own for the whole request, h11 is left where the whole
head leaves it (the body's framing, keep-alive, the answer's parse), a head
h11 would read more of or refuses goes httpcore's own way, and over real
loopback the kept head follows the URL and the headers it was made for
(the first request of each goes httpcore's way)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import h11
import httpcore
import pytest

from agentd.providers import ProviderConfig
from agentd.providers.head import HeadConnection, PlainHead
from agentd.providers.http import ModelHTTP
from tests.unit.http_recorder import Recorder

TARGET = b"/v1/chat/completions"
HOST = (b"Host", b"127.0.0.1:8080")
USUAL = [
    HOST,
    (b"Accept-Encoding", b"gzip, deflate"),
    (b"Connection", b"keep-alive"),
    (b"User-Agent", b"agentd/0.1.0"),
    (b"Authorization", b"Bearer sk-x"),
    (b"Accept", b"text/event-stream"),
    (b"Content-Type", b"application/json"),
    (b"X-Agentd-Purpose", b"main"),
]
ANSWER = b"data: x\n\n"


def whole_event(headers: list[tuple[bytes, bytes]], length: int) -> h11.Request:
    return h11.Request(
        method=b"POST", target=TARGET, headers=[*headers, (b"Content-Length", b"%d" % length)]
    )


def cycle(connection: h11.Connection, head: h11.Request, body: bytes) -> list[Any]:
    """Send `head` and `body` on `connection`, then read an answer; what it
    wrote for the body and what it read, with its states on the way."""
    seen: list[Any] = []
    connection.send(head)
    seen.append((connection.our_state, connection.their_state))
    seen.append(connection.send(h11.Data(data=body)))
    seen.append(connection.send(h11.EndOfMessage()))
    seen.append((connection.our_state, connection.their_state))
    connection.receive_data(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
    )
    while True:
        event = connection.next_event()
        seen.append(event)
        if type(event) is h11.EndOfMessage or event is h11.NEED_DATA:
            break
    seen.append((connection.our_state, connection.their_state))
    return seen


@pytest.mark.parametrize(
    "headers",
    [
        USUAL,
        [HOST],
        [(b"host", b"example.test"), (b"Authorization", b"Bearer k")],
        [HOST, (b"Connection", b"close")],
        [HOST, (b"CONNECTION", b"keep-alive, close")],
        [HOST, (b"X-Odd", b"a\tb  c")],
    ],
)
@pytest.mark.parametrize("length", [0, 7, 123456])
def test_a_plain_head_is_h11_s_bytes_and_leaves_h11_where_the_whole_head_does(
    headers: list[tuple[bytes, bytes]], length: int
) -> None:
    head = PlainHead.of(TARGET, headers)
    assert head is not None
    digits = b"%d" % length
    assert head.data(digits) == h11.Connection(h11.CLIENT).send(whole_event(headers, length))
    body = b"x" * length
    theirs, ours = h11.Connection(h11.CLIENT), h11.Connection(h11.CLIENT)
    assert cycle(ours, head.event(digits), body) == cycle(
        theirs, whole_event(headers, length), body
    )
    # Keep-alive as the whole head says: the next request or none.
    closes = any(n.lower() == b"connection" and b"close" in v for n, v in headers)
    for connection in (ours, theirs):
        assert connection.our_state is (h11.MUST_CLOSE if closes else h11.DONE)
    # The body's framing: a byte past the Content-Length is refused by both.
    theirs, ours = h11.Connection(h11.CLIENT), h11.Connection(h11.CLIENT)
    theirs.send(whole_event(headers, length))
    ours.send(head.event(digits))
    for connection in (ours, theirs):
        with pytest.raises(h11.LocalProtocolError):
            connection.send(h11.Data(data=body + b"!"))


@pytest.mark.parametrize(
    "headers",
    [
        [HOST, (b"Content-Length", b"5")],
        [HOST, (b"Transfer-Encoding", b"chunked")],
        [HOST, (b"Upgrade", b"h2c")],
        [HOST, (b"expect", b"100-continue")],
        [HOST, (b"X-Bad", b"a\r\nb")],
        [HOST, (b"Bad Name", b"v")],
        [HOST, HOST],
        [(b"Accept", b"*/*"), HOST],
        [],
    ],
)
def test_a_head_h11_would_read_more_of_or_refuses_is_not_kept(
    headers: list[tuple[bytes, bytes]],
) -> None:
    assert PlainHead.of(TARGET, headers) is None


async def send(http: ModelHTTP, url: str, body: bytes, headers: dict[str, str]) -> None:
    response = await http._send(http._get_client(), url, body, headers, None)
    try:
        assert response.status_code == 200
        assert b"".join([c async for c in response.aiter_bytes()]) == ANSWER
    finally:
        await response.aclose()


async def test_the_kept_head_follows_the_url_and_the_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests on one kept-alive connection: the first of each URL and
    headers goes httpcore's way (its head is made by h11 after it, off the
    cold first prompt's way), every later one through its kept head; each
    one's head is the one httpx makes for its URL and headers, changed with
    either of them."""
    made_by_httpcore: list[int] = []
    send_head = httpcore.AsyncHTTP11Connection._send_request_headers
    sent: list[bytes] = []

    async def recorded(self: Any, request: httpcore.Request) -> None:
        made_by_httpcore.append(len(sent))  # the number of the request under way
        await send_head(self, request)

    monkeypatch.setattr(httpcore.AsyncHTTP11Connection, "_send_request_headers", recorded)
    async with Recorder(ANSWER) as server:
        http = ModelHTTP(ProviderConfig(base_url=server.base, model="m"))
        client = http._get_client()
        chat = f"{server.base}/chat/completions"
        first = {"Authorization": "Bearer a", "X-Agentd-Purpose": "main"}
        sends = [
            (chat, first, b'{"a":1}'),
            (chat, first, b'{"a":12}'),
            (chat, {**first, "X-Agentd-Purpose": "recall"}, b"{}"),
            (chat, {**first, "X-Agentd-Purpose": "recall"}, b"{1}"),
            (chat, {**first, "Authorization": "Bearer b"}, b"{}"),
            (chat, {**first, "Authorization": "Bearer b"}, b"{}"),
            (f"{server.base}/messages", first, b'{"b":2}'),
            (f"{server.base}/messages", first, b'{"b":23}'),
            (f"{chat}?x=1", first, b"{}"),
            (f"{chat}?x=1", first, b"{}"),
            (chat, first, b'{"a":123}'),
            (chat, {**first, "X-Agentd-Purpose": "recall"}, b"{12}"),
        ]
        try:
            for url, headers, body in sends:
                await send(http, url, body, headers)
                sent.append(body)
                expected = client.build_request("POST", url, content=body, headers=headers)
                target = expected.url.raw_path
                lines = [b"POST " + target + b" HTTP/1.1"]
                lines += [b"%s: %s" % (name, value) for name, value in expected.headers.raw]
                assert server.heads[-1] == b"\r\n".join(lines) + b"\r\n\r\n"
            assert made_by_httpcore == [0, 2, 4, 6, 8]
            assert server.accepted == 1
        finally:
            await http.aclose()


async def test_a_head_that_is_not_plain_goes_httpcore_s_way() -> None:
    """An Expect header among the configured ones: no kept head, httpcore
    makes it (and the server has it)."""
    made: list[bytes] = []
    send_head = httpcore.AsyncHTTP11Connection._send_request_headers

    async def recorded(self: Any, request: httpcore.Request) -> None:
        made.append(request.url.target)
        await send_head(self, request)

    async with Recorder(ANSWER) as server:
        config = ProviderConfig(
            base_url=server.base, model="m", extra_headers=(("Expect", "100-continue"),)
        )
        http = ModelHTTP(config)
        client = http._get_client()
        url = f"{server.base}/chat/completions"
        headers = {"X-Agentd-Purpose": "main", **dict(config.extra_headers)}
        core = http._core_request(client, url, b"{}", headers, None)
        assert core is not None and getattr(core, "kept_head", None) is None
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(httpcore.AsyncHTTP11Connection, "_send_request_headers", recorded)
            try:
                await send(http, url, b"{}", headers)
            finally:
                await http.aclose()
        assert made == [b"/v1/chat/completions"]
        assert b"\r\nExpect: 100-continue\r\n" in server.heads[-1]


class Wire(httpcore.AsyncNetworkStream):
    """A network stream that keeps what is written (or fails the write
    numbered `fail_at` with a `WriteError`) and reads back `answer`; each
    write and each h11 call of its connection noted in `log`."""

    def __init__(self, log: list[str], answer: bytes, fail_at: int | None = None) -> None:
        self.log = log
        self.written: list[bytes] = []
        self.answer = answer
        self.fail_at = fail_at

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data, self.answer = self.answer[:max_bytes], self.answer[max_bytes:]
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if len(self.written) == self.fail_at:
            self.log.append("write failed")
            raise httpcore.WriteError("the server closed its end")
        self.log.append("write")
        self.written.append(buffer)

    async def aclose(self) -> None:
        pass


def h11_noted(connection: httpcore.AsyncHTTP11Connection, log: list[str]) -> None:
    """Each event handed to the connection's h11 noted (`send` goes through
    `send_with_data_passthrough`)."""
    h11_state = connection._h11_state
    passthrough = h11_state.send_with_data_passthrough

    def noted(event: Any) -> Any:
        log.append(f"h11 {type(event).__name__}")
        return passthrough(event)

    h11_state.send_with_data_passthrough = noted  # type: ignore[method-assign]


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def core_request(parts: list[bytes], kept: bool) -> httpcore.Request:
    """A request as `ModelHTTP._core_request` makes it, with its kept head or not."""
    from agentd.providers.http import _CoreRequest

    length = b"%d" % sum(map(len, parts))
    head = PlainHead.of(TARGET, USUAL)
    assert head is not None

    async def body() -> Any:
        for part in parts:
            yield part

    url = httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=8080, target=TARGET)
    return _CoreRequest(
        url,
        [*USUAL, (b"Content-Length", length)],
        body(),
        {"timeout": {}},
        (head, length) if kept else None,
    )


async def exchange(
    parts: list[bytes], kept: bool, fail_at: int | None = None
) -> tuple[list[str], Wire, bytes, bool]:
    """One request on a `HeadConnection` over a `Wire`: what happened in
    order, the wire, the answer's body, whether the connection is kept."""
    log: list[str] = []
    wire = Wire(log, OK, fail_at)
    origin = httpcore.Origin(b"http", b"127.0.0.1", 8080)
    connection = HeadConnection(origin, wire)
    h11_noted(connection, log)
    response = await connection.handle_async_request(core_request(parts, kept))
    assert response.status == 200
    assert isinstance(response.stream, AsyncIterable)
    body = b"".join([part async for part in response.stream])
    await response.aclose()
    return log, wire, body, connection.is_idle()


async def test_a_kept_request_is_written_whole_before_h11_is_told() -> None:
    """Head and body out first, h11 told after (the request, the parts, the
    end); the bytes are those httpcore writes, and the connection is kept
    alive after the answer as after httpcore's own way."""
    parts = [b'{"a":', b"[1,2]}"]
    kept_log, kept_wire, kept_body, kept_idle = await exchange(parts, kept=True)
    own_log, own_wire, own_body, own_idle = await exchange(parts, kept=False)
    assert kept_log == [
        "write",
        "write",
        "write",
        "h11 Request",
        "h11 Data",
        "h11 Data",
        "h11 EndOfMessage",
    ]
    assert own_log[:2] == ["h11 Request", "write"]  # httpcore's: h11 first
    assert b"".join(kept_wire.written) == b"".join(own_wire.written)
    assert (kept_body, kept_idle) == (own_body, own_idle) == (b"ok", True)


@pytest.mark.parametrize("fail_at", [0, 1, 2])
async def test_a_failed_write_of_a_kept_request_ends_as_httpcore_s_own(fail_at: int) -> None:
    """A write refused (the server closed its end) at the head or in the
    body: the answer is read all the same, as httpcore does, and the
    connection is not kept (its request was never whole), as with
    httpcore's own way; h11 is told the request, and its body only whole."""
    parts = [b'{"a":', b"[1,2]}"]
    kept_log, _, kept_body, kept_idle = await exchange(parts, kept=True, fail_at=fail_at)
    _, _, own_body, own_idle = await exchange(parts, kept=False, fail_at=fail_at)
    assert (kept_body, kept_idle) == (own_body, own_idle) == (b"ok", False)
    assert kept_log[-2:] == ["write failed", "h11 Request"]
