"""MCP sampling over LSP end to end: an MCP server's `sampling/createMessage`
during a tool call is asked about with `agent/requestPermission` (kind
`sampling`) and, allowed, served by agentd's model. The real daemon,
tests/mcp/server.py's `summarize` and `sample_raw` tools over stdio, the
bundled model server answering both the conversation and the sampling
request (purpose `sampling`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient
from tests.mcp import server as test_server
from tests.mcp.conftest import StartClient, stdio_server
from tests.mcp.test_mcp_lsp import answer_with

pytestmark = pytest.mark.e2e

SUMMARY = "A one-line summary from agentd's model."


def summarize(text: str = "Summarise this please.", **more: Any) -> dict[str, Any]:
    arguments = {"text": text, **more}
    return {"toolCalls": [{"id": "m1", "name": "mcp__calc__summarize", "arguments": arguments}]}


def sample_raw(params: dict[str, Any]) -> dict[str, Any]:
    arguments = {"params": json.dumps(params)}
    return {"toolCalls": [{"id": "m1", "name": "mcp__calc__sample_raw", "arguments": arguments}]}


def server_got(model_server: ModelServer) -> dict[str, Any]:
    """What the server's tool got back from agentd, as it told the model."""
    messages = model_server.requests("main")[-1]["body"]["messages"]
    content = next(m for m in reversed(messages) if m["role"] == "tool")["content"]
    return dict(json.loads(content))


def chat(client: AgentdClient, sid: str) -> str:
    return "".join(
        u["update"].get("text", "")
        for u in client.updates
        if u["sessionId"] == sid and u["update"]["kind"] == "message_chunk"
    )


async def test_allowed_the_server_gets_the_models_answer(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    model_server.enqueue(summarize("Long text \U0001f600 " + "y" * 1000))
    model_server.enqueue({"text": "Done."})
    model_server.enqueue({"text": SUMMARY}, "sampling")
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "use the zebra tool"))["stopReason"] == "end_turn"

    got = server_got(model_server)["result"]
    assert got["role"] == "assistant"
    assert got["content"] == {"type": "text", "text": SUMMARY}
    assert got["stopReason"] == "endTurn" and got["model"]
    # One request of its own: the server's system prompt and message, no tools,
    # nothing of the session's conversation.
    (sampled,) = model_server.requests("sampling")
    body = sampled["body"]
    assert "tools" not in body
    assert body["messages"][0] == {"role": "system", "content": test_server.SUMMARY_SYSTEM}
    assert [m["role"] for m in body["messages"][1:]] == ["user"]
    assert "zebra" not in json.dumps(body["messages"])
    assert body["max_tokens"] == 200
    # Asked first, about this call, with a preview and no "always".
    (asked,) = seen
    assert asked["kind"] == "sampling" and asked["toolCallId"] == "m1"
    assert asked["sessionId"] == sid and asked["server"] == "calc"
    assert "calc" in asked["title"]
    assert [o["optionId"] for o in asked["options"]] == ["allow_once", "reject_once"]
    preview = asked["arguments"]
    assert preview["systemPrompt"] == test_server.SUMMARY_SYSTEM
    assert preview["lastMessage"].startswith("Long text \U0001f600 yyy")
    assert len(preview["lastMessage"]) <= 300 and preview["maxTokens"] == 200
    assert test_server.SUMMARY_SYSTEM in asked["description"]
    # The model's answer went to the server, not to the chat.
    assert SUMMARY not in chat(client, sid)


@pytest.mark.parametrize("option", ["reject_once", None], ids=["rejected", "cancelled"])
async def test_a_denial_is_an_error_for_the_server_and_no_model_request(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path, option: str | None
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    answer_with(client, option, [])
    model_server.enqueue(summarize())
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "summarise"))["stopReason"] == "end_turn"
    error = server_got(model_server)["error"]
    assert error["code"] == -1 and "declined" in error["message"]
    assert model_server.requests("sampling") == []


async def test_an_editor_that_cannot_be_asked_refuses(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()})  # no requestPermission
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    model_server.enqueue(summarize())
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "summarise"))["stopReason"] == "end_turn"
    error = server_got(model_server)["error"]
    assert error["code"] == -1 and "declined" in error["message"]
    assert seen == [] and model_server.requests("sampling") == []


