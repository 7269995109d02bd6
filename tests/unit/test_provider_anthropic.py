"""AnthropicProvider against httpx.MockTransport: wire format in, stream events out."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentd.errors import ModelError, ModelHTTPError, ModelStreamInterrupted
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
from agentd.providers import (
    ModelRequest,
    ProviderConfig,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallReady,
    ToolCallStarted,
    Usage,
)
from agentd.providers.anthropic import AnthropicProvider

KEY = "sk-ant-SECRET-0123456789"
HOST = "api.example.com"

# --- helpers ----------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    def __init__(self, reads: list[bytes], fail: Exception | None = None) -> None:
        self.reads = reads
        self.fail = fail
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.reads:
            yield chunk
        if self.fail is not None:
            raise self.fail

    async def aclose(self) -> None:
        self.closed = True


class Server:
    def __init__(self, *replies: httpx.Response) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.replies.pop(0)

    def body(self) -> Any:
        return json.loads(self.requests[0].content)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def ev(name: str, **data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def start(input_tokens: int = 10, cached: int = 0) -> bytes:
    usage = {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": cached}
    return ev("message_start", message={"id": "msg_1", "role": "assistant", "usage": usage})


def block_start(index: int, block: dict[str, Any]) -> bytes:
    return ev("content_block_start", index=index, content_block=block)


def delta(index: int, **d: Any) -> bytes:
    return ev("content_block_delta", index=index, delta=d)


def text_block(index: int, *pieces: str) -> list[bytes]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *[delta(index, type="text_delta", text=p) for p in pieces],
        ev("content_block_stop", index=index),
    ]


def tool_block(index: int, call_id: str, name: str, *json_pieces: str) -> list[bytes]:
    return [
        block_start(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}),
        *[delta(index, type="input_json_delta", partial_json=p) for p in json_pieces],
        ev("content_block_stop", index=index),
    ]


def end(reason: str, output_tokens: int = 5) -> list[bytes]:
    return [
        ev("message_delta", delta={"stop_reason": reason}, usage={"output_tokens": output_tokens}),
        ev("message_stop"),
    ]


def reply(*reads: bytes, fail: Exception | None = None) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Body(list(reads), fail)
    )


def provider(server: Server, sleeps: Sleeps | None = None, **cfg: Any) -> AnthropicProvider:
    config = ProviderConfig(
        kind="anthropic", base_url=f"https://{HOST}", api_key=KEY, model="claude-test", **cfg
    )
    return AnthropicProvider(
        config, transport=httpx.MockTransport(server), sleep=sleeps or Sleeps(), rand=lambda: 0.5
    )


def request(**kw: Any) -> ModelRequest:
    kw.setdefault("messages", [user_text("hi")])
    return ModelRequest(model=kw.pop("model", ""), system=kw.pop("system", "be brief"), **kw)


async def collect(
    p: AnthropicProvider, req: ModelRequest | None = None
) -> tuple[list[StreamEvent], ModelError | None]:
    events: list[StreamEvent] = []
    try:
        async for event in p.stream(req or request()):
            events.append(event)
    except ModelError as exc:
        return events, exc
    finally:
        await p.aclose()
    return events, None


# --- streaming --------------------------------------------------------------


@pytest.mark.asyncio
async def test_text_thinking_and_usage() -> None:
    server = Server(
        reply(
            start(input_tokens=10, cached=90),
            ev("ping"),
            block_start(0, {"type": "thinking", "thinking": ""}),
            delta(0, type="thinking_delta", thinking="hmm"),
            delta(0, type="signature_delta", signature="sig"),
            ev("content_block_stop", index=0),
            *text_block(1, "Hel", "lo"),
            *end("end_turn", output_tokens=42),
        )
    )
    events, error = await collect(provider(server))
    assert error is None
    assert events == [
        ThinkingDelta("hmm"),
        ThinkingEnd("sig"),
        TextDelta("Hel"),
        TextDelta("lo"),
        StreamEnd("end_turn", Usage(100, 42, cache_read_tokens=90)),
    ]


@pytest.mark.asyncio
async def test_tool_use_assembled_from_json_deltas() -> None:
    server = Server(
        reply(
            start(),
            *text_block(0, "Reading."),
            *tool_block(1, "toolu_1", "read_file", '{"pa', 'th": ', '"a.py"}'),
            *tool_block(2, "toolu_2", "list_dir"),
            *end("tool_use"),
        )
    )
    events, error = await collect(provider(server))
    assert error is None
    assert events == [
        TextDelta("Reading."),
        ToolCallStarted("toolu_1", "read_file"),
        ToolCallStarted("toolu_2", "list_dir"),
        ToolCallReady(ToolCall("toolu_1", "read_file", {"path": "a.py"})),
        ToolCallReady(ToolCall("toolu_2", "list_dir", {})),
        StreamEnd("tool_use", Usage(10, 5, 0)),
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("refusal", "refusal"),
        ("something_new", "end_turn"),
    ],
)
async def test_stop_reasons(reason: str, expected: str) -> None:
    server = Server(reply(start(), *text_block(0, "x"), *end(reason)))
    events, _ = await collect(provider(server))
    assert events[-1] == StreamEnd(expected, Usage(10, 5, 0))  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_tool_cut_by_max_tokens_is_dropped() -> None:
    server = Server(reply(start(), *tool_block(0, "t1", "write", '{"a": "b'), *end("max_tokens")))
    events, error = await collect(provider(server))
    assert error is None
    assert events == [ToolCallStarted("t1", "write"), StreamEnd("max_tokens", Usage(10, 5, 0))]


@pytest.mark.asyncio
async def test_stream_ending_after_stop_reason_completes() -> None:
    server = Server(reply(start(), *text_block(0, "x"), end("end_turn")[0]))
    events, error = await collect(provider(server))
    assert error is None
    assert events[-1] == StreamEnd("end_turn", Usage(10, 5, 0))


# --- broken streams ---------------------------------------------------------


@pytest.mark.asyncio
async def test_drop_mid_tool_json_keeps_text_and_never_readies_the_call() -> None:
    server = Server(
        reply(
            start(),
            *text_block(0, "Let me edit"),
            block_start(1, {"type": "tool_use", "id": "t1", "name": "write_file", "input": {}}),
            delta(1, type="input_json_delta", partial_json='{"path": "a.py", "text": "de'),
            fail=httpx.ReadError("connection reset"),
        )
    )
    events, error = await collect(provider(server))
    assert events == [TextDelta("Let me edit"), ToolCallStarted("t1", "write_file")]
    assert isinstance(error, ModelStreamInterrupted)
    assert error.message == f"connection to {HOST} lost: connection reset"


@pytest.mark.asyncio
async def test_clean_eof_before_stop_reason_is_interrupted() -> None:
    server = Server(reply(start(), *text_block(0, "partial"), *tool_block(1, "t1", "x", "{}")))
    events, error = await collect(provider(server))
    assert not any(isinstance(e, ToolCallReady) for e in events)
    assert isinstance(error, ModelStreamInterrupted)
    assert "ended before the response was complete" in error.message


@pytest.mark.asyncio
async def test_error_event_mid_stream() -> None:
    error_event = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    server = Server(reply(start(), *text_block(0, "a"), error_event))
    events, error = await collect(provider(server))
    assert events == [TextDelta("a")]
    assert isinstance(error, ModelStreamInterrupted)
    assert error.message == f"{HOST} reported an error: Overloaded (overloaded_error)"


@pytest.mark.asyncio
async def test_error_event_before_output() -> None:
    server = Server(reply(b"event: error\ndata: not even json\n\n"))
    events, error = await collect(provider(server))
    assert events == []
    assert type(error) is ModelError
    assert error.message == f"{HOST} reported an error: not even json"


@pytest.mark.asyncio
async def test_non_json_data() -> None:
    server = Server(
        reply(start(), *text_block(0, "a"), b"event: content_block_delta\ndata: {x\n\n")
    )
    events, error = await collect(provider(server))
    assert events == [TextDelta("a")]
    assert isinstance(error, ModelStreamInterrupted)
    assert "not JSON" in error.message


@pytest.mark.asyncio
async def test_crlf_comments_and_one_byte_reads() -> None:
    raw = b": hi\r\n\r\n" + b"".join([start(), *text_block(0, "ok"), *end("end_turn")]).replace(
        b"\n", b"\r\n"
    )
    server = Server(reply(*[raw[i : i + 1] for i in range(len(raw))]))
    events, error = await collect(provider(server))
    assert error is None
    assert events == [TextDelta("ok"), StreamEnd("end_turn", Usage(10, 5, 0))]


@pytest.mark.asyncio
async def test_overloaded_529_is_retried() -> None:
    overloaded = httpx.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    server = Server(overloaded, reply(start(), *text_block(0, "ok"), *end("end_turn")))
    sleeps = Sleeps()
    events, error = await collect(provider(server, sleeps))
    assert error is None
    assert sleeps.delays == [0.25]
    assert events[0] == TextDelta("ok")


@pytest.mark.asyncio
async def test_401_message_and_no_key() -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {KEY}"}}
    server = Server(httpx.Response(401, json=body))
    _, error = await collect(provider(server))
    assert isinstance(error, ModelHTTPError)
    assert error.message == (
        f"401 Unauthorized from {HOST}: bad *** (authentication_error) — check AGENTD_API_KEY"
    )
    assert len(server.requests) == 1


# --- request ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_request_body_headers_and_forced_tool() -> None:
    server = Server(reply(start(), *end("end_turn")))
    tool = ToolSpec("select", "Pick memories", {"type": "object"})
    req = request(tools=[tool], tool_choice="select", purpose="recall", max_tokens=256)
    await collect(provider(server, fast_model="claude-fast"), req)
    sent = server.requests[0]
    assert sent.url == f"https://{HOST}/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["X-Agentd-Purpose"] == "recall"
    assert sent.headers["User-Agent"].startswith("agentd/")
    assert "Authorization" not in sent.headers
    assert server.body() == {
        "model": "claude-fast",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
        "system": "be brief",
        "tools": [
            {"name": "select", "description": "Pick memories", "input_schema": {"type": "object"}}
        ],
        "tool_choice": {"type": "tool", "name": "select"},
    }


@pytest.mark.asyncio
async def test_history_conversion_tool_results_first_then_reminder() -> None:
    history = [
        Message("user", [TextPart("fix the bug")]),
        Message(
            "assistant",
            [
                ThinkingPart("not sent back"),
                TextPart("Looking."),
                ToolCallPart(ToolCall("c1", "read_file", {"path": "a.py"})),
                ToolCallPart(ToolCall("c2", "grep", {"q": "bug"})),
            ],
        ),
        Message(
            "user",
            [
                ReminderPart("user prefers tabs", source="memory"),
                ToolResultPart("c1", "print(1)"),
                ToolResultPart("c2", "no matches", is_error=True),
            ],
        ),
        Message("assistant", [TextPart("Half an ans")], interrupted=True),
        Message("assistant", [], interrupted=True),  # cancelled before any output
        Message("user", [TextPart("go on")]),
        Message("user", [TextPart("please")]),  # same role again: merged
    ]
    server = Server(reply(start(), *end("end_turn")))
    await collect(provider(server), request(model="m", system="", messages=history))
    body = server.body()
    assert "system" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "c2", "name": "grep", "input": {"q": "bug"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": "print(1)",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "c2",
                    "content": "no matches",
                    "is_error": True,
                },
                {
                    "type": "text",
                    "text": "<system-reminder>\nuser prefers tabs\n</system-reminder>",
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Half an ans"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "go on"}, {"type": "text", "text": "please"}],
        },
    ]


@pytest.mark.asyncio
async def test_merging_keeps_tool_results_first() -> None:
    history = [
        Message("assistant", [ToolCallPart(ToolCall("c1", "ls", {}))]),
        Message("user", [ReminderPart("memo")]),
        Message("user", [ToolResultPart("c1", "a.py")]),
    ]
    server = Server(reply(start(), *end("end_turn")))
    await collect(provider(server), request(messages=history))
    assert server.body()["messages"][1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "a.py", "is_error": False},
            {"type": "text", "text": "<system-reminder>\nmemo\n</system-reminder>"},
        ],
    }


def test_images_of_a_tool_result_go_beside_its_text() -> None:
    from agentd.messages import ImagePart
    from agentd.providers.anthropic import to_anthropic_messages

    history = [
        Message("assistant", [ToolCallPart(ToolCall("c1", "mcp__s__shot", {}))]),
        Message(
            "user",
            [
                ToolResultPart(
                    "c1", "[image image/png, 3 bytes]", False, (ImagePart("image/png", "AAAA"),)
                )
            ],
        ),
    ]
    (_, user) = to_anthropic_messages(history)
    assert user["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": [
                {"type": "text", "text": "[image image/png, 3 bytes]"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                },
            ],
            "is_error": False,
        }
    ]
