"""What an image in the history costs in input tokens, for the context meter.

Providers bill an image by its pixels, not by its base64 size, so the
meter's bytes-per-token estimate cannot count it. Each API documents its
own count, and the meter uses the one of the API the session's model is
reached through (`formula_for`), because the meter's calibration takes the
images' estimate out of the provider's figure: an estimate that errs one
way makes the text's bytes-per-token err the other.

- Anthropic: an image whose long edge is over 1568 px is first scaled down
  to it, then costs (width * height) / 750 tokens, at most about 1600
  (images beyond about 1.2 megapixels are scaled down to that).
- OpenAI (and OpenAI-compatible servers): `detail: "low"` costs 85 tokens;
  `"high"` and `"auto"` (agentd sends no detail: auto) scale the image to
  fit 2048x2048, then its short side down to 768 px, and cost 170 tokens
  per 512-px tile plus 85: 1105 for a 1920x1080 screenshot, 765 for a
  1024x1024 image, 255 for a 512x512 one. A Claude model behind an
  OpenAI-compatible router is billed by Anthropic's count.

Other models' own counts (Gemini's, Qwen-VL's, OpenAI's patch-based small
models) differ; the provider's usage figure re-anchors the meter after
every request, so an estimate only ever covers what was added since.

The size comes from the image's header (PNG, GIF, WebP, JPEG: the types a
prompt or an MCP result may carry), read once per part (`ImagePart.pixels`);
an image whose size cannot be read is counted at the formula's maximum.
"""

from __future__ import annotations

import binascii
import functools
import math
import struct
from typing import Literal

from agentd.messages import ImagePart, Message, ToolResultPart

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


@functools.lru_cache(maxsize=64)
def formula_for(provider: str, model: str) -> Formula:
    """The count an image sent to `model` through `provider` (the settings'
    `provider`: "openai" or "anthropic") is billed by."""
    if provider == "anthropic":
        return "anthropic"
    # `anthropic/claude-sonnet-4` (OpenRouter), `claude-3-5-sonnet` (a proxy).
    if model.lower().rsplit("/", 1)[-1].startswith("claude"):
        return "anthropic"
    return "openai"


def image_tokens(image: ImagePart, formula: Formula) -> int:
    """The image's estimated cost; its size is read once per part (`ImagePart.pixels`)."""
    pixels = image.pixels
    if pixels is None:
        size = image_size(image.data)
        pixels = UNREADABLE if size is None else size
        if image.data:  # an image not read from its file yet is measured again once it is
            image.pixels = pixels
    return tokens_for(*pixels, formula)


def message_image_tokens(message: Message, formula: Formula) -> int:
    """The images of a message (a prompt's, and those of MCP tool results)."""
    total = 0
    for part in message.parts:
        if isinstance(part, ImagePart):
            total += image_tokens(part, formula)
        elif isinstance(part, ToolResultPart) and part.images:
            total += sum(image_tokens(i, formula) for i in part.images)
    return total


def history_image_tokens(messages: list[Message], formula: Formula) -> int:
    return sum(message_image_tokens(m, formula) for m in messages)


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