async def test_the_ask_mode_refuses_without_asking(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    sid = await client.new_session(workspace)
    await client.request("agent/setMode", {"sessionId": sid, "mode": "ask"})
    model_server.enqueue(summarize())  # summarize is read-only: Ask offers it
    assert (await client.prompt(sid, "summarise"))["stopReason"] == "end_turn"
    error = server_got(model_server)["error"]
    assert error["code"] == -1 and "Ask mode" in error["message"]
    assert seen == [] and model_server.requests("sampling") == []


async def test_no_answer_in_time_refuses_and_withdraws_the_question(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client(
        {"calc": stdio_server()}, permission=True, mcp={"startupWait": 60, "permissionTimeout": 0.5}
    )
    withdrawn = asyncio.Event()

    async def never(params: Any) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            withdrawn.set()
            raise

    client.lsp.feature("agent/requestPermission")(never)
    model_server.enqueue(summarize())
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "summarise"))["stopReason"] == "end_turn"
    error = server_got(model_server)["error"]
    assert error["code"] == -1 and "no answer within 0.5 s" in error["message"]
    await asyncio.wait_for(withdrawn.wait(), 30)
    assert model_server.requests("sampling") == []


async def test_a_cancelled_prompt_stops_the_model_stream(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    answer_with(client, "allow_once", [])
    model_server.enqueue(summarize())
    # The sampling answer stalls after its first piece: it runs until cancelled.
    model_server.enqueue({"chunks": ["Half a summ", "ary"], "stallAfter": 1}, "sampling")
    sid = await client.new_session(workspace)
    task = asyncio.ensure_future(client.prompt(sid, "summarise", msg_id="p-sum"))
    sent = await model_server.wait_for(
        lambda e: e["type"] == "request" and e["purpose"] == "sampling", 30
    )
    await model_server.wait_for(lambda e: e["type"] == "first_chunk" and e["id"] == sent["id"], 30)
    client.cancel("p-sum")
    with pytest.raises(JsonRpcException) as info:
        await task
    assert info.value.code == -32800
    await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == sent["id"], 30)
    assert "Half a summ" not in chat(client, sid)
    # The session and the server go on.
    model_server.enqueue(summarize())
    model_server.enqueue({"text": SUMMARY}, "sampling")
    assert (await client.prompt(sid, "again"))["stopReason"] == "end_turn"
    assert server_got(model_server)["result"]["content"]["text"] == SUMMARY


async def test_the_calls_timeout_is_paused_while_the_user_is_asked(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client(
        {"calc": stdio_server()}, permission=True, mcp={"startupWait": 60, "callTimeout": 1}
    )

    async def slow_user(params: Any) -> Any:
        await asyncio.sleep(2.5)  # the user thinks longer than the call may take
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

    client.lsp.feature("agent/requestPermission")(slow_user)
    model_server.enqueue(summarize())
    model_server.enqueue({"text": SUMMARY}, "sampling")
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "summarise"))["stopReason"] == "end_turn"
    assert server_got(model_server)["result"]["content"]["text"] == SUMMARY


async def test_a_huge_max_tokens_is_cut_to_agentds_cap(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True, maxOutputTokens=1000)
    answer_with(client, "allow_once", [])
    model_server.enqueue(summarize(max_tokens=1_000_000))
    model_server.enqueue({"text": SUMMARY}, "sampling")
    sid = await client.new_session(workspace)
    await client.prompt(sid, "summarise")
    assert server_got(model_server)["result"]["content"]["text"] == SUMMARY
    (sampled,) = model_server.requests("sampling")
    assert sampled["body"]["max_tokens"] == 1000


def text_message(text: Any, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": {"type": "text", "text": text}}


GOOD: dict[str, Any] = {"messages": [text_message("hi")], "maxTokens": 50}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({**GOOD, "maxTokens": 0}, "maxTokens"),
        ({**GOOD, "maxTokens": -5}, "maxTokens"),
        ({**GOOD, "maxTokens": 10**12}, "maxTokens"),
        ({**GOOD, "messages": [text_message("x" * 300_000)]}, "messages.0.content.text"),
        ({**GOOD, "messages": [text_message("a")] * 10_000}, "messages"),
        ({**GOOD, "messages": []}, "messages"),
        ({**GOOD, "messages": [text_message("half \ud83d an emoji")]}, "messages.0.content.text"),
        ({**GOOD, "systemPrompt": "\udc00"}, "systemPrompt"),
        ({**GOOD, "temperature": 7}, "temperature"),
        ({**GOOD, "stopSequences": ["a"] * 50}, "stopSequences"),
        (
            {
                **GOOD,
                "messages": [
                    {
                        "role": "user",
                        "content": {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                    }
                ],
            },
            "messages.0.content",
        ),
        (
            {
                **GOOD,
                "messages": [
                    {
                        "role": "user",
                        "content": {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                    }
                ],
            },
            "messages.0.content",
        ),
    ],
    ids=[
        "zero-tokens",
        "negative-tokens",
        "huge-tokens",
        "huge-text",
        "10k-messages",
        "no-messages",
        "lone-surrogate",
        "surrogate-system",
        "temperature",
        "stop-sequences",
        "audio",
        "image-for-a-text-model",
    ],
)
async def test_hostile_requests_are_errors_for_the_server(
    mcp_client: StartClient,
    model_server: ModelServer,
    workspace: Path,
    params: dict[str, Any],
    field: str,
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    model_server.enqueue(sample_raw(params))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "sample"))["stopReason"] == "end_turn"
    error = server_got(model_server)["error"]
    assert error["code"] == -32602
    assert error["message"].startswith(f"{field}:")
    assert seen == [] and model_server.requests("sampling") == []
    # The daemon and the server go on.
    model_server.enqueue(sample_raw(GOOD))
    model_server.enqueue({"text": SUMMARY}, "sampling")
    assert (await client.prompt(sid, "again"))["stopReason"] == "end_turn"
    assert server_got(model_server)["result"]["content"]["text"] == SUMMARY


