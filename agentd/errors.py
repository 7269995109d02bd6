"""agentd's exceptions, the JSON-RPC code each one maps to, and the codes by name.

    AgentdError                      base of everything agentd raises on purpose
    ├── ProtocolError                maps to a JSON-RPC error reply (has .code)
    │   ├── InvalidParams            -32602 INVALID_PARAMS, names the bad field(s)
    │   ├── SessionNotFound          -32001 SESSION_NOT_FOUND (ACP: RESOURCE_NOT_FOUND)
    │   └── SessionBusy              -32003 SESSION_BUSY (a prompt already runs on the session)
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
"""

from __future__ import annotations

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


class SessionNotFound(ProtocolError):
    code = SESSION_NOT_FOUND


class SessionBusy(ProtocolError):
    code = SESSION_BUSY


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
