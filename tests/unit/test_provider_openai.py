"""OpenAIProvider against httpx.MockTransport: wire format in, stream events out."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from agentd.errors import ModelError, ModelStreamInterrupted
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
    ToolCallReady,
    ToolCallStarted,
    Usage,
)
from agentd.providers.openai import OpenAIProvider

KEY = "sk-test-SECRET-0123456789"

# --- helpers ----------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    """A response body delivered read by read, then optionally a failure."""

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
    """Answers each request with the next scripted reply; records requests."""

    def __init__(self, *replies: httpx.Response) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.replies.pop(0)

    def body(self, i: int = 0) -> Any:
        return json.loads(self.requests[i].content)


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]})


def usage(prompt: int, completion: int) -> bytes:
    return sse({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


DONE = b"data: [DONE]\n\n"


def stream_reply(*reads: bytes, fail: Exception | None = None) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Body(list(reads), fail)
    )


def provider(server: Callable[[httpx.Request], httpx.Response], **cfg: Any) -> OpenAIProvider:
    config = ProviderConfig(
        base_url="https://api.example.com/v1", api_key=KEY, model="gpt-test", **cfg
    )
    return OpenAIProvider(config, transport=httpx.MockTransport(server))


def request(**kw: Any) -> ModelRequest:
    kw.setdefault("messages", [user_text("hi")])
    return ModelRequest(model=kw.pop("model", ""), system=kw.pop("system", "be brief"), **kw)


async def collect(
    p: OpenAIProvider, req: ModelRequest | None = None
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


def tool_fragment(index: int, **fn: str) -> dict[str, Any]:
    frag: dict[str, Any] = {"index": index, "function": fn}
    if "name" in fn:
        frag["id"] = f"call_{index}"
        frag["type"] = "function"
    return {"tool_calls": [frag]}


# --- streaming --------------------------------------------------------------


@pytest.mark.asyncio
async def test_text_streaming_with_usage() -> None:
    server = Server(
        stream_reply(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk(finish="stop"),
            usage(12, 3),
            DONE,
        )
    )
    events, error = await collect(provider(server))
    assert error is None
    assert events == [TextDelta("Hel"), TextDelta("lo"), StreamEnd("end_turn", Usage(12, 3))]


@pytest.mark.asyncio
async def test_reasoning_is_thinking() -> None:
    server = Server(
        stream_reply(
            chunk({"reasoning_content": "hmm"}),
            chunk({"reasoning": " ok"}),
            chunk({"content": "A"}, finish="stop"),
            DONE,
        )
    )
    events, _ = await collect(provider(server))
    assert events[:3] == [
        ThinkingDelta("hmm", "reasoning_content"),
        ThinkingDelta(" ok", "reasoning"),
        TextDelta("A"),
    ]


@pytest.mark.asyncio
async def test_tool_call_fragments_are_assembled() -> None:
    server = Server(
        stream_reply(
            chunk({"content": "Reading."}),
            chunk(tool_fragment(0, name="read_file", arguments="")),
            chunk(tool_fragment(0, arguments='{"pa')),
            chunk(tool_fragment(0, arguments='th": "a.py"}')),
            chunk(tool_fragment(1, name="list_dir", arguments="")),
            chunk(finish="tool_calls"),
            usage(5, 7),
            DONE,
        )
    )
    events, error = await collect(provider(server))
    assert error is None
    assert events == [
        TextDelta("Reading."),
        ToolCallStarted("call_0", "read_file"),
        ToolCallStarted("call_1", "list_dir"),
        ToolCallReady(ToolCall("call_0", "read_file", {"path": "a.py"})),
        ToolCallReady(ToolCall("call_1", "list_dir", {})),  # empty arguments -> {}
        StreamEnd("tool_use", Usage(5, 7)),
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("stop", "end_turn"),
        ("tool_calls", "tool_use"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("something_new", "end_turn"),
    ],
)
async def test_stop_reasons(finish: str, expected: str) -> None:
    server = Server(stream_reply(chunk({"content": "x"}), chunk(finish=finish), DONE))
    events, _ = await collect(provider(server))
    assert events[-1] == StreamEnd(expected, Usage())  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_stop_with_tool_calls_is_tool_use() -> None:
    # Some compatible servers finish tool calls with "stop".
    server = Server(stream_reply(chunk(tool_fragment(0, name="t", arguments="{}"), "stop"), DONE))
    events, _ = await collect(provider(server))
    assert events[-1] == StreamEnd("tool_use", Usage())


@pytest.mark.asyncio
async def test_call_cut_by_max_tokens_is_dropped() -> None:
    server = Server(
        stream_reply(chunk(tool_fragment(0, name="t", arguments='{"a": ')), chunk(finish="length"))
    )
    events, error = await collect(provider(server))
    assert error is None
    assert events == [ToolCallStarted("call_0", "t"), StreamEnd("max_tokens", Usage())]


@pytest.mark.asyncio
async def test_finished_call_with_broken_json_is_an_error() -> None:
    server = Server(stream_reply(chunk(tool_fragment(0, name="t", arguments="{oops")), DONE))
    events, error = await collect(provider(server))
    assert isinstance(error, ModelStreamInterrupted)  # ToolCallStarted was yielded
    assert "'t' with invalid JSON arguments" in error.message
    assert not any(isinstance(e, ToolCallReady) for e in events)


@pytest.mark.asyncio
async def test_done_without_finish_reason_completes() -> None:
    server = Server(stream_reply(chunk({"content": "x"}), DONE))
    events, error = await collect(provider(server))
    assert error is None
    assert events[-1] == StreamEnd("end_turn", Usage())


@pytest.mark.asyncio
async def test_finish_reason_without_done_completes() -> None:
    server = Server(stream_reply(chunk({"content": "x"}), chunk(finish="stop")))
    events, error = await collect(provider(server))
    assert error is None
    assert events[-1] == StreamEnd("end_turn", Usage())


# --- broken streams ---------------------------------------------------------


@pytest.mark.asyncio
async def test_drop_mid_tool_call_keeps_text_and_never_readies_the_call() -> None:
    server = Server(
        stream_reply(
            chunk({"content": "Let me edit"}),
            chunk(tool_fragment(0, name="write_file", arguments='{"path": "a.py", "text": "de')),
            fail=httpx.ReadError("peer closed connection"),
        )
    )
    events, error = await collect(provider(server))
    assert events == [TextDelta("Let me edit"), ToolCallStarted("call_0", "write_file")]
    assert isinstance(error, ModelStreamInterrupted)
    assert "connection to api.example.com lost" in error.message


@pytest.mark.asyncio
async def test_clean_eof_before_done_is_interrupted() -> None:
    server = Server(stream_reply(chunk({"content": "partial"}), chunk(tool_fragment(0, name="t"))))
    events, error = await collect(provider(server))
    assert events == [TextDelta("partial"), ToolCallStarted("call_0", "t")]
    assert isinstance(error, ModelStreamInterrupted)
    assert "ended before the response was complete" in error.message


@pytest.mark.asyncio
async def test_cut_in_the_middle_of_a_line() -> None:
    server = Server(stream_reply(chunk({"content": "a"}), b'data: {"choices": [{"ind'))
    events, error = await collect(provider(server))
    assert events == [TextDelta("a")]
    assert isinstance(error, ModelStreamInterrupted)


@pytest.mark.asyncio
async def test_non_json_data_line() -> None:
    server = Server(stream_reply(chunk({"content": "a"}), b"data: {not json\n\n"))
    events, error = await collect(provider(server))
    assert events == [TextDelta("a")]
    assert isinstance(error, ModelStreamInterrupted)
    assert "malformed event from api.example.com: not JSON" in error.message


@pytest.mark.asyncio
async def test_non_json_before_any_output_is_a_model_error() -> None:
    server = Server(stream_reply(b"data: <html>\n\n"))
    events, error = await collect(provider(server))
    assert events == []
    assert type(error) is ModelError


@pytest.mark.asyncio
async def test_error_object_in_stream() -> None:
    err = {"error": {"message": f"overloaded, key {KEY}", "type": "server_error"}}
    server = Server(stream_reply(chunk({"content": "a"}), sse(err)))
    events, error = await collect(provider(server))
    assert events == [TextDelta("a")]
    assert isinstance(error, ModelStreamInterrupted)
    assert "api.example.com reported an error: overloaded" in error.message
    assert KEY not in error.message


@pytest.mark.asyncio
async def test_error_event_in_stream() -> None:
    server = Server(stream_reply(b"event: error\ndata: upstream timed out\n\n"))
    _, error = await collect(provider(server))
    assert error is not None
    assert error.message == "api.example.com reported an error: upstream timed out"


@pytest.mark.asyncio
async def test_comments_crlf_and_split_reads() -> None:
    raw = (
        b": keep-alive\r\n\r\n"
        + chunk({"content": "He"}).replace(b"\n", b"\r\n")
        + b": another comment\r\n"
        + chunk({"content": "llo"}, "stop").replace(b"\n", b"\r\n")
        + b"data: [DONE]\r\n\r\n"
    )
    # Every possible split position at once: one byte per read.
    server = Server(stream_reply(*[raw[i : i + 1] for i in range(len(raw))]))
    events, error = await collect(provider(server))
    assert error is None
    assert events == [TextDelta("He"), TextDelta("llo"), StreamEnd("end_turn", Usage())]


@pytest.mark.asyncio
async def test_very_long_line() -> None:
    text = "x" * 2_000_000
    raw = chunk({"content": text}, "stop") + DONE
    server = Server(stream_reply(*[raw[i : i + 4096] for i in range(0, len(raw), 4096)]))
    events, error = await collect(provider(server))
    assert error is None
    assert events == [TextDelta(text), StreamEnd("end_turn", Usage())]


# --- request ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_request_body_with_tools_and_forced_choice() -> None:
    server = Server(stream_reply(chunk(finish="stop"), DONE))
    tool = ToolSpec("remember", "Save a fact", {"type": "object", "properties": {}})
    req = request(tools=[tool], tool_choice="remember", purpose="extract", temperature=0.0)
    await collect(provider(server, fast_model="gpt-mini"), req)
    assert server.requests[0].url == "https://api.example.com/v1/chat/completions"
    assert server.body() == {
        "model": "gpt-mini",  # side queries use the fast model
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "max_tokens": 8192,  # the family's default cap: the request set none
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "remember",
                    "description": "Save a fact",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "remember"}},
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
        Message("assistant", [ToolCallPart(ToolCall("c3", "ls", {}))]),
        Message("user", [ToolResultPart("c3", "a.py")]),
        Message("assistant", [TextPart("Half an ans")], interrupted=True),
        Message("assistant", [], interrupted=True),  # cancelled before any output
        Message("user", [TextPart("go on")]),
    ]
    server = Server(stream_reply(chunk(finish="stop"), DONE))
    await collect(provider(server), request(model="m", messages=history))
    assert server.body()["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "fix the bug"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "grep", "arguments": '{"q": "bug"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "tool", "tool_call_id": "c2", "content": "no matches"},
        {
            "role": "user",
            "content": "<system-reminder>\nuser prefers tabs\n</system-reminder>",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "a.py"},
        {"role": "assistant", "content": "Half an ans"},
        {"role": "user", "content": "go on"},
    ]


@pytest.mark.asyncio
async def test_reminder_and_text_share_one_user_message() -> None:
    msg = Message("user", [ReminderPart("r"), TextPart("question")])
    server = Server(stream_reply(chunk(finish="stop"), DONE))
    await collect(provider(server), request(system="", messages=[msg]))
    assert server.body()["messages"] == [
        {"role": "user", "content": "<system-reminder>\nr\n</system-reminder>\n\nquestion"}
    ]


@pytest.mark.asyncio
async def test_headers() -> None:
    server = Server(stream_reply(chunk(finish="stop"), DONE))
    await collect(provider(server, extra_headers=(("X-Org", "acme"),)), request(purpose="recall"))
    headers = server.requests[0].headers
    assert headers["X-Agentd-Purpose"] == "recall"
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["User-Agent"].startswith("agentd/")
    assert headers["Accept"] == "text/event-stream"
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Org"] == "acme"


@pytest.mark.asyncio
async def test_no_key_no_authorization_header() -> None:
    server = Server(stream_reply(chunk(finish="stop"), DONE))
    p = OpenAIProvider(
        ProviderConfig(base_url="http://127.0.0.1:8000/v1", model="m"),
        transport=httpx.MockTransport(server),
    )
    await collect(p)
    assert "Authorization" not in server.requests[0].headers
    assert server.requests[0].url == "http://127.0.0.1:8000/v1/chat/completions"


def test_images_of_a_tool_result_are_named_not_sent() -> None:
    from agentd.messages import ImagePart
    from agentd.providers.openai import to_chat_messages

    history = [
        Message("assistant", [ToolCallPart(ToolCall("c1", "mcp__s__shot", {}))]),
        Message("user", [ToolResultPart("c1", "a shot", False, (ImagePart("image/png", "AAAA"),))]),
    ]
    tool = to_chat_messages("", history)[-1]
    assert tool == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "a shot\n\n[1 image(s) not shown: this API takes no images in tool results]",
    }
