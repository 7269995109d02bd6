"""The local model server, driven over real loopback HTTP with httpx.

Synchronisation is by the server's log (`wait_for`) and by what the client
has read, never by sleeps; no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import json
import re
import signal
import struct
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from agentd.testing.model_server import ModelServer, ModelServerThread, main
from agentd.testing.model_server.replies import RequestView, default_reply, parse_reply

# --- helpers -----------------------------------------------------------------------------


class SSEParser:
    """A small WHATWG-style SSE parser: CRLF/CR/LF, comments, events split anywhere."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._text = ""
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[tuple[str | None, str]]:
        self._text += self._decoder.decode(data)
        out: list[tuple[str | None, str]] = []
        while True:
            match = re.search(r"\r\n|\r|\n", self._text)
            # A lone CR at the end may be the first half of a CRLF: wait for more.
            if match is None or (match.group() == "\r" and match.end() == len(self._text)):
                return out
            line, self._text = self._text[: match.start()], self._text[match.end() :]
            if not line:
                if self._data:
                    out.append((self._event, "\n".join(self._data)))
                self._event, self._data = None, []
            elif line.startswith(":"):
                continue
            else:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    self._event = value
                elif name == "data":
                    self._data.append(value)


def parse_sse(raw: bytes) -> list[tuple[str | None, str]]:
    return SSEParser().feed(raw)


def openai_body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "agentd-local", "messages": [{"role": "user", "content": text}], **extra}


