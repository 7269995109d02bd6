"""Compaction: the window, the count, the plan, the summary, and the compactor's flows.

The compactor is driven here with a fake provider (an async generator of
stream events) and real sessions; the daemon-level flows are in
tests/e2e/test_compaction.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from agentd.agent import context
from agentd.agent import summary as summ
from agentd.agent.compaction import (
    CompactionOptions,
    Compactor,
    ContextFull,
    choose_split,
    plan_clearing,
    prompt_starts,
    stub,
)
from agentd.agent.context import (
    FALLBACK_WINDOW,
    Calibration,
    ContextWindow,
    Meter,
    family_window,
    history_bytes,
    prompt_tokens,
)
from agentd.agent.session import AwaitClientResult, Session
from agentd.errors import ContextOverflow, ModelHTTPError
from agentd.events import CompactionReport, MemoryDelivered, Note, PromptEnded, Update
from agentd.messages import (
    ImagePart,
    Message,
    ReminderPart,
    TextPart,
    ToolCall,
    ToolCallPart,
    ToolResultPart,
    user_text,
)
from agentd.providers.base import ModelRequest, StreamEnd, StreamEvent, ToolCallReady, Usage
from agentd.tasks import Supervisor
from agentd.transcript import (
    CompactionRecord,
    TranscriptWriter,
    apply_compaction,
    load,
)
from agentd.turn_ends import SUMMARY_SOURCE

# --- the window ------------------------------------------------------------------------------


def test_family_windows_by_name() -> None:
    assert family_window("gpt-4o-mini") == 128_000
    assert family_window("openai/gpt-4.1") == 1_047_576
    assert family_window("claude-sonnet-4-5") == 200_000
    assert family_window("anthropic/claude-3-5-haiku") == 200_000
    assert family_window("Qwen/Qwen3-Coder-480B-A35B") == 262_144
    assert family_window("llama3.1:8b") == 131_072
    assert family_window("test-model") is None


def test_window_sources_in_order() -> None:
    w = ContextWindow("my-local-model")
    assert w.resolve() == (FALLBACK_WINDOW, "fallback") and not w.known
    w = ContextWindow("gpt-4o")
    assert w.resolve() == (128_000, "family")
    w.endpoint = 64_000
    assert w.resolve() == (64_000, "endpoint")
    w.provider = 60_000
    assert w.resolve() == (60_000, "provider")
    w = ContextWindow("gpt-4o", configured=100_000)
    w.endpoint = 64_000
    assert w.resolve() == (100_000, "setting")
    # A provider that says the window is smaller than the setting wins.
    w.provider = 90_000
    assert w.resolve() == (90_000, "provider")
    w.provider = 120_000
    assert w.resolve() == (100_000, "setting")


class _CountedTable(tuple[tuple[str, int], ...]):
    walks = 0

    def __iter__(self) -> Any:
        type(self).walks += 1
        return super().__iter__()


def test_the_family_table_is_walked_once_per_model_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is asked several times before each request (compaction's
    checks, the answer's room): a name is looked up in the table once."""
    monkeypatch.setattr(context, "FAMILY_WINDOWS", _CountedTable(context.FAMILY_WINDOWS))
    w = ContextWindow("a-model-no-family-knows-1")
    for _ in range(5):
        assert w.tokens == FALLBACK_WINDOW and not w.known
    assert ContextWindow("gpt-4o-no-family-test").tokens == 128_000
    assert ContextWindow("gpt-4o-no-family-test").tokens == 128_000
    assert _CountedTable.walks == 2


# --- the count -------------------------------------------------------------------------------


def test_calibration_follows_the_provider() -> None:
    cal = Calibration()
    assert cal.bytes_per_token == Calibration.DEFAULT
    cal.observe(4000, 1000)
    assert cal.bytes_per_token == 4.0
    cal.observe(2000, 1000)
    assert 2.0 < cal.bytes_per_token < 4.0
    cal.observe(10, 0)  # a server that reports nothing changes nothing
    cal.observe(100_000, 10)  # too small a request to say anything
    assert 2.0 < cal.bytes_per_token < 4.0
    cal.observe(10**9, 1000)
    assert cal.bytes_per_token <= Calibration.MAX


