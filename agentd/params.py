"""What both front ends do with incoming params, in one place.

Both wires (LSP-framed and ACP) validate params with pydantic at the boundary
and answer -32602 naming each bad field; this is the one place that turns a
pydantic `ValidationError`, or a workspace path that cannot be used, into an
`agentd.errors.InvalidParams` with `data.fields = [{field, message}]`.
Each front end maps `InvalidParams` to its own error reply.

A handler declares its params model by annotating its `p` parameter;
`params_model` finds that model by name in the front end's models module.
The annotation is only a name at run time: the models (and pydantic) are
imported for type checking only, so that importing the handlers before
`initialize` is answered stays cheap. This module imports pydantic only
inside `validate_params` (called after the warm-up), for the same reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlparse

from agentd.errors import InvalidParams

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


def _invalid(method: str, fields: list[dict[str, str]]) -> InvalidParams:
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return InvalidParams(f"Invalid params for {method}: {summary}", {"fields": fields})


def validate_params(method: str, model: type[M], params: Any) -> M:
    from pydantic import ValidationError

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


@cache
def params_model(handler: Callable[..., Any], models: ModuleType) -> type[BaseModel]:
    """The model `handler`'s `p` is annotated with (`p: NewSessionParams`), from `models`."""
    from pydantic import BaseModel

    annotation = inspect.get_annotations(handler).get("p")
    name = annotation.rpartition(".")[2] if isinstance(annotation, str) else None
    model = getattr(models, name, None) if name else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(
            f"{handler.__qualname__}: `p` must be annotated with a model of {models.__name__}"
        )
    return model


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


def prompt_text(blocks: list[dict[str, Any]] | str) -> str:
    """Flatten prompt content blocks (text, resource links, embedded resources)."""
    if isinstance(blocks, str):
        return blocks
    out: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            out.append(str(block.get("text", "")))
        elif kind == "resource_link":
            out.append(f"[{block.get('name') or block.get('uri')}]({block.get('uri')})")
        elif kind == "resource":
            res = block.get("resource") or {}
            uri = res.get("uri", "")
            text = res.get("text")
            if isinstance(text, str):
                out.append(f'<context uri="{uri}">\n{text}\n</context>')
            else:
                out.append(f"[{uri}]")
    return "\n\n".join(out)