def anthropic_body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {
        "model": "agentd-local",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


async def openai_chunks(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """JSON chunks of an OpenAI stream, and the raw data strings (incl. [DONE])."""
    resp = await client.post("/v1/chat/completions", json={**body, "stream": True}, headers=headers)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    data = [d for _, d in parse_sse(resp.content)]
    return [json.loads(d) for d in data if d != "[DONE]"], data


async def anthropic_events(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    resp = await client.post("/v1/messages", json={**body, "stream": True}, headers=headers)
    assert resp.status_code == 200
    events = []
    for name, data in parse_sse(resp.content):
        obj = json.loads(data)
        assert name == obj["type"]  # every Anthropic event names its type twice
        events.append(obj)
    return events


def content_of(chunks: list[dict[str, Any]]) -> list[str]:
    return [
        c["choices"][0]["delta"]["content"]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]


def text_deltas(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    ]


def of_type(kind: str, request_id: int | None = None) -> Any:
    return lambda e: e["type"] == kind and (request_id is None or e.get("id") == request_id)


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[ModelServer]:
    async with ModelServer(log_path=tmp_path / "log.jsonl") as srv:
        yield srv


@pytest_asyncio.fixture
async def client(server: ModelServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": "Bearer sk-secret", "x-api-key": "sk-ant-secret"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as c:
        yield c


# --- OpenAI ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_openai_stream_text(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "hello big wide world"})
    body = openai_body(stream_options={"include_usage": True})
    chunks, data = await openai_chunks(client, body)

    assert content_of(chunks) == ["hello ", "big ", "wide ", "world"]
    first = chunks[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["model"] == "agentd-local"
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert len({c["id"] for c in chunks}) == 1
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])
    assert data[-1] == "[DONE]"

    request = server.requests()[0]
    assert request["api"] == "openai" and request["purpose"] == "main"
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["messages"][0]["content"] == "hi"
    assert request["headers"]["authorization"] == "<redacted>"
    assert request["headers"]["x-api-key"] == "<redacted>"
    kinds = [e["type"] for e in server.log if e.get("id") == request["id"]]
    assert kinds == ["request", "first_chunk", "complete"]


@pytest.mark.asyncio
async def test_openai_stream_without_usage_and_explicit_chunks(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.enqueue({"chunks": ["hel", "lo"], "thinking": "let me think"})
    chunks, data = await openai_chunks(client, openai_body())
    reasoning = [
        c["choices"][0]["delta"]["reasoning_content"]
        for c in chunks
        if "reasoning_content" in c["choices"][0]["delta"]
    ]
    assert reasoning == ["let ", "me ", "think"]
    assert content_of(chunks) == ["hel", "lo"]
    assert all("usage" not in c for c in chunks)
    assert data[-1] == "[DONE]"


@pytest.mark.asyncio
async def test_openai_tool_call_fragments_reassemble(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    args = {"path": "src/a.txt", "lines": [1, 2, 3], "note": 'ünïcode "quoted"'}
    server.enqueue(
        {
            "text": "Reading it.",
            "toolCalls": [
                {"name": "read_file", "arguments": args, "id": "call_1"},
                {"name": "list_dir", "arguments": {}},
            ],
        }
    )
    chunks, _ = await openai_chunks(client, openai_body())
    calls: dict[int, dict[str, Any]] = {}
    fragments: dict[int, list[str]] = {}
    for chunk in chunks:
        for tc in chunk["choices"][0]["delta"].get("tool_calls", []):
            if "id" in tc:
                assert tc["type"] == "function"
                calls[tc["index"]] = {"id": tc["id"], "name": tc["function"]["name"]}
            fragments.setdefault(tc["index"], []).append(tc["function"]["arguments"])
    assert calls[0] == {"id": "call_1", "name": "read_file"}
    assert calls[1]["name"] == "list_dir" and calls[1]["id"].startswith("call_")
    assert len([f for f in fragments[0] if f]) > 2
    assert json.loads("".join(fragments[0])) == args
    assert json.loads("".join(fragments[1])) == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("stop", "finish", "anthropic_stop"),
    [
        ("max_tokens", "length", "max_tokens"),
        ("refusal", "content_filter", "refusal"),
        ("end_turn", "stop", "end_turn"),
    ],
)
async def test_stop_reason_overrides(
    server: ModelServer, client: httpx.AsyncClient, stop: str, finish: str, anthropic_stop: str
) -> None:
    server.enqueue({"text": "cut", "stopReason": stop})
    chunks, _ = await openai_chunks(client, openai_body())
    assert chunks[-1]["choices"][0]["finish_reason"] == finish
    server.enqueue({"text": "cut", "stopReason": stop})
    events = await anthropic_events(client, anthropic_body())
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == anthropic_stop


@pytest.mark.asyncio
async def test_openai_non_stream(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue(
        {
            "text": "done",
            "thinking": "hmm",
            "toolCalls": [{"name": "grep", "arguments": {"q": "x"}}],
            "usage": {"input": 10, "output": 5},
        }
    )
    resp = await client.post("/v1/chat/completions", json=openai_body())
    assert resp.status_code == 200
    completion = resp.json()
    assert completion["object"] == "chat.completion"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] == "done"
    assert message["reasoning_content"] == "hmm"
    call = message["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "grep"
    assert json.loads(call["function"]["arguments"]) == {"q": "x"}
    assert completion["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    }


# --- Anthropic ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_anthropic_stream(server: ModelServer, client: httpx.AsyncClient) -> None:
    args = {"path": "a.txt", "content": "line one\nline two"}
    server.enqueue(
        {
            "thinking": "first think",
            "text": "I will write it.",
            "toolCalls": [{"name": "write_file", "arguments": args}],
            "usage": {"input": 42, "output": 7},
        }
    )
    events = await anthropic_events(client, anthropic_body())
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["role"] == "assistant" and start["content"] == []
    assert start["usage"]["input_tokens"] == 42

    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[2]["name"] == "write_file" and blocks[2]["id"].startswith("toolu_")
    assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1, 2]

    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    thinking = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
    assert thinking == "first think"
    assert any(d["type"] == "signature_delta" for d in deltas)
    assert "".join(text_deltas(events)) == "I will write it."
    partial = [d["partial_json"] for d in deltas if d["type"] == "input_json_delta"]
    assert len(partial) > 2
    assert json.loads("".join(partial)) == args

    message_delta = events[-2]
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    assert message_delta["usage"]["output_tokens"] == 7
    assert server.requests()[0]["api"] == "anthropic"


@pytest.mark.asyncio
async def test_anthropic_non_stream(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "hello", "toolCalls": [{"name": "ls", "arguments": {"d": "."}}]})
    resp = await client.post("/v1/messages", json=anthropic_body())
    message = resp.json()
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0] == {"type": "text", "text": "hello"}
    assert message["content"][1]["type"] == "tool_use"
    assert message["content"][1]["input"] == {"d": "."}
    assert message["usage"]["output_tokens"] > 0


@pytest.mark.asyncio
async def test_models_list(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v1/models")
    assert resp.status_code == 200
    models = resp.json()
    assert models["object"] == "list" and models["data"]
    assert all(m["object"] == "model" and m["type"] == "model" for m in models["data"])


# --- faults ------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_status_fault_then_success_on_same_client(
    server: ModelServer, client: httpx.AsyncClient, path: str
) -> None:
    body = openai_body() if path.endswith("completions") else anthropic_body()
    server.enqueue({"status": 429, "retryAfter": "2"})
    server.enqueue({"status": 503, "errorBody": {"error": {"message": "custom"}}})
    server.enqueue({"text": "ok now"})

    resp = await client.post(path, json=body)
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "2"
    error = resp.json()
    if path.endswith("messages"):
        assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    else:
        assert error["error"]["code"] == "rate_limit_exceeded"
    resp = await client.post(path, json=body)
    assert resp.status_code == 503 and resp.json() == {"error": {"message": "custom"}}
    assert "retry-after" not in resp.headers
    resp = await client.post(path, json=body)
    assert resp.status_code == 200

    faults = [e for e in server.log if e["type"] == "fault"]
    assert [(f["kind"], f["status"]) for f in faults] == [("status", 429), ("status", 503)]


@pytest.mark.asyncio
async def test_drop_after_text_chunks(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "one two three four five", "dropAfter": 2})
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream(
            "POST", "/v1/chat/completions", json=openai_body(stream=True)
        ) as resp:
            async for piece in resp.aiter_bytes():
                received += piece
    chunks = [json.loads(d) for _, d in parse_sse(bytes(received))]
    assert content_of(chunks) == ["one ", "two "]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    fault = await server.wait_for(of_type("fault"))
    assert fault["kind"] == "drop" and fault["chunksSent"] == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_drop_mid_tool_call_arguments(
    server: ModelServer, client: httpx.AsyncClient, api: str
) -> None:
    args = {"path": "some/long/path/to/a/file.txt", "mode": "overwrite"}
    reply = {"chunks": ["a ", "b"], "toolCalls": [{"name": "write", "arguments": args}]}
    server.enqueue({**reply, "dropAfter": 3})
    path, body = (
        ("/v1/chat/completions", openai_body(stream=True))
        if api == "openai"
        else ("/v1/messages", anthropic_body(stream=True))
    )
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("POST", path, json=body) as resp:
            async for piece in resp.aiter_bytes():
                received += piece
    events = [json.loads(d) for _, d in parse_sse(bytes(received))]
    if api == "openai":
        pieces = [
            tc["function"]["arguments"]
            for e in events
            for tc in e["choices"][0]["delta"].get("tool_calls", [])
        ]
    else:
        pieces = [
            e["delta"]["partial_json"]
            for e in events
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
        ]
    partial = "".join(pieces)
    assert partial and json.dumps(args).startswith(partial)
    with pytest.raises(json.JSONDecodeError):
        json.loads(partial)

    # Even when dropAfter exceeds every chunk, a drop on a tool call cuts its JSON.
    server.enqueue({**reply, "dropAfter": 1000})
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post(path, json=body)
    fault = await server.wait_for(lambda e: e["type"] == "fault" and e["id"] == 2)
    assert fault["kind"] == "drop" and fault["chunksSent"] > 2


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_stall_after_then_client_leaves(
    server: ModelServer, client: httpx.AsyncClient, api: str
) -> None:
    server.enqueue({"text": "a b c d e f", "stallAfter": 2})
    path, body = (
        ("/v1/chat/completions", openai_body(stream=True))
        if api == "openai"
        else ("/v1/messages", anthropic_body(stream=True))
    )
    parser = SSEParser()
    texts: list[str] = []
    async with client.stream("POST", path, json=body) as resp:
        async for piece in resp.aiter_bytes():
            for _, data in parser.feed(piece):
                obj = json.loads(data)
                texts += content_of([obj]) if api == "openai" else text_deltas([obj])
            if len(texts) == 2:
                break
        stall = await server.wait_for(of_type("fault"))
        assert stall["kind"] == "stall" and stall["chunksSent"] == 2
    # Leaving the block closed the connection mid-response.
    gone = await server.wait_for(of_type("disconnect"))
    assert gone["chunksSent"] == 2 and gone["id"] == stall["id"]
    assert texts == ["a ", "b "]
    assert not [e for e in server.log if e["type"] == "complete"]


@pytest.mark.asyncio
async def test_stall_after_headers(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "never sent", "stallAfter": 0})
    async with client.stream("POST", "/v1/messages", json=anthropic_body(stream=True)) as resp:
        assert resp.status_code == 200
        await server.wait_for(of_type("fault"))
    gone = await server.wait_for(of_type("disconnect"))
    assert gone["chunksSent"] == 0
    assert not [e for e in server.log if e["type"] == "first_chunk"]


@pytest.mark.asyncio
async def test_disconnect_logged_when_client_closes_mid_stream(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    # A long chunk delay keeps the stream open; the watcher must notice the close.
    server.enqueue({"text": "one two three", "chunkDelay": 600})
    async with client.stream("POST", "/v1/chat/completions", json=openai_body(stream=True)) as resp:
        parser = SSEParser()
        got: list[str] = []
        async for piece in resp.aiter_bytes():
            for _, data in parser.feed(piece):
                got += content_of([json.loads(data)])
            if got:
                break
    gone = await server.wait_for(of_type("disconnect"))
    assert gone["chunksSent"] == 1
    # The server keeps serving after a client left.
    assert (await client.get("/v1/models")).status_code == 200


@pytest.mark.asyncio
@pytest.mark.parametrize("hold", [False, True], ids=["headers-at-once", "headers-held"])
async def test_hold_headers_until_the_first_chunk(
    server: ModelServer, client: httpx.AsyncClient, hold: bool
) -> None:
    """Held, the status line goes out with the first chunk (after ttft); otherwise
    at once. The server writes headers and first chunk without yielding, so the
    client sees the headers only once the first chunk is logged, if held."""
    server.set_hold_headers(hold)
    server.enqueue({"text": "late answer", "ttft": 0.5})
    async with client.stream("POST", "/v1/chat/completions", json=openai_body(stream=True)) as resp:
        assert resp.status_code == 200
        first = [e for e in server.log if e["type"] == "first_chunk"]
        assert bool(first) == hold
        chunks = parse_sse(await resp.aread())
    assert content_of([json.loads(d) for _, d in chunks if d != "[DONE]"]) == ["late ", "answer"]
    # A client that leaves during the ttft, headers held or not, is logged as a disconnect.
    server.enqueue({"text": "never", "ttft": 600})

    async def leave_during_ttft() -> None:
        async with client.stream("POST", "/v1/messages", json=anthropic_body(stream=True)):
            await asyncio.Event().wait()

    task = asyncio.create_task(leave_during_ttft())
    await server.wait_for(of_type("request", 2))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gone = await server.wait_for(of_type("disconnect"))
    assert gone["id"] == 2 and gone["chunksSent"] == 0


@pytest.mark.asyncio
async def test_disconnect_during_ttft(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "late", "ttft": 600})
    async with client.stream("POST", "/v1/messages", json=anthropic_body(stream=True)) as resp:
        assert resp.status_code == 200
    gone = await server.wait_for(of_type("disconnect"))
    assert gone["chunksSent"] == 0


@pytest.mark.asyncio
async def test_malformed_error_event(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "a b c", "malformed": "error_event"})
    resp = await client.post("/v1/messages", json=anthropic_body(stream=True))
    events = parse_sse(resp.content)
    names = [name for name, _ in events]
    assert names[-1] == "error"
    assert json.loads(events[-1][1])["error"]["type"] == "overloaded_error"
    assert "message_stop" not in names
    assert text_deltas([json.loads(d) for _, d in events[:-1]]) == ["a "]

    server.enqueue({"text": "a b c", "malformed": "error_event"})
    resp = await client.post("/v1/chat/completions", json=openai_body(stream=True))
    data = [json.loads(d) for _, d in parse_sse(resp.content)]
    assert data[-1]["error"]["type"] == "server_error"
    assert content_of(data[:-1]) == ["a "]
    fault = await server.wait_for(of_type("fault"))
    assert fault["kind"] == "malformed" and fault["malformed"] == "error_event"


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_malformed_bad_json(
    server: ModelServer, client: httpx.AsyncClient, path: str
) -> None:
    server.enqueue({"text": "a b c", "malformed": "bad_json"})
    body = openai_body(stream=True) if "chat" in path else anthropic_body(stream=True)
    resp = await client.post(path, json=body)
    bad = []
    for _, data in parse_sse(resp.content):
        if data == "[DONE]":
            continue
        try:
            json.loads(data)
        except json.JSONDecodeError:
            bad.append(data)
    assert len(bad) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_malformed_valid_variants(
    server: ModelServer, client: httpx.AsyncClient, api: str
) -> None:
    """comments_crlf, split_events and long_line are valid streams with odd framing."""
    text = "héllo wörld, ünïcode ✓ text"
    path, body = (
        ("/v1/chat/completions", openai_body(stream=True))
        if api == "openai"
        else ("/v1/messages", anthropic_body(stream=True))
    )

    def text_of(raw: bytes) -> str:
        objs = [json.loads(d) for _, d in parse_sse(raw) if d != "[DONE]"]
        return "".join(content_of(objs) if api == "openai" else text_deltas(objs))

    server.enqueue({"text": text, "malformed": "comments_crlf"})
    raw = (await client.post(path, json=body)).content
    assert b"\r\n\r\n" in raw and b"\n\n" not in raw.replace(b"\r\n", b"")
    assert re.search(rb"(^|\r\n):", raw)
    assert text_of(raw) == text

    server.enqueue({"text": text, "malformed": "split_events"})
    pieces: list[bytes] = []
    async with client.stream("POST", path, json=body) as resp:
        async for piece in resp.aiter_raw():
            pieces.append(piece)
    raw = b"".join(pieces)
    assert len(pieces) > len(parse_sse(raw))
    assert any(not p.endswith(b"\n\n") for p in pieces)
    assert text_of(raw) == text

    server.enqueue({"text": text, "malformed": "long_line"})
    raw = (await client.post(path, json=body)).content
    assert max(map(len, raw.split(b"\n"))) > 1 << 20
    assert text_of(raw) == text + "x" * (1 << 20)


