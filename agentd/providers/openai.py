"""OpenAI-compatible Chat Completions (OpenAI, DashScope/Qwen, vLLM, Ollama, llama.cpp).

The request is built so that its prefix stays byte-identical from one step
of a conversation to the next (OpenAI and several compatible servers cache
prompts by prefix): fixed keys first, then the tools in the order given,
then the messages last, each message encoded by a pure function of that
message and the model's settings, so a step only appends.
"""

from __future__ import annotations

import json
import uuid
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
    ToolResultPart,
    ToolSpec,
    cached_wire,
    find_prefix,
    keep_prefix,
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
from agentd.providers.models import SIDE_QUERY_REASONING_ALLOWANCE, ModelTraits, openai_traits
from agentd.providers.sse import SSEEvent

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIProvider(HTTPProvider):
    name = "openai"
    path = "/chat/completions"

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        model = request.model or self.config.model_for(request.purpose)
        return self._http.stream(
            self._url,
            request_parts(request, model, self.config),
            headers=headers,
            purpose=request.purpose,
            on_sent=request.on_sent,
            parser=ChatStreamParser(self._http),
        )

    async def context_window(self, model: str) -> int | None:
        """The model's context length as `/models` reports it (vLLM, OpenRouter,
        LM Studio, llama.cpp do; OpenAI and Ollama do not)."""
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        url = f"{self.config.effective_base_url()}/models"
        data = await self._http.get_json(url, headers, timeout=MODELS_TIMEOUT)
        return context_length_of(data, model or self.config.model)


# --- the model list -------------------------------------------------------------

MODELS_TIMEOUT = 10.0
# Where OpenAI-compatible servers put a model's window in their `/models` entries.
_LENGTH_KEYS = ("context_length", "max_model_len", "context_window", "max_context_length")


def context_length_of(data: Any, model: str) -> int | None:
    """A model's context window from a `/models` answer, or None.

    Reads `context_length` (OpenRouter, and agentd's model server),
    `max_model_len` (vLLM), `context_window`, `max_context_length` (LM
    Studio), `top_provider.context_length` (OpenRouter) and `meta.n_ctx`
    or `meta.n_ctx_train` (llama.cpp). The entry whose `id` is `model`
    wins; without one, a server whose models all report the same window
    (a single-model server under another name) is taken at its word.
    """
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == model:
            return _entry_length(entry)
    lengths = {_entry_length(e) for e in entries if isinstance(e, dict)}
    return lengths.pop() if len(lengths) == 1 else None


def _entry_length(entry: dict[str, Any]) -> int | None:
    for place in (entry, entry.get("top_provider"), entry.get("meta")):
        if not isinstance(place, dict):
            continue
        for key in (*_LENGTH_KEYS, "n_ctx", "n_ctx_train"):
            value = place.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


# --- request ----------------------------------------------------------------


def traits_for(model: str, config: ProviderConfig) -> ModelTraits:
    """The model's traits; the user's overrides are about the configured main model."""
    if model == config.model:
        return openai_traits(
            model,
            reasoning_model=config.reasoning_model,
            replay_reasoning=config.replay_reasoning,
        )
    return openai_traits(model)


def request_body(
    request: ModelRequest, model: str, config: ProviderConfig | None = None
) -> dict[str, Any]:
    body, traits = _request_head(request, model, config)
    # Last, so that the bytes of one step's request are a prefix of the next one's.
    body["messages"] = to_chat_messages(
        request.system, request.messages, replay_reasoning=traits.replay_reasoning
    )
    return body


def request_content(
    request: ModelRequest, model: str, config: ProviderConfig | None = None
) -> bytes:
    """`request_body` as the JSON bytes sent, the same bytes `json.dumps` gives
    for it: `request_parts` joined."""
    return bytes(request_parts(request, model, config))


# The heads and system messages of the last requests (`HeadCache`).
_HEADS = HeadCache()


def request_parts(
    request: ModelRequest, model: str, config: ProviderConfig | None = None
) -> RequestBody:
    """The request's bytes as sent, in parts, built from each history
    message's cached encoding: a step encodes only the messages it has not
    sent before, walks only those (the last step's pieces are taken over,
    `find_prefix`), and joins only the pieces that no kept chunk holds
    (`body.SealedChunks`)."""
    refs = (config, *request.tools)
    fixed = (
        "openai",
        model,
        request.purpose,
        request.max_tokens,
        request.temperature,
        request.stop,
    )
    what = (*fixed, request.tool_choice)
    hit = _HEADS.get(what, refs)
    if hit is None:
        body, traits = _request_head(request, model, config)
        hit = (_head_json(request, body), traits.replay_reasoning)
        _HEADS.put(what, refs, hit)
    head_json, replay = hit
    key = ("openai", replay)
    head = [head_json, b',"messages":[']
    if request.system:
        system = _HEADS.get(("openai/system", request.system), ())
        if system is None:
            system = json_bytes({"role": "system", "content": request.system})
            _HEADS.put(("openai/system", request.system), (), system)
        head += (system, b",")
    pieces, sealed, same = _message_pieces(request.messages, key)
    # The last piece (the comma the body's end replaces) stays out of chunks.
    start = sealed.update(pieces, same, len(pieces) - 1)
    return RequestBody.of(head, sealed, pieces[start:])


