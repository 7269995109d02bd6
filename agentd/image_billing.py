"""What each model API bills for an image, in input tokens, by its pixels.

Both APIs document how they count an image, and both count its size in
pixels, not its bytes: Anthropic (width * height) / 750 tokens once the long
edge is at most 1568 px, at most about 1600; OpenAI 85 tokens at
`detail: "low"`, else 85 plus 170 per 512-px tile once the image fits
2048x2048 and its short side is at most 768 px. The size comes from the
image's header (PNG, GIF, WebP, JPEG), base64 as both APIs take it.

Shared by the context meter (`agentd.agent.image_cost`, which estimates
what the provider will bill) and the bundled model server
(`agentd.testing.model_server.images`, which bills as the API it emulates),
so that the two agree; pure, it imports nothing of agentd.
"""

from __future__ import annotations

import binascii
import math
import struct
from typing import Literal

# Which API's count an image is billed by.
Formula = Literal["anthropic", "openai"]

# Anthropic.
LONG_EDGE = 1568
PIXELS_PER_TOKEN = 750
MAX_TOKENS = 1600
# OpenAI: high (and auto) detail.
FIT_EDGE = 2048
SHORT_EDGE = 768
TILE = 512
TILE_TOKENS = 170
BASE_TOKENS = 85
# The most tiles an image can take: 768x2048 once scaled (2 by 4 tiles).
OPENAI_MAX_TOKENS = BASE_TOKENS + TILE_TOKENS * 8
LOW_DETAIL_TOKENS = BASE_TOKENS
# How much of a JPEG is searched for its size: a camera's EXIF block (with
# its thumbnail) comes first and may take up to 64 KiB.
JPEG_SEARCH = 128 * 1024
# `ImagePart.pixels` of an image whose size could not be read.
UNREADABLE = (0, 0)


def tokens_for(width: int, height: int, formula: Formula, detail: str = "auto") -> int:
    """What an image of `width` x `height` px costs by `formula`; `detail`
    is OpenAI's (`low`, `high`, `auto`)."""
    if formula == "anthropic":
        return anthropic_tokens(width, height)
    return openai_tokens(width, height, detail)


def anthropic_tokens(width: int, height: int) -> int:
    if width <= 0 or height <= 0:
        return MAX_TOKENS
    scale = min(1.0, LONG_EDGE / max(width, height))
    pixels = (width * scale) * (height * scale)
    return max(1, min(MAX_TOKENS, math.ceil(pixels / PIXELS_PER_TOKEN)))


def openai_tokens(width: int, height: int, detail: str = "auto") -> int:
    if detail == "low":
        return LOW_DETAIL_TOKENS
    if width <= 0 or height <= 0:
        return OPENAI_MAX_TOKENS
    # Scaled down only (a small image is not enlarged), to whole pixels.
    if max(width, height) > FIT_EDGE:
        width, height = _scaled(width, height, FIT_EDGE, max(width, height))
    if min(width, height) > SHORT_EDGE:
        width, height = _scaled(width, height, SHORT_EDGE, min(width, height))
    tiles = -(-width // TILE) * -(-height // TILE)
    return BASE_TOKENS + TILE_TOKENS * tiles


def _scaled(width: int, height: int, to: int, edge: int) -> tuple[int, int]:
    """`width` x `height` scaled by to/edge, each side at least one pixel."""
    return max(1, width * to // edge), max(1, height * to // edge)


def image_size(data: str) -> tuple[int, int] | None:
    """(width, height) from the header of base64 `data`, or None."""
    head = _decode(data, 64)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    if head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp_size(head)
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(_decode(data, JPEG_SEARCH))
    return None


def _decode(data: str, limit: int) -> bytes:
    """The first `limit` bytes (about) of base64 `data`; b"" if it is not base64."""
    chars = -(-limit // 3) * 4
    try:
        return binascii.a2b_base64(data[:chars])
    except (binascii.Error, ValueError):
        return b""


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X" and len(head) >= 30:
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


# Start-of-frame markers (baseline, progressive, ...): not DHT (C4), JPG (C8), DAC (CC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        if marker == 0xD9 or marker == 0xDA:  # the image's end or its data: no frame header
            return None
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None