@pytest.mark.asyncio
async def test_non_stream_faults(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "x y", "dropAfter": 1})
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post("/v1/chat/completions", json=openai_body())
    server.enqueue({"text": "x y", "malformed": "bad_json"})
    resp = await client.post("/v1/messages", json=anthropic_body())
    with pytest.raises(json.JSONDecodeError):
        json.loads(resp.content)
    server.enqueue({"text": "x y", "stallAfter": 0})
    async with client.stream("POST", "/v1/messages", json=anthropic_body()) as resp:
        assert resp.status_code == 200
        await server.wait_for(lambda e: e["type"] == "fault" and e["kind"] == "stall")
    await server.wait_for(of_type("disconnect"))


# --- scripting, purposes, rules --------------------------------------------------------


@pytest.mark.asyncio
async def test_queue_per_purpose_and_rules(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.enqueue({"text": "recall one"}, purpose="recall")
    server.add_rule("weather", {"text": "sunny"}, times=1)
    server.add_rule("weather", {"text": "rainy"})
    server.add_rule("topic", {"text": "extracted"}, purpose="extract")

    async def ask(text: str, purpose: str | None = None) -> str:
        headers = {"x-agentd-purpose": purpose} if purpose else None
        chunks, _ = await openai_chunks(client, openai_body(text), headers)
        return "".join(content_of(chunks))

    assert await ask("anything", "recall") == "recall one"
    assert await ask("anything", "recall") == "Echo: anything"
    assert await ask("how is the weather?") == "sunny"
    assert await ask("how is the weather?") == "rainy"
    assert await ask("a topic", "extract") == "extracted"
    assert await ask("a topic") == "Echo: a topic"
    assert [r["purpose"] for r in server.requests("recall")] == ["recall", "recall"]
    assert [r["replySource"] for r in server.requests("main")] == ["rule", "rule", "default"]


@pytest.mark.asyncio
async def test_latency_applies_to_purpose(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.set_latency("recall", 600)
    headers = {"x-agentd-purpose": "recall"}
    async with client.stream(
        "POST", "/v1/messages", json=anthropic_body(stream=True), headers=headers
    ) as resp:
        assert resp.status_code == 200
    gone = await server.wait_for(of_type("disconnect"))
    assert gone["chunksSent"] == 0
    # Other purposes are not slowed.
    assert text_deltas(await anthropic_events(client, anthropic_body("x"))) == ["Echo: ", "x"]


def test_invalid_replies_are_refused() -> None:
    bad: dict[str, Any]
    for bad in (
        {"txt": "typo"},
        {"toolCalls": [{"arguments": {}}]},
        {"stopReason": "done"},
        {"ttft": -1},
        {"malformed": "weird"},
        {"status": 200},
        {"chunks": "abc"},
    ):
        with pytest.raises(ValueError):
            parse_reply(bad)
    server = ModelServer()
    with pytest.raises(ValueError):
        server.add_rule("x", {"text": "y"}, times=0)
    with pytest.raises(ValueError):
        server.set_latency("main", -1)


# --- the default responder -----------------------------------------------------------------


@pytest.mark.asyncio
async def test_default_echo_ignores_system_reminders(client: httpx.AsyncClient) -> None:
    text = "<system-reminder>\nmemory: likes tabs\n</system-reminder>\nwhat is up"
    chunks, _ = await openai_chunks(client, openai_body(text))
    assert "".join(content_of(chunks)) == "Echo: what is up"
    body = anthropic_body()
    body["messages"][0]["content"] = [
        {"type": "text", "text": "<system-reminder>\nrecalled\n</system-reminder>"},
        {"type": "text", "text": "hello there"},
    ]
    assert "".join(text_deltas(await anthropic_events(client, body))) == "Echo: hello there"


@pytest.mark.asyncio
async def test_default_tool_directives(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.set_default_arguments("list_dir", {"path": "."})
    text = 'Let me look.\n!tool read_file {"path": "a.txt"}\n!tool list_dir'
    events = await anthropic_events(client, anthropic_body(text))
    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in blocks] == ["text", "tool_use", "tool_use"]
    assert [b["name"] for b in blocks[1:]] == ["read_file", "list_dir"]
    partial: dict[int, str] = {}
    for e in events:
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
            partial[e["index"]] = partial.get(e["index"], "") + e["delta"]["partial_json"]
    assert json.loads(partial[1]) == {"path": "a.txt"}
    assert json.loads(partial[2]) == {"path": "."}
    assert "".join(text_deltas(events)) == "Echo: Let me look."
    assert events[-2]["delta"]["stop_reason"] == "tool_use"

    chunks, _ = await openai_chunks(client, openai_body("!chunks 5"))
    assert content_of(chunks) == ["w1 ", "w2 ", "w3 ", "w4 ", "w5"]

    resp = await client.post("/v1/chat/completions", json=openai_body("!status 503"))
    assert resp.status_code == 503 and resp.json()["error"]["type"] == "server_error"


def test_default_timing_directives() -> None:
    view = RequestView("openai", "m", True, False, None, "!ttft 2.5\n!delay 0.25\nhi", None, 2)
    reply = default_reply(view)
    assert (reply.ttft, reply.chunk_delay, reply.text) == (2.5, 0.25, "Echo: hi")


@pytest.mark.asyncio
async def test_default_replies_to_tool_results(client: httpx.AsyncClient) -> None:
    long_result = "R" * 150 + "S" * 150
    messages = [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "r", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": long_result},
        {"role": "user", "content": "<system-reminder>x</system-reminder>"},
    ]
    chunks, _ = await openai_chunks(client, {"model": "m", "messages": messages})
    assert "".join(content_of(chunks)) == "Tool result received: " + long_result[:200]

    body = anthropic_body()
    call = {"type": "tool_use", "id": "t1", "name": "r", "input": {}}
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "file body"}],
    }
    reminder = {"type": "text", "text": "<system-reminder>memo</system-reminder>"}
    body["messages"] += [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result, reminder]},
    ]
    events = await anthropic_events(client, body)
    assert "".join(text_deltas(events)) == "Tool result received: file body"


