"""LSP framing under random chunking and broken frames (vscode-jsonrpc's tests, clangd's caps)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.lsp.transport import MAX_BODY, FrameSplitter, frame


async def collect(data: bytes, cuts: list[int]) -> list[bytes]:
    pieces: list[bytes] = []
    pos = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(data))):
        pieces.append(data[pos:cut])
        pos = cut
    pieces.append(data[pos:])
    bodies: list[bytes] = []
    frames = FrameSplitter(bodies.append)
    for piece in pieces:
        frames.feed(piece)
    frames.end()
    return bodies


messages = st.lists(
    st.dictionaries(st.text(max_size=5), st.text(max_size=30), max_size=4), min_size=1, max_size=6
)


@settings(max_examples=200, deadline=None)
@given(messages, st.lists(st.integers(min_value=0, max_value=4000), max_size=30))
async def test_random_chunking_preserves_messages_in_order(
    msgs: list[dict[str, str]], cuts: list[int]
) -> None:
    bodies = [json.dumps(m, ensure_ascii=False).encode() for m in msgs]
    data = b"".join(frame(b) for b in bodies)
    assert await collect(data, cuts) == bodies


async def test_three_messages_in_one_write() -> None:
    bodies = [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert await collect(b"".join(frame(b) for b in bodies), []) == bodies


async def test_huge_length_refused_without_allocating() -> None:
    data = b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1) + frame(b'{"ok":1}')
    assert await collect(data, []) == [b'{"ok":1}']


async def test_overlong_length_cut_at_next_header() -> None:
    data = b'Content-Length: 999\r\n\r\n{"x":1}' + frame(b'{"ok":1}')
    assert await collect(data, [10, 30]) == [b'{"x":1}', b'{"ok":1}']


async def test_bad_headers_resync() -> None:
    data = (
        b"Content-Length: nope\r\n\r\n{}"
        + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
        + b"junk junk\r\n\r\n"
        + frame(b'{"ok":1}')
    )
    assert await collect(data, [3, 17, 40]) == [b'{"ok":1}']


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(min_value=0, max_value=3000), max_size=10))
async def test_random_bytes_never_crash_and_a_later_frame_is_read(
    noise: bytes, cuts: list[int]
) -> None:
    good = frame(b'{"ok":1}')
    bodies = await collect(noise + b"\r\n\r\n" + good, cuts)
    assert bodies[-1] == b'{"ok":1}' or b"Content-Length" in noise


async def test_a_length_of_thousands_of_digits_is_refused_and_the_next_frame_read() -> None:
    # `int` refuses more than 4300 digits: the splitter must not raise from
    # the read callback (the buffer would keep the block: deaf from then on).
    for digits in (b"9" * 5000, b"1" * 11):
        data = b"Content-Length: " + digits + b"\r\n\r\n{}" + frame(b'{"ok":1}')
        assert await collect(data, [7]) == [b'{"ok":1}'], digits[:12]
    # Leading zeros are no part of the number, however many.
    data = b"Content-Length: " + b"0" * 5000 + b"2\r\n\r\n{}" + frame(b'{"ok":1}')
    assert await collect(data, [7]) == [b"{}", b'{"ok":1}']


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([b"Content-Length", b"content-length", b"CONTENT-LENGTH"]),
    st.sampled_from([b": ", b":", b":  ", b": 0", b": 00"]),
    st.sampled_from([b"", b"\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8"]),
    st.binary(max_size=40),
)
async def test_every_spelling_of_the_header_reads_the_same_body(
    name: bytes, sep: bytes, more: bytes, body: bytes
) -> None:
    # The usual header is read by a shortcut; any other spelling by the
    # general parse: both give the body its length names.
    data = name + sep + b"%d" % len(body) + more + b"\r\n\r\n" + body + frame(b'{"ok":1}')
    assert await collect(data, []) == [body, b'{"ok":1}']