@pytest.mark.parametrize(
    "params",
    [{**GOOD, "maxTokens": "many"}, {**GOOD, "messages": "hi"}, {"messages": [text_message(5)]}],
    ids=["tokens-string", "messages-string", "text-number"],
)
async def test_wrong_types_are_refused_by_the_sdk_as_invalid_params(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path, params: dict[str, Any]
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    answer_with(client, "allow_once", [])
    model_server.enqueue(sample_raw(params))
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "sample"))["stopReason"] == "end_turn"
    assert server_got(model_server)["error"]["code"] == -32602
    assert model_server.requests("sampling") == []


async def test_sampling_during_parallel_calls_of_one_server_is_refused(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    calls = [
        {"id": f"m{i}", "name": "mcp__calc__summarize", "arguments": {"text": "t"}} for i in (1, 2)
    ]
    model_server.enqueue({"toolCalls": calls})
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "twice"))["stopReason"] == "end_turn"
    messages = model_server.requests("main")[-1]["body"]["messages"]
    answers = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    assert [a["error"]["code"] for a in answers] == [-32600, -32600]
    assert seen == [] and model_server.requests("sampling") == []


async def test_an_image_reaches_a_model_that_takes_images(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True, supportsImages=True)
    seen: list[dict[str, Any]] = []
    answer_with(client, "allow_once", seen)
    image = {"type": "image", "data": test_server.PNG, "mimeType": "image/png"}
    content = [{"type": "text", "text": "What is this?"}, image]
    model_server.enqueue(sample_raw({**GOOD, "messages": [{"role": "user", "content": content}]}))
    model_server.enqueue({"text": SUMMARY}, "sampling")
    sid = await client.new_session(workspace)
    await client.prompt(sid, "look")
    assert server_got(model_server)["result"]["content"]["text"] == SUMMARY
    (sampled,) = model_server.requests("sampling")
    sent = json.dumps(sampled["body"]["messages"])
    assert test_server.PNG in sent and "What is this?" in sent
    assert seen[0]["arguments"]["lastMessage"] == "What is this?[image]"


async def test_a_session_at_its_token_limit_refuses_and_sampling_counts_in_the_usage(
    mcp_client: StartClient, model_server: ModelServer, workspace: Path
) -> None:
    client = await mcp_client({"calc": stdio_server()}, permission=True)
    answer_with(client, "allow_once", [])
    model_server.enqueue(summarize())
    model_server.enqueue({"text": "Done."})
    model_server.enqueue({"text": SUMMARY, "usage": {"input": 1000, "output": 500}}, "sampling")
    sid = await client.new_session(workspace)
    usage = (await client.prompt(sid, "summarise"))["usage"]
    # The server's request is paid for like the conversation's.
    assert usage["inputTokens"] >= 1000 and usage["outputTokens"] >= 500
    limited = await mcp_client(
        {"calc": stdio_server()}, permission=True, limits={"sessionTokenLimit": 1}
    )
    seen: list[dict[str, Any]] = []
    answer_with(limited, "allow_once", seen)
    model_server.enqueue(summarize())
    sid = await limited.new_session(workspace)
    # The first request used the session's tokens: the call's sampling is refused.
    assert (await limited.prompt(sid, "summarise"))["stopReason"] == "token_limit"
    await limited.wait_for_log("SAMPLED error -32600")
    assert seen == [] and len(model_server.requests("sampling")) == 1
