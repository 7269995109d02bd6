"""agentd's exceptions, and the JSON-RPC code each one maps to.

    AgentdError                      base of everything agentd raises on purpose
    ├── ProtocolError                maps to a JSON-RPC error reply (has .code)
    │   ├── InvalidParams            -32602, names the bad field(s)
    │   ├── SessionNotFound          -32001
    │   └── SessionBusy              -32003 (a prompt already runs on the session)
    ├── ModelError                   a model request failed; becomes stopReason "error"
    │   ├── ModelHTTPError           the endpoint answered with an error status
    │   ├── ModelTimeout             connect / idle / total time limit reached
    │   ├── ModelConnectionError     could not reach the endpoint
    │   └── ModelStreamInterrupted   the stream broke after output had started
    ├── ToolError                    a daemon tool refused or failed (sent to the model)
    │   └── PathOutsideWorkspace
    └── ConfigError                  configuration that cannot be used

The wire layer (`agentd/lsp/`) is the only place that turns these into
JSON-RPC replies; the providers are the only place that turn httpx's
exceptions into `ModelError`s. Messages never contain API keys.
"""

from __future__ import annotations

from typing import Any


class AgentdError(Exception):
    """Base class."""


class ProtocolError(AgentdError):
    code: int = -32603

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidParams(ProtocolError):
    code = -32602


class SessionNotFound(ProtocolError):
    code = -32001


class SessionBusy(ProtocolError):
    code = -32003


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
