"""A server's request that the SDK could not read, read again so that it gets an answer.

The SDK parses each message from a server with pydantic's JSON parser,
which refuses a lone surrogate escape (`"\\udc00"`, half a character):
such a line is surfaced as an exception and dropped, and the server waits
for an answer that never comes, its tool call hanging until its timeout.
Python's own parser takes the line; a request (a message with `method` and
`id`) read that way goes to the SDK like any other, so that it is answered:
a sampling request is refused naming the field (`agentd.mcp.sampling`), an
elicitation's text is made valid Unicode. Anything else (a response, a
notification, a line that is not JSON) stays what the SDK made of it.
"""

from __future__ import annotations

import json
from typing import Any

# A longer line is not read twice.
MAX_LINE_CHARS = 32 * 1024 * 1024


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def salvaged(item: Any) -> Any:
    """`item` (what the SDK's transport yielded), or the request it failed to read."""
    from pydantic import ValidationError

    if not isinstance(item, ValidationError):
        return item
    errors = item.errors()
    line = errors[0].get("input") if len(errors) == 1 else None
    if errors[0]["type"] != "json_invalid" or not isinstance(line, str):
        return item
    if len(line) > MAX_LINE_CHARS:
        return item
    try:
        data = json.loads(line, parse_constant=_no_constant)
    except ValueError:
        return item
    if not isinstance(data, dict) or "method" not in data or "id" not in data:
        return item
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCRequest

    try:
        return SessionMessage(JSONRPCRequest.model_validate(data))
    except ValidationError:
        return item