@pytest.mark.asyncio
async def test_default_forced_tool(server: ModelServer, client: httpx.AsyncClient) -> None:
    server.set_default_arguments("save_memory", {"topics": ["a"]})
    body = openai_body(
        "extract this",
        tools=[{"type": "function", "function": {"name": "save_memory", "parameters": {}}}],
        tool_choice={"type": "function", "function": {"name": "save_memory"}},
    )
    completion = (await client.post("/v1/chat/completions", json=body)).json()
    call = completion["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "save_memory"
    assert json.loads(call["function"]["arguments"]) == {"topics": ["a"]}

    body = anthropic_body("!tool other {}", tool_choice={"type": "tool", "name": "pick"})
    message = (await client.post("/v1/messages", json=body)).json()
    assert [(b["type"], b["name"], b["input"]) for b in message["content"]] == [
        ("tool_use", "pick", {})
    ]


# --- control endpoints -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_control_endpoints(server: ModelServer, client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/_agentd/enqueue", json={"purpose": "main", "replies": [{"text": "one"}, {"text": "two"}]}
    )
    assert resp.json() == {"ok": True, "queued": 2}
    await client.post("/_agentd/enqueue", json={"purpose": "recall", "reply": {"text": "r"}})
    await client.post("/_agentd/rule", json={"match": "ping", "reply": {"text": "pong"}})
    await client.post("/_agentd/latency", json={"purpose": "extract", "seconds": 0})
    await client.post("/_agentd/default_arguments", json={"tool": "t", "arguments": {"a": 1}})

    async def ask(text: str, purpose: str = "main") -> str:
        headers = {"x-agentd-purpose": purpose}
        chunks, _ = await openai_chunks(client, openai_body(text), headers)
        return "".join(content_of(chunks))

    assert [await ask("x"), await ask("x"), await ask("ping?")] == ["one", "two", "pong"]
    assert await ask("x", "recall") == "r"

    log = (await client.get("/_agentd/log")).json()
    assert log == server.log and [e["id"] for e in log if e["type"] == "request"] == [1, 2, 3, 4]

    for path, payload in [
        ("/_agentd/enqueue", {"reply": {"bogus": 1}}),
        ("/_agentd/enqueue", {"replies": [{"text": "ok"}, {"ttft": "soon"}]}),
        ("/_agentd/rule", {"reply": {"text": "no match given"}}),
        ("/_agentd/latency", {"purpose": "main", "seconds": -2}),
    ]:
        resp = await client.post(path, json=payload)
        assert resp.status_code == 400 and resp.json()["error"]
    assert (await client.post("/_agentd/enqueue", content=b"{nope")).status_code == 400
    assert (await client.get("/_agentd/enqueue")).status_code == 405
    assert (await client.post("/_agentd/nothing", json={})).status_code == 404
    # The refused batch above enqueued nothing.
    assert await ask("ping") == "pong"

    assert (await client.post("/_agentd/reset")).json() == {"ok": True}
    assert (await client.get("/_agentd/log")).json() == []
    assert await ask("ping") == "Echo: ping"


