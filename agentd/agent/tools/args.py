"""Checking a model's tool arguments against the tool's JSON Schema.

A bad argument is the model's mistake, so it becomes a failed tool result
the model reads and can correct (issue 14, item 10), never an exception
that ends the prompt. The schema subset the daemon tools use is checked:
`type` (string, integer, number, boolean, array of strings), `enum`,
`minimum`, `maximum`, `required`. Models often quote numbers and booleans
(`"20"`, `"true"`); those are accepted. Unknown keys are dropped: models
invent extra ones, and ignoring them is kinder than failing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentd.errors import ToolError


class BadArguments(ToolError):
    pass


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            return None
    return None


def _boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _one(name: str, value: Any, schema: Mapping[str, Any]) -> tuple[Any, str | None]:
    kind = schema.get("type")
    out: Any = value
    if kind == "string":
        if not isinstance(value, str):
            return None, f"'{name}' must be a string, got {_show(value)}"
    elif kind == "integer":
        out = _integer(value)
        if out is None:
            return None, f"'{name}' must be an integer, got {_show(value)}"
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return None, f"'{name}' must be a number, got {_show(value)}"
        try:
            out = float(value)
        except ValueError:
            return None, f"'{name}' must be a number, got {_show(value)}"
    elif kind == "boolean":
        out = _boolean(value)
        if out is None:
            return None, f"'{name}' must be true or false, got {_show(value)}"
    elif kind == "array":
        items = value if isinstance(value, list) else [value] if isinstance(value, str) else None
        if items is None or not all(isinstance(i, str) for i in items):
            return None, f"'{name}' must be a list of strings, got {_show(value)}"
        out = list(items)
    enum = schema.get("enum")
    if enum is not None and out not in enum:
        choices = ", ".join(repr(e) for e in enum)
        return None, f"'{name}' must be one of {choices}, got {_show(value)}"
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(out, int | float) and not isinstance(out, bool):
        if low is not None and out < low:
            return None, f"'{name}' must be at least {low}, got {_show(value)}"
        if high is not None and out > high:
            return None, f"'{name}' must be at most {high}, got {_show(value)}"
    return out, None


def check_arguments(tool: str, schema: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """The arguments the tool will use, or `BadArguments` naming each bad one."""
    if not isinstance(args, Mapping):
        raise BadArguments(f"{tool}: the arguments must be a JSON object, got {_show(args)}")
    props: Mapping[str, Any] = schema.get("properties", {})
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, prop in props.items():
        if name not in args or args[name] is None:
            continue
        value, problem = _one(name, args[name], prop)
        if problem is not None:
            problems.append(problem)
        else:
            out[name] = value
    for name in schema.get("required", []):
        if name not in out and not any(p.startswith(f"'{name}'") for p in problems):
            problems.append(f"'{name}' is required")
    if problems:
        raise BadArguments(f"Invalid arguments for {tool}: " + "; ".join(problems) + ".")
    return out
