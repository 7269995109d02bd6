"""Providers and the context window: overflow errors of both APIs, `/models` lengths."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentd.errors import ContextOverflow, ModelError, ModelHTTPError
from agentd.messages import user_text
from agentd.providers import ModelRequest, ProviderConfig
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.base import ReportsContextWindow
from agentd.providers.openai import OpenAIProvider, context_length_of
from agentd.providers.overflow import is_context_overflow, overflow_limit

KEY = "sk-test-SECRET-0123456789"

# What each API answers when the request is longer than the window (bodies
# as documented by the providers and seen from the servers named).
OVERFLOWS: list[tuple[str, int, dict[str, Any], int | None]] = [
    (
        "openai",
        400,
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, "
                "your messages resulted in 130415 tokens. Please reduce the length of the "
                "messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
        128_000,
    ),
    (
        "openai responses",
        400,
        {
            "error": {
                "message": "Your input exceeds the context window of this model. Please "
                "adjust your input and try again.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        },
        None,
    ),
    (
        "anthropic",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 208310 tokens > 200000 maximum",
            },
        },
        200_000,
    ),
    (
        "anthropic max_tokens",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: 188240 + "
                "21333 > 200000, decrease input length or `max_tokens` and try again",
            },
        },
        200_000,
    ),
    (
        "anthropic bytes",
        413,
        {
            "type": "error",
            "error": {
                "type": "request_too_large",
                "message": "Request exceeds the maximum allowed number of bytes.",
            },
        },
        None,
    ),
    (
        "llama.cpp",
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9000,
                "n_ctx": 8192,
            }
        },
        8192,
    ),
    (
        "vllm",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (1000 in the messages, 4000 in the completion).",
            "type": "BadRequestError",
            "code": 400,
        },
        4096,
    ),
]


@pytest.mark.parametrize("name,status,body,limit", OVERFLOWS, ids=[o[0] for o in OVERFLOWS])
def test_overflow_bodies_are_recognised(
    name: str, status: int, body: dict[str, Any], limit: int | None
) -> None:
    text = json.dumps(body)
    assert is_context_overflow(status, text)
    assert overflow_limit(text) == limit


@pytest.mark.parametrize(
    "status,body",
    [
        (400, {"error": {"message": "Invalid value for 'temperature'", "code": None}}),
        (429, {"error": {"message": "maximum context length is 10 tokens"}}),  # not a 4xx it can be
        (500, {"error": {"message": "prompt is too long"}}),
        (401, {"error": {"message": "invalid x-api-key"}}),
    ],
)
def test_other_errors_are_not_overflows(status: int, body: dict[str, Any]) -> None:
    assert not is_context_overflow(status, json.dumps(body))


def _provider(kind: str, handler: Any) -> OpenAIProvider | AnthropicProvider:
    if kind == "openai":
        return _openai(handler)
    config = ProviderConfig(
        kind="anthropic", base_url="https://api.example.com", api_key=KEY, model="m"
    )
    return AnthropicProvider(config, transport=httpx.MockTransport(handler))


def _openai(handler: Any) -> OpenAIProvider:
    config = ProviderConfig(
        kind="openai", base_url="https://api.example.com/v1", api_key=KEY, model="m"
    )
    return OpenAIProvider(config, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("kind,index", [("openai", 0), ("anthropic", 2)])
async def test_an_overflow_is_a_context_overflow_error_and_not_retried(
    kind: str, index: int
) -> None:
    _, status, body, limit = OVERFLOWS[index]
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, json=body)

    provider = _provider(kind, handler)
    request = ModelRequest(model="m", system="s", messages=[user_text("hi")])
    with pytest.raises(ContextOverflow) as caught:
        async for _ in provider.stream(request):
            pass
    await provider.aclose()
    err = caught.value
    assert isinstance(err, ModelHTTPError) and isinstance(err, ModelError)
    assert err.kind == "context_overflow" and err.status == 400 and err.limit == limit
    assert "context window" in err.message and KEY not in err.message
    assert len(calls) == 1


def test_context_length_from_model_lists() -> None:
    assert context_length_of({"data": [{"id": "m", "max_model_len": 32768}]}, "m") == 32768
    openrouter = {
        "data": [
            {"id": "a/x", "context_length": 200000},
            {"id": "b/y", "top_provider": {"context_length": 64000}},
        ]
    }
    assert context_length_of(openrouter, "b/y") == 64000
    assert context_length_of(openrouter, "c/z") is None  # the others disagree
    llama = {"data": [{"id": "model.gguf", "meta": {"n_ctx_train": 131072}}]}
    assert context_length_of(llama, "whatever") == 131072  # one model under another name
    assert context_length_of({"data": [{"id": "m"}]}, "m") is None  # OpenAI, Ollama
    assert context_length_of({"data": [{"id": "m", "context_length": True}]}, "m") is None
    assert context_length_of(["odd"], "m") is None
    assert context_length_of(None, "m") is None


async def test_openai_provider_asks_the_model_list() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"id": "m", "context_length": 65536}]})

    provider = _openai(handler)
    assert isinstance(provider, ReportsContextWindow)
    assert await provider.context_window("m") == 65536
    assert str(seen[0].url) == "https://api.example.com/v1/models"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"<html>not json</html>")

    assert await _openai(broken).context_window("m") is None

    def failing(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    assert await _openai(failing).context_window("m") is None
    assert not isinstance(_provider("anthropic", broken), ReportsContextWindow)


async def test_the_model_list_is_asked_with_the_headers_of_an_endpoint_a_client_set() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"id": "m", "context_length": 4096}]})

    config = ProviderConfig(
        base_url="https://gateway.example/v1",
        model="m",
        extra_headers=(("X-Gateway-Token", "gw-1"),),
        set_by="the editor",
    )
    provider = OpenAIProvider(config, transport=httpx.MockTransport(handler))
    assert await provider.context_window("m") == 4096
    assert seen[0].headers["x-gateway-token"] == "gw-1"
    assert "authorization" not in seen[0].headers
