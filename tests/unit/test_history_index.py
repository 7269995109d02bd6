"""Compaction's checks read a `HistoryIndex` kept up to date per message
(issue 20): whatever changes the history, the incremental index must say
what a fresh reading of the whole history says, and a step must measure
only the messages it added."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agentd.agent import history_index
from agentd.agent.compaction import (
    CompactionOptions,
    Compactor,
    choose_split,
    plan_clearing,
    prompt_starts,
    stub,
)
from agentd.agent.context import Calibration, ContextWindow, message_bytes
from agentd.agent.history_index import STUB_MIN_BYTES, HistoryIndex
from agentd.agent.image_cost import message_image_tokens
from agentd.agent.session import AwaitClientResult, Session
from agentd.events import CompactionReport, Update
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
from agentd.providers.anthropic import to_anthropic_messages
from agentd.providers.base import ModelRequest
from agentd.providers.openai import to_chat_messages
from agentd.tasks import Supervisor
from agentd.testing.model_server.checks import ModelRules, Signer, check_anthropic, check_openai
from agentd.testing.model_server.replies import BadRequest
from agentd.transcript import CompactionRecord, apply_compaction
from agentd.turn_ends import INTERRUPTED_RESULT, is_summary

# --- the whole-history readings the index replaces (as they were before it) ------------------


def reference_split(history: list[Message], keep_tokens: int, cal: Calibration) -> int:
    # A prompt's words that answer no call: a message with results (an older
    # transcript's prompt after a crash) would keep them without their calls.
    starts = [
        i for i, m in enumerate(history) if m.role == "user" and m.text and not m.tool_results
    ]
    if not starts:
        return 0
    sizes = [message_bytes(m) for m in history]
    images = [message_image_tokens(m, "anthropic") for m in history]
    tail = tail_images = 0
    split = len(history)
    for start in reversed(starts):
        tail += sum(sizes[start:split])
        tail_images += sum(images[start:split])
        split = start
        if cal.tokens(tail) + tail_images >= keep_tokens:
            break
    if not any(not is_summary(m) for m in history[:split]):
        return 0
    return split


def reference_clearing(
    history: list[Message], keep_results: int, keep_tokens: int, cal: Calibration
) -> dict[str, str]:
    calls: dict[str, ToolCall] = {}
    steps: list[int] = []
    for i, msg in enumerate(history):
        for call in msg.tool_calls:
            calls[call.id] = call
        if msg.tool_results:
            steps.append(i)
    kept: set[int] = set()
    used = 0
    for i in reversed(steps):
        cost = cal.tokens(message_bytes(history[i])) + message_image_tokens(history[i], "anthropic")
        if kept and (len(kept) >= keep_results or used + cost > keep_tokens):
            break
        kept.add(i)
        used += cost
    out: dict[str, str] = {}
    for i in steps:
        if i in kept:
            continue
        for part in history[i].tool_results:
            if len(part.content) >= STUB_MIN_BYTES or part.images:
                out[part.tool_call_id] = stub(
                    calls.get(part.tool_call_id), part.content, len(part.images)
                )
    return out


def _fields(index: HistoryIndex) -> tuple[list[int], ...]:
    return (index.cum, index.images, index.starts, index.steps, index.clearable)


def _step(rng: random.Random, history: list[Message], n: int) -> list[Message]:
    """One change of the kinds a session's history goes through; returns the
    history (a new list when the change builds one, as a reload does)."""
    what = rng.random()
    if what < 0.25:
        history.append(user_text(f"prompt {n} " + "p" * rng.randrange(0, 3000)))
    elif what < 0.5:
        call = ToolCall(f"c{n}", "read_file", {"path": f"f{n}.py"})
        history.append(Message("assistant", [TextPart(f"reading {n}"), ToolCallPart(call)]))
        images = (ImagePart("image/png", "AAAA"),) if rng.random() < 0.1 else ()
        size = rng.choice((10, STUB_MIN_BYTES - 1, STUB_MIN_BYTES, 5000))
        history.append(Message("user", [ToolResultPart(call.id, "r" * size, False, images)]))
    elif what < 0.6 and history:
        # A reminder attached in place to the newest message (a delivery point).
        history[-1].parts.append(ReminderPart("memo " * rng.randrange(1, 200), "memory"))
    elif what < 0.65:
        history.append(Message("assistant", []))  # a step cancelled before any output
    elif what < 0.7:
        # An older transcript's prompt after a crash: the call's missing
        # result folded into the next prompt's message (`answer_missing`).
        call = ToolCall(f"c{n}", "run_command", {"command": "make"})
        history.append(Message("assistant", [ToolCallPart(call)]))
        result = ToolResultPart(call.id, INTERRUPTED_RESULT, True)
        history.append(Message("user", [result, TextPart(f"go on {n} " + "g" * 500)]))
    elif what < 0.78 and history:
        # Compaction's clearing: new messages for the cleared results, in place.
        cleared = reference_clearing(history, 2, 500, Calibration())
        record = CompactionRecord(0, None, None, cleared, CompactionReport("done", "manual"))
        history[:] = apply_compaction(history, [], record)[0]
    elif what < 0.82 and len(history) > 4:
        # A summary of the head, committed in place.
        split = rng.randrange(1, len(history) - 1)
        record = CompactionRecord(split, "summary", {}, {}, CompactionReport("done", "manual"))
        history[:] = apply_compaction(history, [], record)[0]
    elif what < 0.87:
        # A reload (or a reset): another list, with equal or other messages.
        history = [Message(m.role, list(m.parts), m.interrupted) for m in history]
        if rng.random() < 0.5:
            history = history[: rng.randrange(0, len(history) + 1)]
    else:
        history.append(Message("assistant", [TextPart("answer " * rng.randrange(1, 300))]))
    return history


@pytest.mark.parametrize("seed", range(20))
def test_the_index_kept_up_to_date_reads_as_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    cal = Calibration()
    history: list[Message] = []
    index = HistoryIndex()
    for n in range(120):
        history = _step(rng, history, n)
        index.sync(history)
        assert _fields(index) == _fields(HistoryIndex.of(history))
        for keep in (0, 50, 400, 10**6):
            assert choose_split(history, keep, cal, index) == reference_split(history, keep, cal)
        for keep_results, keep_tokens in ((1, 10), (3, 2000), (5, 10**6)):
            assert plan_clearing(
                history, keep_results, keep_tokens, cal, index
            ) == reference_clearing(history, keep_results, keep_tokens, cal)


def _clearing_compactor(sup: Supervisor) -> Compactor:
    """A compactor over the 32k guess of an unknown model's window: checked,
    never held back, and clearing a `_big_restored_session`'s old output."""
    return Compactor(
        _NoModel(),  # type: ignore[arg-type]
        sup,
        ContextWindow("unknown-model"),
        options=CompactionOptions(),
        max_output=8192,
    )


