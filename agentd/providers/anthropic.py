"""Anthropic Messages API.

Extended thinking (`thinking`, for requests of purpose "main"): the model's
signed thinking blocks, and redacted ones, are kept in the history as they
came and sent back unchanged, in their place before the text and tool calls
of their message; the API requires them with the tool results that answer
that message. Unsigned thinking (cut short, or from another provider) is
never sent.

Prompt caching (`ModelRequest.cache`): breakpoints on the last tool, the
system prompt, the last message (written by this request) and the last user
message before the final assistant message (written by the previous step,
read by this one): four, the API's limit. Each message is encoded by a pure
function of that message and the thinking setting, and kept on it as bytes
(`cached_wire`); merging same-role neighbours and the breakpoints, which move
as the conversation grows, are applied to those bytes on each request
(`request_content`), so a step encodes only the messages it adds.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Hashable
from dataclasses import dataclass, field
from typing import Any

from agentd.errors import ModelError
from agentd.messages import (
    ImagePart,
    Message,
    ReminderPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    cached_wire,
    find_prefix,
    keep_prefix,
    render_reminder,
)
from agentd.providers.base import (
    ModelRequest,
    RedactedThinking,
    StopReason,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallReady,
    ToolCallStarted,
    Usage,
)
from agentd.providers.body import RequestBody, SealedChunks
from agentd.providers.config import ProviderConfig
from agentd.providers.http import (
    HeadCache,
    HTTPProvider,
    ModelHTTP,
    as_int,
    json_bytes,
    json_with,
    parse_tool_arguments,
    provider_message,
    tools_json,
)
from agentd.providers.models import DEFAULT_MAX_OUTPUT, THINKING_ANSWER_ROOM
from agentd.providers.sse import SSEEvent

API_VERSION = "2023-06-01"
EPHEMERAL = {"type": "ephemeral"}
_THINKING_BLOCKS = ("thinking", "redacted_thinking")

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "pause_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}


class AnthropicProvider(HTTPProvider):
    name = "anthropic"
    path = "/v1/messages"

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        headers = {"anthropic-version": API_VERSION}
        if self.config.api_key:
            headers["x-api-key"] = self.config.api_key
        model = request.model or self.config.model_for(request.purpose)
        return self._http.stream(
            self._url,
            request_parts(request, model, self.config),
            headers=headers,
            purpose=request.purpose,
            on_sent=request.on_sent,
            parser=MessagesStreamParser(self._http),
        )


# --- request ----------------------------------------------------------------


def request_body(
    request: ModelRequest, model: str, config: ProviderConfig | None = None
) -> dict[str, Any]:
    body, thinking, cache = _request_head(request, model, config)
    # Last, so that the bytes of one step's request are a prefix of the next one's.
    messages = to_anthropic_messages(request.messages, thinking=thinking)
    body["messages"] = with_breakpoints(messages) if cache else messages
    return body


def request_content(
    request: ModelRequest, model: str, config: ProviderConfig | None = None
) -> bytes:
    """`request_body` as the JSON bytes sent, the same bytes `json.dumps` gives
    for it: `request_parts` joined."""
    return bytes(request_parts(request, model, config))


# The heads of the last requests (`HeadCache`): the system prompt is in them.
_HEADS = HeadCache()


def request_parts(
    request: ModelRequest, model: str, config: ProviderConfig | None = None
) -> RequestBody:
    """The request's bytes as sent, in parts, built from each history
    message's cached blocks: a step encodes only the messages it has not
    sent before, and takes the request messages of the last step over as far
    as they still hold (`find_prefix`), so it walks only what it added, and
    joins only what no kept chunk holds (`body.SealedChunks`). Merging
    same-role neighbours and placing the cache breakpoints, which move from
    step to step, happen here on the cached bytes, never in the per-message
    cache."""
    refs = (config, *request.tools)
    fixed = (
        "anthropic",
        model,
        request.purpose,
        request.max_tokens,
        request.temperature,
        request.stop,
    )
    what = (*fixed, request.tool_choice, request.cache, request.system)
    hit = _HEADS.get(what, refs)
    if hit is None:
        body, thinking, cache = _request_head(request, model, config)
        hit = (_head_json(request, body, cache), thinking, cache)
        _HEADS.put(what, refs, hit)
    head_json, thinking, cache = hit
    key = ("anthropic", thinking)
    turns = _Turns.of(request.messages, key)
    head = [head_json, b',"messages":[']
    plain, sealed, same = turns.plain, turns.sealed, 2 * turns.dirty
    if not cache:
        # The last piece (the comma the body's end replaces) stays out of chunks.
        start = sealed.update(plain, same, len(plain) - 1)
        return RequestBody.of(head, sealed, plain[start:])
    # Roles alternate once merged, so both breakpoints are among the last
    # three messages: only those are encoded again with them.
    last = max(len(turns.turns) - 3, 0)
    marks = {last + i for i in _breakpoints([t[0].role for t in turns.turns[last:]])}
    start = sealed.update(plain, same, 2 * last)
    tail = plain[start : 2 * last]
    for i in range(last, len(turns.turns)):
        tail += (_turn_json(turns.turns[i], i in marks), b",")
    return RequestBody.of(head, sealed, tail)


class _Turns:
    """The request messages of a history (same-role neighbours merged), kept
    with the newest history message for the next step (`find_prefix`)."""

    __slots__ = ("count", "dirty", "first", "plain", "sealed", "turns")

    def __init__(self) -> None:
        # The request messages, each as the blocks of the history messages in it.
        self.turns: list[list[_Blocks]] = []
        # first[t]: the index of the history message request message t starts with.
        self.first: list[int] = []
        # count[i]: len(turns) once history message i is in.
        self.count: list[int] = []
        # Each request message's JSON without a breakpoint, then a comma.
        self.plain: list[bytes] = []
        # plain[: 2 * dirty] is as it was at the last request over this history.
        self.dirty = 0
        # plain joined into chunks, for as long as it stays as it was.
        self.sealed = SealedChunks()

    @classmethod
    def of(cls, messages: list[Message], key: Hashable) -> _Turns:
        out = cls()
        start = 0
        found = find_prefix(messages, key)
        if found is not None:
            kept: _Turns = found.state  # ours now: shortened in place, never copied
            # Again from the request message the newest one sent went into
            # (it may have changed in place), from that one's start.
            redo = kept.count[found.k - 1] - 1
            if redo >= 0:
                out = kept
                start = out.first[redo]
                del out.turns[redo:], out.first[redo:], out.count[start:]
                del out.plain[2 * redo :]
        dirty = len(out.turns)
        turns = out.turns
        for i in range(start, len(messages)):
            msg = messages[i]
            blocks = cached_wire(msg, key, _message_blocks)
            if not blocks.whole:
                pass  # the API rejects empty content
            elif turns and turns[-1][0].role == msg.role:
                turns[-1].append(blocks)  # roles must alternate: merged
                dirty = min(dirty, len(turns) - 1)
            else:
                turns.append([blocks])
                out.first.append(i)
            out.count.append(len(turns))
        del out.plain[2 * dirty :]
        out.dirty = dirty
        for turn in turns[dirty:]:
            out.plain += (_turn_json(turn, False), b",")
        keep_prefix(messages, key, out, found)
        return out


def _request_head(
    request: ModelRequest, model: str, config: ProviderConfig | None
) -> tuple[dict[str, Any], bool, bool]:
    """The body without its messages; whether thinking blocks are sent; whether
    the request is marked for caching."""
    config = config or ProviderConfig(kind="anthropic", model=model)
    main = request.purpose == "main"
    # The API refuses thinking with a forced tool (how side queries get
    # structured output), and it is for the conversation only.
    budget = config.thinking_budget if main and not request.tool_choice else None
    if request.max_tokens is not None:
        cap = request.max_tokens
    else:
        default = budget + THINKING_ANSWER_ROOM if budget else DEFAULT_MAX_OUTPUT
        cap = (config.max_output_tokens if main else None) or default
    if budget and cap <= budget:
        # A nearly full context window left less room than the budget: the
        # API would refuse the request, so this one step does without thinking.
        budget = None
    cache = request.cache and config.prompt_caching
    body: dict[str, Any] = {"model": model, "max_tokens": cap, "stream": True}
    if budget:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    elif request.temperature is not None:  # thinking takes no temperature
        body["temperature"] = request.temperature
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.tool_choice:
        body["tool_choice"] = {"type": "tool", "name": request.tool_choice}
    # The API caches in this order: tools, system, messages.
    if request.tools:
        shape = _cached_tool if cache else _tool
        body["tools"] = [shape(t, i == len(request.tools) - 1) for i, t in enumerate(request.tools)]
    if request.system:
        if cache:
            body["system"] = [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
        else:
            body["system"] = request.system
    return body, budget is not None, cache


def _head_json(request: ModelRequest, body: dict[str, Any], cache: bool) -> bytes:
    """The body's JSON without its closing brace; the tool definitions' JSON is
    kept from step to step (`tools_json`)."""
    if not request.tools:
        return json_bytes(body)[:-1]
    shape, kind = (_cached_tool, "anthropic/cache") if cache else (_tool, "anthropic")
    return json_with(body, "tools", tools_json(request.tools, shape, kind))[:-1]


def _tool(t: ToolSpec, last: bool = False) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "input_schema": t.parameters}


def _cached_tool(t: ToolSpec, last: bool = False) -> dict[str, Any]:
    """The last tool carries the tools' cache breakpoint."""
    return {**_tool(t), "cache_control": EPHEMERAL} if last else _tool(t)


