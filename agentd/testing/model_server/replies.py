"""Scripted replies for the local model server, and the default responder.

A reply is written as a JSON-able dict with camelCase keys (see
`parse_reply`), so that tests in this process and scripts in other processes
(through the control endpoints) describe replies the same way. Parsing is
strict: an unknown key is a typo in a test, and failing at `enqueue` time
points at it far better than a reply that silently ignores it.

`inspect_request` reads what the server needs from an OpenAI or Anthropic
request body; `default_reply` answers when nothing was scripted.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentd.testing.model_server.images import image_chars

Api = Literal["openai", "anthropic"]
JSONDict = dict[str, Any]

STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "refusal")
MALFORMED_KINDS = ("error_event", "bad_json", "comments_crlf", "split_events", "long_line")
LONG_LINE_BYTES = 1 << 20


class BadRequest(Exception):
    """The request body is not one the real API would accept (answered with 400).
    `param` and `code` fill OpenAI's error object."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(slots=True, frozen=True)
class ScriptedToolCall:
    name: str
    # A dict is sent as JSON; a string is sent verbatim (to script invalid JSON);
    # None takes the arguments set with `set_default_arguments` when answering.
    arguments: JSONDict | str | None = None
    id: str | None = None


@dataclass(slots=True, frozen=True)
class Reply:
    text: str = ""
    chunks: tuple[str, ...] | None = None
    thinking: str = ""
    # Anthropic: a redacted thinking block whose (opaque) data hides this text.
    redacted_thinking: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    stop_reason: str | None = None
    ttft: float = 0.0
    chunk_delay: float = 0.0
    # input, output, cache read, cache write (the last two 0 unless scripted).
    usage: tuple[int, int, int, int] | None = None
    status: int | None = None
    retry_after: str | None = None
    error_body: Any = None
    drop_after: int | None = None
    stall_after: int | None = None
    # Close the connection once the request is read, before any byte of an
    # answer: what a client sees when a server's keep-alive timeout closes
    # the idle connection just as the request goes out on it.
    hang_up: bool = False
    # While a stream waits for its first token (`ttft`, headers sent), an SSE
    # comment every this many seconds (0: none), as proxies keep a quiet
    # stream alive.
    ping_every: float = 0.0
    malformed: str | None = None
    # For `malformed: error_event | bad_json`: how many content chunks precede it.
    error_after: int = 1


def _number(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"reply.{key} must be a number >= 0")
    return float(value)


def _count(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"reply.{key} must be an integer >= 0")
    return value


def _string(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"reply.{key} must be a string")
    return value


def _tool_call(item: Any) -> ScriptedToolCall:
    if not isinstance(item, Mapping):
        raise ValueError("reply.toolCalls items must be objects")
    unknown = set(item) - {"name", "arguments", "id"}
    if unknown:
        raise ValueError(f"unknown toolCalls keys: {sorted(unknown)}")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("reply.toolCalls[].name must be a non-empty string")
    arguments = item.get("arguments")
    if arguments is not None and not isinstance(arguments, dict | str):
        raise ValueError("reply.toolCalls[].arguments must be an object or a string")
    call_id = item.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise ValueError("reply.toolCalls[].id must be a string")
    return ScriptedToolCall(name, arguments, call_id)


_REPLY_KEYS = frozenset(
    {
        "text", "chunks", "thinking", "redactedThinking", "toolCalls", "stopReason", "ttft",
        "chunkDelay", "usage", "status", "retryAfter", "errorBody", "dropAfter", "stallAfter",
        "malformed", "errorAfter", "hangUp", "pingEvery",
    }
)  # fmt: skip


