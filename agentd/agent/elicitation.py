"""Asking the user for input on an MCP server's behalf (MCP elicitation).

An MCP server may ask, in the middle of a tool call, for a form to be
filled in ("which account?") or for a URL to be opened (a sign-in). Each
front end shows it in its own way (ACP: `elicitation/create`; LSP:
`agent/elicit`) through an `Elicitor` set on the session; both take the
same params shape and give the same answer shape (`{action, content?}`).

Everything here is fail-closed: no elicitor, a mode the editor did not
declare, a schema outside the restricted shapes both protocols allow, a URL
that is not http(s), an answer that does not match the schema: the server
gets `decline` (never an error that would fail its tool). What comes back
from the editor is untrusted: its size, types and values are checked
against the schema the server sent before the server sees them.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from agentd.agent.session import Session

Mode = Literal["form", "url"]
Action = Literal["accept", "decline", "cancel"]

# Bounds on what a server may ask and an editor may answer.
MAX_SCHEMA_BYTES = 64 * 1024
MAX_PROPERTIES = 64
MAX_NAME = 256
MAX_CONTENT_BYTES = 64 * 1024
MAX_CHOICES = 1000
MAX_URL = 8192
MAX_MESSAGE = 16 * 1024
MAX_ELICITATION_ID = 1024

_PRIMITIVES = ("string", "number", "integer", "boolean")


@dataclass(slots=True)
class ElicitationRequest:
    """One server's question, in the wire shape both front ends send."""

    tool_call_id: str
    # The server's configured name (the editor may show it).
    server: str
    mode: Mode
    message: str
    # Form mode: the restricted JSON Schema of the answer.
    requested_schema: dict[str, Any] | None = None
    # URL mode: where to send the user, and the server's id for it.
    url: str | None = None
    elicitation_id: str | None = None

    def params(self, session_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sessionId": session_id,
            "toolCallId": self.tool_call_id,
            "mode": self.mode,
            "message": self.message,
        }
        if self.mode == "form":
            out["requestedSchema"] = self.requested_schema
        else:
            out["url"] = self.url
            out["elicitationId"] = self.elicitation_id
        return out


@dataclass(slots=True)
class ElicitationAnswer:
    action: Action
    content: dict[str, Any] | None = None
    # Why it is not the user's own answer (for the log).
    detail: str = ""


@dataclass(slots=True)
class PendingElicitation:
    """A question the editor was sent: its raw answer, and how to withdraw it."""

    answer: asyncio.Future[Any]
    # Stop waiting (cancel, timeout): the editor is told to close its dialog.
    withdraw: Callable[[], None]


class Elicitor(Protocol):
    def supports(self, mode: str) -> bool: ...

    def ask(self, session: Session, request: ElicitationRequest) -> PendingElicitation: ...

    def complete(self, session: Session, elicitation_id: str) -> None:
        """The server says a URL-mode elicitation is done (the editor may close it)."""
        ...


# --- what a server may ask ---------------------------------------------------------------


