"""Images in the context meter: their size read from their headers, their
cost by the documented count of the API the session's model is reached
through (OpenAI's tiles, Anthropic's pixels / 750), and the meter adding it
to the bytes' estimate while its calibration (bytes per token) leaves it
out; the bundled model server bills them by the same counts."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import cast

import pytest

from agentd.agent.compaction import Compactor
from agentd.agent.context import Calibration, ContextWindow, Meter, history_bytes
from agentd.agent.image_cost import formula_for, image_tokens, message_image_tokens
from agentd.agent.session import AwaitClientResult, Session
from agentd.image_billing import MAX_TOKENS, OPENAI_MAX_TOKENS, image_size, tokens_for
from agentd.messages import ImagePart, Message, TextPart, ToolResultPart
from agentd.providers.base import ModelProvider, Usage
from agentd.tasks import Supervisor


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
    assert image_tokens(ImagePart("image/png", data), "anthropic") == MAX_TOKENS
    assert image_tokens(ImagePart("image/png", data), "openai") == OPENAI_MAX_TOKENS


def test_tokens_follow_anthropics_count() -> None:
    # (width * height) / 750, the long edge first scaled to 1568, at most 1600.
    assert tokens_for(200, 200, "anthropic") == 54
    assert tokens_for(1000, 1000, "anthropic") == 1334
    assert tokens_for(1092, 1092, "anthropic") == 1590  # the documented ~1.19 MP for 1:1
    assert tokens_for(1920, 1080, "anthropic") == MAX_TOKENS  # 1568x882: over 1.2 megapixels
    assert tokens_for(4000, 100, "anthropic") == 82  # 1568x39.2
    assert tokens_for(1, 1, "anthropic") == 1


@pytest.mark.parametrize(
    ("width", "height", "detail", "tokens"),
    [
        # OpenAI's documented examples: 1024x1024 high is 768x768, 4 tiles.
        (1024, 1024, "high", 765),
        # 2048x4096 high: 1024x2048 to fit 2048, then 768x1536: 6 tiles.
        (2048, 4096, "high", 1105),
        # 4096x8192 low: 85 whatever the size.
        (4096, 8192, "low", 85),
        # auto (agentd sends no detail) counts as high.
        (1920, 1080, "auto", 1105),  # 1365x768: 3 by 2 tiles
        (512, 512, "auto", 255),  # one tile: a small image is not enlarged
        (513, 512, "auto", 425),
        (100, 100, "high", 255),
        (768, 2048, "auto", OPENAI_MAX_TOKENS),  # 2 by 4 tiles, the most there are
        (8000, 200, "high", 765),  # 2048x51: 4 by 1 tiles
    ],
)
def test_tokens_follow_openais_count(width: int, height: int, detail: str, tokens: int) -> None:
    assert tokens_for(width, height, "openai", detail) == tokens


@pytest.mark.parametrize(
    ("provider", "model", "formula"),
    [
        ("anthropic", "claude-sonnet-4-5", "anthropic"),
        ("anthropic", "anything", "anthropic"),
        ("openai", "gpt-4o", "openai"),
        ("openai", "qwen2.5-vl-72b", "openai"),
        # A Claude model behind an OpenAI-compatible router is billed by Anthropic.
        ("openai", "anthropic/claude-3.5-sonnet", "anthropic"),
        ("openai", "Claude-3-Haiku", "anthropic"),
    ],
)
def test_the_formula_is_the_providers_by_the_model(provider: str, model: str, formula: str) -> None:
    assert formula_for(provider, model) == formula


def test_a_parts_size_is_read_once_and_is_not_part_of_its_value() -> None:
    part = ImagePart("image/png", b64(png(750, 100)))
    assert image_tokens(part, "anthropic") == 100 and part.pixels == (750, 100)
    assert image_tokens(part, "openai") == 425  # 2 by 1 tiles
    part.data = b64(png(1500, 100))  # never happens: proves the size read once is used
    assert image_tokens(part, "anthropic") == 100
    assert part == ImagePart("image/png", part.data)
    # An image whose bytes are not read yet is measured again once they are.
    empty = ImagePart("image/png", "", "ab" * 32)
    assert image_tokens(empty, "anthropic") == MAX_TOKENS and empty.pixels is None
    empty.data = b64(png(750, 100))
    assert image_tokens(empty, "anthropic") == 100


def test_a_messages_images_include_those_of_tool_results() -> None:
    small = ImagePart("image/png", b64(png(750, 10)))
    msg = Message(
        "user", [TextPart("look"), small, ToolResultPart("c1", "shot", False, (small, small))]
    )
    assert message_image_tokens(msg, "anthropic") == 30
    assert message_image_tokens(msg, "openai") == 3 * 425


def test_the_meter_counts_images_and_its_calibration_leaves_them_out() -> None:
    shot = ImagePart("image/png", b64(png(1920, 1080)))
    text = "x" * 3500
    history = [Message("user", [TextPart(text), shot, shot])]
    cal, meter = Calibration(), Meter(formula="anthropic")
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


def test_the_compactor_counts_images_as_the_sessions_model_bills_them() -> None:
    """The formula follows the provider and the session's model, also across
    a model switch: the index is rebuilt and the meter's images re-estimated."""
    shot = ImagePart("image/png", b64(png(1920, 1080)))
    session = Session("s1", Path("/w"), AwaitClientResult([]))
    session.history.append(Message("user", [TextPart("look"), shot]))
    openai = Compactor(
        cast(ModelProvider, object()), Supervisor(), ContextWindow("gpt-4o", 100_000)
    )
    text = Calibration().tokens(history_bytes(session.history))
    assert openai.estimate(session) == text + 1105
    assert openai.state(session).index.formula == "openai"
    # The provider's count of a request with the screenshot: the calibration
    # learns the text's share (the image's 1105 left out).
    openai.observe(session, 1, Usage(input_tokens=1305, output_tokens=5))
    assert openai.state(session).meter.mark_images == 1105
    session.model = "anthropic/claude-sonnet-4"  # the same router, a Claude model
    session.history.append(Message("user", [TextPart("and this"), shot]))
    added = openai.calibration.tokens(history_bytes(session.history[1:]))
    assert openai.estimate(session) == 1305 + added + MAX_TOKENS
    st = openai.state(session)
    assert st.meter.mark_images == MAX_TOKENS and st.index.formula == "anthropic"
    claude = Compactor(
        cast(ModelProvider, object()),
        Supervisor(),
        ContextWindow("claude-sonnet-4-5", 100_000),
        provider_kind="anthropic",
    )
    alone = Session("s2", Path("/w"), AwaitClientResult([]))
    alone.history.append(session.history[0])
    assert claude.estimate(alone) == text + MAX_TOKENS

    # Requests routed to an Anthropic endpoint (ACP `providers/set`): the
    # same model's images are counted as that API bills them, and back.
    routed = Compactor(
        cast(ModelProvider, object()), Supervisor(), ContextWindow("gpt-4o", 100_000)
    )
    third = Session("s3", Path("/w"), AwaitClientResult([]))
    third.history.append(session.history[0])
    assert routed.estimate(third) == text + 1105
    routed.endpoint_changed("anthropic")
    assert routed.estimate(third) == text + MAX_TOKENS
    assert routed.state(third).index.formula == "anthropic"
    routed.endpoint_changed("openai")
    assert routed.estimate(third) == text + 1105