def parse_reply(data: Mapping[str, Any]) -> Reply:
    """Validate a reply dict; ValueError names the first bad key."""
    if not isinstance(data, Mapping):
        raise ValueError("a reply must be an object")
    unknown = set(data) - _REPLY_KEYS
    if unknown:
        raise ValueError(f"unknown reply keys: {sorted(unknown)}")
    chunks = data.get("chunks")
    if chunks is not None and (
        not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks)
    ):
        raise ValueError("reply.chunks must be a list of strings")
    tool_calls = data.get("toolCalls", [])
    if not isinstance(tool_calls, list):
        raise ValueError("reply.toolCalls must be a list")
    stop_reason = data.get("stopReason")
    if stop_reason is not None and stop_reason not in STOP_REASONS:
        raise ValueError(f"reply.stopReason must be one of {STOP_REASONS}")
    usage = data.get("usage")
    usage_four: tuple[int, int, int, int] | None = None
    if usage is not None:
        if not isinstance(usage, Mapping):
            raise ValueError("reply.usage must be an object")
        keys = ("input", "output", "cacheRead", "cacheWrite")
        unknown_usage = set(usage) - set(keys)
        if unknown_usage:
            raise ValueError(f"unknown reply.usage keys: {sorted(unknown_usage)}")
        four = [usage.get(k, 0) for k in keys]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in four):
            raise ValueError("reply.usage.input/output/cacheRead/cacheWrite must be integers >= 0")
        usage_four = (int(four[0]), int(four[1]), int(four[2]), int(four[3]))
    status = _count(data, "status")
    if status is not None and not 400 <= status <= 599:
        raise ValueError("reply.status must be an HTTP error status (400-599)")
    retry_after = data.get("retryAfter")
    if retry_after is not None:
        if isinstance(retry_after, bool) or not isinstance(retry_after, str | int | float):
            raise ValueError("reply.retryAfter must be a string or a number")
        retry_after = str(retry_after)
    malformed = data.get("malformed")
    if malformed is not None and malformed not in MALFORMED_KINDS:
        raise ValueError(f"reply.malformed must be one of {MALFORMED_KINDS}")
    error_after = _count(data, "errorAfter")
    hang_up = data.get("hangUp", False)
    if not isinstance(hang_up, bool):
        raise ValueError("reply.hangUp must be a boolean")
    return Reply(
        text=_string(data, "text"),
        chunks=tuple(chunks) if chunks is not None else None,
        thinking=_string(data, "thinking"),
        redacted_thinking=_string(data, "redactedThinking"),
        tool_calls=tuple(_tool_call(c) for c in tool_calls),
        stop_reason=stop_reason,
        ttft=_number(data, "ttft"),
        chunk_delay=_number(data, "chunkDelay"),
        usage=usage_four,
        status=status,
        retry_after=retry_after,
        error_body=data.get("errorBody"),
        drop_after=_count(data, "dropAfter"),
        stall_after=_count(data, "stallAfter"),
        malformed=malformed,
        error_after=1 if error_after is None else error_after,
        hang_up=hang_up,
        ping_every=_number(data, "pingEvery"),
    )


# --- what the server reads from a request ---------------------------------------------


