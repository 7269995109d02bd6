"""Wire formats of the OpenAI Chat Completions and Anthropic Messages APIs.

Streams are built as a list of `Frame`s (SSE events, already encoded) before
anything is sent, so that faults (drop, stall, malformed events) are applied
the same way to both APIs by cutting or rewriting that list. A frame marked
`content` carries one content chunk: a piece of thinking, of text, or of a
tool call's arguments; those are what `dropAfter`/`stallAfter` count.

The shapes follow the public API references, including fields clients
ignore (`logprobs`, `system_fingerprint`, `stop_sequence`), so that real client
libraries accept them.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, replace
from typing import Any

from agentd.testing.model_server.http import reason_phrase
from agentd.testing.model_server.replies import Api, JSONDict, Output

MODELS = ("agentd-local", "agentd-local-small")
_OPENAI_FINISH = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
# A made-up but well-formed signature: clients keep it and send it back verbatim.
_SIGNATURE = "YWdlbnRkLWxvY2FsLXRoaW5raW5nLXNpZ25hdHVyZQ=="


@dataclass(slots=True, frozen=True)
class Frame:
    data: bytes
    content: bool = False


_SURROGATE = re.compile("[\ud800-\udfff]")


def _dumps(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    if _SURROGATE.search(text):
        # A scripted lone surrogate goes out as its JSON escape, as a server
        # written in JavaScript (UTF-16 strings) sends one.
        return json.dumps(obj, separators=(",", ":"))
    return text


def _data(obj: Any, *, content: bool = False) -> Frame:
    return Frame(f"data: {_dumps(obj)}\n\n".encode(), content)


def _event(obj: JSONDict, *, content: bool = False) -> Frame:
    return Frame(f"event: {obj['type']}\ndata: {_dumps(obj)}\n\n".encode(), content)


# --- OpenAI Chat Completions -----------------------------------------------------------


def openai_ids(request_id: int) -> tuple[str, int]:
    return f"chatcmpl-agentd{request_id:08d}", int(time.time())


def _openai_usage(out: Output) -> JSONDict:
    return {
        "prompt_tokens": out.input_tokens,
        "completion_tokens": out.output_tokens,
        "total_tokens": out.input_tokens + out.output_tokens,
        # Cached tokens are part of prompt_tokens.
        "prompt_tokens_details": {"cached_tokens": out.cache_read, "audio_tokens": 0},
    }


def _anthropic_usage(out: Output, output_tokens: int) -> JSONDict:
    # input_tokens is what was neither read from nor written to the cache.
    return {
        "input_tokens": max(0, out.input_tokens - out.cache_read - out.cache_write),
        "cache_creation_input_tokens": out.cache_write,
        "cache_read_input_tokens": out.cache_read,
        "output_tokens": output_tokens,
    }


def openai_stream(out: Output, *, model: str, request_id: int, include_usage: bool) -> list[Frame]:
    completion_id, created = openai_ids(request_id)

    def chunk(delta: JSONDict, finish: str | None = None, *, content: bool = False) -> Frame:
        obj: JSONDict = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_agentd",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            # With include_usage every chunk carries `usage: null` but the last.
            obj["usage"] = None
        return _data(obj, content=content)

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [chunk({"reasoning_content": t}, content=True) for t in out.thinking]
    frames += [chunk({"content": t}, content=True) for t in out.text]
    for index, call in enumerate(out.tool_calls):
        start = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        frames.append(chunk({"tool_calls": [start]}))
        for piece in call.fragments:
            delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            frames.append(chunk(delta, content=True))
    frames.append(chunk({}, _OPENAI_FINISH[out.stop_reason]))
    if include_usage:
        frames.append(
            _data(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": "fp_agentd",
                    "choices": [],
                    "usage": _openai_usage(out),
                }
            )
        )
    frames.append(Frame(b"data: [DONE]\n\n"))
    return frames


def openai_body(out: Output, *, model: str, request_id: int) -> JSONDict:
    completion_id, created = openai_ids(request_id)
    text = "".join(out.text)
    message: JSONDict = {"role": "assistant", "content": text or None, "refusal": None}
    if out.thinking:
        message["reasoning_content"] = "".join(out.thinking)
    if out.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in out.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_agentd",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _OPENAI_FINISH[out.stop_reason],
            }
        ],
        "usage": _openai_usage(out),
    }


# --- Anthropic Messages ----------------------------------------------------------------


def _message_id(request_id: int) -> str:
    return f"msg_agentd{request_id:08d}"


def _parsed_input(arguments: str) -> Any:
    # Arguments scripted as invalid JSON cannot be an object in a whole message;
    # they are passed through as a string, which is what the script asked for.
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def anthropic_stream(out: Output, *, model: str, request_id: int) -> list[Frame]:
    start_message: JSONDict = {
        "id": _message_id(request_id),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(out, 1),
    }
    frames = [
        _event({"type": "message_start", "message": start_message}),
        _event({"type": "ping"}),
    ]
    index = 0

    def block(start: JSONDict, deltas: list[JSONDict], tail: list[JSONDict]) -> None:
        nonlocal index
        frames.append(
            _event({"type": "content_block_start", "index": index, "content_block": start})
        )
        for delta in deltas:
            frames.append(
                _event(
                    {"type": "content_block_delta", "index": index, "delta": delta}, content=True
                )
            )
        for delta in tail:
            frames.append(_event({"type": "content_block_delta", "index": index, "delta": delta}))
        frames.append(_event({"type": "content_block_stop", "index": index}))
        index += 1

    if out.thinking:
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [{"type": "thinking_delta", "thinking": t} for t in out.thinking],
            [{"type": "signature_delta", "signature": out.signature or _SIGNATURE}],
        )
    if out.redacted:
        block({"type": "redacted_thinking", "data": out.redacted}, [], [])
    if out.text:
        block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": t} for t in out.text],
            [],
        )
    for call in out.tool_calls:
        block(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in call.fragments],
            [],
        )
    frames.append(
        _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": out.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": out.output_tokens},
            }
        )
    )
    frames.append(_event({"type": "message_stop"}))
    return frames


def anthropic_body(out: Output, *, model: str, request_id: int) -> JSONDict:
    content: list[JSONDict] = []
    if out.thinking:
        signature = out.signature or _SIGNATURE
        content.append(
            {"type": "thinking", "thinking": "".join(out.thinking), "signature": signature}
        )
    if out.redacted:
        content.append({"type": "redacted_thinking", "data": out.redacted})
    if out.text:
        content.append({"type": "text", "text": "".join(out.text)})
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _parsed_input(c.arguments)}
        for c in out.tool_calls
    ]
    return {
        "id": _message_id(request_id),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": out.stop_reason,
        "stop_sequence": None,
        "usage": _anthropic_usage(out, out.output_tokens),
    }


# --- errors and faults -----------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_TYPES = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def error_body(
    api: Api,
    status: int,
    message: str | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> JSONDict:
    """The error object each API sends with an error status."""
    text = message or f"{reason_phrase(status)} (scripted by the agentd model server)"
    if api == "anthropic":
        kind = _ANTHROPIC_ERROR_TYPES.get(
            status, "invalid_request_error" if status < 500 else "api_error"
        )
        return {"type": "error", "error": {"type": kind, "message": text}}
    fallback = ("invalid_request_error", code) if status < 500 else ("server_error", code)
    kind, known_code = _OPENAI_ERROR_TYPES.get(status, fallback)
    return {"error": {"message": text, "type": kind, "param": param, "code": known_code}}


def stream_error_frame(api: Api) -> Frame:
    """An error reported inside a 200 stream, as each API does when it fails mid-way."""
    if api == "anthropic":
        return _event(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    return _data(
        {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    )


def bad_json_frame(api: Api) -> Frame:
    # A truncated object: the kind of line a broken proxy produces.
    if api == "anthropic":
        return Frame(b'event: content_block_delta\ndata: {"type":"content_block_delta","ind\n\n')
    return Frame(b'data: {"id":"chatcmpl-broken","choices":[{"delta":{"cont\n\n')


def comments_crlf(frames: list[Frame]) -> list[Frame]:
    """The same events with `:` comment lines and CRLF line endings."""
    # JSON escapes newlines inside strings, so every b"\n" here ends an SSE line.
    out = [Frame(b": agentd model server stream\r\n\r\n")]
    for frame in frames:
        data = (b": keep-alive\n" + frame.data).replace(b"\n", b"\r\n")
        out.append(replace(frame, data=data))
    return out


# Odd piece sizes, so that splits land inside field names, JSON, UTF-8 sequences
# and line endings rather than on event boundaries.
SPLIT_SIZES = (7, 1, 13, 3, 29, 5, 11)


def split_odd(data: bytes) -> list[bytes]:
    pieces: list[bytes] = []
    pos = turn = 0
    while pos < len(data):
        size = SPLIT_SIZES[turn % len(SPLIT_SIZES)]
        pieces.append(data[pos : pos + size])
        pos += size
        turn += 1
    return pieces


def models_body(context_window: int | None = None) -> JSONDict:
    """A model list both OpenAI and Anthropic clients can read; with a
    context window, each model reports it as OpenRouter and vLLM do."""
    created = 1_700_000_000
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "agentd",
            "type": "model",
            "display_name": name,
            "created_at": "2023-11-14T22:13:20Z",
            **(
                {"context_length": context_window, "max_model_len": context_window}
                if context_window
                else {}
            ),
        }
        for name in MODELS
    ]
    return {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": MODELS[0],
        "last_id": MODELS[-1],
    }
