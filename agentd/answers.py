"""Which of agentd's requests an editor's answer names, and whether it can be read.

Both front ends send requests to the editor (ACP: `fs/*`, `terminal/*`,
`session/request_permission`, `elicitation/create`, with integer ids; LSP:
`agent/requestPermission`, `agent/elicit`, `window/workDoneProgress/create`,
with string ids) and match the answers here, by one rule:

- An answer's id names a request when it is that request's id, the same
  JSON value and type.
- A string that is exactly the canonical decimal form of a pending integer
  id (`"0"`, `"17"`; never `"00"`, `" 0"`, `"+1"`, `"-0"`) names that
  request too: a client that keys its table of requests by strings (a
  JavaScript object, a JSON map) sends ids back so, and the alternative is
  a tool that waits until the user cancels the prompt. Nothing else (a
  float, a boolean, a padded or huge string) names a request. agentd's LSP
  ids are never decimal strings (`perm-...`, `elicit-...`, a UUID), so an
  integer never names one of them.
- An answer that names a request but cannot be read (an `error` that is no
  object with an integer `code` and a string `message`, no `"jsonrpc":
  "2.0"`, a body too deep to decode) ends that request with an error now:
  a request never waits for ever on a malformed answer that names it.
  A missing `result` reads as `null`, as it always has.

Stdlib only: both front ends import it before `initialize` is answered.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

# The longest decimal form an id of ours can take: ids count up from 0 per
# connection, so 20 digits (past 2**64) is never reached; a longer string is
# refused before it is parsed.
_MAX_DIGITS = 20


def answered_request(msg_id: Any, pending: Container[Any]) -> Any:
    """The key in `pending` that the answer id `msg_id` names, or None."""
    if isinstance(msg_id, bool):
        return None
    if isinstance(msg_id, str | int) and msg_id in pending:
        return msg_id
    if isinstance(msg_id, str) and decimal_form(msg_id):
        number = int(msg_id)
        if number in pending:
            return number
    return None


def decimal_form(text: str) -> bool:
    """Whether `text` is the canonical decimal form of a non-negative integer."""
    return (
        0 < len(text) <= _MAX_DIGITS
        and text.isascii()
        and text.isdigit()
        and (text == "0" or text[0] != "0")
    )


def unreadable_error(message: dict[str, Any]) -> str | None:
    """Why the answer's `error` cannot be read (None: no error, or a readable one)."""
    error = message.get("error")
    if error is None:
        return None
    if not isinstance(error, dict):
        return "its error is not an object"
    code = error.get("code")
    if isinstance(code, bool) or not isinstance(code, int):
        return "its error has no integer code"
    if not isinstance(error.get("message"), str):
        return "its error has no string message"
    return None


def unreadable(why: str) -> str:
    """The message of the error that ends a request whose answer cannot be read."""
    return f"the editor's answer could not be read: {why}"
