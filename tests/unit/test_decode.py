"""`agentd.decode.decode_body`: its way straight to the C scanner (an object
in UTF-8, nothing after it) reads what `json.loads` reads, and every other
body, a failure included, is answered as `json.loads`' way answers it."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd import decode
from agentd.decode import Undecodable, decode_body
from agentd.errors import INVALID_REQUEST, PARSE_ERROR


def _loads_way(body: bytes) -> tuple[str, Any]:
    """What `decode_body` answered before its scanner way: ("value", v) or
    ("error", (code, message, reply, reply_id))."""
    try:
        return "value", json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return "error", (PARSE_ERROR, f"Parse error: {str(exc)[:200]}", True, None)
    except RecursionError:
        why = "Invalid Request: nested deeper than agentd reads"
    except ValueError:
        why = f"Invalid Request: a number of more than {sys.get_int_max_str_digits()} digits"
    reply, reply_id = decode.top_level_id(body)
    return "error", (INVALID_REQUEST, why, reply, reply_id)


def _decoded(body: bytes) -> tuple[str, Any]:
    try:
        return "value", decode_body(body)
    except Undecodable as exc:
        return "error", (exc.code, exc.message, exc.reply, exc.reply_id)


def _same(body: bytes) -> None:
    got, want = _decoded(body), _loads_way(body)
    # NaN is not equal to itself: compared by their JSON.
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True), body[:200]
    assert type(got[1]) is type(want[1])


PROMPT = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "session/prompt",
    "params": {"sessionId": "ab" * 16, "prompt": [{"type": "text", "text": "héllo \u2603"}]},
}


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(PROMPT).encode(),
        json.dumps(PROMPT, ensure_ascii=False).encode(),
        # Text after the value: whitespace is read past, anything else is extra data.
        json.dumps(PROMPT).encode() + b" \r\n\t",
        json.dumps(PROMPT).encode() + b"x",
        json.dumps(PROMPT).encode() + b"{}",
        b'{"a": 1}',
        b"{}",
        b"{",
        b"{ ",
        b'{"a": NaN, "b": Infinity}',
        b' {"a": 1}',
        b"[1, 2]",
        b'"text"',
        b"",
        # UTF-16 and UTF-32, told apart by their zero bytes (and BOMs).
        json.dumps(PROMPT).encode("utf-16-le"),
        json.dumps(PROMPT).encode("utf-16-be"),
        json.dumps(PROMPT).encode("utf-32-le"),
        json.dumps(PROMPT).encode("utf-16"),
        b"{\x00",
        b"\xef\xbb\xbf" + json.dumps(PROMPT).encode(),
        # Invalid UTF-8; a lone surrogate's bytes (read with surrogatepass).
        b'{"a": "\xff"}',
        b'{"a": "\xed\xa0\x80"}',
        b'{"a": "\\ud800"}',
        # Too deep, a number too long (the id still answered), a bad id.
        b'{"id": 3, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"id": 4, "x": ' + b"9" * 5000 + b"}",
        b'{"id": ' + b"9" * 5000 + b"}",
        b'{"a": 1, "a": 2}',
    ],
)
def test_bodies_read_as_json_loads_reads_them(body: bytes) -> None:
    _same(body)


def test_the_scanner_way_is_taken_for_an_object_in_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails if the usual message still goes through `json.loads`."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("json.loads called")

    monkeypatch.setattr(json, "loads", refuse)
    assert decode_body(json.dumps(PROMPT, ensure_ascii=False).encode()) == PROMPT


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=4), values, max_size=4),
    ascii_only=st.booleans(),
    tail=st.sampled_from([b"", b" ", b"\n", b"\r\n", b"x", b"}", b"\x00"]),
    cut=st.integers(min_value=0, max_value=3),
)
def test_objects_and_their_damage_read_alike(
    value: dict[str, Any], ascii_only: bool, tail: bytes, cut: int
) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") + tail
    _same(body)
    _same(body[: len(body) - cut])