def _message_pieces(
    messages: list[Message], key: Hashable
) -> tuple[list[bytes], SealedChunks, int]:
    """Each message's JSON followed by a comma (none for a message that sends
    nothing), taken over from the last request on this history as far as it
    still holds (`find_prefix`): a step encodes and walks only what it added.
    With the pieces: their kept chunks, and how many pieces are as they were
    when those were made."""
    pieces: list[bytes] = []
    # ends[i]: len(pieces) once messages[i] is in.
    ends: list[int] = []
    sealed = SealedChunks()
    redo = same = 0
    found = find_prefix(messages, key)
    if found is not None:
        pieces, ends, sealed = found.state  # ours now: changed in place, never copied
        redo = found.k - 1  # the newest message sent may have changed in place
        same = ends[redo - 1] if redo else 0
        del pieces[same:]
        del ends[redo:]
    for msg in messages[redo:]:
        text = cached_wire(msg, key, _message_json)
        if text:
            pieces += (text, b",")
        ends.append(len(pieces))
    keep_prefix(messages, key, (pieces, ends, sealed), found)
    return pieces, sealed, same


def _message_json(msg: Message, key: Hashable) -> bytes:
    replay = bool(key[1]) if isinstance(key, tuple) else False
    return b",".join(json_bytes(m) for m in encode_message(msg, replay_reasoning=replay))


def _request_head(
    request: ModelRequest, model: str, config: ProviderConfig | None
) -> tuple[dict[str, Any], ModelTraits]:
    """The body without its messages, and the model's traits."""
    config = config or ProviderConfig(model=model)
    traits = traits_for(model, config)
    main = request.purpose == "main"
    if request.max_tokens is not None:
        cap = request.max_tokens
        if traits.reasoning and not main:
            cap += SIDE_QUERY_REASONING_ALLOWANCE  # a side query's cap is for its answer
    else:
        cap = (config.max_output_tokens if main else None) or traits.max_output_tokens
    effort = config.reasoning_effort if main else traits.side_effort
    body: dict[str, Any] = {"model": model}
    # Reasoning models reject max_tokens; compatible servers (vLLM, Ollama,
    # llama.cpp, DashScope, DeepSeek) understand nothing else.
    body["max_completion_tokens" if traits.reasoning else "max_tokens"] = cap
    if effort is not None:
        body["reasoning_effort"] = effort
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
    if request.tool_choice:
        body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
    return body, traits


def _head_json(request: ModelRequest, body: dict[str, Any]) -> bytes:
    """The body's JSON without its closing brace; the tool definitions' JSON is
    kept from step to step (`tools_json`)."""
    if not request.tools:
        return json_bytes(body)[:-1]
    return json_with(body, "tools", tools_json(request.tools, _tool, "openai"))[:-1]


def _tool(t: ToolSpec, last: bool = False) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    }


def to_chat_messages(
    system: str, messages: list[Message], *, replay_reasoning: bool = False
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for msg in messages:
        out.extend(encode_message(msg, replay_reasoning=replay_reasoning))
    return out


def encode_message(msg: Message, *, replay_reasoning: bool = False) -> list[dict[str, Any]]:
    """One history message as Chat Completions messages: a pure function of
    the message and the setting, so its bytes never change between steps."""
    if msg.role == "user":
        return _user_messages(msg)
    return _assistant_message(msg, replay_reasoning)


def _tool_result_text(result: ToolResultPart) -> str:
    # A tool message takes text only: the model is told the images exist.
    if not result.images:
        return result.content
    n = len(result.images)
    return f"{result.content}\n\n[{n} image(s) not shown: this API takes no images in tool results]"


def _user_messages(msg: Message) -> list[dict[str, Any]]:
    # Tool results must directly follow the assistant message that made the
    # calls, so they go first; text and reminders ride in a user message after.
    # Chat Completions has no error flag: the result text has to say so itself.
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": r.tool_call_id, "content": _tool_result_text(r)}
        for r in msg.tool_results
    ]
    texts = [
        render_reminder(p.text) if isinstance(p, ReminderPart) else p.text
        for p in msg.parts
        if isinstance(p, ReminderPart) or (isinstance(p, TextPart) and p.text)
    ]
    if msg.images:
        # With images the content is a list of parts, in the prompt's order.
        content: list[dict[str, Any]] = []
        for p in msg.parts:
            if isinstance(p, ImagePart):
                url = f"data:{p.mime_type};base64,{p.data}"
                content.append({"type": "image_url", "image_url": {"url": url}})
            elif isinstance(p, ReminderPart):
                content.append({"type": "text", "text": render_reminder(p.text)})
            elif isinstance(p, TextPart) and p.text:
                content.append({"type": "text", "text": p.text})
        out.append({"role": "user", "content": content})
    elif texts:
        out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _assistant_message(msg: Message, replay_reasoning: bool) -> list[dict[str, Any]]:
    # Reasoning text goes back only to the families that require it after a
    # tool call (`agentd.providers.models`); OpenAI itself rejects the field.
    # An interrupted message goes as it was cut.
    text, calls = msg.text, msg.tool_calls
    if not text and not calls:
        return []  # e.g. cancelled before any output; the API rejects it empty
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if replay_reasoning and calls:
        thinking = [p for p in msg.parts if isinstance(p, ThinkingPart) and not p.redacted]
        name = next((p.source for p in thinking if p.source), "reasoning_content")
        # Sent even when empty: DeepSeek refuses a tool-call message without it.
        out[name] = "".join(p.text for p in thinking)
    if calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": json.dumps(c.arguments, ensure_ascii=False),
                },
            }
            for c in calls
        ]
    return [out]