def _json_size(value: Any) -> int | None:
    """The length of `value` as JSON text, in characters; None if it is not
    plain JSON (a NaN, a non-string key, an object too deep to encode)."""
    try:
        return len(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not one of the restricted shapes (flat object of
    string, number, integer, boolean and multi-select string properties); None if it is."""
    if not isinstance(schema, dict):
        return "requestedSchema is not an object"
    size = _json_size(schema)
    if size is None:
        return "requestedSchema is not plain JSON"
    if size > MAX_SCHEMA_BYTES:
        return "requestedSchema is too large"
    if schema.get("type", "object") != "object":
        return "requestedSchema.type is not object"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return "requestedSchema.properties is not an object"
    if len(properties) > MAX_PROPERTIES:
        return f"requestedSchema has more than {MAX_PROPERTIES} properties"
    for name, prop in properties.items():
        if len(name) > MAX_NAME:
            return "a property name is too long"
        why = _property_problem(prop)
        if why is not None:
            return f"requestedSchema.properties.{name}: {why}"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(
        isinstance(r, str) and r in properties for r in required
    ):
        return "requestedSchema.required must name its properties"
    return None


def _property_problem(prop: Any) -> str | None:
    if not isinstance(prop, dict):
        return "not an object"
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        if _choices(items) is None or not _titled(items, "anyOf"):
            return "an array must be a multi-select of strings (items.enum or items.anyOf)"
        return _bounds_problem(prop, ("minItems", "maxItems"), integer=True, least=0)
    if kind not in _PRIMITIVES:
        return f"type {kind!r} is not one of {', '.join(_PRIMITIVES)} or a string array"
    if kind == "string":
        if ("enum" in prop or "oneOf" in prop) and (
            _choices(prop) is None or not _titled(prop, "oneOf")
        ):
            return "enum must list strings, oneOf options {const, title} strings"
        if not isinstance(prop.get("format", ""), str):
            return "format must be a string"
        return _bounds_problem(prop, ("minLength", "maxLength"), integer=True, least=0)
    if kind in ("number", "integer"):
        return _bounds_problem(prop, ("minimum", "maximum"), integer=kind == "integer")
    return None


def _bounds_problem(
    prop: Mapping[str, Any], keys: tuple[str, str], integer: bool, least: float | None = None
) -> str | None:
    # ACP's models type these strictly (an integer's bounds are integers,
    # lengths and counts are not negative): a client reading one would fail.
    for key in keys:
        value = prop.get(key)
        if value is None:
            continue
        if not _is_number(value, integer=integer) or (integer and isinstance(value, float)):
            return f"{key} must be {'an integer' if integer else 'a number'}"
        if least is not None and value < least:
            return f"{key} must not be below {least:g}"
    return None


def _titled(spec: Any, key: str) -> bool:
    """Whether the options under `key` (when there are) each have a string title, as ACP wants."""
    if not isinstance(spec, dict):
        return False
    options = spec.get(key)
    if options is None or "enum" in spec:
        return True
    return isinstance(options, list) and all(
        isinstance(o, dict) and isinstance(o.get("title"), str) for o in options
    )


def _choices(spec: Any) -> list[str] | None:
    """The allowed strings of an enum-like spec (`enum`, `oneOf`/`anyOf` of `const`)."""
    if not isinstance(spec, dict):
        return None
    if "enum" in spec:
        values = spec["enum"]
    else:
        options = spec.get("oneOf", spec.get("anyOf"))
        if not isinstance(options, list):
            return None
        values = [o.get("const") if isinstance(o, dict) else None for o in options]
    if not isinstance(values, list) or len(values) > MAX_CHOICES:
        return None
    if not all(isinstance(v, str) for v in values):
        return None
    return values


def url_problem(url: Any) -> str | None:
    """Why `url` must not be shown to the user (only http and https are)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        return "the URL is empty or too long"
    scheme, sep, rest = url.partition(":")
    if not sep or scheme.lower() not in ("http", "https") or not rest.startswith("//"):
        return "the URL is not http(s)"
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        return "the URL has spaces or control characters"
    return None


# --- what the editor answers -------------------------------------------------------------


def read_answer(result: Any, request: ElicitationRequest) -> ElicitationAnswer:
    """The editor's `{action, content?}`, checked; anything unusable is `decline`."""
    action = result.get("action") if isinstance(result, dict) else None
    if action in ("decline", "cancel"):
        return ElicitationAnswer(action)
    if action != "accept":
        return ElicitationAnswer("decline", detail="the editor's answer has no valid action")
    if request.mode == "url":
        return ElicitationAnswer("accept")  # consent to open it: no content travels
    content = result.get("content", {})
    if content is None:
        content = {}
    why = content_problem(content, request.requested_schema or {})
    if why is not None:
        return ElicitationAnswer("decline", detail=f"the editor's content: {why}")
    return ElicitationAnswer("accept", content)


def content_problem(content: Any, schema: Mapping[str, Any]) -> str | None:
    """Why `content` does not answer `schema` (a checked schema); None if it does."""
    if not isinstance(content, dict):
        return "not an object"
    size = _json_size(content)
    if size is None:
        return "not plain JSON"
    if size > MAX_CONTENT_BYTES:
        return "too large"
    properties: Mapping[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if content.get(name) is None:
            return f"{name} is required"
    for name, value in content.items():
        prop = properties.get(name)
        if prop is None:
            return f"{name} is not in the schema"
        if value is None:
            continue
        why = _value_problem(value, prop)
        if why is not None:
            return f"{name}: {why}"
    return None


def _value_problem(value: Any, prop: Mapping[str, Any]) -> str | None:
    kind = prop.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "must be a string"
        choices = _choices(prop) if ("enum" in prop or "oneOf" in prop) else None
        if choices is not None and value not in choices:
            return "not one of the choices"
        # `pattern` is not run: a server's regular expression could be made to
        # take forever; the server checks what it receives anyway.
        return _range_problem(len(value), prop, "minLength", "maxLength")
    if kind in ("number", "integer"):
        if not _is_number(value, integer=kind == "integer"):
            return f"must be {'an integer' if kind == 'integer' else 'a number'}"
        return _range_problem(value, prop, "minimum", "maximum")
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be a boolean"
    if kind == "array":
        choices = _choices(prop.get("items")) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of strings"
        if any(v not in choices for v in value):
            return "not one of the choices"
        return _range_problem(len(value), prop, "minItems", "maxItems")
    return "the schema has no such type"


def _range_problem(value: float, prop: Mapping[str, Any], low: str, high: str) -> str | None:
    least, most = prop.get(low), prop.get(high)
    if least is not None and value < least:
        return f"below {low} {least}"
    if most is not None and value > most:
        return f"above {high} {most}"
    return None


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return not integer or isinstance(value, int) or value.is_integer()
