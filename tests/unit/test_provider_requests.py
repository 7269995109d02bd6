"""What each provider sends for today's models: reasoning parameters, thinking
blocks, reasoning text, cache breakpoints, and a prefix that only grows."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentd.errors import ModelHTTPError
from agentd.messages import (
    Message,
    ReminderPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    user_text,
)
from agentd.providers import ModelRequest, ProviderConfig, Purpose
from agentd.providers import anthropic as anthropic_wire
from agentd.providers import openai as openai_wire
from agentd.providers.models import is_openai_reasoning, openai_traits
from agentd.providers.openai import OpenAIProvider

TOOLS = [
    ToolSpec("read_file", "Read a file", {"type": "object"}),
    ToolSpec("search", "Search", {"type": "object"}),
]


def openai_body(
    model: str, purpose: Purpose = "main", max_tokens: int | None = None, **cfg: Any
) -> dict[str, Any]:
    config = ProviderConfig(model=model, **cfg)
    req = ModelRequest(
        model=model,
        system="sys",
        messages=[user_text("hi")],
        purpose=purpose,
        max_tokens=max_tokens,
    )
    return openai_wire.request_body(req, model, config)


def tool_step(n: int, thinking: list[ThinkingPart] | None = None) -> list[Message]:
    """One tool-using step of a conversation: the call and its result."""
    call = ToolCall(f"c{n}", "read_file", {"path": f"f{n}.py"})
    return [
        Message("assistant", [*(thinking or []), TextPart(f"step {n}"), ToolCallPart(call)]),
        Message("user", [ToolResultPart(f"c{n}", f"contents {n}")]),
    ]


# --- OpenAI reasoning models ---------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "reasoning"),
    [
        ("o1", True),
        ("o3-mini", True),
        ("o4-mini-2025-04-16", True),
        ("gpt-5", True),
        ("gpt-5-mini", True),
        ("gpt-5.1-codex", True),
        ("gpt-5-chat-latest", False),  # the family's chat model
        ("gpt-4o-mini", False),
        ("openai/o3", False),  # through a router: the compatible dialect
        ("qwen3-coder", False),
        ("deepseek-reasoner", False),
        ("omni-moderation", False),
    ],
)
def test_openai_reasoning_families(model: str, reasoning: bool) -> None:
    assert is_openai_reasoning(model) is reasoning


def test_reasoning_model_gets_max_completion_tokens_and_effort() -> None:
    body = openai_body("o3", reasoning_effort="high")
    assert "max_tokens" not in body
    assert body["max_completion_tokens"] == 32_000  # room for the reasoning
    assert body["reasoning_effort"] == "high"
    body = openai_body("gpt-5-mini", max_output_tokens=12_000)
    assert body["max_completion_tokens"] == 12_000
    assert "reasoning_effort" not in body  # the API's own default


def test_compatible_servers_keep_max_tokens() -> None:
    for model in ("qwen3-coder", "llama3.1:8b", "openai/o3", "gpt-4o"):
        body = openai_body(model)
        assert body["max_tokens"] == 8192, model
        assert "max_completion_tokens" not in body
        assert "reasoning_effort" not in body
    # A compatible server that takes an effort (DeepSeek, gpt-oss on vLLM) gets it.
    assert openai_body("deepseek-chat", reasoning_effort="low")["reasoning_effort"] == "low"


def test_reasoning_model_setting_overrides_the_name() -> None:
    body = openai_body("corp-reasoner-prod", reasoning_model=True)
    assert body["max_completion_tokens"] == 32_000 and "max_tokens" not in body
    body = openai_body("o3", reasoning_model=False)
    assert body["max_tokens"] == 8192 and "max_completion_tokens" not in body
    # The override is about the main model: another model keeps its family's.
    config = ProviderConfig(model="corp-reasoner", fast_model="gpt-4o-mini", reasoning_model=True)
    req = ModelRequest(model="", system="", messages=[user_text("x")], purpose="recall")
    assert "max_tokens" in openai_wire.request_body(req, "gpt-4o-mini", config)


def test_side_queries_on_a_reasoning_model_think_little_and_have_room() -> None:
    body = openai_body("o4-mini", purpose="recall", max_tokens=400, reasoning_effort="high")
    assert body["max_completion_tokens"] == 400 + 8000
    assert body["reasoning_effort"] == "low"  # not the main conversation's "high"
    assert "reasoning_effort" not in openai_body("o1-mini", purpose="extract", max_tokens=400)


def test_openai_request_prefix_only_grows() -> None:
    history = [user_text("fix it"), *tool_step(1)]
    req = ModelRequest(model="m", system="sys", messages=history, tools=TOOLS, cache=True)
    first = json.dumps(openai_wire.request_body(req, "m"))
    history += [*tool_step(2), Message("assistant", [TextPart("done")]), user_text("thanks")]
    second = json.dumps(openai_wire.request_body(req, "m"))
    assert list(json.loads(second))[-1] == "messages"  # messages last, tools before
    # Everything the first request said comes again, byte for byte, before what is new.
    assert second.startswith(first.removesuffix("]}"))


@pytest.mark.asyncio
async def test_a_400_naming_max_tokens_is_explained() -> None:
    error = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=error)

    config = ProviderConfig(base_url="https://llm.corp.example/v1", model="corp-o3")
    provider = OpenAIProvider(config, transport=httpx.MockTransport(server))
    req = ModelRequest(model="", system="", messages=[user_text("hi")])
    with pytest.raises(ModelHTTPError) as caught:
        async for _ in provider.stream(req):
            pass
    await provider.aclose()
    message = caught.value.message
    assert message.startswith("400 Bad Request from llm.corp.example: Unsupported parameter")
    assert "set reasoningModel = true in the agentd config" in message
    assert caught.value.retryable is False


@pytest.mark.parametrize(
    ("kind", "detail", "advice"),
    [
        ("openai", "Unrecognized request argument supplied: reasoning_effort", "reasoningEffort"),
        (
            "openai",
            "Unsupported parameter: 'max_completion_tokens' is not supported",
            "reasoningModel = false",
        ),
        (
            "anthropic",
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
            "thinking.budgetTokens",
        ),
        ("anthropic", "max_tokens: 64000 > 32000, which is the maximum", "maxOutputTokens"),
        (
            "openai",
            "The reasoning_content in the thinking mode must be passed back to the API.",
            "replayReasoning",
        ),
        ("openai", "messages: too long", None),
    ],
)
def test_400_advice_names_the_setting(kind: str, detail: str, advice: str | None) -> None:
    from agentd.providers.http import to_model_error

    body = json.dumps({"error": {"message": detail, "type": "invalid_request_error"}}).encode()
    config = ProviderConfig(kind=kind, model="m")  # type: ignore[arg-type]
    err = to_model_error(httpx.Response(400), host="h", config=config, body=body)
    if advice is None:
        assert " — " not in err.message
    else:
        assert advice in err.message.split(" — ", 1)[1]


# --- reasoning text from OpenAI-compatible servers ------------------------------------


def test_reasoning_text_is_not_sent_back_by_default() -> None:
    thinking = [ThinkingPart("I should read f1.", source="reasoning_content")]
    history = [user_text("go"), *tool_step(1, thinking)]
    for model in ("gpt-4o", "qwen3-coder", "llama3"):
        assert openai_traits(model).replay_reasoning is False
        req = ModelRequest(model=model, system="", messages=history)
        body = openai_wire.request_body(req, model)
        assistant = body["messages"][1]
        assert set(assistant) == {"role", "content", "tool_calls"}, model


def test_reasoning_text_goes_back_where_required() -> None:
    thinking = [ThinkingPart("Read ", source="reasoning"), ThinkingPart("f1.", source="reasoning")]
    history = [user_text("go"), *tool_step(1, thinking), *tool_step(2)]
    req = ModelRequest(model="deepseek-v4", system="", messages=history)
    body = openai_wire.request_body(req, "deepseek-v4")
    first, second = body["messages"][1], body["messages"][3]
    assert first["reasoning"] == "Read f1."  # in the field it came in
    assert second["reasoning_content"] == ""  # required on every tool-call message
    # An answer without tool calls needs none; the user's setting decides too.
    config = ProviderConfig(model="kimi-k2-thinking", replay_reasoning=False)
    body = openai_wire.request_body(req, "kimi-k2-thinking", config)
    assert "reasoning" not in body["messages"][1]


# --- Anthropic extended thinking ------------------------------------------------------


def anthropic_body(req: ModelRequest, **cfg: Any) -> dict[str, Any]:
    config = ProviderConfig(kind="anthropic", model="claude-test", **cfg)
    return anthropic_wire.request_body(req, "claude-test", config)


def test_thinking_setting_for_the_conversation_only() -> None:
    req = ModelRequest(model="", system="s", messages=[user_text("hi")])
    body = anthropic_body(req, thinking_budget=4000)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert body["max_tokens"] == 4000 + 8192
    body = anthropic_body(req, thinking_budget=4000, max_output_tokens=20_000)
    assert body["max_tokens"] == 20_000
    side = ModelRequest(model="", system="s", messages=[user_text("hi")], purpose="recall")
    assert "thinking" not in anthropic_body(side, thinking_budget=4000)
    forced = ModelRequest(
        model="", system="s", messages=[user_text("hi")], tools=TOOLS, tool_choice="search"
    )
    assert "thinking" not in anthropic_body(forced, thinking_budget=4000)


def test_signed_and_redacted_thinking_go_back_unchanged_in_place() -> None:
    thinking = [
        ThinkingPart("Let me read f1.", signature="sig-1"),
        ThinkingPart("", redacted="opaque=="),
        ThinkingPart("cut short"),  # no signature: never sent
        ThinkingPart("from another provider", source="reasoning_content"),
    ]
    history = [user_text("go"), *tool_step(1, thinking)]
    req = ModelRequest(model="", system="s", messages=history)
    body = anthropic_body(req, thinking_budget=2048)
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me read f1.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque=="},
        {"type": "text", "text": "step 1"},
        {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "f1.py"}},
    ]
    # Thinking off: no thinking blocks at all.
    plain = anthropic_body(req)
    assert [b["type"] for b in plain["messages"][1]["content"]] == ["text", "tool_use"]


# --- Anthropic prompt caching ---------------------------------------------------------


def breakpoints(body: dict[str, Any]) -> list[str]:
    found = [f"tool:{t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += ["system" for b in system if "cache_control" in b]
    for i, msg in enumerate(body["messages"]):
        for j, block in enumerate(msg["content"]):
            if "cache_control" in block:
                found.append(f"messages.{i}.{j}")
    return found


def test_cache_breakpoints_system_tools_and_the_last_two_user_messages() -> None:
    history = [
        Message("user", [ReminderPart("memory", "memory:local"), TextPart("fix it")]),
        *tool_step(1),
        *tool_step(2),
    ]
    req = ModelRequest(model="", system="s", messages=history, tools=TOOLS, cache=True)
    body = anthropic_body(req)
    assert body["system"] == [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]
    # Written by this request: the last message; read by it: the previous
    # request's last message, the user message before the final assistant one.
    assert breakpoints(body) == ["tool:search", "system", "messages.2.0", "messages.4.0"]
    assert len(breakpoints(body)) <= 4
    assert breakpoints(anthropic_body(req, prompt_caching=False)) == []
    req.cache = False  # a side query
    assert breakpoints(anthropic_body(req)) == []
    # The encoding of the history itself is untouched by the marks.
    assert "cache_control" not in json.dumps(anthropic_wire.to_anthropic_messages(history))


def test_one_user_message_gets_one_breakpoint() -> None:
    req = ModelRequest(model="", system="", messages=[user_text("hi")], cache=True)
    assert breakpoints(anthropic_body(req)) == ["messages.0.0"]


def strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def test_anthropic_request_prefix_only_grows_apart_from_the_marks() -> None:
    history = [user_text("fix it"), *tool_step(1, [ThinkingPart("t", signature="s1")])]
    req = ModelRequest(model="", system="s", messages=history, tools=TOOLS, cache=True)
    first = json.dumps(strip_cache_control(anthropic_body(req, thinking_budget=2048)))
    history += tool_step(2, [ThinkingPart("u", signature="s2")])
    second = json.dumps(strip_cache_control(anthropic_body(req, thinking_budget=2048)))
    assert second.startswith(first.removesuffix("]}"))


def test_thinking_steps_aside_when_the_room_left_is_below_the_budget() -> None:
    config = ProviderConfig(kind="anthropic", model="claude-sonnet-4-5", thinking_budget=4096)
    request = ModelRequest("claude-sonnet-4-5", "sys", [Message("user", [TextPart("hi")])])
    body = anthropic_wire.request_body(request, "claude-sonnet-4-5", config)
    assert body["thinking"]["budget_tokens"] == 4096
    request.max_tokens = 3000  # what a nearly full window leaves for the answer
    body = anthropic_wire.request_body(request, "claude-sonnet-4-5", config)
    assert "thinking" not in body and body["max_tokens"] == 3000


# --- MCP sampling requests ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_sampling_request_sends_its_stop_sequences_and_no_thinking(kind: str) -> None:
    req = ModelRequest(
        model="m",
        system="s",
        messages=[user_text("hi")],
        purpose="sampling",
        max_tokens=300,
        stop=("END", "\n\n"),
    )
    if kind == "openai":
        config = ProviderConfig(model="m", reasoning_effort="high", max_output_tokens=9000)
        body = json.loads(openai_wire.request_content(req, "m", config))
        assert body["stop"] == ["END", "\n\n"] and body["max_tokens"] == 300
        assert "reasoning_effort" not in body  # the user's effort is the conversation's
    else:
        body = anthropic_body(req, thinking_budget=4000)
        assert body["stop_sequences"] == ["END", "\n\n"] and body["max_tokens"] == 300
        assert "thinking" not in body
    # The cached head of the request is keyed by its stop sequences too.
    plain = ModelRequest(model="m", system="s", messages=[user_text("hi")], purpose="sampling")
    again = (
        json.loads(openai_wire.request_content(plain, "m", ProviderConfig(model="m")))
        if kind == "openai"
        else anthropic_body(plain)
    )
    assert "stop" not in again and "stop_sequences" not in again