def test_meter_counts_from_the_providers_figure_plus_what_was_added() -> None:
    cal = Calibration()
    cal.bytes_per_token = 4.0
    meter = Meter()
    history = [user_text("x" * 400)]
    # Before any request: everything estimated (100 of overhead bytes too).
    assert meter.estimate(history, 100, cal) == cal.tokens(100 + history_bytes(history))
    # The provider counted 129 tokens for those 516 bytes: 4 bytes a token.
    meter.observe(history, 1, 100, Usage(input_tokens=129), cal)
    assert meter.estimate(history, 100, cal) == 129
    history.append(Message("assistant", [TextPart("y" * 84)]))
    assert meter.estimate(history, 100, cal) == 129 + 25  # 84 + 16 bytes of framing
    meter.invalidate()
    assert meter.estimate(history, 100, cal) == cal.tokens(100 + history_bytes(history))


def test_cached_input_counts_as_context() -> None:
    # Anthropic reports cached input apart from input_tokens; the parser sums
    # it into input_tokens, of which cache_read_tokens is a part.
    assert prompt_tokens(Usage(1000, 5, cache_read_tokens=800, cache_write_tokens=100)) == 1000
    assert prompt_tokens(Usage(100, 5)) == 100


# --- the plan --------------------------------------------------------------------------------


def tool_turn(n: int, size: int, tool: str = "read_file") -> list[Message]:
    call = ToolCall(f"c{n}", tool, {"path": f"f{n}.py"})
    return [
        user_text(f"prompt {n}"),
        Message("assistant", [ToolCallPart(call)]),
        Message("user", [ToolResultPart(call.id, "z" * size)]),
        Message("assistant", [TextPart(f"answer {n}")]),
    ]


def test_old_tool_output_is_cleared_first_the_newest_steps_kept() -> None:
    cal = Calibration()
    history = [m for n in range(5) for m in tool_turn(n, 5000)]
    cleared = plan_clearing(history, keep_results=3, keep_tokens=100_000, cal=cal)
    assert sorted(cleared) == ["c0", "c1"]
    assert cleared["c0"] == "[output of read_file f0.py, 5 KB, cleared]"
    # The newest step is kept even when it alone is over the share; others go.
    cleared = plan_clearing(history, keep_results=3, keep_tokens=10, cal=cal)
    assert sorted(cleared) == ["c0", "c1", "c2", "c3"]
    # Short output is left alone.
    short = [m for n in range(5) for m in tool_turn(n, 100)]
    assert plan_clearing(short, keep_results=1, keep_tokens=10, cal=cal) == {}
    assert stub(None, "x" * 2048) == "[tool output, 2 KB, cleared]"
    long = ToolCall("c", "run_command", {"command": "y" * 200})
    assert stub(long, "out").startswith("[output of run_command yyy")
    assert stub(long, "out").endswith("..., 3 bytes, cleared]")


def test_an_old_tool_result_with_images_is_cleared_and_its_images_dropped() -> None:
    # An MCP tool's result: a short text and an image. Short text alone is
    # left alone; with an image, the result is cleared and the image goes.
    cal = Calibration()
    history = [m for n in range(3) for m in tool_turn(n, 10)]
    shot = ToolResultPart("c0", "a shot", False, (ImagePart("image/png", "AAAA" * 1000),))
    history[2] = Message("user", [shot])
    cleared = plan_clearing(history, keep_results=1, keep_tokens=100_000, cal=cal)
    assert cleared == {"c0": "[output of read_file f0.py, 6 bytes and 1 image, cleared]"}
    report = CompactionReport("done", "threshold", 900, cleared=1)
    new, _ = apply_compaction(history, [], CompactionRecord(0, None, None, cleared, report))
    assert new[2].tool_results[0].content == cleared["c0"]
    assert new[2].tool_results[0].images == ()
    assert history[2].tool_results[0].images == shot.images  # the original is untouched


