"""Each history message is encoded for a provider once and kept
(`agentd.messages.cached_wire`): the bytes sent must stay those of encoding
the whole request afresh, whatever changed the history since the last step,
for both wires (OpenAI chat messages; Anthropic content blocks, whose
same-role merging and cache breakpoints are placed on each request)."""

from __future__ import annotations

import gc
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

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
from agentd.providers import anthropic as anthropic_wire
from agentd.providers import body as body_module
from agentd.providers import openai as openai_wire
from agentd.transcript import CompactionRecord, apply_compaction


@dataclass(frozen=True)
class Wire:
    name: str
    body: Callable[[ModelRequest, str, ProviderConfig | None], dict[str, Any]]
    content: Callable[[ModelRequest, str, ProviderConfig | None], bytes]
    # Settings that change how messages are encoded (reasoning / thinking sent back).
    configs: tuple[ProviderConfig | None, ...]


WIRES = [
    Wire(
        "openai",
        openai_wire.request_body,
        openai_wire.request_content,
        (None, ProviderConfig(model="deepseek-v4", replay_reasoning=True)),
    ),
    Wire(
        "anthropic",
        anthropic_wire.request_body,
        anthropic_wire.request_content,
        (
            ProviderConfig(kind="anthropic", model="m"),
            ProviderConfig(kind="anthropic", model="m", thinking_budget=2048),
            ProviderConfig(kind="anthropic", model="m", prompt_caching=False),
        ),
    ),
]


