"""What an image in the history costs in input tokens, for the context meter.

Providers bill an image by its pixels, not by its base64 size, so the
meter's bytes-per-token estimate cannot count it. Each API documents its
own count (`agentd.image_billing`), and the meter uses the one of the API
the session's model is reached through (`formula_for`), because the
meter's calibration takes the images' estimate out of the provider's
figure: an estimate that errs one way makes the text's bytes-per-token err
the other.

- Anthropic (`provider = "anthropic"`, and a Claude model behind an
  OpenAI-compatible router): an image whose long edge is over 1568 px is
  first scaled down to it, then costs (width * height) / 750 tokens, at
  most about 1600 (images beyond about 1.2 megapixels are scaled down to
  that).
- OpenAI (and the other OpenAI-compatible models): agentd sends no
  `detail` (auto, counted as high): the image is scaled to fit 2048x2048,
  then its short side down to 768 px, and costs 170 tokens per 512-px tile
  plus 85: 1105 for a 1920x1080 screenshot, 765 for a 1024x1024 image, 255
  for a 512x512 one.

Other models' own counts (Gemini's, Qwen-VL's, OpenAI's patch-based small
models) differ; the provider's usage figure re-anchors the meter after
every request, so an estimate only ever covers what was added since.

The size is read from the image's header once per part (`ImagePart.pixels`);
an image whose size cannot be read is counted at the formula's maximum.
"""

from __future__ import annotations

import functools

from agentd.image_billing import UNREADABLE, Formula, image_size, tokens_for
from agentd.messages import ImagePart, Message, ToolResultPart


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
