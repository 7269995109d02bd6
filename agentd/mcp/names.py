"""What the model is told about an MCP tool: its name and its input schema.

Pure functions, no SDK: they are the contract between MCP servers (any
name, any JSON Schema) and the providers (strict names, picky schemas).

Names. A tool `query` of the server `db` is `mcp__db__query`. Both OpenAI
and Anthropic accept names of 1 to 64 characters from `[A-Za-z0-9_-]`. A
part that needs changing to fit (another character, a double underscore, an
underscore at either end of the server's name, which would make the split
ambiguous) or a name that is too long gets a suffix made of a hash of the
original server and tool names. So a name depends only on its own server
and tool (never on which other tools exist, or in which order they were
listed): it stays the same across restarts and `tools/list_changed`, and
two different tools never share a name.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

PREFIX = "mcp__"
MAX_NAME = 64
_BAD = re.compile(r"[^A-Za-z0-9_-]")
# Keys whose presence at the root of a tool's input schema a provider rejects
# (OpenAI wants a plain object schema there; Anthropic wants `type: object`).
_ROOT_COMBINATORS = ("anyOf", "oneOf", "allOf", "not", "enum", "const")


def _clean(part: str, server: bool) -> str:
    cleaned = _BAD.sub("_", part)
    while "__" in cleaned:
        cleaned = cleaned.replace("__", "_")
    if server:
        cleaned = cleaned.strip("_")
    return cleaned or "x"


def tool_name(server: str, tool: str) -> str:
    """The model-facing name of `tool` on `server`, e.g. `mcp__db__query`."""
    s, t = _clean(server, True), _clean(tool, False)
    name = f"{PREFIX}{s}__{t}"
    if s == server and t == tool and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}\x00{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"


def display_name(name: str) -> str:
    """`mcp__db__query` -> `query` (what a tool card shows beside the server)."""
    if not name.startswith(PREFIX):
        return name
    _, _, rest = name[len(PREFIX) :].partition("__")
    return rest or name


def input_schema(schema: Any) -> dict[str, Any]:
    """A server's `inputSchema`, normalised to what both providers accept:
    an object schema at the root, with `properties`; combinators at the root
    (which OpenAI refuses there) dropped, the rest passed through unchanged."""
    out = dict(schema) if isinstance(schema, dict) else {}
    for key in _ROOT_COMBINATORS:
        out.pop(key, None)
    out["type"] = "object"
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    required = out.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        out.pop("required")
    return out
