"""An MCP `CallToolResult` -> the text (and images) the model gets.

Read by attribute from the SDK's models (no SDK import here):

| content block        | to the model                                        |
| -------------------- | --------------------------------------------------- |
| text                 | the text                                            |
| resource_link        | `[name](uri)` and its description                   |
| embedded resource    | its text inside `<resource uri=...>`, or a note     |
| image                | a note with the MIME type and size; the image itself |
|                      | too when it is one models take (PNG, JPEG, GIF, WebP |
|                      | up to 5 MB, at most 8 in a result)                  |
| audio                | a note with the MIME type and size                  |
| structuredContent    | its JSON, when no text block carries it already     |

`isError` makes the result a failed one. The caller caps the text at
`toolResultMaxChars`. The images travel beside the text: a provider whose API
takes images in tool results (Anthropic's) sends them, the others tell the
model they were not shown.
"""

from __future__ import annotations

import json
from typing import Any

from agentd.messages import ImagePart

# What the image-taking APIs accept in a tool result: these types, 5 MB an image.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
IMAGE_MAX_BYTES = 5 * 1024 * 1024
IMAGES_MAX = 8


def _size(data: Any) -> str:
    if not isinstance(data, str):
        return "unknown size"
    return f"{len(data) * 3 // 4:,} bytes"


def _block_text(block: Any) -> str | None:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind == "resource_link":
        name = getattr(block, "title", None) or getattr(block, "name", None) or "resource"
        line = f"[{name}]({getattr(block, 'uri', '')})"
        description = getattr(block, "description", None)
        return f"{line} {description}" if description else line
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = getattr(resource, "uri", "")
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f'<resource uri="{uri}">\n{text}\n</resource>'
        mime = getattr(resource, "mime_type", None) or "binary"
        return f"[resource {uri}: {mime}, {_size(getattr(resource, 'blob', None))}, not shown]"
    if kind == "image" and _image(block) is not None:
        return f"[image {block.mime_type}, {_size(block.data)}]"
    if kind in ("image", "audio"):
        mime = getattr(block, "mime_type", None) or kind
        return f"[{kind} {mime}, {_size(getattr(block, 'data', None))}, not shown]"
    return None


def _image(block: Any) -> ImagePart | None:
    """The image of an image block models take, else None."""
    mime, data = getattr(block, "mime_type", None), getattr(block, "data", None)
    if mime not in IMAGE_TYPES or not isinstance(data, str) or not data:
        return None
    if len(data) * 3 // 4 > IMAGE_MAX_BYTES:
        return None
    return ImagePart(mime, data)


def result_images(result: Any) -> tuple[ImagePart, ...]:
    """The images of a `CallToolResult` a model can be given (the first `IMAGES_MAX`)."""
    blocks = getattr(result, "content", None) or ()
    found = (_image(b) for b in blocks if getattr(b, "type", None) == "image")
    return tuple(i for i in found if i is not None)[:IMAGES_MAX]


def result_text(result: Any) -> tuple[str, bool]:
    """(text for the model, is_error) of a `CallToolResult`."""
    blocks = list(getattr(result, "content", None) or ())
    parts = [t for t in (_block_text(b) for b in blocks) if t is not None]
    has_text = any(getattr(b, "type", None) == "text" for b in blocks)
    structured = getattr(result, "structured_content", None)
    if structured is not None and not has_text:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n\n".join(parts) if parts else "(the tool returned no content)"
    return text, bool(getattr(result, "is_error", False))
