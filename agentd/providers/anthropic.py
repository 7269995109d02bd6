"""Anthropic Messages API."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from agentd.errors import ModelError
from agentd.messages import (
    ImagePart,
    Message,
    ReminderPart,
    TextPart,
    ToolCall,
    render_reminder,
)
from agentd.providers.base import (
    ModelRequest,
    StopReason,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
)
from agentd.providers.http import (
    HTTPProvider,
    ModelHTTP,
    as_int,
    parse_tool_arguments,
    provider_message,
)
from agentd.providers.sse import SSEEvent

API_VERSION = "2023-06-01"

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
            request_body(request, model),
            headers=headers,
            purpose=request.purpose,
            on_sent=request.on_sent,
            parser=MessagesStreamParser(self._http),
        )


# --- request ----------------------------------------------------------------


def request_body(request: ModelRequest, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": to_anthropic_messages(request.messages),
        "stream": True,
    }
    if request.system:
        body["system"] = request.system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    if request.tool_choice:
        body["tool_choice"] = {"type": "tool", "name": request.tool_choice}
    return body


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for msg in messages:
        blocks = _user_blocks(msg) if msg.role == "user" else _assistant_blocks(msg)
        if not blocks:
            continue  # the API rejects empty content
        if out and out[-1]["role"] == msg.role:
            # The API requires roles to alternate: merge, keeping any tool
            # results ahead of text, as they must answer the previous turn.
            merged = out[-1]["content"] + blocks
            merged.sort(key=lambda b: b["type"] != "tool_result")  # stable
            out[-1]["content"] = merged
        else:
            out.append({"role": msg.role, "content": blocks})
    return out


def _user_blocks(msg: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {
            "type": "tool_result",
            "tool_use_id": r.tool_call_id,
            "content": r.content,
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
            source = {"type": "base64", "media_type": part.mime_type, "data": part.data}
            blocks.append({"type": "image", "source": source})
    return blocks


def _assistant_blocks(msg: Message) -> list[dict[str, Any]]:
    # Thinking is not sent back (it would need the signature we do not keep);
    # an interrupted message goes as it was cut.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": msg.text}] if msg.text else []
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
        for c in msg.tool_calls
    ]
    return blocks


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
            block = self._tools.get(as_int(data.get("index")))
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
        if kind == "thinking" and block.get("thinking"):
            return [ThinkingDelta(str(block["thinking"]))]
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
        if kind == "input_json_delta":
            tool = self._tools.get(as_int(data.get("index")))
            if tool is not None:
                tool.json.append(str(delta.get("partial_json") or ""))
        return []  # signature_delta and future kinds carry nothing we show

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
        if "output_tokens" in usage:
            self._usage.output_tokens = as_int(usage["output_tokens"])  # a running total

    def _error(self, detail: str) -> ModelError:
        return self._http.fail(f"{self._http.host} reported an error: {detail or 'no details'}")
