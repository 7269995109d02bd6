"""JSON-RPC message bodies from untrusted bytes, for both front ends.

`json.loads` fails in more ways than `JSONDecodeError` on what a buggy or
hostile client sends, and each must become an error reply, never an
exception that ends a read loop:

    invalid UTF-8 or JSON        -32700 Parse error, id null (nothing to trust)
    nesting deeper than the      -32600 Invalid Request (`RecursionError`: the
      decoder's recursion limit         C decoder recurses once per level)
    an integer of more than      -32600 Invalid Request (Python refuses to
      4,300 digits                      convert it: `ValueError`)

For the last two the JSON is well formed, so the request id is usually
readable: `top_level_id` finds it with a flat scan (no recursion, bounded),
so the editor waiting for that id gets its answer. When the id itself is the
unreadable value (a 5,000-digit id), or the value is no object at all, the
reply goes to id null; an object without an id is a notification: no reply,
only a log line.

Stdlib only: imported by both front ends before `initialize` is answered.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from json.scanner import make_scanner
from typing import Any

from agentd.errors import INVALID_REQUEST, PARSE_ERROR

# Salvaging an id scans the body token by token in Python: bounded, so that
# a huge undecodable body costs milliseconds, not seconds, of the event loop.
MAX_SALVAGE_BYTES = 8 * 1024 * 1024
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)
_ID_KEY = b'"id"'


class Undecodable(Exception):
    """A body that is not a usable JSON value: the error, whether it is answered
    (not for a notification) and the id to answer it with."""

    def __init__(self, code: int, message: str, *, reply: bool = True, reply_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reply = reply
        self.reply_id = reply_id


# The C scanner `json.loads` ends in (a default decoder's), called directly;
# typeshed names the wrong type for `make_scanner`'s argument.
_scan_once: Callable[[str, int], tuple[Any, int]] = make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def decode_body(body: bytes) -> Any:
    """The JSON value of `body`; raises `Undecodable` with the error to answer.

    The usual message, an object in UTF-8 with nothing after it, goes
    straight to the C scanner: `json.loads` reaches it through Python steps
    (guessing UTF-16 or UTF-32 from zero bytes, decoding, a whitespace match
    before and after, the check for extra data), which took 0.05 ms of a
    prompt's way to the core once the daemon had idled (the scanner alone
    half of `json.loads`' 0.1 ms). A body that opens with `{` is one
    `json.loads` decodes as UTF-8 too, unless its second byte is zero (then
    the scan fails at once): the same text, decoded the same way
    (`surrogatepass`). Anything else, a failure or text after the value
    included, takes `json.loads`' own way, whose errors are the answers."""
    if body[:1] == b"{":
        try:
            text = body.decode("utf-8", "surrogatepass")
            value, end = _scan_once(text, 0)
        except (ValueError, RecursionError, StopIteration):
            pass  # read again below, for the error to answer (StopIteration: no value)
        else:
            if end == len(text):
                return value
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Undecodable(PARSE_ERROR, f"Parse error: {_short(exc)}") from None
    except RecursionError:
        why = "Invalid Request: nested deeper than agentd reads"
    except ValueError:
        # The only other ValueError of json.loads: int()'s digit limit.
        why = f"Invalid Request: a number of more than {sys.get_int_max_str_digits()} digits"
    reply, reply_id = top_level_id(body)
    raise Undecodable(INVALID_REQUEST, why, reply=reply, reply_id=reply_id)


def _short(exc: Exception) -> str:
    return str(exc)[:200]


def top_level_id(body: bytes) -> tuple[bool, Any]:
    """(answer?, id) for a well-formed body, found without recursion: an object
    with an "id" member is answered, to that id when it is a string or an
    integer that can be read (else null); an object without one is a
    notification; anything else is answered to null."""
    if len(body) > MAX_SALVAGE_BYTES:
        return True, None
    depth = 0
    expect_key = False
    key: bytes | None = None
    after_colon = False
    for m in _TOKEN.finditer(body):
        tok = m.group()
        if tok in (b"{", b"["):
            if depth == 0 and tok != b"{":
                return True, None
            if depth == 1 and after_colon and key == _ID_KEY:
                return True, None  # an object or array as id: not usable
            depth += 1
            expect_key = depth == 1
            after_colon = False
            continue
        if tok in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                break
            continue
        if depth != 1:
            continue
        if tok == b",":
            expect_key, after_colon = True, False
        elif tok == b":":
            after_colon = True
        elif expect_key:
            key, expect_key = tok, False
        elif after_colon:
            after_colon = False
            if key == _ID_KEY:
                return True, _scalar_id(tok)
    return False, None


def _scalar_id(tok: bytes) -> Any:
    try:
        value = json.loads(tok)
    except ValueError:
        return None  # the id is the number too long to read
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return value