def test_the_tail_starts_at_a_prompt_and_holds_the_current_one() -> None:
    cal = Calibration()
    history = [m for n in range(4) for m in tool_turn(n, 1000)]
    assert prompt_starts(history) == [0, 4, 8, 12]
    # Nothing kept beyond the minimum: the last prompt and its tool steps.
    assert choose_split(history, keep_tokens=0, cal=cal) == 12
    # A larger share reaches further back, always at a prompt start.
    assert choose_split(history, keep_tokens=400, cal=cal) == 8
    assert choose_split(history, keep_tokens=10**6, cal=cal) == 0
    # A tail cannot start inside a prompt's tool steps: mid-prompt, the
    # current prompt is the minimum.
    assert choose_split(history[:11], keep_tokens=0, cal=cal) == 8
    # Only an earlier summary before the split: nothing to summarise.
    summary = Message("user", [ReminderPart("S", SUMMARY_SOURCE)])
    assert choose_split([summary, *tool_turn(9, 10)], keep_tokens=0, cal=cal) == 0


def test_apply_compaction_replaces_the_head_and_keeps_the_tails_notes() -> None:
    history = [m for n in range(3) for m in tool_turn(n, 1000)]
    notes: list[tuple[int, Note]] = [
        (1, MemoryDelivered("user_query", "local", ["/m/a.md"])),
        (4, PromptEnded("end_turn")),  # ends the summarised prompt 0
        (5, MemoryDelivered("user_query", "local", ["/m/b.md"])),
        (12, PromptEnded("end_turn")),
    ]
    report = CompactionReport("done", "manual", 900, 300, summarized=4, summary="S")
    record = CompactionRecord(4, "S", {"constraints": []}, {"c2": "[stub]"}, report)
    new, new_notes = apply_compaction(history, notes, record)
    assert len(new) == 1 + 8
    assert new[0].parts == [ReminderPart("S", SUMMARY_SOURCE)]
    assert new[1:3] == history[4:6]
    assert new[-2].tool_results[0].content == "[stub]"
    assert history[10].tool_results[0].content == "z" * 1000  # the original is untouched
    assert new_notes == [
        (0, report),
        (2, MemoryDelivered("user_query", "local", ["/m/b.md"])),
        (9, PromptEnded("end_turn")),
    ]
    # Clearing only: every note stays, the divider goes where it happened.
    only = CompactionRecord(0, None, None, {"c0": "[stub]"}, report)
    new, new_notes = apply_compaction(history, notes, only)
    assert len(new) == len(history) and new_notes == [*notes, (12, report)]


# --- the summary -----------------------------------------------------------------------------


def test_constraints_are_carried_by_the_daemon_not_rewritten_by_the_model() -> None:
    first = summ.merge(
        None, {"constraints": ["Use tabs.", "Deploy on Tuesdays."], "progress": "p1"}, ["a"], 4
    )
    # The next answer lists only new constraints and withdraws number 2.
    second = summ.merge(
        first,
        {"constraints": ["Never touch prod.", "Use tabs."], "revoked": [2], "files": ["b: new"]},
        ["b", "a"],
        6,
    )
    assert second.constraints == ["Use tabs.", "Never touch prod."]
    assert second.files == ["b: new"] and second.progress == "p1"
    assert second.paths == ["b", "a"] and second.messages == 10
    text = summ.render(second)
    assert "1. Use tabs.\n2. Never touch prod." in text
    assert "10 messages" in text
    assert summ.Summary.from_json(second.to_json()) == second
    assert summ.Summary.from_json(None) is None


