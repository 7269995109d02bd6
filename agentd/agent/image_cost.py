"""What an image in the history costs in input tokens, for the context meter.

Providers bill an image by its pixels, not by its base64 size, so the
meter's bytes-per-token estimate cannot count it. The estimate is
Anthropic's documented one for every provider: an image whose long edge is
over 1568 px is first scaled down to it, then costs (width * height) / 750
tokens, at most about 1600 (images beyond about 1.2 megapixels are scaled
down to that). OpenAI's high-detail count (85 + 170 per 512-px tile once
the short side is 768 px: 1105 for a 1920x1080 screenshot, against 1600
here) is never higher for the same image, so the meter errs high, which
only makes compaction come a little early.

The size comes from the image's header (PNG, GIF, WebP, JPEG: the types a
prompt or an MCP result may carry); an image whose size cannot be read is
counted at the maximum.
"""

from __future__ import annotations

import binascii
import math
import struct

from agentd.messages import ImagePart, Message, ToolResultPart

LONG_EDGE = 1568
PIXELS_PER_TOKEN = 750
MAX_TOKENS = 1600
# How much of a JPEG is searched for its size: a camera's EXIF block (with
# its thumbnail) comes first and may take up to 64 KiB.
JPEG_SEARCH = 128 * 1024


def image_tokens(image: ImagePart) -> int:
    """The image's estimated cost, computed once per part (`ImagePart.tokens`)."""
    if image.tokens:
        return image.tokens
    size = image_size(image.data)
    tokens = MAX_TOKENS if size is None else tokens_for(*size)
    if image.data:  # an image not read from its file yet is counted again once it is
        image.tokens = tokens
    return tokens


def message_image_tokens(message: Message) -> int:
    """The images of a message (a prompt's, and those of MCP tool results)."""
    total = 0
    for part in message.parts:
        if isinstance(part, ImagePart):
            total += image_tokens(part)
        elif isinstance(part, ToolResultPart) and part.images:
            total += sum(image_tokens(i) for i in part.images)
    return total


def history_image_tokens(messages: list[Message]) -> int:
    return sum(message_image_tokens(m) for m in messages)


def tokens_for(width: int, height: int) -> int:
    if width <= 0 or height <= 0:
        return MAX_TOKENS
    scale = min(1.0, LONG_EDGE / max(width, height))
    pixels = (width * scale) * (height * scale)
    return max(1, min(MAX_TOKENS, math.ceil(pixels / PIXELS_PER_TOKEN)))


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