# --- response ---------------------------------------------------------------


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    started: bool = False


class ChatStreamParser:
    """Chat Completions chunks -> stream events.

    The response is complete once a `finish_reason` or `[DONE]` arrived; a
    body that ends before either was cut off. Tool calls are assembled from
    fragments by index and released only when complete.
    """

    def __init__(self, http: ModelHTTP) -> None:
        self._http = http
        self._calls: dict[int, _PartialCall] = {}
        self._finish: str | None = None
        self._ready = 0
        self._usage = Usage()
        self.done = False

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        if event.event == "error":
            raise self._error(provider_message(event.data))
        chunk = self._http.event_json(event)
        if chunk.get("error"):
            raise self._error(provider_message(chunk))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = Usage(
                as_int(usage.get("prompt_tokens")),
                as_int(usage.get("completion_tokens")),
                cache_read_tokens=_cached_tokens(usage),
            )
        out: list[StreamEvent] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # we ask for one choice
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, out)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason and self._finish is None:
                self._finish = reason
                out.extend(self._release_calls())
        return out

    def finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if self._finish is None:
            if not self.done:
                raise self._http.fail(
                    f"the stream from {self._http.host} ended before the response was complete"
                )
            self._finish = "stop"
            out.extend(self._release_calls())
        reason = _STOP_REASONS.get(self._finish, "end_turn")
        if reason == "end_turn" and self._ready:
            reason = "tool_use"  # some servers say "stop" after tool calls
        out.append(StreamEnd(reason, self._usage))
        return out

    def _error(self, detail: str) -> ModelError:
        return self._http.fail(f"{self._http.host} reported an error: {detail or 'no details'}")

    def _delta(self, delta: dict[str, Any], out: list[StreamEvent]) -> None:
        for source in ("reasoning_content", "reasoning"):
            reasoning = delta.get(source)
            if isinstance(reasoning, str) and reasoning:
                out.append(ThinkingDelta(reasoning, source))
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(TextDelta(content))
        for fragment in delta.get("tool_calls") or ():
            if isinstance(fragment, dict):
                self._fragment(fragment, out)

    def _fragment(self, fragment: dict[str, Any], out: list[StreamEvent]) -> None:
        index = fragment.get("index")
        call_id = fragment.get("id")
        if not isinstance(index, int):
            # Servers that omit the index send one fragment per call, or
            # continue the last call without an id.
            index = len(self._calls) if call_id else max(self._calls, default=0)
        call = self._calls.setdefault(index, _PartialCall())
        if isinstance(call_id, str) and call_id and not call.id:
            call.id = call_id
        function = fragment.get("function")
        if isinstance(function, dict):
            name = function.get("name")
            if isinstance(name, str) and name and not call.name:
                call.name = name
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif isinstance(arguments, dict):  # some servers send the object itself
                call.arguments.append(json.dumps(arguments))
        if call.name and not call.started:
            call.started = True
            call.id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            out.append(ToolCallStarted(call.id, call.name))

    def _release_calls(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for _, call in sorted(self._calls.items()):
            arguments = parse_tool_arguments("".join(call.arguments))
            if call.started and arguments is not None:
                out.append(ToolCallReady(ToolCall(call.id, call.name, arguments)))
            elif self._finish != "length":
                # A call the model finished but broke: an error beats a tool
                # call silently lost. Cut by max_tokens, it is simply dropped.
                what = repr(call.name) if call.name else "without a name"
                raise self._http.fail(
                    f"{self._http.host} sent a tool call {what} with invalid JSON arguments"
                )
        self._ready = len(out)
        return out


def _cached_tokens(usage: dict[str, Any]) -> int | None:
    """Prompt tokens served from the cache, if the server says:
    `prompt_tokens_details.cached_tokens` (OpenAI, vLLM), `prompt_cache_hit_tokens`
    (DeepSeek)."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")
    return cached if isinstance(cached, int) and not isinstance(cached, bool) else None
