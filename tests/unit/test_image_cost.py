"""Images in the context meter: their size read from their headers, their
cost by Anthropic's documented count, and the meter adding it to the bytes'
estimate while its calibration (bytes per token) leaves it out."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from agentd.agent.context import Calibration, Meter, history_bytes
from agentd.agent.image_cost import (
    MAX_TOKENS,
    image_size,
    image_tokens,
    message_image_tokens,
    tokens_for,
)
from agentd.messages import ImagePart, Message, TextPart, ToolResultPart
from agentd.providers.base import Usage


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def png(width: int, height: int) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = b"IHDR" + header
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + body + struct.pack(">I", zlib.crc32(body))


def jpeg(width: int, height: int, exif: int = 60_000) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    # A camera's EXIF block (with its thumbnail) before the frame header.
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"E" * exif
    sof = b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + app1 + b"\xff\xff" + sof + b"\xff\xda" + b"\x00" * 32


def webp(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("raw", "size"),
    [
        (png(1920, 1080), (1920, 1080)),
        (b"GIF89a" + struct.pack("<HH", 320, 200) + b"\x00" * 8, (320, 200)),
        (jpeg(4032, 3024), (4032, 3024)),
        (
            webp(b"VP8X", b"\x00" * 4 + (799).to_bytes(3, "little") + (599).to_bytes(3, "little")),
            (800, 600),
        ),
        (webp(b"VP8L", b"\x2f" + (639 | 479 << 14).to_bytes(4, "little")), (640, 480)),
        (webp(b"VP8 ", b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", 1024, 768)), (1024, 768)),
    ],
    ids=["png", "gif", "jpeg-after-exif", "webp-vp8x", "webp-vp8l", "webp-vp8"],
)
def test_the_size_is_read_from_the_header(raw: bytes, size: tuple[int, int]) -> None:
    assert image_size(b64(raw)) == size


@pytest.mark.parametrize("data", ["", "not base64 at all!", b64(b"plain text"), b64(b"\xff\xd8")])
def test_an_unreadable_image_costs_the_most(data: str) -> None:
    assert image_size(data) is None
    assert image_tokens(ImagePart("image/png", data)) == MAX_TOKENS


def test_tokens_follow_anthropics_count() -> None:
    # (width * height) / 750, the long edge first scaled to 1568, at most 1600.
    assert tokens_for(200, 200) == 54
    assert tokens_for(1000, 1000) == 1334
    assert tokens_for(1092, 1092) == 1590
    assert tokens_for(1920, 1080) == MAX_TOKENS  # 1568x882 is over 1.2 megapixels
    assert tokens_for(4000, 100) == 82  # 1568x39.2
    assert tokens_for(1, 1) == 1


def test_a_parts_cost_is_computed_once_and_is_not_part_of_its_value() -> None:
    part = ImagePart("image/png", b64(png(750, 100)))
    assert image_tokens(part) == 100 and part.tokens == 100
    part.data = b64(png(1500, 100))  # never happens: proves the cached figure is used
    assert image_tokens(part) == 100
    assert part == ImagePart("image/png", part.data)
    # An image whose bytes are not read yet is not cached at the maximum.
    empty = ImagePart("image/png", "", "ab" * 32)
    assert image_tokens(empty) == MAX_TOKENS and empty.tokens == 0


def test_a_messages_images_include_those_of_tool_results() -> None:
    small = ImagePart("image/png", b64(png(750, 10)))
    msg = Message(
        "user", [TextPart("look"), small, ToolResultPart("c1", "shot", False, (small, small))]
    )
    assert message_image_tokens(msg) == 30


def test_the_meter_counts_images_and_its_calibration_leaves_them_out() -> None:
    shot = ImagePart("image/png", b64(png(1920, 1080)))
    text = "x" * 3500
    history = [Message("user", [TextPart(text), shot, shot])]
    cal, meter = Calibration(), Meter()
    overhead = 700
    size = overhead + history_bytes(history)
    # Before any usage: the bytes' estimate and the images' pixels.
    assert meter.estimate(history, overhead, cal) == cal.tokens(size) + 2 * MAX_TOKENS
    # The provider counts both; the calibration learns the text's share only.
    usage = Usage(input_tokens=size // 4 + 2 * MAX_TOKENS, output_tokens=5)
    meter.observe(history, 1, overhead, usage, cal)
    assert cal.bytes_per_token == pytest.approx(4.0, rel=0.01)
    # Another screenshot since the provider's count: added at its cost.
    history.append(Message("user", [TextPart("and this"), shot]))
    added = cal.tokens(history_bytes(history[1:]))
    assert meter.estimate(history, overhead, cal) == usage.input_tokens + added + MAX_TOKENS
    # A later request's calibration again leaves every image out.
    usage = Usage(input_tokens=usage.input_tokens + added + MAX_TOKENS, output_tokens=5)
    meter.observe(history, 2, overhead, usage, cal)
    assert cal.bytes_per_token == pytest.approx(4.0, rel=0.05)
