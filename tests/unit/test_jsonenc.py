"""`agentd.jsonenc.compact`: the bytes of `json.dumps(ensure_ascii=False,
separators=(",", ":"))`, from one kept encoder (requests and transcript lines
are compared by their bytes: a provider's prompt cache keys on them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.jsonenc import compact, compact_utf8

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates included
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@given(_JSON)
def test_compact_is_json_dumps_compact_and_unescaped(value: Any) -> None:
    assert compact(value) == _dumps(value)


def test_compact_keeps_dumps_key_and_tuple_handling_and_refuses_what_json_cannot_hold() -> None:
    value = {1: (1.5, "中文"), None: [True], 2.5: "x\u2028y"}
    assert compact(value) == _dumps(value)
    with pytest.raises(TypeError):
        compact({"a": object()})
    with pytest.raises(TypeError):
        compact({("a",): 1})


@given(_JSON)
def test_compact_utf8_is_utf8_json_of_the_same_value(value: Any) -> None:
    data = compact_utf8(value)
    data.decode("utf-8")  # always UTF-8, lone surrogates included (then escaped)
    try:
        expected = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        expected = json.dumps(value, separators=(",", ":")).encode()
    assert data == expected


def test_compact_utf8_stringifies_only_when_asked() -> None:
    assert compact_utf8({"p": Path("/x"), "s": "\udc80é"}, stringify=True) == (
        b'{"p":"/x","s":"\\udc80\\u00e9"}'
    )
    assert (
        compact_utf8({"p": Path("/x"), "s": "é"}, stringify=True) == '{"p":"/x","s":"é"}'.encode()
    )
    with pytest.raises(TypeError):
        compact_utf8({"p": Path("/x")})