def test_the_summariser_reads_turns_without_reminders_and_with_tags_kept_ours() -> None:
    call = ToolCall("c1", "read_file", {"path": "x.py"})
    messages = [
        Message(
            "user",
            [ReminderPart("memory: secret-note", "memory:local"), TextPart("fix </user> x.py")],
        ),
        Message("assistant", [TextPart("Reading."), ToolCallPart(call)]),
        Message("user", [ToolResultPart("c1", "q" * 3000, is_error=True)]),
    ]
    (turn,) = summ.turn_texts(messages)
    assert "secret-note" not in turn
    assert "<user>fix <\\/user> x.py</user>" in turn
    assert '<tool-call name="read_file">{"path": "x.py"}</tool-call>' in turn
    assert '<tool-result name="read_file" error="true">' in turn
    assert "[... 1500 more characters]" in turn
    assert summ.tool_paths(messages) == ["x.py"]
    text = summ.request_text(summ.Summary(constraints=["A."]), [turn], "focus on tests")
    assert text.index("<previous-summary>") < text.index("<conversation>")
    assert "1. A." in text and "focus on tests" in text


# --- the compactor ---------------------------------------------------------------------------


class FakeProvider:
    """Answers `record_summary`; `gate` holds answers, `fail` makes them fail."""

    name = "fake"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None
        self.fail = False
        self.closed = 0

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        self.requests.append(request)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.fail:
                raise ModelHTTPError("500 from fake", status=500)
            text = request.messages[0].text
            said = [line.removeprefix("<user>") for line in text.splitlines() if "Always" in line]
            args = {"constraints": said, "progress": "summarised"}
            yield ToolCallReady(ToolCall("s", "record_summary", args))
            yield StreamEnd("tool_use", Usage(10, 10))
        finally:
            self.closed += 1

    def warm(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def session_with(turns: int, size: int = 4000) -> Session:
    s = Session("s1", Path("/w"), AwaitClientResult([]))
    for n in range(turns):
        s.history.append(user_text(f"Turn {n}. Always rule-{n}.\n" + "w " * (size // 2)))
        s.history.append(Message("assistant", [TextPart("ok")]))
    s.turns = turns
    return s


def compactor(provider: FakeProvider, supervisor: Supervisor, window: int = 10_000) -> Compactor:
    return Compactor(
        provider,
        supervisor,
        ContextWindow("m", configured=window),
        options=CompactionOptions(keep_recent=0.2),
        max_output=1000,
    )


async def test_between_turns_the_summary_is_ready_and_swapped_in_without_waiting() -> None:
    provider, sup = FakeProvider(), Supervisor()
    c = compactor(provider, sup)
    s = session_with(8)  # about 9,000 tokens: past 0.8 of the 9,000-token budget
    seen: list[Update] = []
    c.after_reply(s)
    pending = c.state(s).pending
    assert pending is not None and pending.trigger == "threshold"
    await asyncio.wait([pending.task])
    await c.before_request(s, "system", [], seen.append)
    assert [type(u).__name__ for u in seen] == ["CompactionReport"]
    report = seen[0]
    assert isinstance(report, CompactionReport)
    assert report.status == "done" and report.trigger == "threshold"
    assert report.tokens_after < report.tokens_before
    assert s.history[0].parts[0] == ReminderPart(report.summary or "", SUMMARY_SOURCE)
    assert "1. Turn 0. Always rule-0." in (report.summary or "")
    assert s.history[-2].text.startswith("Turn 7.")
    assert provider.requests[0].purpose == "compact"
    await sup.aclose()


async def test_a_request_that_fits_never_waits_one_that_does_not_does() -> None:
    provider, sup = FakeProvider(), Supervisor()
    provider.gate = asyncio.Event()
    c = compactor(provider, sup)
    s = session_with(8)
    seen: list[Update] = []
    # Past the threshold but within the budget: a summary starts, nobody waits.
    s.history[:] = s.history[:14]
    await c.before_request(s, "system", [], seen.append)
    assert c.state(s).pending is not None and seen == []
    # A request that would not fit waits for it.
    s.history.append(user_text("Always big. " + "b " * 6000))
    waiting = asyncio.ensure_future(c.before_request(s, "system", [], seen.append))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert [(r.status, r.trigger) for r in seen if isinstance(r, CompactionReport)] == [
        ("started", "threshold")
    ]
    provider.gate.set()
    await waiting
    assert [r.status for r in seen if isinstance(r, CompactionReport)] == ["started", "done"]
    await sup.aclose()


async def test_a_failed_summary_changes_nothing_and_is_reported_once() -> None:
    provider, sup = FakeProvider(), Supervisor()
    provider.fail = True
    c = compactor(provider, sup)
    s = session_with(7)  # past the threshold, within the budget
    before = list(s.history)
    c.after_reply(s)
    pending = c.state(s).pending
    assert pending is not None
    await asyncio.wait([pending.task])
    seen: list[Update] = []
    await c.before_request(s, "system", [], seen.append)
    (report,) = seen
    assert isinstance(report, CompactionReport) and report.status == "failed"
    assert "500 from fake" in (report.message or "")
    assert s.history == before
    # No new attempt in the same turn; the request still fits, so it goes on.
    assert c.state(s).pending is None
    await sup.aclose()


async def test_cancelling_the_wait_cancels_the_summariser_and_keeps_the_history() -> None:
    provider, sup = FakeProvider(), Supervisor()
    provider.gate = asyncio.Event()
    c = compactor(provider, sup)
    s = session_with(12)  # over the budget: the request waits
    before = list(s.history)
    seen: list[Update] = []
    waiting = asyncio.ensure_future(c.before_request(s, "system", [], seen.append))
    while not provider.requests:
        await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert [r.status for r in seen if isinstance(r, CompactionReport)] == [
        "started",
        "cancelled",
    ]
    assert s.history == before and c.state(s).pending is None
    await asyncio.sleep(0)
    assert provider.closed == 1  # the summariser's stream was closed
    await sup.aclose()


async def test_a_summary_of_a_reset_history_is_never_swapped_in() -> None:
    provider, sup = FakeProvider(), Supervisor()
    c = compactor(provider, sup)
    s = session_with(8)
    c.after_reply(s)
    pending = c.state(s).pending
    assert pending is not None
    c.forget(s)
    assert pending.task.cancelled() or pending.task.cancelling()
    s.history[:] = session_with(2).history
    seen: list[Update] = []
    await c.before_request(s, "system", [], seen.append)
    assert seen == [] and not any(m.parts[0].__class__ is ReminderPart for m in s.history)
    await sup.aclose()


async def test_too_long_even_after_compaction_is_context_full() -> None:
    provider, sup = FakeProvider(), Supervisor()
    c = compactor(provider, sup)
    s = Session("s1", Path("/w"), AwaitClientResult([]))
    s.history.append(user_text("x " * 40_000))
    with pytest.raises(ContextFull) as full:
        await c.before_request(s, "system", [], lambda u: None)
    assert "new session" in full.value.message
    await sup.aclose()


async def test_a_guessed_window_never_holds_a_request_back() -> None:
    provider, sup = FakeProvider(), Supervisor()
    c = Compactor(provider, sup, ContextWindow("unknown-model"), max_output=8192)
    s = Session("s1", Path("/w"), AwaitClientResult([]))
    s.history.append(user_text("x " * 80_000))  # far over the 32k guess
    seen: list[Update] = []
    await c.before_request(s, "system", [], seen.append)  # no ContextFull, no wait
    assert seen == [] and c.answer_room(s) == 8192
    # Known, the same request is refused with what to do.
    c.window.endpoint = FALLBACK_WINDOW
    with pytest.raises(ContextFull):
        await c.before_request(s, "system", [], seen.append)
    await sup.aclose()


async def test_overflow_learns_the_window_and_compacts_once() -> None:
    provider, sup = FakeProvider(), Supervisor()
    c = compactor(provider, sup, window=100_000)
    s = session_with(8)
    seen: list[Update] = []
    err = ContextOverflow("too long", status=400, limit=10_000)
    assert await c.after_overflow(s, err, seen.append)
    assert c.window.tokens == 10_000
    assert [r.status for r in seen if isinstance(r, CompactionReport)] == ["started", "done"]
    assert seen[-1].trigger == "overflow"  # type: ignore[union-attr]
    # Only the window was wrong: no compaction, the retry asks for less room.
    small = session_with(1)
    assert await c.after_overflow(small, ContextOverflow("x", limit=9_000), seen.append)
    assert len(seen) == 2
    await sup.aclose()


async def test_manual_compaction_and_nothing_to_compact() -> None:
    provider, sup = FakeProvider(), Supervisor()
    c = compactor(provider, sup, window=100_000)
    s = session_with(4)
    seen: list[Update] = []
    report = await c.compact(s, "keep the rules", seen.append)
    assert report.status == "done" and report.trigger == "manual" and report.summarized > 0
    assert "keep the rules" in provider.requests[0].messages[0].text
    one = session_with(1)
    report = await c.compact(one, None, seen.append)
    assert report.status == "done" and report.message == "There is nothing to compact yet."
    assert report.tokens_after == report.tokens_before
    await sup.aclose()


def test_answer_room_and_tool_output_cap_follow_the_window() -> None:
    c = Compactor(FakeProvider(), Supervisor(), ContextWindow("m", 8_000), max_output=8192)
    s = session_with(1, size=100)
    assert c.budget() == 6_000
    assert 256 <= c.answer_room(s) <= 8_000 - c.estimate(s)
    assert c.tool_result_cap(40_000) == int(6_000 * 0.5 * c.calibration.bytes_per_token)
    big = Compactor(FakeProvider(), Supervisor(), ContextWindow("m", 1_000_000))
    assert big.tool_result_cap(40_000) == 40_000
    assert big.answer_room(s) == 8192


# --- persisted -------------------------------------------------------------------------------


def test_a_reload_rebuilds_the_compacted_history(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    history = [m for n in range(3) for m in tool_turn(n, 1000)]
    for m in history:
        w.append(m)
    w.note(PromptEnded("end_turn"))
    report = CompactionReport("done", "threshold", 900, 300, summarized=4, summary="S")
    summary = summ.Summary(constraints=["Use tabs."], messages=4).to_json()
    record = CompactionRecord(4, "S", summary, {"c2": "[stub]"}, report)
    w.compaction(record)
    w.append(user_text("after"))
    w.close()
    loaded = load(path)
    assert loaded is not None
    expected, notes = apply_compaction(history, [(12, PromptEnded("end_turn"))], record)
    assert loaded.history == [*expected, user_text("after")]
    assert loaded.notes == notes
    assert loaded.summary == summary
    assert (loaded.turns, loaded.title) == (4, "prompt 0")
    assert loaded.total == 13
    # Extraction reads the message lines: every turn, summarised or not.
    from agentd.transcript import read_slice

    assert [m.text for _, m in read_slice(path, 0, 1)] == ["prompt 0"]
    assert len(read_slice(path, 0)) == 13


def test_compaction_notes_round_trip() -> None:
    from agentd.transcript import note_from_json, note_to_json

    full = CompactionReport("done", "overflow", 9, 3, 2, 4, "S", None)
    failed = CompactionReport("failed", "threshold", 9, 9, message="boom")
    for note in (full, failed):
        assert note_from_json(note_to_json(note)) == note
    with pytest.raises(ValueError):
        note_from_json({"kind": "compaction", "status": "odd", "trigger": "manual"})


def test_the_request_overhead_counts_tool_definitions_encoded_once_per_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tool definitions' size is that of their JSON, as before, but each
    spec is encoded once, not at every step."""
    import json

    from agentd.agent.context import overhead_bytes
    from agentd.messages import ToolSpec

    specs = [
        ToolSpec(f"t{i}", f"does {i} \u00e9\u2603 " * i, {"type": "object", "n": [i] * i})
        for i in range(4)
    ]

    def expected(system: str, tools: list[ToolSpec]) -> int:
        listed = [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in tools
        ]
        return len(system.encode()) + len(json.dumps(listed, ensure_ascii=False).encode())

    cases = [specs, specs[1:], [specs[3], specs[0]], specs[:1], []]
    for tools in cases:
        assert overhead_bytes("sys \u00e9", tools) == expected("sys \u00e9", tools)
    calls: list[object] = []
    real = json.dumps

    def counting(value: object, **kwargs: object) -> str:
        calls.append(value)
        return real(value, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(json, "dumps", counting)
    for tools in cases:
        overhead_bytes("sys", tools)
    assert calls == []
