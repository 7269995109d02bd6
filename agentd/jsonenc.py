"""Compact JSON (no spaces after `,` and `:`, text as is, not `\\u` escaped)
from one kept encoder: the form of model requests and transcript lines.

`json.dumps(value, ensure_ascii=False, separators=(",", ":"))` builds a
`JSONEncoder` and then the C encoder object it runs on every call, and a
kept `JSONEncoder`'s `encode` still builds the C object each time: about
4 us of each of the few encodings on a prompt's way to its model request,
more once the process has idled, where the encoding itself of a message
takes 2 us. The C encoder is made once here and called directly, which is
what `json.dumps` does inside, without the circular-reference check (what
is encoded here is plain data the daemon built: dicts, lists, strings,
numbers). Without the C accelerator (not CPython), `JSONEncoder.encode`.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# `str` for what JSON cannot hold: what the wire writers want, where a stray
# Path in a reply must not lose it.
_STR_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def _c_encoder(encoder: json.JSONEncoder) -> Any:
    # The arguments `JSONEncoder.iterencode` gives it: markers (None: no
    # circular check), default, the string encoder, indent, separators,
    # sort_keys, skipkeys, allow_nan.
    if c_make_encoder is None:
        return None
    return c_make_encoder(
        None, encoder.default, encode_basestring, None, ":", ",", False, False, True
    )


_C_ENCODER = _c_encoder(_ENCODER)
_C_STR_ENCODER = _c_encoder(_STR_ENCODER)


def compact(value: Any) -> str:
    """`value` as compact JSON text: what `json.dumps(value, ensure_ascii=False,
    separators=(",", ":"))` gives, TypeError for what JSON cannot hold."""
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


def compact_utf8(value: Any, *, stringify: bool = False) -> bytes:
    """`compact(value)` as UTF-8 bytes, for what goes to a pipe or a file. A
    lone surrogate (a file name the disk gave us) cannot be UTF-8: then the
    whole value is written ASCII-escaped (`\\udxxx`), still JSON and still
    UTF-8, so the message or line is never lost to it. `stringify`: a value
    JSON cannot hold is written as its `str()` instead of raising."""
    encoder, c_encoder = (_STR_ENCODER, _C_STR_ENCODER) if stringify else (_ENCODER, _C_ENCODER)
    text = encoder.encode(value) if c_encoder is None else "".join(c_encoder(value, 0))
    try:
        return text.encode()
    except UnicodeEncodeError:
        default = str if stringify else None
        return json.dumps(value, separators=(",", ":"), default=default).encode()