@dataclass(frozen=True, slots=True)
class _Blocks:
    """One message's content blocks as JSON bytes: its tool results apart,
    since a merged turn puts every tool result ahead of the other blocks."""

    role: str
    results: tuple[bytes, ...]
    others: tuple[bytes, ...]
    # Whether the last of `others` is a thinking block (no cache_control there).
    thinking_last: bool
    # The message as a request message of its own, without a breakpoint: what
    # nearly every message of a request is.
    whole: bytes


def _message_blocks(msg: Message, key: Hashable) -> _Blocks:
    thinking = bool(key[1]) if isinstance(key, tuple) else False
    blocks = encode_blocks(msg, thinking=thinking)
    results = tuple(json_bytes(b) for b in blocks if b["type"] == "tool_result")
    others = [b for b in blocks if b["type"] != "tool_result"]
    last_thinking = bool(others) and others[-1]["type"] in _THINKING_BLOCKS
    whole = json_bytes({"role": msg.role, "content": blocks}) if blocks else b""
    return _Blocks(msg.role, results, tuple(json_bytes(b) for b in others), last_thinking, whole)


_BREAKPOINT = b',"cache_control":' + json_bytes(EPHEMERAL) + b"}"


def _turn_json(turn: list[_Blocks], breakpoint: bool) -> bytes:
    """A request message made of one history message's blocks, or of several
    same-role neighbours' merged (tool results first, as in
    `to_anthropic_messages`), with the cache breakpoint if it carries one."""
    if len(turn) == 1 and not breakpoint:
        return turn[0].whole
    results = [b for blocks in turn for b in blocks.results]
    others = [b for blocks in turn for b in blocks.others]
    thinking_last = next((b.thinking_last for b in reversed(turn) if b.others), False)
    items = results + others
    if breakpoint and not thinking_last:
        # The block's own JSON with the key added last, as `{**block, ...}` gives.
        items[-1] = items[-1][:-1] + _BREAKPOINT
    head = b'{"role":"user","content":[' if turn[0].role == "user" else _ASSISTANT
    return b"".join((head, b",".join(items), b"]}"))


