"""Each history message is encoded for a provider once and kept
(`agentd.messages.cached_wire`): the bytes sent must stay those of encoding
the whole request afresh, whatever changed the history since the last step."""

from __future__ import annotations

import json
from typing import Any

from agentd.events import CompactionReport
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
    user_text,
)
from agentd.providers import ModelRequest, ProviderConfig
from agentd.providers import openai as openai_wire
from agentd.transcript import CompactionRecord, apply_compaction


def _request(history: list[Message], model: str = "m") -> ModelRequest:
    tools = [ToolSpec("read_file", "Read a file", {"type": "object"})]
    return ModelRequest(model=model, system="sys", messages=history, tools=tools)


def _fresh(request: ModelRequest, config: ProviderConfig | None = None) -> bytes:
    body: dict[str, Any] = openai_wire.request_body(request, request.model, config)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _sent(request: ModelRequest, config: ProviderConfig | None = None) -> bytes:
    return openai_wire.request_content(request, request.model, config)


def _history() -> list[Message]:
    call = ToolCall("c1", "read_file", {"path": "é.py"})
    return [
        user_text("hi \u2603"),
        Message("assistant", [ThinkingPart("hm", source="reasoning"), ToolCallPart(call)]),
        Message("user", [ToolResultPart("c1", "x" * 500)]),
        Message("assistant", []),  # cancelled before any output: sends nothing
        Message("user", [TextPart("look"), ImagePart("image/png", "AAAA")]),
    ]


def test_the_bytes_are_those_of_the_whole_request_encoded_afresh() -> None:
    history = _history()
    for config in (None, ProviderConfig(model="deepseek-v4", replay_reasoning=True)):
        request = _request(history)
        assert _sent(request, config) == _fresh(request, config)
        assert _sent(request, config) == _fresh(request, config)  # from the cache now


def test_a_reminder_attached_after_a_send_is_sent() -> None:
    # The turn engine inserts memory at the user query and appends it after
    # tool results (`agentd.agent.turn._attach_reminder`), in place.
    history = _history()
    _sent(_request(history))
    history[0].parts.insert(0, ReminderPart("remember this", "memory"))
    history[2].parts.append(ReminderPart("and this", "memory"))
    sent = _sent(_request(history))
    assert b"remember this" in sent and b"and this" in sent
    assert sent == _fresh(_request(history))


def test_a_part_replaced_in_place_is_sent() -> None:
    history = _history()
    _sent(_request(history))
    history[4].parts[1] = TextPart("[image missing]")  # as a transcript load does
    assert _sent(_request(history)) == _fresh(_request(history))


def test_parts_reassigned_and_interrupted_are_sent() -> None:
    # A cancel keeps the partial assistant message: new parts, interrupted.
    history = _history()
    _sent(_request(history))
    history[3].parts = [TextPart("partial answer")]
    history[3].interrupted = True
    sent = _sent(_request(history))
    assert b"partial answer" in sent
    assert sent == _fresh(_request(history))


def test_compaction_cleared_output_is_sent() -> None:
    history = _history()
    _sent(_request(history))
    report = CompactionReport("done", "manual")
    record = CompactionRecord(0, None, None, {"c1": "[cleared]"}, report)
    compacted, _ = apply_compaction(history, [], record)
    sent = _sent(_request(compacted))
    assert b"[cleared]" in sent and b"x" * 500 not in sent
    assert sent == _fresh(_request(compacted))


def test_each_message_is_encoded_once() -> None:
    history = _history()
    _sent(_request(history))
    calls: list[Message] = []
    real = openai_wire.encode_message

    def counting(msg: Message, **kw: Any) -> list[dict[str, Any]]:
        calls.append(msg)
        return real(msg, **kw)

    openai_wire.encode_message = counting
    try:
        history.append(user_text("next"))
        _sent(_request(history))
    finally:
        openai_wire.encode_message = real
    assert calls == [history[-1]]
