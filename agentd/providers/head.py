"""A model stream request's head made once and written from kept bytes.

httpcore's HTTP/1.1 connection makes every request's head the same way:
an `h11.Request` of the request's header list (each name and value checked
by a regular expression, each name lowered) handed to its `h11.Connection`,
which looks through the headers for the framing (Content-Length,
Transfer-Encoding), keep-alive (Connection), Upgrade and Expect, then writes
each header out. A provider's stream requests to a URL send the same head
every time but for the Content-Length: 0.15 ms of a prompt's way to its
request's first bytes once the daemon had idled, for the same work each time.

A `PlainHead` is that work done once per URL and request headers (by h11
itself: the head's bytes up to the Content-Length are h11's own for the
whole request); a request then costs the bytes joined with its length.
`HeadConnection` writes them and the body's parts, then hands its
`h11.Connection` a short `h11.Request` of the headers h11's state machine
reads (Host, Connection and the Content-Length: a plain head has no other
header that says anything about framing, an upgrade or a 100-continue),
the body's parts and its end, in place of the whole head and once every
byte is written. So h11 knows that the request went out, how its body was
framed, whether the connection stays alive and that a POST's answer
follows, as it would from the whole head, and parses the answer as ever.
Anything else (a Content-Length, Transfer-Encoding, Upgrade or Expect among
the headers, a head h11 refuses, an h11 without the parts used here) has
no `PlainHead` and goes httpcore's own way.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import h11
import httpcore

try:  # Not public: a pre-checked header list h11 takes as is.
    from h11._headers import Headers as _Headers
except ImportError:  # pragma: no cover - an h11 without it: httpcore's way
    _Headers = None  # type: ignore[assignment,misc]

# What h11's state machine reads of a request's headers: Host (every HTTP/1.1
# request has one) and Connection (a `close` ends keep-alive) go into the
# short request it is given; a head with any of the others is not plain.
READ = frozenset({b"host", b"connection"})
NOT_PLAIN = frozenset({b"content-length", b"transfer-encoding", b"upgrade", b"expect"})


class PlainHead:
    """A POST's head to one URL with one set of headers, but its Content-Length."""

    __slots__ = ("_prefix", "_read", "_target")

    def __init__(
        self, target: bytes, read: list[tuple[bytes, bytes, bytes]], prefix: bytes
    ) -> None:
        self._target = target
        # The headers h11's state machine reads, as h11 keeps them.
        self._read = read
        self._prefix = prefix

    @classmethod
    def of(cls, target: bytes, headers: list[tuple[bytes, bytes]]) -> PlainHead | None:
        """The head of a POST to `target` with `headers` (Host first, no
        Content-Length), checked and made by h11 once; None if it is not
        plain (see the module) or h11 refuses it."""
        if _Headers is None or not headers or headers[0][0].lower() != b"host":
            return None
        if any(name.lower() in NOT_PLAIN for name, _ in headers):
            return None
        try:
            whole = h11.Request(
                method=b"POST", target=target, headers=[*headers, (b"Content-Length", b"0")]
            )
            data = h11.Connection(h11.CLIENT).send(whole)
        except h11.LocalProtocolError:
            return None
        end = b"Content-Length: 0\r\n\r\n"
        items = getattr(whole.headers, "_full_items", None)
        if not data.endswith(end) or not isinstance(items, list):
            return None
        read = [item for item in items[:-1] if item[1] in READ]
        return cls(target, read, data[: -len(end)])

    def data(self, length: bytes) -> bytes:
        """The whole head for a body of `length` (ASCII digits): what h11 writes."""
        return b"%sContent-Length: %s\r\n\r\n" % (self._prefix, length)

    def event(self, length: bytes) -> h11.Request:
        """The request as h11's state machine reads it: Host, Connection and
        the Content-Length."""
        assert _Headers is not None
        return h11.Request(
            method=b"POST",
            target=self._target,
            headers=_Headers([*self._read, (b"Content-Length", b"content-length", length)]),
            _parsed=True,
        )


class HeadConnection(httpcore.AsyncHTTP11Connection):
    """httpcore's HTTP/1.1 connection, sending a request that has a kept
    head (`kept_head`: a `PlainHead` and the body's length, set by
    `http._core_request`) whole at once: the kept head's bytes, then the
    body's parts, each written as httpcore writes them, and h11 told after
    the last write (the request, its body's parts, its end: `_tell_h11`), so
    that h11's bookkeeping (0.09 ms after idle) no longer comes between the
    prompt and the request's bytes, first or last. Every other request is
    httpcore's, and so is everything after the request's body."""

    # The request whose body went out with its head (`_send_request_body` has
    # nothing left to send for it).
    _body_sent: httpcore.Request | None = None

    async def _send_request_headers(self, request: httpcore.Request) -> None:
        self._body_sent = None
        kept = getattr(request, "kept_head", None)
        h11_state = self._h11_state
        if (
            kept is None
            or h11_state.our_state is not h11.IDLE
            or h11_state.their_state is not h11.IDLE
        ):
            await super()._send_request_headers(request)
            return
        head, length = kept
        declared = int(length)
        timeout: Any = request.extensions.get("timeout", {}).get("write")
        stream = self._network_stream
        assert isinstance(request.stream, AsyncIterable)
        parts: list[bytes] = []
        whole = False
        try:
            await stream.write(head.data(length), timeout=timeout)
            size = 0
            async for part in request.stream:
                size += len(part)
                if size > declared:
                    raise h11.LocalProtocolError("Too much data for declared Content-Length")
                parts.append(part)
                await stream.write(part, timeout=timeout)
            if size < declared:
                raise h11.LocalProtocolError("Too little data for declared Content-Length")
            whole = True
        finally:
            # Whatever happened to the writes (a WriteError is httpcore's to
            # pass over: the server may answer all the same), h11 knows the
            # request went out, and its body whole only when it did.
            self._tell_h11(head.event(length), parts if whole else None)
        self._body_sent = request

    def _tell_h11(self, event: h11.Request, body: list[bytes] | None) -> None:
        """h11's state for a request sent past it: `event` (what its state
        machine reads of the head: the body's framing, keep-alive, a POST's
        answer next), then the body's parts and its end when it was all
        written. The bytes h11 would write are those already written."""
        h11_state = self._h11_state
        h11_state.send(event)
        if body is not None:
            for part in body:
                h11_state.send_with_data_passthrough(h11.Data(data=part))
            h11_state.send(h11.EndOfMessage())

    async def _send_request_body(self, request: httpcore.Request) -> None:
        if self._body_sent is request:
            self._body_sent = None
            return
        await super()._send_request_body(request)
