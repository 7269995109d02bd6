"""Images billed as each API bills them: by their pixels, not their base64.

The server counts a request's input tokens as a quarter of its JSON's
characters (`RequestView.input_tokens`, the prompt cache's prefixes), which
would bill a screenshot by the length of its base64 text: tens of
thousands of tokens for a photo, a few hundred for a flat PNG. The real
APIs bill it by its size in pixels, each by its documented count
(`agentd.image_billing`: OpenAI's 512-px tiles, honouring an image
part's `detail`; Anthropic's pixels / 750). `image_chars` is what turns the
one into the other: the characters to add to a value's JSON length so that
a quarter of it counts each image at its API's figure.
"""

from __future__ import annotations

from typing import Any, Literal

from agentd.image_billing import UNREADABLE, image_size, tokens_for

Api = Literal["openai", "anthropic"]


def image_chars(value: Any, api: Api, text: str) -> int:
    """For `value` (a message, a content block, a list of them) whose JSON
    is `text`: minus the base64 of each image in it, plus four characters
    per token its API bills for the image."""
    if '"image' not in text:
        return 0  # most requests hold none: not walked
    total = 0
    for data, detail in _images(value, api):
        width, height = image_size(data) or UNREADABLE
        total += 4 * tokens_for(width, height, api, detail) - len(data)
    return total


def _images(value: Any, api: Api) -> list[tuple[str, str]]:
    """(base64 data, OpenAI's detail) of each image part in `value`, however
    deep (an Anthropic tool result's content holds image blocks too)."""
    found: list[tuple[str, str]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            image = _image_of(item, api)
            if image is not None:
                found.append(image)
            else:
                stack.extend(v for v in item.values() if isinstance(v, list | dict))
    return found


def _image_of(part: dict[str, Any], api: Api) -> tuple[str, str] | None:
    if api == "openai" and part.get("type") == "image_url":
        image = part.get("image_url")
        if isinstance(image, dict) and str(image.get("url", "")).startswith("data:"):
            detail = image.get("detail")
            return str(image["url"]).partition(",")[2], detail if isinstance(
                detail, str
            ) else "auto"
    if api == "anthropic" and part.get("type") == "image":
        source = part.get("source")
        if isinstance(source, dict) and isinstance(source.get("data"), str):
            return source["data"], "auto"
    return None
