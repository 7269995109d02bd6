"""agentd's exceptions, the JSON-RPC code each one maps to, and the codes by name.

    AgentdError                      base of everything agentd raises on purpose
    ├── ProtocolError                maps to a JSON-RPC error reply (has .code)
    │   ├── InvalidParams            -32602 INVALID_PARAMS, names the bad field(s)
    │   ├── SessionNotFound          -32001 SESSION_NOT_FOUND (ACP: RESOURCE_NOT_FOUND)
    │   ├── SessionBusy              -32003 SESSION_BUSY (a prompt already runs on the session)
    │   ├── SessionInUse             -32004 SESSION_IN_USE (another agentd process has it open)
    │   └── StartupFailed            -32603 INTERNAL_ERROR: the start-up (settings, App) failed
    ├── ModelError                   a model request failed; becomes stopReason "error"
    │   ├── ModelHTTPError           the endpoint answered with an error status
    │   │   └── ContextOverflow      ... because the request does not fit the model's window
    │   ├── ModelTimeout             connect / idle / total time limit reached
    │   ├── ModelConnectionError     could not reach the endpoint
    │   └── ModelStreamInterrupted   the stream broke after output had started
    ├── ToolError                    a daemon tool refused or failed (sent to the model)
    │   └── PathOutsideWorkspace
    └── ConfigError                  configuration that cannot be used

The front ends (`agentd/lsp/`, `agentd/acp/`) are the only places that turn
these into JSON-RPC replies, each in one function (`lsp/handlers.py`
`_map_error`, `acp/handlers.py` `dispatch`); the providers are the only place
that turn httpx's exceptions into `ModelError`s. Messages never contain API
keys. Imports nothing of agentd: every layer may raise these.

An error sent to an editor is short: `bounded_error` (applied by both front
ends' writers to every error reply) keeps its message within
`MAX_ERROR_MESSAGE_BYTES` and its `data` within `MAX_ERROR_DATA_BYTES`, so an
exception that carries a request's body never echoes megabytes back; the
details go to the log.
"""

from __future__ import annotations

import errno
import json
from typing import Any

# JSON-RPC 2.0
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# LSP
SERVER_NOT_INITIALIZED = -32002
REQUEST_CANCELLED = -32800
# ACP (its schema's `ErrorCode`)
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002
# agentd's own, the same on both wires
SESSION_NOT_FOUND = -32001
SESSION_BUSY = -32003
SESSION_IN_USE = -32004

MAX_ERROR_MESSAGE_BYTES = 1024
MAX_ERROR_DATA_BYTES = 4096
# A field name or a field's message in `data.fields`, and how many fields.
_MAX_FIELD_CHARS = 200
_MAX_FIELDS = 20


class AgentdError(Exception):
    """Base class."""


class ProtocolError(AgentdError):
    code: int = INTERNAL_ERROR

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidParams(ProtocolError):
    code = INVALID_PARAMS

    @classmethod
    def of(cls, field: str, why: str) -> InvalidParams:
        """The -32602 for one field: "Invalid params: FIELD: WHY", with the
        field named in `data.fields` as every front end reports it."""
        fields = [{"field": field, "message": why}]
        return cls(f"Invalid params: {field}: {why}", {"fields": fields})


class SessionNotFound(ProtocolError):
    code = SESSION_NOT_FOUND


class SessionBusy(ProtocolError):
    code = SESSION_BUSY


class SessionInUse(ProtocolError):
    """The session is open in another agentd process (another editor window):
    it is not deleted from under it (`agentd.session_files.LiveSessions`)."""

    code = SESSION_IN_USE


# Where a user finds the traceback: agentd has no log file of its own; the
# editor that spawned it keeps its stderr (and, over LSP, window/logMessage).
STARTUP_LOG_HINT = "The details are in agentd's log (its stderr, which the editor keeps)."


class StartupFailed(ProtocolError):
    """The warm-up (the settings, then the App) raised `cause`: every request
    that needs them is answered with this, saying so in a user's words. The
    traceback is logged once, where the warm-up failed, not per request."""

    def __init__(self, cause: BaseException) -> None:
        text = short_text(str(cause), 300)
        what = type(cause).__name__ + (f": {text}" if text else "")
        super().__init__(f"agentd could not start: {what}. {STARTUP_LOG_HINT}")
        self.cause = cause


class ModelError(AgentdError):
    """A model request failed. `kind` is a short machine-readable tag."""

    kind: str = "model_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.status is not None:
            out["status"] = self.status
        return out


class ModelHTTPError(ModelError):
    kind = "http_error"


class ContextOverflow(ModelHTTPError):
    """The request is longer than the model's context window (OpenAI
    `context_length_exceeded`, Anthropic "prompt is too long", 413s). The
    turn engine compacts the history and retries the step once. `limit` is
    the window the provider named, when it did."""

    kind = "context_overflow"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(message, status=status, retryable=retryable, retry_after=retry_after)
        self.limit = limit


class ModelTimeout(ModelError):
    kind = "timeout"


class ModelConnectionError(ModelError):
    kind = "connection_error"


class ModelStreamInterrupted(ModelError):
    kind = "stream_interrupted"


class ToolError(AgentdError):
    """A daemon tool could not do what was asked; the text goes to the model."""


class PathOutsideWorkspace(ToolError):
    pass


class ConfigError(AgentdError):
    pass


def describe_os_error(exc: OSError) -> str:
    """An OS error in one line that names its cause: "Too many open files (EMFILE)"."""
    name = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason} ({name})" if name else reason


def short_text(text: str, limit: int = MAX_ERROR_MESSAGE_BYTES) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, saying how much was cut."""
    if len(text) * 4 <= limit or len(text.encode("utf-8", "replace")) <= limit:
        return text
    note = f" [... {len(text)} characters in all]"
    keep = text[: limit - len(note)]
    while len(keep.encode("utf-8", "replace")) + len(note) > limit:
        keep = keep[: len(keep) * 3 // 4]
    return keep + note


def bounded_error(error: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error object within the byte budgets (see the module docs)."""
    out = dict(error)
    message = out.get("message")
    out["message"] = short_text(message if isinstance(message, str) else str(message))
    if "data" in out:
        data = _bounded_data(out["data"])
        if data is None:
            del out["data"]
        else:
            out["data"] = data
    return out


def _bounded_data(data: Any) -> Any:
    if isinstance(data, str | int | float | bool) or data is None:
        return short_text(data, _MAX_FIELD_CHARS) if isinstance(data, str) else data
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {}
    fields = data.get("fields")
    if isinstance(fields, list):
        out["fields"] = [
            {
                k: short_text(str(v), _MAX_FIELD_CHARS)
                for k, v in f.items()
                if k in ("field", "message") and isinstance(v, str)
            }
            for f in fields[:_MAX_FIELDS]
            if isinstance(f, dict)
        ]
    for key, value in data.items():
        if key in ("fields", "traceback"):
            continue  # fields bounded above; a traceback is for the log
        if _small(value):
            out[key] = value
    return out or None


def _small(value: Any) -> bool:
    """Whether `value` (a JSON value) is within `MAX_ERROR_DATA_BYTES` as JSON."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        return False
    return len(text) <= MAX_ERROR_DATA_BYTES


def internal_error_message(method: str, exc: BaseException) -> str:
    """What an editor is told of a handler's bug: the method and the exception's
    type and (short) text. The traceback goes to the log."""
    text = short_text(str(exc), 300)
    return f"Internal error in {method}: {type(exc).__name__}" + (f": {text}" if text else "")