@dataclass(slots=True)
class RequestView:
    api: Api
    model: str
    stream: bool
    include_usage: bool
    forced_tool: str | None
    last_user_text: str
    # Content of the tool result the conversation ends with, if it ends with one.
    tool_result: str | None
    input_chars: int
    # The answer's room the request asked for (0: not given).
    max_tokens: int = 0

    @property
    def input_tokens(self) -> int:
        """The server's count of the request's input: a quarter of its JSON,
        its images billed by their pixels (`images`)."""
        return max(1, self.input_chars // 4)


_REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def strip_reminders(text: str) -> str:
    return _REMINDER_RE.sub("", text).strip()


def _text_of(content: Any) -> str:
    """Text of an OpenAI/Anthropic content value: a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "\n".join(texts)
    return ""


def _require(body: JSONDict, api: Api) -> list[JSONDict]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: field required (a string)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: field required (a non-empty list)")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages.{i}: must be an object with a role")
        if api == "anthropic" and msg["role"] not in ("user", "assistant"):
            raise BadRequest(f"messages.{i}.role: must be 'user' or 'assistant'")
        content = msg.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                _check_image(api, part, f"messages.{i}.content.{j}")
    if api == "anthropic":
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest("max_tokens: field required (a positive integer)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream: must be a boolean")
    return messages


_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def _check_image(api: Api, part: JSONDict, where: str) -> None:
    """Image parts as the real APIs check them: the right shape for the API,
    a type it takes, base64 data."""
    data: Any
    if api == "openai":
        url = part.get("image_url", {}).get("url") if part.get("type") == "image_url" else None
        if not isinstance(url, str):
            raise BadRequest(f"{where}: an image part is {{type: image_url, image_url: {{url}}}}")
        head, _, data = url.partition(",")
        mime = head.removeprefix("data:").removesuffix(";base64")
        if not (head.startswith("data:") and head.endswith(";base64")) or mime not in _IMAGE_TYPES:
            raise BadRequest(f"{where}: image_url.url must be a base64 data URL of an image")
    else:
        source = part.get("source") if part.get("type") == "image" else None
        if not isinstance(source, dict) or source.get("type") != "base64":
            raise BadRequest(
                f"{where}: an image block is {{type: image, source: {{type: base64}}}}"
            )
        if source.get("media_type") not in _IMAGE_TYPES:
            raise BadRequest(f"{where}.source.media_type: must be one of {', '.join(_IMAGE_TYPES)}")
        data = source.get("data")
    try:
        base64.b64decode(str(data), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: the image data is not valid base64") from None


def _openai_view(body: JSONDict) -> RequestView:
    messages = _require(body, "openai")
    choice = body.get("tool_choice")
    forced = None
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            forced = function["name"]
    users = [m for m in messages if m["role"] == "user"]
    last_user = strip_reminders(_text_of(users[-1].get("content"))) if users else ""
    # Tool results, then user messages carrying only text the provider put after
    # them (reminders): the conversation still ends with a tool result.
    i = len(messages) - 1
    while (
        i >= 0
        and messages[i]["role"] == "user"
        and not strip_reminders(_text_of(messages[i].get("content"))).strip()
    ):
        i -= 1
    tool_result = None
    if i >= 0 and messages[i]["role"] == "tool":
        tool_result = _text_of(messages[i].get("content"))
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return RequestView(
        api="openai",
        model=body["model"],
        stream=bool(body.get("stream", False)),
        include_usage=include_usage,
        forced_tool=forced,
        last_user_text=last_user,
        tool_result=tool_result,
        input_chars=_billed_chars(messages, "openai") + len(json.dumps(body.get("tools", []))),
        max_tokens=_int(body.get("max_tokens") or body.get("max_completion_tokens")),
    )


def _billed_chars(messages: list[JSONDict], api: Api) -> int:
    """The characters of the messages' JSON, each image's counted as its
    API bills it (`images.image_chars`)."""
    text = json.dumps(messages)
    return len(text) + image_chars(messages, api, text)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _anthropic_view(body: JSONDict) -> RequestView:
    messages = _require(body, "anthropic")
    choice = body.get("tool_choice")
    forced = None
    if (
        isinstance(choice, dict)
        and choice.get("type") == "tool"
        and isinstance(choice.get("name"), str)
    ):
        forced = choice["name"]
    users = [m for m in messages if m["role"] == "user"]
    last_user = strip_reminders(_text_of(users[-1].get("content"))) if users else ""
    tool_result = None
    last = messages[-1]
    blocks = last.get("content")
    if last["role"] == "user" and isinstance(blocks, list):
        kinds = [b.get("type") if isinstance(b, dict) else None for b in blocks]
        # Reminders the provider put after the results leave the conversation
        # ending with a tool result; a prompt's own words (merged in after
        # results that closed a cut turn) do not.
        while (
            kinds
            and kinds[-1] == "text"
            and not strip_reminders(str(blocks[len(kinds) - 1].get("text", "")))
        ):
            kinds.pop()
        if kinds and kinds[-1] == "tool_result":
            tool_result = _text_of(blocks[len(kinds) - 1].get("content"))
    system = body.get("system", "")
    return RequestView(
        api="anthropic",
        model=body["model"],
        stream=bool(body.get("stream", False)),
        include_usage=True,
        forced_tool=forced,
        last_user_text=last_user,
        tool_result=tool_result,
        input_chars=_billed_chars(messages, "anthropic")
        + len(json.dumps(system))
        + len(json.dumps(body.get("tools", []))),
        max_tokens=_int(body.get("max_tokens")),
    )


def inspect_request(api: Api, body: Any) -> RequestView:
    """Validate a request body and read what the server needs; BadRequest if invalid."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return _openai_view(body) if api == "openai" else _anthropic_view(body)


# --- the default responder -------------------------------------------------------------

_TOOL_RE = re.compile(r"^!tool\s+(\S+)(?:\s+(.*))?$")
_NUMBER_RE = re.compile(r"^!(ttft|delay|chunks|status)\s+(\S+)\s*$")


def default_reply(view: RequestView) -> Reply:
    """The reply when nothing is queued and no rule matches (see the module docs)."""
    if view.forced_tool is not None:
        return Reply(tool_calls=(ScriptedToolCall(view.forced_tool),))
    if view.tool_result is not None:
        return Reply(text="Tool result received: " + view.tool_result[:200])
    calls: list[ScriptedToolCall] = []
    ttft = delay = 0.0
    chunks: int | None = None
    status: int | None = None
    rest: list[str] = []
    for line in view.last_user_text.splitlines():
        stripped = line.strip()
        tool = _TOOL_RE.match(stripped)
        number = _NUMBER_RE.match(stripped)
        if tool:
            raw = (tool.group(2) or "").strip()
            arguments: JSONDict | str | None = None
            if raw:
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    parsed = None
                # Text that is not a JSON object is sent verbatim, which lets a
                # prompt script a model that emits invalid tool arguments.
                arguments = parsed if isinstance(parsed, dict) else raw
            calls.append(ScriptedToolCall(tool.group(1), arguments))
            continue
        if number:
            kind, value = number.groups()
            try:
                amount = float(value)
            except ValueError:
                amount = math.nan
            if math.isfinite(amount) and amount >= 0:
                if kind == "ttft":
                    ttft = amount
                elif kind == "delay":
                    delay = amount
                elif kind == "chunks" and amount.is_integer():
                    chunks = int(amount)
                elif kind == "status" and amount.is_integer() and 400 <= amount <= 599:
                    status = int(amount)
                else:
                    rest.append(line)
                continue
        rest.append(line)
    remaining = "\n".join(rest).strip()
    if chunks is not None:
        text = " ".join(f"w{i}" for i in range(1, chunks + 1))
    elif calls and not remaining:
        text = ""
    else:
        text = f"Echo: {remaining}"
    return Reply(text=text, tool_calls=tuple(calls), ttft=ttft, chunk_delay=delay, status=status)


# --- a reply made concrete for one request ---------------------------------------------


@dataclass(slots=True)
class OutToolCall:
    id: str
    name: str
    arguments: str  # the JSON text, exactly as streamed
    fragments: list[str]


@dataclass(slots=True)
class Output:
    thinking: list[str]
    text: list[str]
    tool_calls: list[OutToolCall]
    stop_reason: str
    # All input tokens; of them, those read from and written to the prompt cache.
    input_tokens: int
    output_tokens: int
    cache_read: int = 0
    cache_write: int = 0
    # Anthropic: the thinking block's signature, and a redacted block's data.
    signature: str = ""
    redacted: str = ""


def word_chunks(text: str) -> list[str]:
    """Split after each run of whitespace; "".join(result) == text."""
    return [c for c in re.split(r"(?<=\s)(?=\S)", text) if c]


def fragments(arguments: str) -> list[str]:
    """Split tool arguments JSON the way real streams do: several short pieces."""
    if len(arguments) <= 1:
        return [arguments]
    # About three pieces for short arguments, at most 16 characters each, and
    # no more than 64 pieces, however long the arguments are.
    size = max(1, min(16, math.ceil(len(arguments) / 3)), math.ceil(len(arguments) / 64))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def resolve(
    reply: Reply,
    view: RequestView,
    request_id: int,
    default_args: Mapping[str, JSONDict],
    cached: tuple[int, int, int] | None = None,
) -> Output:
    """Turn a reply into the exact pieces to stream for this request.
    `cached` is the prompt cache's (total, read, written) input tokens."""
    text = list(reply.chunks) if reply.chunks is not None else word_chunks(reply.text)
    if reply.malformed == "long_line":
        text.append("x" * LONG_LINE_BYTES)
    prefix = "call_agentd" if view.api == "openai" else "toolu_agentd"
    calls: list[OutToolCall] = []
    for i, call in enumerate(reply.tool_calls):
        arguments = call.arguments
        if arguments is None:
            arguments = default_args.get(call.name, {})
        args_text = (
            arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        )
        call_id = call.id or f"{prefix}_{request_id}_{i}"
        calls.append(OutToolCall(call_id, call.name, args_text, fragments(args_text)))
    stop = reply.stop_reason or ("tool_use" if calls else "end_turn")
    thinking = word_chunks(reply.thinking)
    read = write = 0
    if reply.usage is not None:
        input_tokens, output_tokens, read, write = reply.usage
    else:
        out_chars = sum(map(len, text)) + sum(map(len, thinking))
        out_chars += sum(len(c.name) + len(c.arguments) for c in calls)
        if cached is not None:
            input_tokens, read, write = cached
        else:
            input_tokens = view.input_tokens
        output_tokens = max(1, out_chars // 4)
    return Output(thinking, text, calls, stop, input_tokens, output_tokens, read, write)