_ASSISTANT = b'{"role":"assistant","content":['


def to_anthropic_messages(
    messages: list[Message], *, thinking: bool = False
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for msg in messages:
        blocks = encode_blocks(msg, thinking=thinking)
        if not blocks:
            continue  # the API rejects empty content
        if out and out[-1]["role"] == msg.role:
            # The API requires roles to alternate: merge, keeping any tool
            # results ahead of text, as they must answer the previous turn.
            merged = out[-1]["content"] + blocks
            merged.sort(key=lambda b: b["type"] != "tool_result")  # stable
            out[-1] = {"role": msg.role, "content": merged}
        else:
            out.append({"role": msg.role, "content": blocks})
    return out


def encode_blocks(msg: Message, *, thinking: bool = False) -> list[dict[str, Any]]:
    """One history message as content blocks: a pure function of the message
    and the setting, so its bytes never change between steps."""
    return _user_blocks(msg) if msg.role == "user" else _assistant_blocks(msg, thinking)


def with_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with cache breakpoints on the last message and on the last
    user message before the final assistant message, on copies."""
    out = list(messages)
    for i in sorted(_breakpoints([m["role"] for m in messages])):
        blocks = list(out[i]["content"])
        if blocks[-1]["type"] in _THINKING_BLOCKS:
            continue  # the API takes no cache_control on thinking
        blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
        out[i] = {**out[i], "content": blocks}
    return out


def _breakpoints(roles: list[str]) -> set[int]:
    """Which messages carry a cache breakpoint: the last one (written by this
    request) and the last user message before the final assistant message
    (written by the previous step, read by this one). They move as the
    conversation grows, so they are placed on each request, never cached."""
    marks = {len(roles) - 1}
    for i in range(len(roles) - 1, 0, -1):
        if roles[i] == "assistant":
            marks.add(i - 1)
            break
    return {i for i in marks if i >= 0}


def _image_block(image: ImagePart) -> dict[str, Any]:
    source = {"type": "base64", "media_type": image.mime_type, "data": image.data}
    return {"type": "image", "source": source}


def _tool_result_content(result: ToolResultPart) -> str | list[dict[str, Any]]:
    """The text, or, with images, text and image blocks (the API takes both in a tool result)."""
    if not result.images:
        return result.content
    return [{"type": "text", "text": result.content}, *map(_image_block, result.images)]


def _user_blocks(msg: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {
            "type": "tool_result",
            "tool_use_id": r.tool_call_id,
            "content": _tool_result_content(r),
            "is_error": r.is_error,
        }
        for r in msg.tool_results
    ]
    for part in msg.parts:
        if isinstance(part, ReminderPart):
            blocks.append({"type": "text", "text": render_reminder(part.text)})
        elif isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part))
    return blocks


def _assistant_blocks(msg: Message, thinking: bool) -> list[dict[str, Any]]:
    # Parts in the order they streamed; tool calls last, where the API puts
    # them. An interrupted message goes as it was cut.
    blocks: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for part in msg.parts:
        if isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCallPart):
            c = part.call
            calls.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
        elif isinstance(part, ThinkingPart) and thinking:
            # Only as it came: a block without its signature would be refused.
            if part.redacted:
                blocks.append({"type": "redacted_thinking", "data": part.redacted})
            elif part.signature:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
    return blocks + calls


# --- response ---------------------------------------------------------------


@dataclass(slots=True)
class _ToolBlock:
    id: str
    name: str
    initial: dict[str, Any]  # a server may send the whole input at the start
    json: list[str] = field(default_factory=list)
    stopped: bool = False

    def arguments(self) -> dict[str, Any] | None:
        """The parsed input, or None while the block is unfinished or broken."""
        if not self.stopped:
            return None
        text = "".join(self.json)
        return parse_tool_arguments(text) if text.strip() else self.initial


class MessagesStreamParser:
    """Messages API events -> stream events.

    The response is complete once `message_delta` carried a stop reason;
    tool calls are released then, so a stream that breaks later never leaves
    a ready call behind a failed turn.
    """

    def __init__(self, http: ModelHTTP) -> None:
        self._http = http
        self._tools: dict[int, _ToolBlock] = {}
        # Signature pieces of each thinking block, by index, until it stops.
        self._thinking: dict[int, list[str]] = {}
        self._stop: str | None = None
        self._ready = 0
        self._usage = Usage()
        self.done = False

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        if event.event == "ping":
            return []
        if event.event == "error":
            raise self._error(provider_message(event.data))
        data = self._http.event_json(event)
        kind = data.get("type", event.event)
        if kind == "error":
            raise self._error(provider_message(data))
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict):
                self._add_usage(message.get("usage"))
        elif kind == "content_block_start":
            return self._block_start(data)
        elif kind == "content_block_delta":
            return self._block_delta(data)
        elif kind == "content_block_stop":
            index = as_int(data.get("index"))
            signature = self._thinking.pop(index, None)
            if signature is not None:
                return [ThinkingEnd("".join(signature))]
            block = self._tools.get(index)
            if block is not None:
                block.stopped = True
        elif kind == "message_delta":
            self._add_usage(data.get("usage"))
            delta = data.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(reason, str) and reason and self._stop is None:
                self._stop = reason
                return self._release_calls()
        elif kind == "message_stop":
            self.done = True
        # Unknown event types are skipped: the API adds new ones over time.
        return []

    def finish(self) -> list[StreamEvent]:
        if self._stop is None:
            raise self._http.fail(
                f"the stream from {self._http.host} ended before the response was complete"
            )
        reason = _STOP_REASONS.get(self._stop, "end_turn")
        if reason == "end_turn" and self._ready:
            reason = "tool_use"
        return [StreamEnd(reason, self._usage)]

    def _block_start(self, data: dict[str, Any]) -> list[StreamEvent]:
        block = data.get("content_block")
        if not isinstance(block, dict):
            return []
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            return [TextDelta(str(block["text"]))]
        if kind == "thinking":
            signature = block.get("signature")
            self._thinking[as_int(data.get("index"))] = [signature] if signature else []
            return [ThinkingDelta(str(block["thinking"]))] if block.get("thinking") else []
        if kind == "redacted_thinking":
            return [RedactedThinking(str(block.get("data") or ""))]
        if kind == "tool_use":
            initial = block.get("input")
            tool = _ToolBlock(
                str(block.get("id") or ""),
                str(block.get("name") or ""),
                initial if isinstance(initial, dict) else {},
            )
            self._tools[as_int(data.get("index"))] = tool
            return [ToolCallStarted(tool.id, tool.name)]
        return []

    def _block_delta(self, data: dict[str, Any]) -> list[StreamEvent]:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [TextDelta(str(delta["text"]))]
        if kind == "thinking_delta" and delta.get("thinking"):
            return [ThinkingDelta(str(delta["thinking"]))]
        if kind == "signature_delta":
            pieces = self._thinking.get(as_int(data.get("index")))
            if pieces is not None:
                pieces.append(str(delta.get("signature") or ""))
        elif kind == "input_json_delta":
            tool = self._tools.get(as_int(data.get("index")))
            if tool is not None:
                tool.json.append(str(delta.get("partial_json") or ""))
        return []  # future kinds carry nothing we show

    def _release_calls(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for _, tool in sorted(self._tools.items()):
            arguments = tool.arguments()
            if arguments is not None:
                out.append(ToolCallReady(ToolCall(tool.id, tool.name, arguments)))
            elif self._stop != "max_tokens":
                # A call the model finished but broke: an error beats a tool
                # call silently lost. Cut by max_tokens, it is simply dropped.
                raise self._http.fail(
                    f"{self._http.host} sent a tool call {tool.name!r} with invalid JSON input"
                )
        self._ready = len(out)
        return out

    def _add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        # Cached prompt tokens are reported apart; they are input all the same.
        inputs = sum(
            as_int(usage.get(k))
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        if inputs:
            self._usage.input_tokens = inputs
        read, write = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
        if isinstance(read, int):
            self._usage.cache_read_tokens = read
        if isinstance(write, int):
            self._usage.cache_write_tokens = write
        if "output_tokens" in usage:
            self._usage.output_tokens = as_int(usage["output_tokens"])  # a running total

    def _error(self, detail: str) -> ModelError:
        return self._http.fail(f"{self._http.host} reported an error: {detail or 'no details'}")