def _big_restored_session(n: int) -> Session:
    """A restored session of one long tool-using turn: too long for a
    32k-token window, and nothing a summary could take (one turn)."""
    s = Session("s1", Path("/w"), AwaitClientResult([]))
    s.history.append(user_text("Walk through every module."))
    for i in range(n):
        call = ToolCall(f"c{i}", "read_file", {"path": f"m{i}.py"})
        s.history.append(Message("assistant", [TextPart(f"Reading {i}."), ToolCallPart(call)]))
        s.history.append(Message("user", [ToolResultPart(call.id, "x" * 2000)]))
    return s


class _NoModel:
    name = "none"

    def stream(self, request: ModelRequest) -> object:
        raise AssertionError("no side query is expected")

    def warm(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_the_checks_before_a_request_measure_only_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    measured: list[Message] = []

    def counting(message: Message) -> int:
        measured.append(message)
        return message_bytes(message)

    monkeypatch.setattr(history_index, "message_bytes", counting)
    sup = Supervisor()
    c = _clearing_compactor(sup)
    s = _big_restored_session(500)
    seen: list[Update] = []
    await c.before_request(s, "system", [], seen.append)  # clears the old output
    c.after_reply(s)
    assert [u for u in seen if isinstance(u, CompactionReport) and u.status == "done"]
    for i in range(3):
        s.history.append(user_text(f"And module {i}?"))
        s.history.append(Message("assistant", [TextPart("Done.")]))
        measured.clear()
        await c.before_request(s, "system", [], seen.append)
        c.after_reply(s)
        # The two new messages and the one before them (a reminder may have
        # been attached to it; each check measures it again), not the 1,000 before.
        newest = s.history[-3:]
        assert measured and all(any(m is x for x in newest) for m in measured), len(measured)
    await sup.aclose()


async def test_the_checks_around_a_request_bring_the_index_up_to_date_once_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under active clearing (a long restored session over a guessed 32k
    window), the checks before a request and those after its reply each
    bring the index up to date once, not once per question they ask."""
    synced: list[int] = []
    real = HistoryIndex.sync

    def counting(self: HistoryIndex, history: list[Message]) -> None:
        synced.append(len(history))
        real(self, history)

    monkeypatch.setattr(HistoryIndex, "sync", counting)
    sup = Supervisor()
    c = _clearing_compactor(sup)
    s = _big_restored_session(500)
    seen: list[Update] = []
    await c.before_request(s, "system", [], seen.append)  # clears the old output
    c.after_reply(s)
    for i in range(3):
        s.history.append(user_text(f"And module {i}?"))
        synced.clear()
        await c.before_request(s, "system", [], seen.append)
        assert synced == [len(s.history)]
        s.history.append(Message("assistant", [TextPart("Done.")]))
        synced.clear()
        c.after_reply(s)
        assert synced == [len(s.history)]
    await sup.aclose()


class _Watched(list[Message]):
    """A history that records the length of each slice taken of it."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__(messages)
        self.sliced: list[int] = []

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            self.sliced.append(len(range(*i.indices(len(self)))))
        return super().__getitem__(i)


def test_bringing_the_index_up_to_date_copies_only_the_new_messages() -> None:
    """Checking that the history still starts with the messages indexed
    copies none of them (slicing the two prefixes to compare them touched
    every message, about 35 us at 1,000 messages in a daemon's heap)."""
    history = _Watched(_big_restored_session(500).history)
    index = HistoryIndex.of(history)
    for i in range(3):
        history.append(user_text(f"And module {i}?"))
        history.append(Message("assistant", [TextPart("Done.")]))
        history.sliced.clear()
        index.sync(history)
        assert max(history.sliced, default=0) <= 2, history.sliced
        assert _fields(index) == _fields(HistoryIndex.of(list(history)))
    # A message replaced further back (not the newest) is still seen.
    history[5] = Message("user", [ToolResultPart("c1", "cleared")])
    index.sync(history)
    assert _fields(index) == _fields(HistoryIndex.of(list(history)))


# --- a prompt that holds tool results is no split point -------------------------------------


def _older_cut_history() -> list[Message]:
    """An older transcript continued after a crash, as `load` reads it: the
    call the crash left unanswered got its interrupted result in the next
    prompt's message (`turn_ends.answer_missing`), which holds most of the
    history's bytes."""
    call = ToolCall("a", "run_command", {"command": "make test"})
    return [
        user_text("first"),
        Message("assistant", [TextPart("Hello.")]),
        user_text("fix it"),
        Message("assistant", [ToolCallPart(call)]),
        Message(
            "user",
            [ToolResultPart("a", INTERRUPTED_RESULT, True), TextPart("go on " + "g" * 8000)],
        ),
        Message("assistant", [TextPart("Done.")]),
    ]


def _valid_for_both_apis(history: list[Message]) -> None:
    """Raises the model server's BadRequest, in each API's words, if a call
    and its result are parted (as OpenAI and Anthropic refuse them)."""
    check_openai({"model": "test-model", "messages": to_chat_messages("", history)}, ModelRules())
    check_anthropic({"messages": to_anthropic_messages(history)}, Signer())


def test_a_prompt_that_holds_tool_results_is_no_split_point() -> None:
    cal = Calibration()
    history = _older_cut_history()
    _valid_for_both_apis(history)
    assert prompt_starts(history) == [0, 2]
    index = HistoryIndex.of(history)
    assert index.starts == [0, 2]
    # The smallest tail that holds the merged prompt starts at the prompt
    # of the call it answers: call and result stay together.
    split = choose_split(history, 0, cal, index)
    assert split == 2
    report = CompactionReport("done", "manual")
    compacted, _ = apply_compaction(history, [], CompactionRecord(split, "S", {}, {}, report))
    assert [m.role for m in compacted] == ["user", "user", "assistant", "user", "assistant"]
    assert compacted[3].tool_results[0].tool_call_id == "a"
    _valid_for_both_apis(compacted)


def test_an_incremental_index_skips_a_prompt_that_holds_tool_results() -> None:
    history = _older_cut_history()
    index = HistoryIndex()
    for n in range(1, len(history) + 1):
        growing = history[:n]
        index.sync(growing)
        assert index.starts == [i for i in (0, 2) if i < n]
        if n == 5:
            # A reminder attached in place to the merged prompt while it is
            # the newest message (a delivery point) leaves it no start.
            growing[-1].parts.append(ReminderPart("memo", "memory"))
            index.sync(growing)
            assert index.starts == [0, 2]
    history.append(user_text("and the tests?"))
    index.sync(history)
    assert index.starts == [0, 2, 6]
    assert _fields(index) == _fields(HistoryIndex.of(history))


def test_a_summary_recorded_at_a_prompt_that_holds_results_leaves_them_out() -> None:
    """A compaction record written before the rule (its split at the merged
    prompt): the results whose calls the summary replaced are left out, the
    prompt's words kept, so the history is valid again."""
    history = _older_cut_history()
    report = CompactionReport("done", "manual")
    compacted, _ = apply_compaction(history, [], CompactionRecord(4, "S", {}, {}, report))
    assert [m.role for m in compacted] == ["user", "user", "assistant"]
    assert compacted[1].tool_results == []
    assert compacted[1].text == history[4].text
    assert history[4].tool_results  # the original is untouched
    _valid_for_both_apis(compacted)
    # Without the fix the same tail is refused: the check can fail.
    with pytest.raises(BadRequest, match="tool"):
        _valid_for_both_apis([compacted[0], history[4], history[5]])
