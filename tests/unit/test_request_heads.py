"""A request's head (its JSON before the messages) is assembled once for the
requests that share it (`http.HeadCache`), and assembled again when anything
it is made of changes: the settings (a new provider config), the tools (an
MCP server's new listing), the system prompt (an instruction file edited),
the request's own values. Every head sent is the one a fresh encoding gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agentd.messages import Message, ToolSpec, user_text
from agentd.providers import ModelRequest, ProviderConfig
from agentd.providers import anthropic as anthropic_wire
from agentd.providers import openai as openai_wire

TOOLS = [
    ToolSpec("read_file", "Read a file", {"type": "object"}),
    ToolSpec("search", "Search", {"type": "object"}),
]

WIRES: dict[str, Any] = {"openai": openai_wire, "anthropic": anthropic_wire}


def _request(history: list[Message], **kw: Any) -> ModelRequest:
    base: dict[str, Any] = {
        "model": "m",
        "system": "sys",
        "messages": history,
        "tools": TOOLS,
        "cache": True,
    }
    return ModelRequest(**{**base, **kw})


def _sent(kind: str, request: ModelRequest, config: ProviderConfig) -> dict[str, Any]:
    """What `request_parts` sends, checked against the uncached encoding."""
    wire = WIRES[kind]
    sent = json.loads(bytes(wire.request_parts(request, request.model, config)))
    assert sent == wire.request_body(request, request.model, config)
    return dict(sent)


@pytest.fixture
def heads_built(kind: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the wire assembled a head."""
    wire = WIRES[kind]
    calls = [0]
    real: Callable[..., Any] = wire._request_head

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(wire, "_request_head", counted)
    return calls


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_sessions_requests_assemble_their_head_once(kind: str, heads_built: list[int]) -> None:
    wire = WIRES[kind]
    config = ProviderConfig(kind=kind, model="m")  # type: ignore[arg-type]
    history = [user_text("first")]
    sent = [bytes(wire.request_parts(_request(history), "m", config))]
    for n in range(5):
        history.append(Message("assistant", [user_text(f"reply {n}").parts[0]]))
        history.append(user_text(f"prompt {n}"))
        sent.append(bytes(wire.request_parts(_request(history), "m", config)))
    assert heads_built[0] == 1
    # The same bytes as a fresh encoding of the last request.
    assert json.loads(sent[-1]) == wire.request_body(_request(history), "m", config)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_head_is_assembled_again_when_what_it_is_made_of_changes(
    kind: str, heads_built: list[int]
) -> None:
    config = ProviderConfig(kind=kind, model="m")  # type: ignore[arg-type]
    history = [user_text("hi")]
    first = _sent(kind, _request(history), config)

    # The settings changed: a new config with another output cap.
    capped = ProviderConfig(kind=kind, model="m", max_output_tokens=1234)  # type: ignore[arg-type]
    after = _sent(kind, _request(history), capped)
    assert after["max_tokens"] == 1234 != first["max_tokens"]

    # The tools changed: an MCP server listed one more (a new list, new spec).
    more = [*TOOLS, ToolSpec("mcp__db__query", "Run SQL", {"type": "object"})]
    after = _sent(kind, _request(history, tools=more), config)
    assert len(after["tools"]) == 3
    # ... and an equal-looking spec that is another object (a new listing).
    renamed = [TOOLS[0], ToolSpec("search", "Search the workspace", {"type": "object"})]
    after = _sent(kind, _request(history, tools=renamed), config)
    described = [t.get("description") or t["function"]["description"] for t in after["tools"]]
    assert described[1] == "Search the workspace"

    # The system prompt changed: an instruction file edited.
    after = _sent(kind, _request(history, system="sys\n\nnew instructions"), config)
    system = after["system"] if kind == "anthropic" else after["messages"][0]["content"]
    assert "new instructions" in json.dumps(system)

    # The request's own values: a side query's forced tool and cap, a temperature.
    after = _sent(
        kind, _request(history, purpose="recall", tool_choice="search", max_tokens=50), config
    )
    assert after["max_tokens"] == 50
    after = _sent(kind, _request(history, temperature=0.5), config)
    assert after["temperature"] == 0.5

    # Back to the first: the same bytes as at first.
    assert _sent(kind, _request(history), config) == first
