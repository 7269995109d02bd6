"""The model server refuses what the real APIs refuse, and emulates their prompt caches.

Over real loopback HTTP with httpx, non-streaming answers (the same checks
and accounting apply to streams; `tests/e2e/test_providers.py` drives those
through the daemon).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from agentd.testing.model_server import ModelServer

pytestmark = pytest.mark.asyncio

LONG = "The repository's conventions, at length. " * 150  # about 1,500 tokens


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as srv:
        yield srv


@pytest_asyncio.fixture
async def client(server: ModelServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
        yield c


async def chat(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    body.setdefault("model", "agentd-local")
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return await client.post("/v1/chat/completions", json=body)


async def messages(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    body.setdefault("model", "claude-local")
    body.setdefault("max_tokens", 4096)
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return await client.post("/v1/messages", json=body)


def openai_error(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 400, resp.text
    error: dict[str, Any] = resp.json()["error"]
    return error


def anthropic_error(resp: httpx.Response) -> str:
    assert resp.status_code == 400, resp.text
    data = resp.json()
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    message: str = data["error"]["message"]
    return message


# --- OpenAI reasoning models --------------------------------------------------------------


async def test_reasoning_models_refuse_max_tokens(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    error = openai_error(await chat(client, model="o3-mini", max_tokens=100))
    assert error["param"] == "max_tokens" and error["code"] == "unsupported_parameter"
    assert "Use 'max_completion_tokens' instead." in error["message"]
    assert (await chat(client, model="o3-mini", max_completion_tokens=100)).status_code == 200
    # Compatible models keep taking max_tokens; a configured name is a reasoning model.
    assert (await chat(client, model="agentd-local", max_tokens=100)).status_code == 200
    server.set_model("corp-reasoner", reasoning=True)
    assert openai_error(await chat(client, model="corp-reasoner", max_tokens=1))["param"] == (
        "max_tokens"
    )
    # Refused requests are logged as such, not as requests a reply answered.
    assert not any(
        "max_tokens" in r["body"] for r in server.requests() if r["body"]["model"] != "agentd-local"
    )
    assert sum(e["type"] == "bad_request" for e in server.log) == 2


async def test_reasoning_effort_only_for_reasoning_models(client: httpx.AsyncClient) -> None:
    ok = await chat(client, model="gpt-5-mini", reasoning_effort="minimal")
    assert ok.status_code == 200
    error = openai_error(await chat(client, model="gpt-4o", reasoning_effort="low"))
    assert error["param"] == "reasoning_effort"
    error = openai_error(await chat(client, model="o3", reasoning_effort="extreme"))
    assert error["param"] == "reasoning_effort" and error["code"] == "invalid_value"
    assert openai_error(await chat(client, model="o3", temperature=0.2))["param"] == "temperature"


def tool_turn(**assistant_extra: Any) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [call], **assistant_extra},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]


async def test_reasoning_text_in_the_history_refused_or_required_by_model(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    error = openai_error(await chat(client, messages=tool_turn(reasoning_content="hmm")))
    assert error["param"] == "messages[1].reasoning_content"
    assert (await chat(client, messages=tool_turn())).status_code == 200
    # DeepSeek's thinking models want it back after a tool call.
    error = openai_error(await chat(client, model="deepseek-v4-pro", messages=tool_turn()))
    assert "must be passed back" in error["message"]
    ok = await chat(client, model="deepseek-v4-pro", messages=tool_turn(reasoning_content="hmm"))
    assert ok.status_code == 200
    server.set_model("qwen3-thinking", replay_reasoning=True)
    assert (await chat(client, model="qwen3-thinking", messages=tool_turn())).status_code == 400


async def test_openai_tool_calls_and_results_must_pair_up(client: httpx.AsyncClient) -> None:
    answered = tool_turn()
    assert (await chat(client, messages=answered)).status_code == 200
    # A call without its result (the daemon died while it ran), the next prompt after it.
    cut = [*answered[:2], {"role": "user", "content": "go on"}]
    error = openai_error(await chat(client, messages=cut))
    assert error["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: c1"
    )
    assert error["param"] == "messages.[1].role"
    assert openai_error(await chat(client, messages=answered[:2]))["param"] == "messages.[1].role"
    # A result with no call before it.
    orphan = [answered[0], answered[2]]
    error = openai_error(await chat(client, messages=orphan))
    assert "must be a response to a preceeding message with 'tool_calls'" in error["message"]
    assert error["param"] == "messages.[1].role"


async def test_anthropic_tool_uses_and_results_must_pair_up(client: httpx.AsyncClient) -> None:
    answered = after_tool([])
    assert (await messages(client, messages=answered)).status_code == 200
    cut = [*answered[:2], {"role": "user", "content": [{"type": "text", "text": "go on"}]}]
    assert anthropic_error(await messages(client, messages=cut)) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "t1. Each `tool_use` block must have a corresponding `tool_result` block in the next "
        "message."
    )
    orphan = [answered[0], {"role": "assistant", "content": "ok"}, answered[2]]
    assert anthropic_error(await messages(client, messages=orphan)).startswith(
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: t1."
    )


async def test_reasoning_text_is_streamed_as_reasoning_content(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.enqueue({"thinking": "let me see", "text": "ok"})
    resp = await chat(client)
    message = resp.json()["choices"][0]["message"]
    assert message["reasoning_content"] == "let me see" and message["content"] == "ok"


# --- prompt caching -------------------------------------------------------------------------


async def test_openai_cache_reports_a_repeated_prefix(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    first = [{"role": "system", "content": LONG}, {"role": "user", "content": "one"}]
    usage = (await chat(client, messages=first)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    second = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "two"}]
    usage = (await chat(client, messages=second)).json()["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    # The first request's whole prompt, in 128-token steps from 1,024 up.
    assert 1024 <= cached < usage["prompt_tokens"] and cached % 128 == 0
    assert server.requests()[-1]["cache"] == {
        "input": usage["prompt_tokens"],
        "read": cached,
        "write": 0,
    }
    # One byte changed at the start: nothing is served from the cache.
    changed = [{"role": "system", "content": LONG + "!"}, *second[1:]]
    usage = (await chat(client, messages=changed)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    # Another model has its own cache; a short prompt is never cached.
    usage = (await chat(client, model="agentd-local-small", messages=second)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    short = [{"role": "user", "content": "hi"}]
    await chat(client, messages=short)
    usage = (await chat(client, messages=short)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


EPHEMERAL = {"type": "ephemeral"}


def marked(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": EPHEMERAL}


async def test_anthropic_cache_writes_at_breakpoints_and_reads_them_back(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    system = [marked(LONG)]
    one = [{"role": "user", "content": [marked("one")]}]
    usage = (await messages(client, system=system, messages=one)).json()["usage"]
    assert usage["cache_read_input_tokens"] == 0
    written = usage["cache_creation_input_tokens"]
    assert written > 1024 and usage["input_tokens"] == 0  # all of it up to the last mark
    two = [
        {"role": "user", "content": [{"type": "text", "text": "one"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [marked("two")]},
    ]
    usage = (await messages(client, system=system, messages=two)).json()["usage"]
    # The mark moved on: the old prefix is found by looking back from the new one.
    assert usage["cache_read_input_tokens"] == written
    assert usage["cache_creation_input_tokens"] > 0
    log = server.requests()[-1]["cache"]
    assert log["read"] == written and log["input"] > written
    # Without any mark, nothing is cached or read.
    usage = (await messages(client, system=LONG, messages=[two[0]])).json()["usage"]
    assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0


async def test_anthropic_refuses_a_fifth_breakpoint(client: httpx.AsyncClient) -> None:
    tools = [
        {"name": f"t{i}", "description": "d", "input_schema": {"type": "object"}} for i in range(3)
    ]
    tools = [{**t, "cache_control": EPHEMERAL} for t in tools]
    body = {
        "tools": tools,
        "system": [marked("s")],
        "messages": [{"role": "user", "content": [marked("x")]}],
    }
    message = anthropic_error(await messages(client, **body))
    assert message == "A maximum of 4 blocks with cache_control may be provided. Found 5."


async def test_cache_emulation_can_be_switched_and_tuned(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    resp = await client.post("/_agentd/cache", json={"minTokens": 0, "ttl": 60})
    assert resp.status_code == 200
    short = [{"role": "user", "content": "hi there"}]
    await chat(client, messages=short)
    usage = (await chat(client, messages=short)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0  # under one 128-token step
    server.configure_cache(enabled=False)
    assert server.requests()[-1]["cache"]["read"] == 0
    assert (await client.post("/_agentd/cache", json={"size": 1})).status_code == 400
    assert (await client.post("/_agentd/cache", json={"minTokens": -1})).status_code == 400
    assert (
        await client.post("/_agentd/model", json={"name": "x", "reasoning": 1})
    ).status_code == 400
    ok = await client.post("/_agentd/model", json={"name": "x", "reasoning": True})
    assert ok.status_code == 200 and server.models.is_reasoning("x")
    server.reset()
    assert not server.models.is_reasoning("x")


# --- Anthropic extended thinking ---------------------------------------------------------


THINKING = {"type": "enabled", "budget_tokens": 2048}


async def test_thinking_settings_the_api_refuses(client: httpx.AsyncClient) -> None:
    low = {"type": "enabled", "budget_tokens": 512}
    assert "greater than or equal to 1024" in anthropic_error(await messages(client, thinking=low))
    message = anthropic_error(await messages(client, thinking=THINKING, max_tokens=2048))
    assert "`max_tokens` must be greater than `thinking.budget_tokens`" in message
    tools = [{"name": "pick", "description": "d", "input_schema": {"type": "object"}}]
    forced = {"type": "tool", "name": "pick"}
    message = anthropic_error(
        await messages(client, thinking=THINKING, tools=tools, tool_choice=forced)
    )
    assert message == "Thinking may not be enabled when tool_choice forces tool use."
    assert "temperature" in anthropic_error(
        await messages(client, thinking=THINKING, temperature=0.5)
    )


async def test_thinking_on_answers_begin_with_signed_thinking(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.enqueue({"toolCalls": [{"name": "ls", "arguments": {}}]})
    content = (await messages(client, thinking=THINKING)).json()["content"]
    assert [b["type"] for b in content] == ["thinking", "tool_use"]
    thinking = content[0]
    assert server.signer.valid(thinking["thinking"], thinking["signature"])
    # Thinking off, an unscripted answer has none.
    content = (await messages(client)).json()["content"]
    assert [b["type"] for b in content] == ["text"]


def after_tool(assistant: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tool_use = {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}
    return [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [*assistant, tool_use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]},
    ]


async def test_thinking_blocks_must_come_back_signed_after_a_tool_turn(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    signed = {"type": "thinking", "thinking": "I list.", "signature": server.signer.sign("I list.")}
    ok = await messages(client, thinking=THINKING, messages=after_tool([signed]))
    assert ok.status_code == 200
    message = anthropic_error(await messages(client, thinking=THINKING, messages=after_tool([])))
    assert message.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with "
        "a thinking block"
    )
    text = {"type": "text", "text": "Listing."}
    assert "found `text`" in anthropic_error(
        await messages(client, thinking=THINKING, messages=after_tool([text, signed]))
    )
    # Changed on its way back: refused, thinking on or off.
    altered = {**signed, "thinking": "I list files."}
    for extra in ({"thinking": THINKING}, {}):
        message = anthropic_error(await messages(client, messages=after_tool([altered]), **extra))
        assert message == "messages.1.content.0: Invalid `signature` in `thinking` block"
    # Without thinking, an assistant message needs no thinking block.
    assert (await messages(client, messages=after_tool([text]))).status_code == 200


async def test_redacted_thinking_goes_out_opaque_and_must_come_back_as_it_was(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        {"redactedThinking": "a secret thought", "toolCalls": [{"name": "ls", "arguments": {}}]}
    )
    content = (await messages(client, thinking=THINKING)).json()["content"]
    assert [b["type"] for b in content] == ["redacted_thinking", "tool_use"]
    data = content[0]["data"]
    assert "secret" not in data
    redacted = {"type": "redacted_thinking", "data": data}
    ok = await messages(client, thinking=THINKING, messages=after_tool([redacted]))
    assert ok.status_code == 200
    forged = {"type": "redacted_thinking", "data": data[:-4] + "AAA="}
    message = anthropic_error(
        await messages(client, thinking=THINKING, messages=after_tool([forged]))
    )
    assert message == "messages.1.content.0: Invalid `data` in `redacted_thinking` block"
