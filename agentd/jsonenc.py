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
# The arguments `JSONEncoder.iterencode` gives it: markers (None: no circular
# check), default, the string encoder, indent, separators, sort_keys,
# skipkeys, allow_nan.
_C_ENCODER = (
    c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", False, False, True)
    if c_make_encoder is not None
    else None
)


def compact(value: Any) -> str:
    """`value` as compact JSON text: what `json.dumps(value, ensure_ascii=False,
    separators=(",", ":"))` gives, TypeError for what JSON cannot hold."""
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))