@pytest.fixture(params=WIRES, ids=lambda w: w.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    return request.param  # type: ignore[no-any-return]


def _request(history: list[Message], model: str = "m") -> ModelRequest:
    tools = [ToolSpec("read_file", "Read a file", {"type": "object"})]
    # `cache`: the Anthropic wire marks breakpoints, as the turn engine asks.
    return ModelRequest(model=model, system="sys", messages=history, tools=tools, cache=True)


def _fresh(wire: Wire, request: ModelRequest, config: ProviderConfig | None = None) -> bytes:
    body = wire.body(request, request.model, config or wire.configs[0])
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _sent(wire: Wire, request: ModelRequest, config: ProviderConfig | None = None) -> bytes:
    return wire.content(request, request.model, config or wire.configs[0])


def _history() -> list[Message]:
    call = ToolCall("c1", "read_file", {"path": "é.py"})
    return [
        user_text("hi \u2603"),
        Message(
            "assistant",
            [
                ThinkingPart("hm", signature="sig"),
                ThinkingPart("hm", source="reasoning"),
                ToolCallPart(call),
            ],
        ),
        Message("user", [ToolResultPart("c1", "x" * 500)]),
        Message("assistant", []),  # cancelled before any output: sends nothing
        Message("user", [TextPart("look"), ImagePart("image/png", "AAAA")]),
    ]


def test_the_bytes_are_those_of_the_whole_request_encoded_afresh(wire: Wire) -> None:
    history = _history()
    for config in wire.configs:
        request = _request(history)
        assert _sent(wire, request, config) == _fresh(wire, request, config)
        assert _sent(wire, request, config) == _fresh(wire, request, config)  # cached now


def test_a_reminder_attached_after_a_send_is_sent(wire: Wire) -> None:
    # The turn engine attaches memory to the newest message, in place
    # (`agentd.agent.turn._attach_reminder`): first among the reminders of a
    # prompt's message, after the results of a tool step; a step retried
    # after an overflow sends that message again with the reminder.
    history = _history()
    _sent(wire, _request(history))
    history[-1].parts.append(ReminderPart("and this", "memory"))
    sent = _sent(wire, _request(history))
    assert b"and this" in sent
    assert sent == _fresh(wire, _request(history))
    history.append(Message("assistant", [TextPart("ok")]))
    history.append(user_text("next"))
    _sent(wire, _request(history))
    history[-1].parts.insert(0, ReminderPart("remember this", "memory"))
    sent = _sent(wire, _request(history))
    assert b"remember this" in sent
    assert sent == _fresh(wire, _request(history))


def test_a_part_replaced_in_place_is_sent(wire: Wire) -> None:
    history = _history()
    _sent(wire, _request(history))
    history[4].parts[1] = TextPart("[image missing]")  # as a transcript load does
    assert _sent(wire, _request(history)) == _fresh(wire, _request(history))


def test_parts_reassigned_and_interrupted_are_sent(wire: Wire) -> None:
    # The newest message's parts replaced and marked interrupted after a send.
    history = _history()
    history.append(Message("assistant", [TextPart("an answer")]))
    _sent(wire, _request(history))
    history[-1].parts = [TextPart("partial answer")]
    history[-1].interrupted = True
    sent = _sent(wire, _request(history))
    assert b"partial answer" in sent
    assert sent == _fresh(wire, _request(history))


def test_a_history_rebuilt_with_changed_messages_is_sent(wire: Wire) -> None:
    # Older messages change only as new objects (a reload, compaction): the
    # last request's assembly is not reused past the first one that differs.
    history = _history()
    _sent(wire, _request(history))
    copy = [Message(m.role, list(m.parts), m.interrupted) for m in history]
    copy[0] = user_text("another start")
    copy[2] = Message("user", [ToolResultPart("c1", "other output")])
    sent = _sent(wire, _request(copy))
    assert b"another start" in sent and b"other output" in sent
    assert sent == _fresh(wire, _request(copy))
    assert _sent(wire, _request(history)) == _fresh(wire, _request(history))


def test_compaction_cleared_output_is_sent(wire: Wire) -> None:
    history = _history()
    _sent(wire, _request(history))
    report = CompactionReport("done", "manual")
    record = CompactionRecord(0, None, None, {"c1": "[cleared]"}, report)
    compacted, _ = apply_compaction(history, [], record)
    sent = _sent(wire, _request(compacted))
    assert b"[cleared]" in sent and b"x" * 500 not in sent
    assert sent == _fresh(wire, _request(compacted))


def test_a_compaction_summary_is_sent(wire: Wire) -> None:
    # A summary replaces the head with new messages; the tail keeps its caches.
    history = _history()
    _sent(wire, _request(history))
    report = CompactionReport("done", "manual")
    record = CompactionRecord(2, "the summary", {}, {}, report)
    compacted, _ = apply_compaction(history, [], record)
    sent = _sent(wire, _request(compacted))
    assert b"the summary" in sent and b"hi \\u2603" not in sent and "hi \u2603".encode() not in sent
    assert sent == _fresh(wire, _request(compacted))


def test_the_cache_breakpoints_move_with_the_conversation() -> None:
    # Anthropic: breakpoints on the last message and the last user message
    # before the final assistant message. A step later both have moved: the
    # messages that carried them go without, the new ones with.
    wire = WIRES[1]
    history = [user_text("one")]
    first = _sent(wire, _request(history))
    assert first.count(b'"cache_control"') == 3  # tools, system, the last message
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    history += [
        Message("assistant", [TextPart("reading"), ToolCallPart(call)]),
        Message("user", [ToolResultPart("c1", "text of a.py")]),
    ]
    second = _sent(wire, _request(history))
    assert second == _fresh(wire, _request(history))
    body = json.loads(second)
    marked = [i for i, m in enumerate(body["messages"]) if "cache_control" in m["content"][-1]]
    assert marked == [0, 2]
    history += [Message("assistant", [TextPart("done")]), user_text("two")]
    third = _sent(wire, _request(history))
    assert third == _fresh(wire, _request(history))
    body = json.loads(third)
    marked = [i for i, m in enumerate(body["messages"]) if "cache_control" in m["content"][-1]]
    assert marked == [2, 4]


def test_same_role_neighbours_are_merged_with_results_first() -> None:
    # A cancelled step leaves an empty assistant message between two user
    # messages: Anthropic gets one user message, tool results ahead of text,
    # with the breakpoint on its last block (a thinking block takes none).
    wire = WIRES[1]
    config = ProviderConfig(kind="anthropic", model="m", thinking_budget=2048)
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    history = [
        user_text("one"),
        Message("assistant", [ToolCallPart(call)]),
        Message("user", [TextPart("wait"), ReminderPart("memo", "memory")]),
        Message("assistant", []),
        Message("user", [ToolResultPart("c1", "a"), TextPart("and")]),
        Message("assistant", [TextPart("ok"), ThinkingPart("t", signature="s")]),
    ]
    for _ in range(2):
        sent = _sent(wire, _request(history), config)
        assert sent == _fresh(wire, _request(history), config)
    merged = json.loads(sent)["messages"][2]["content"]
    assert [b["type"] for b in merged] == ["tool_result", "text", "text", "text"]
    assert "cache_control" in merged[-1]
    last = json.loads(sent)["messages"][3]["content"]
    assert last[-1]["type"] == "thinking" and "cache_control" not in last[-1]


def _count_encodings(
    wire: Wire, history: list[Message], change: Callable[[], None]
) -> list[Message]:
    module: Any = openai_wire if wire.name == "openai" else anthropic_wire
    name = "encode_message" if wire.name == "openai" else "encode_blocks"
    calls: list[Message] = []
    real = getattr(module, name)

    def counting(msg: Message, **kw: Any) -> Any:
        calls.append(msg)
        return real(msg, **kw)

    setattr(module, name, counting)
    try:
        change()
        _sent(wire, _request(history))
    finally:
        setattr(module, name, real)
    return calls


def test_each_message_is_encoded_once(wire: Wire) -> None:
    history = _history()
    _sent(wire, _request(history))
    calls = _count_encodings(wire, history, lambda: history.append(user_text("next")))
    assert calls == [history[-1]]


def test_a_step_reads_only_the_messages_it_added(wire: Wire) -> None:
    # The last request's assembly is taken over: the cache of every older
    # message is not even looked at, only the newest one sent (which may have
    # changed in place) and the new ones.
    module: Any = openai_wire if wire.name == "openai" else anthropic_wire
    history = [m for _ in range(40) for m in _history()]
    history.append(Message("assistant", [TextPart("end")]))
    _sent(wire, _request(history))
    looked: list[Message] = []
    real = module.cached_wire

    def counting(msg: Message, key: Any, encode: Any) -> Any:
        looked.append(msg)
        return real(msg, key, encode)

    module.cached_wire = counting
    try:
        for n in range(3):
            looked.clear()
            history += [user_text(f"u{n}"), Message("assistant", [TextPart(f"a{n}")])]
            sent = _sent(wire, _request(history))
            newest = history[-3:]
            assert looked and all(any(m is x for x in newest) for m in looked), len(looked)
    finally:
        module.cached_wire = real
    assert sent == _fresh(wire, _request(history))


def _change(rng: random.Random, history: list[Message], n: int) -> list[Message]:
    """One change of the kinds a session's history goes through between two
    requests (a new list when the change builds one, as a reload does)."""
    what = rng.random()
    if what < 0.2:
        history.append(user_text(f"prompt {n}"))
    elif what < 0.4:
        call = ToolCall(f"c{n}", "read_file", {"path": f"f{n}.py"})
        parts: list[Any] = [ToolCallPart(call)]
        if rng.random() < 0.5:
            parts.insert(0, ThinkingPart("hm", signature="sig"))
        if rng.random() < 0.5:
            parts.insert(0, TextPart("reading"))
        history.append(Message("assistant", parts))
        history.append(Message("user", [ToolResultPart(call.id, f"out {n}")]))
    elif what < 0.5 and history:
        # A reminder attached in place to the newest message.
        history[-1].parts.insert(rng.randrange(len(history[-1].parts) + 1), ReminderPart("memo"))
    elif what < 0.55 and history:
        # The newest message's parts replaced (a partial answer), or emptied.
        history[-1].parts = [TextPart(f"partial {n}")] if rng.random() < 0.5 else []
        history[-1].interrupted = True
    elif what < 0.65:
        history.append(Message("assistant", []))  # cancelled before any output
    elif what < 0.7:
        history.append(Message("user", [TextPart(f"more {n}")]))  # same role again
    elif what < 0.78 and len(history) > 3:
        record = CompactionRecord(
            rng.randrange(1, len(history) - 1),
            "summary",
            {},
            {},
            CompactionReport("done", "manual"),
        )
        history[:] = apply_compaction(history, [], record)[0]
    elif what < 0.85:
        history = [Message(m.role, list(m.parts), m.interrupted) for m in history]
        if rng.random() < 0.5:
            history = history[: rng.randrange(0, len(history) + 1)]
    else:
        history.append(Message("assistant", [TextPart(f"answer {n}")]))
    return history


# A body's history is sent in kept chunks of CHUNK_BYTES (`providers/body.py`):
# small ones here, so that a short history spans many and each change meets one.
CHUNK_SIZES = [body_module.CHUNK_BYTES, 1, 97]


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
@pytest.mark.parametrize("seed", range(10))
def test_every_step_of_a_changing_history_is_sent_as_encoded_afresh(
    wire: Wire, seed: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(body_module, "CHUNK_BYTES", chunk)
    rng = random.Random(seed)
    history: list[Message] = []
    for n in range(150):
        history = _change(rng, history, n)
        config = rng.choice(wire.configs)
        cache = rng.random() < 0.8
        request = ModelRequest("m", "sys", history, cache=cache)
        assert _sent(wire, request, config) == _fresh(wire, request, config), n


def _long_history(n: int) -> list[Message]:
    out: list[Message] = [user_text("go")]
    for i in range(n):
        call = ToolCall(f"c{i}", "read_file", {"path": f"f{i}.py"})
        out.append(Message("assistant", [TextPart(f"reading {i}"), ToolCallPart(call)]))
        out.append(Message("user", [ToolResultPart(call.id, f"line {i}\n" * 40)]))
    return out


def test_a_step_joins_only_what_no_kept_chunk_holds(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history's chunks of one request are the next step's, the very
    objects: a step copies its head, the pieces after the last whole chunk
    and what it added, not the whole body."""
    monkeypatch.setattr(body_module, "CHUNK_BYTES", 4096)
    parts = openai_wire.request_parts if wire.name == "openai" else anthropic_wire.request_parts
    history = _long_history(60)
    config = wire.configs[0]
    first = parts(_request(history), "m", config)
    assert len(first.parts) > 5
    history.append(Message("assistant", [TextPart("done")]))
    history.append(user_text("and now?"))
    second = parts(_request(history), "m", config)
    assert bytes(second) == _fresh(wire, _request(history), config)
    assert second.length == len(bytes(second))
    kept = first.parts[1:-2]  # the head, and the chunk the newest message ended, are redone
    assert all(a is b for a, b in zip(kept, second.parts[1:], strict=False))


class _Walked(list[Message]):
    """A history that counts the walks over it and the messages sliced off it."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__(messages)
        self.walks = 0
        self.sliced = 0

    def __iter__(self) -> Any:
        self.walks += 1
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            self.sliced += len(range(*i.indices(len(self))))
        return super().__getitem__(i)


def test_a_step_checks_that_the_history_continues_without_walking_it(wire: Wire) -> None:
    """Whether a history continues the last request's (`find_prefix`) is one
    comparison of two lists in C: no walk over the messages from Python (a
    call per message took about 40 us at 1,000 messages), no copy but of
    those added."""
    history = _Walked(_long_history(200))
    config = wire.configs[0]
    wire.content(_request(history), "m", config)
    for n in range(3):
        history += [Message("assistant", [TextPart(f"done {n}")]), user_text(f"and {n}?")]
        history.walks = history.sliced = 0
        sent = wire.content(_request(history), "m", config)
        assert history.walks == 0 and history.sliced <= 10, (history.walks, history.sliced)
        assert sent == _fresh(wire, _request(list(history)), config)


class _CountingPieces(list[bytes]):
    """Pieces that count the ones read one by one (a chunk's join reads a slice)."""

    read = 0

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, int):
            self.read += 1
        return super().__getitem__(i)


def test_a_step_below_one_chunk_measures_only_the_pieces_it_added() -> None:
    """Pieces short of the smallest chunk are sealed in none: their sizes are
    still kept, so a step walks what it added and the piece it redoes, not
    all of them again (issue 20: 0.25 ms a step at 1,000 messages when no
    chunk was smaller than 256 KB)."""
    pieces = _CountingPieces([b"x" * 4, b","] * 1000)
    sealed = body_module.SealedChunks()
    assert sealed.update(pieces, 0, len(pieces) - 1) == 0  # 5 KB: no chunk
    for _ in range(3):
        # As a step does: the newest message is encoded again, two more added.
        same = len(pieces) - 2
        del pieces[same:]
        pieces += [b"y" * 4, b",", b"z" * 4, b","]
        pieces.read = 0
        assert sealed.update(pieces, same, len(pieces) - 1) == 0
        assert pieces.read == 3, pieces.read


def test_a_step_joins_under_one_small_chunk_however_long_the_history(wire: Wire) -> None:
    """A default window's long session is cleared down to about 170 KB,
    under the largest chunk (256 KB): its body must still be sealed in kept
    chunks, so that a step joins again only the pieces after the last of
    them (under 16 KB) and what it added, not the whole history (issue 20:
    0.1 ms of every step at 1,000 messages)."""
    parts = openai_wire.request_parts if wire.name == "openai" else anthropic_wire.request_parts
    history = _long_history(400)
    config = wire.configs[0]
    first = parts(_request(history), "m", config)
    assert 100_000 < first.length < body_module.CHUNK_BYTES
    for n in range(20):
        history.append(Message("assistant", [TextPart(f"done {n}")]))
        history.append(user_text(f"and now {n}?"))
        before, first = first, parts(_request(history), "m", config)
        assert bytes(first) == _fresh(wire, _request(history), config)
        # The parts of the body, the head first, that are new objects.
        joined = [p for p in first.parts[1:] if not any(p is q for q in before.parts)]
        smallest = body_module.CHUNK_BYTES // body_module.FAN_IN**body_module.LEVELS
        assert sum(map(len, joined)) < 3 * smallest, [len(p) for p in joined]
    # Small chunks are joined into larger ones: the head, at most FAN_IN - 1
    # of each smaller size (none of 256 KB here), and the tail.
    most = 2 + (body_module.FAN_IN - 1) * body_module.LEVELS
    assert len(first.parts) <= most, [len(p) for p in first.parts]


async def test_a_body_is_written_in_its_largest_chunks_and_one_more_write(wire: Wire) -> None:
    """Each part httpcore writes costs a turn of the event loop: the chunks
    smaller than the largest and the tail go out joined, as one write (a
    170 KB body is the request's head and one write, not eight)."""
    parts = openai_wire.request_parts if wire.name == "openai" else anthropic_wire.request_parts
    for n in (400, 2000):
        history = _long_history(n)
        body = parts(_request(history), "m", wire.configs[0])
        writes = [part async for part in body]
        assert b"".join(writes) == bytes(body) == _fresh(wire, _request(history), wire.configs[0])
        largest = [p for p in body.parts[1:-1] if len(p) >= body_module.CHUNK_BYTES]
        assert bool(largest) == (n == 2000)
        if n == 400:
            assert len(body.parts) > 2, [len(p) for p in body.parts]  # small chunks
        assert len(writes) == 2 + len(largest), [len(p) for p in body.parts]
        assert all(a is b for a, b in zip(writes[1:-1], largest, strict=True))


@pytest.mark.parametrize("seed", range(20))
def test_kept_chunks_are_those_made_afresh(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever changes between two calls (pieces dropped, changed, added, a
    lower limit), the chunks and the first piece in none are those a fresh
    `SealedChunks` makes of the same pieces."""
    monkeypatch.setattr(body_module, "CHUNK_BYTES", 50)
    rng = random.Random(seed)
    pieces: list[bytes] = []
    sealed = body_module.SealedChunks()
    for n in range(200):
        same = rng.randrange(0, len(pieces) + 1) if rng.random() < 0.3 else len(pieces)
        del pieces[same:]
        pieces += [bytes([97 + n % 26]) * rng.randrange(0, 30) for _ in range(rng.randrange(4))]
        limit = rng.choice([None, len(pieces), rng.randrange(0, len(pieces) + 1)])
        fresh = body_module.SealedChunks()
        expected = fresh.update(pieces, 0, limit)
        assert sealed.update(pieces, same, limit) == expected, n
        assert sealed.chunks == fresh.chunks and sealed.ends == fresh.ends, n


def test_a_dropped_history_is_freed_without_the_garbage_collector(wire: Wire) -> None:
    """The assembly kept on the newest message (`messages.keep_prefix`) holds
    the messages before it, never itself: no reference cycle keeps a dropped
    history (a reset, a closed session) alive until the collector runs."""
    history = _long_history(20)
    wire.content(_request(history), "m", wire.configs[0])
    history.append(user_text("more"))
    wire.content(_request(history), "m", wire.configs[0])
    gc.collect()
    gc.disable()
    try:
        del history
        assert gc.collect() == 0
    finally:
        gc.enable()


async def test_the_bytes_sent_at_every_step_are_those_encoded_afresh(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the provider and real loopback HTTP to the bundled model server,
    the history in many kept chunks: each step's body as the server read it
    is the whole request encoded afresh, sent with a Content-Length (never
    chunked), also after a compaction and when a 503 makes the provider send
    the same body again."""
    from agentd.providers.anthropic import AnthropicProvider
    from agentd.providers.openai import OpenAIProvider
    from agentd.testing.model_server import ModelServer

    monkeypatch.setattr(body_module, "CHUNK_BYTES", 1000)

    async def no_sleep(delay: float) -> None:
        pass

    async with ModelServer() as server:
        server.keep_raw_bodies = True
        config = wire.configs[0]
        if wire.name == "openai":
            provider: OpenAIProvider | AnthropicProvider = OpenAIProvider(
                ProviderConfig(base_url=server.openai_base_url, model="m"), sleep=no_sleep
            )
        else:
            provider = AnthropicProvider(
                ProviderConfig(kind="anthropic", base_url=server.base_url, model="m"),
                sleep=no_sleep,
            )
        history = _long_history(30)
        try:
            for step in range(8):
                if step == 3:
                    # At an assistant message: a split that parted a call from
                    # its result would leave a result the APIs refuse.
                    record = CompactionRecord(
                        21, "summary", {}, {}, CompactionReport("done", "manual")
                    )
                    history[:] = apply_compaction(history, [], record)[0]
                if step == 5:
                    server.enqueue({"status": 503})  # the same body, sent again
                if step == 6:
                    history[-1].parts.append(ReminderPart("memo"))  # in place
                server.enqueue({"text": f"answer {step}"})
                seen = len(server.requests())
                request = _request(history)
                async for _ in provider.stream(request):
                    pass
                expected = _fresh(wire, request, config)
                entries = server.requests()[seen:]
                assert len(entries) == (2 if step == 5 else 1), step
                for entry in entries:
                    assert server.raw_bodies[entry["id"]] == expected, step
                    assert entry["headers"]["content-length"] == str(len(expected))
                    assert "transfer-encoding" not in entry["headers"]
                history.append(Message("assistant", [TextPart(f"answer {step}")]))
                history.append(user_text(f"next {step}"))
        finally:
            await provider.aclose()


def test_a_compaction_lets_the_replaced_messages_go_at_once(wire: Wire) -> None:
    """The messages a summary replaced are not kept alive, until the next
    request, by the assembly kept on the newest message."""
    history = _long_history(20)
    wire.content(_request(history), "m", wire.configs[0])
    replaced = history[5]
    record = CompactionRecord(30, "summary", {}, {}, CompactionReport("done", "manual"))
    compacted = apply_compaction(history, [], record)[0]
    del history
    assert sys.getrefcount(replaced) == 2  # `replaced` and the call's argument
    assert _sent(wire, _request(compacted)) == _fresh(wire, _request(compacted))


def test_tool_definitions_are_encoded_once_per_spec_and_sent_as_afresh(wire: Wire) -> None:
    """The tool definitions (several KB) are encoded once per ToolSpec object,
    whatever list they come in, and the bytes stay those of the whole request
    encoded afresh (the last tool carries Anthropic's cache breakpoint)."""
    from agentd.providers import http

    specs = [
        ToolSpec(f"tool_{i}", f"Does thing {i} \u00e9\u2603", {"type": "object", "n": i})
        for i in range(4)
    ]
    encoded: list[Any] = []
    real = http.json_bytes

    def counting(value: Any) -> bytes:
        # A tool's definition, or a body that holds them.
        if isinstance(value, dict) and value.keys() & {"tools", "input_schema", "function"}:
            encoded.append(value)
        return real(value)

    history = _history()
    for config in wire.configs:
        for tools in (specs, specs[1:], [specs[2], specs[0]], []):
            request = ModelRequest("m", "sys", history, tools=tools, cache=True)
            assert _sent(wire, request, config) == _fresh(wire, request, config)
    module = openai_wire if wire.name == "openai" else anthropic_wire
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(http, "json_bytes", counting)
        patch.setattr(module, "json_bytes", counting)
        for config in wire.configs:
            for tools in (specs, specs[1:], [specs[2], specs[0]]):
                request = ModelRequest("m", "sys", history, tools=tools, cache=True)
                _sent(wire, request, config)
    assert encoded == []