# --- the log ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_wait_for_future_entry_and_timeout(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    waiter = asyncio.create_task(server.wait_for(of_type("complete")))
    await client.post("/v1/messages", json=anthropic_body())
    entry = await waiter
    assert entry["id"] == 1
    # Past entries match too.
    assert (await server.wait_for(of_type("request")))["id"] == 1
    with pytest.raises(TimeoutError):
        await server.wait_for(of_type("never"), timeout=0.01)


@pytest.mark.asyncio
async def test_log_file_has_json_lines(
    server: ModelServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    await client.post("/v1/chat/completions", json=openai_body())
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["type"] for e in entries] == ["request", "first_chunk", "complete"]
    assert entries[0]["headers"]["authorization"] == "<redacted>"
    assert "sk-secret" not in "".join(lines)


# --- HTTP robustness -------------------------------------------------------------------------


async def raw_exchange(server: ModelServer, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(data)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.asyncio
async def test_bad_requests(server: ModelServer, client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/chat/completions", content=b"{not json")
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    resp = await client.post("/v1/messages", json={"model": "m", "messages": []})
    assert resp.status_code == 400 and resp.json()["type"] == "error"
    resp = await client.post(
        "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
    )
    assert resp.status_code == 400 and "max_tokens" in resp.json()["error"]["message"]
    assert (await client.get("/v1/nothing")).status_code == 404
    assert (await client.get("/v1/messages")).status_code == 405

    assert (await raw_exchange(server, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
    assert (await raw_exchange(server, b"GET / HTTP/2.0\r\n\r\n")).startswith(b"HTTP/1.1 505 ")
    chunked = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    assert (await raw_exchange(server, chunked)).startswith(b"HTTP/1.1 501 ")
    # A client that leaves inside a request body costs nothing.
    partial = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"
    await raw_exchange_then_close(server, partial)
    assert not server.requests()
    assert (await client.get("/v1/models")).status_code == 200


async def raw_exchange_then_close(server: ModelServer, data: bytes) -> None:
    _, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(data)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


@pytest.mark.asyncio
async def test_keep_alive_and_pipelining(server: ModelServer) -> None:
    body = json.dumps(anthropic_body("first")).encode()
    stream_body = json.dumps(anthropic_body("second", stream=True)).encode()
    head = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n"
    last = head.replace("host: x\r\n", "host: x\r\nconnection: close\r\n")
    # Both requests in one write: the second is read while the first is answered.
    data = head.format(len(body)).encode() + body + last.format(len(stream_body)).encode()
    raw = await raw_exchange(server, data + stream_body)
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 ") and b"connection: keep-alive" in first
    match = re.search(rb"content-length: (\d+)", first)
    assert match is not None
    length = int(match.group(1))
    assert json.loads(rest[:length])["content"][0]["text"] == "Echo: first"
    second = rest[length:]
    assert second.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in second
    assert b"connection: close" in second and second.endswith(b"0\r\n\r\n")
    assert b"Echo: " in second and b"message_stop" in second
    assert len(server.requests()) == 2


@pytest.mark.asyncio
async def test_http10_stream_ends_with_close(server: ModelServer) -> None:
    body = json.dumps(openai_body("old", stream=True)).encode()
    head = f"POST /v1/chat/completions HTTP/1.0\r\ncontent-length: {len(body)}\r\n\r\n"
    raw = await raw_exchange(server, head.encode() + body)
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in first and b"connection: close" in first
    assert rest.endswith(b"data: [DONE]\n\n")
    assert content_of([json.loads(d) for _, d in parse_sse(rest) if d != "[DONE]"]) == [
        "Echo: ",
        "old",
    ]


@pytest.mark.asyncio
async def test_stop_ends_stalled_streams(tmp_path: Path) -> None:
    server = ModelServer()
    await server.start()
    server.enqueue({"text": "x", "stallAfter": 0})
    body = anthropic_body(stream=True)
    async with (
        httpx.AsyncClient(base_url=server.base_url) as client,
        client.stream("POST", "/v1/messages", json=body) as resp,
    ):
        await server.wait_for(of_type("fault"))
        await server.stop()
        with pytest.raises(httpx.RemoteProtocolError):
            await resp.aread()


# --- loopback only, the thread helper, the command line ----------------------------------------


def test_non_loopback_host_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::"):
        with pytest.raises(ValueError, match="loopback"):
            ModelServer(host)
    assert ModelServer("localhost").base_url.startswith("http://127.0.0.1:")
    assert ModelServer("::1").base_url.startswith("http://[::1]:")
    assert main(["--host", "0.0.0.0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "loopback" in captured.err


def test_model_server_thread() -> None:
    with ModelServerThread() as srv:
        srv.enqueue({"text": "from a thread"})
        with httpx.Client(base_url=srv.openai_base_url) as client:
            completion = client.post("/chat/completions", json=openai_body()).json()
        assert completion["choices"][0]["message"]["content"] == "from a thread"
        assert srv.wait_for(of_type("complete"))["id"] == 1
        assert [e["type"] for e in srv.log] == ["request", "first_chunk", "complete"]
        assert len(srv.requests("main")) == 1
        srv.reset()
        assert srv.log == []
        with pytest.raises(ValueError):
            srv.enqueue({"nope": 1})
        with pytest.raises(TimeoutError):
            srv.wait_for(of_type("never"), timeout=0.01)


@pytest.mark.asyncio
async def test_cli_prints_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    entries = [{"reply": {"text": "scripted"}}, {"purpose": "recall", "reply": {}}]
    script.write_text(json.dumps(entries))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd.testing.model_server", "--port", "0",
        "--script", str(script), "--latency", "recall=0", "--log", str(tmp_path / "l.jsonl"),
        "--hold-headers",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        info = json.loads(await proc.stdout.readline())
        assert info["url"] == f"http://127.0.0.1:{info['port']}"
        async with httpx.AsyncClient(base_url=info["url"]) as client:
            completion = (await client.post("/v1/chat/completions", json=openai_body())).json()
            assert completion["choices"][0]["message"]["content"] == "scripted"
        proc.send_signal(signal.SIGTERM)
        _, err = await proc.communicate()
        assert proc.returncode == 0, err
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize(
    "argv",
    [["--latency", "recall"], ["--latency", "recall=soon"], ["--script", "/nonexistent.json"]],
)
def test_cli_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err


# --- the context window and the stand-in summariser -------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_a_request_over_the_window_is_refused_as_the_api_refuses_it(
    server: ModelServer, client: httpx.AsyncClient, path: str
) -> None:
    openai = path.endswith("completions")
    make = openai_body if openai else anthropic_body
    server.set_context_window(500)
    server.enqueue({"text": "kept for the request that fits"})
    long = make("x" * 4000, max_tokens=16)
    resp = await client.post(path, json=long)
    assert resp.status_code == 400
    error = resp.json()
    # The server's count: a quarter of the JSON of messages, tools (and system).
    used = (len(json.dumps(long["messages"])) + len("[]") + (0 if openai else len('""'))) // 4
    if openai:
        assert error["error"]["code"] == "context_length_exceeded"
        assert error["error"]["type"] == "invalid_request_error"
        assert "maximum context length is 500 tokens" in error["error"]["message"]
        assert f"({used} in the messages, 16 in the completion)" in error["error"]["message"]
    else:
        assert error["type"] == "error"
        assert error["error"] == {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {used} tokens > 500 maximum",
        }
    # Nothing scripted was used up by the refused request.
    resp = await client.post(path, json=make("short", max_tokens=16))
    assert resp.status_code == 200 and "kept for the request" in resp.text
    fault = next(e for e in server.log if e["type"] == "fault")
    assert (fault["kind"], fault["status"], fault["window"]) == ("overflow", 400, 500)
    assert server.requests()[0]["replySource"] == "overflow"


@pytest.mark.asyncio
async def test_openai_counts_the_completion_room_against_the_window(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.set_context_window(500)
    resp = await client.post("/v1/chat/completions", json=openai_body("hi", max_tokens=495))
    assert resp.status_code == 400
    resp = await client.post("/v1/chat/completions", json=openai_body("hi", max_tokens=400))
    assert resp.status_code == 200
    # Anthropic, when input and max_tokens together are over the window:
    resp = await client.post("/v1/messages", json=anthropic_body("hi", max_tokens=495))
    assert resp.status_code == 400
    assert "input length and `max_tokens` exceed context limit" in resp.text


@pytest.mark.asyncio
async def test_the_window_is_reported_by_the_model_list_and_set_over_http(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    resp = await client.post("/_agentd/context_window", json={"tokens": 8192})
    assert resp.status_code == 200
    models = (await client.get("/v1/models")).json()["data"]
    assert all(m["context_length"] == m["max_model_len"] == 8192 for m in models)
    resp = await client.post("/_agentd/context_window", json={"tokens": 0})
    assert resp.status_code == 400
    await client.post("/_agentd/context_window", json={"tokens": None})
    assert "context_length" not in (await client.get("/v1/models")).json()["data"][0]


@pytest.mark.asyncio
async def test_compact_requests_get_the_stand_in_summary(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    text = (
        "<previous-summary>\n1. Never deploy on Fridays.\n</previous-summary>\n\n<conversation>\n"
        "<turn>\n<user>Hello there. Always use tabs in Makefiles.\nThe build takes long."
        "</user>\n<assistant>Fine.</assistant>\n"
        '<tool-call name="read_file">{"path": "Makefile"}</tool-call>\n'
        '<tool-result name="run_command" error="true">make: *** [all] Error 2\nmore'
        "</tool-result>\n</turn>\n</conversation>\n\nCall record_summary now."
    )
    body = openai_body(
        text,
        tools=[{"type": "function", "function": {"name": "record_summary", "parameters": {}}}],
        tool_choice={"type": "function", "function": {"name": "record_summary"}},
    )
    resp = await client.post(
        "/v1/chat/completions", json=body, headers={"x-agentd-purpose": "compact"}
    )
    call = resp.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "record_summary"
    args = json.loads(call["arguments"])
    # Only the new conversation's constraints, verbatim; the previous ones are the daemon's.
    assert args["constraints"] == ["Always use tabs in Makefiles."]
    assert args["files"] == ["Makefile (read_file)"]
    assert args["errors"] == ["run_command: make: *** [all] Error 2"]
    assert args["revoked"] == []
    assert server.requests("compact")[0]["replySource"] == "standin"
    # A main request forcing a tool still gets the plain default.
    resp = await client.post("/v1/chat/completions", json=body)
    assert (
        json.loads(resp.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
        == {}
    )


# --- images billed by their pixels --------------------------------------------------------------


def _png_b64(width: int, height: int, padding: int) -> str:
    """A PNG header of that size and `padding` bytes after it: the server reads
    only the header, and the padding makes the base64 long, as a photo's is."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = b"IHDR" + header
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + body + struct.pack(">I", zlib.crc32(body))
    return base64.b64encode(png + b"\x07" * padding).decode()


def _with_image(api: str, data: str, detail: str | None = None) -> dict[str, Any]:
    if api == "openai":
        image: dict[str, Any] = {"url": f"data:image/png;base64,{data}"}
        if detail is not None:
            image["detail"] = detail
        part: dict[str, Any] = {"type": "image_url", "image_url": image}
        text = {"type": "text", "text": "look"}
        return openai_body(max_tokens=16) | {
            "messages": [{"role": "user", "content": [text, part]}]
        }
    source = {"type": "base64", "media_type": "image/png", "data": data}
    content = [{"type": "text", "text": "look"}, {"type": "image", "source": source}]
    return anthropic_body(max_tokens=16) | {"messages": [{"role": "user", "content": content}]}


def _without_image(api: str) -> dict[str, Any]:
    content = [{"type": "text", "text": "look"}]
    make = openai_body if api == "openai" else anthropic_body
    return make(max_tokens=16) | {"messages": [{"role": "user", "content": content}]}


async def _input_tokens(client: httpx.AsyncClient, api: str, body: dict[str, Any]) -> int:
    path = "/v1/chat/completions" if api == "openai" else "/v1/messages"
    resp = await client.post(path, json=body)
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    return int(usage["prompt_tokens"] if api == "openai" else usage["input_tokens"])


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("api", "detail", "billed"),
    [("openai", None, 1105), ("openai", "low", 85), ("anthropic", None, 1600)],
)
async def test_an_image_is_billed_by_its_pixels_as_the_api_counts_them(
    server: ModelServer, client: httpx.AsyncClient, api: str, detail: str | None, billed: int
) -> None:
    """A 1920x1080 screenshot whose base64 is 100 KB (25,000 tokens as text):
    OpenAI bills 1105 (6 tiles; 85 at low detail), Anthropic 1600, in the
    usage and in the count a context window refuses by."""
    data = _png_b64(1920, 1080, 75_000)
    assert len(data) > 100_000
    plain = await _input_tokens(client, api, _without_image(api))
    with_image = await _input_tokens(client, api, _with_image(api, data, detail))
    # The image part's own JSON (its type, the data URL's head) is text.
    assert billed <= with_image - plain <= billed + 30
    # The window's count too: 4,000 tokens hold the screenshot.
    server.set_context_window(4_000)
    assert await _input_tokens(client, api, _with_image(api, data, detail)) == with_image
