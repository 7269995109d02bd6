"""Validation of incoming params, shared by every front end.

Both wires (LSP-framed and ACP) validate params with pydantic at the boundary
and answer -32602 naming each bad field; this is the one place that turns a
pydantic `ValidationError`, or a workspace path that cannot be used, into an
`agentd.errors.InvalidParams` with `data.fields = [{field, message}]`.
Each front end maps `InvalidParams` to its own error reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ValidationError

from agentd.errors import InvalidParams

M = TypeVar("M", bound=BaseModel)


def _invalid(method: str, fields: list[dict[str, str]]) -> InvalidParams:
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return InvalidParams(f"Invalid params for {method}: {summary}", {"fields": fields})


def validate_params(method: str, model: type[M], params: Any) -> M:
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _invalid(method, [{"field": "params", "message": "must be an object"}])
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(p) for p in err["loc"]) or "params", "message": err["msg"]}
            for err in exc.errors()
        ]
        raise _invalid(method, fields) from None


def workspace_path(value: str, field: str = "workspaceRoot") -> Path:
    """An absolute path (or file:// URI) of an existing directory, resolved."""
    if value.startswith("file:"):
        value = unquote(urlparse(value).path)
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise InvalidParams(
            f"Invalid params: {field}: must be an absolute path: {value!r}",
            {"fields": [{"field": field, "message": "must be an absolute path"}]},
        )
    if not path.is_dir():
        raise InvalidParams(
            f"Invalid params: {field}: not a directory: {value!r}",
            {"fields": [{"field": field, "message": "not a directory"}]},
        )
    return path.resolve()
