"""The request head's h11 event, its headers checked once per set of them.

h11 checks every header name and value of a request against the HTTP
grammar (a regex each) when the `h11.Request` event is made. httpcore makes
one per request, and the model client's requests carry the same headers
every time but the Content-Length: in the daemon, making the event was
0.065 ms of a prompt's way to its request head after an idle spell (of
0.18 ms from the HTTP/1.1 connection to the socket write). The pool's
connections (`CheckedHeadConnection`) make it from headers h11 checked
when their set was first sent (h11's own `normalize_and_validate`, through
an `h11.Request`), with the request's Content-Length in its place when it
is plain digits, as h11 would keep it. Any other Content-Length, and a
request with none or several, is checked whole as before. The event itself
(method, target, Host) is still made and checked by h11, and what follows
it (h11's state machine writing the head and the body, the response) is
h11's and httpcore's as it was.

Not public: httpcore's `_send_request_headers` (overridden here) and
`_send_event`, and h11's `Headers` constructor (the type of an event's
`headers`). `CONNECTION` is httpcore's own connection class where either
is not as this module expects (`tests/unit/test_provider_head.py` fails
then).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import h11
import httpcore

_CONTENT_LENGTH = b"content-length"
# h11's bound on a Content-Length's digits (`CONTENT_LENGTH_MAX_DIGITS`).
_MAX_LENGTH_DIGITS = 20
# Sets of headers kept checked: the model client sends a handful.
_MAX_SETS = 64

Triple = tuple[bytes, bytes, bytes]
# Each set of headers (the Content-Length's value left out) -> h11's checked
# (raw name, lowercased name, value) of them, and the Content-Length's index.
_checked: dict[tuple[tuple[bytes, bytes], ...], tuple[list[Triple], int]] = {}


def _h11_headers_type() -> Callable[[list[Triple]], Any] | None:
    """h11's `Headers` class, if it is made from (raw, lowercased, value)
    triples and an `h11.Request` takes it as checked; else None."""
    pairs = [(b"Host", b"h"), (b"Content-Length", b"1")]
    try:
        made = h11.Request(method=b"GET", target=b"/", headers=pairs).headers
        kind: Any = type(made)
        copy = kind([(b"Host", b"host", b"h"), (b"Content-Length", b"content-length", b"1")])
        event = h11.Request(method=b"GET", target=b"/", headers=copy)
    except Exception:
        return None
    same = list(copy) == list(made) and copy.raw_items() == made.raw_items()
    return kind if same and event.headers is copy else None


def _can_override() -> bool:
    connection = httpcore.AsyncHTTP11Connection
    send_headers = getattr(connection, "_send_request_headers", None)
    send_event = getattr(connection, "_send_event", None)
    if not (inspect.iscoroutinefunction(send_headers) and inspect.iscoroutinefunction(send_event)):
        return False
    assert send_headers is not None
    return list(inspect.signature(send_headers).parameters) == ["self", "request"]


_HEADERS = _h11_headers_type()


def checked_headers(method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> Any:
    """What to give `h11.Request` as `headers`: h11's checked `Headers` for
    a set seen before (checked now if new: h11's `LocalProtocolError` for a
    bad one), or `headers` as they are, for h11 to check."""
    if _HEADERS is None:
        return headers
    at = -1
    key: list[tuple[bytes, bytes]] = []
    for i, (name, value) in enumerate(headers):
        if len(name) == len(_CONTENT_LENGTH) and name.lower() == _CONTENT_LENGTH:
            if at >= 0:
                return headers
            at = i
            value = b""
        key.append((name, value))
    if at < 0:
        return headers
    raw_name, length = headers[at]
    if not (length.isdigit() and len(length) <= _MAX_LENGTH_DIGITS):
        return headers
    known = _checked.get(tuple(key))
    if known is None:
        rest = [pair for i, pair in enumerate(headers) if i != at]
        made = h11.Request(method=method, target=target, headers=rest).headers
        triples = [
            (raw, name, value)
            for (raw, value), (name, _) in zip(made.raw_items(), made, strict=True)
        ]
        triples.insert(at, (raw_name, _CONTENT_LENGTH, b""))
        if len(_checked) >= _MAX_SETS:
            _checked.clear()
        known = _checked[tuple(key)] = (triples, at)
    triples, at = known
    full = triples.copy()
    full[at] = (raw_name, _CONTENT_LENGTH, length)
    return _HEADERS(full)


class CheckedHeadConnection(httpcore.AsyncHTTP11Connection):
    """httpcore's HTTP/1.1 connection, its request heads' headers checked
    once per set (`checked_headers`)."""

    async def _send_request_headers(self, request: httpcore.Request) -> None:
        timeouts = request.extensions.get("timeout", {})
        timeout = timeouts.get("write", None)
        method, target = request.method, request.url.target
        try:
            headers = checked_headers(method, target, request.headers)
            event = h11.Request(method=method, target=target, headers=headers)
        except h11.LocalProtocolError as exc:
            # As httpcore maps it.
            raise httpcore.LocalProtocolError(exc) from exc
        await self._send_event(event, timeout=timeout)


CONNECTION: type[httpcore.AsyncHTTP11Connection] = (
    CheckedHeadConnection
    if _HEADERS is not None and _can_override()
    else httpcore.AsyncHTTP11Connection
)
