"""Prompts a crash cut short: closed when their session is loaded, valid for
both providers' encodings, written back only with the session's next line,
and read back the same way; a torn last line never swallows the next one."""

from __future__ import annotations

from pathlib import Path

from agentd.events import CompactionReport, PromptEnded, UsageReport
from agentd.messages import Message, ReminderPart, TextPart, ToolCall, ToolCallPart, ToolResultPart
from agentd.providers.anthropic import to_anthropic_messages
from agentd.providers.openai import to_chat_messages
from agentd.transcript import CompactionRecord, TranscriptWriter, load
from agentd.turn_ends import (
    INTERRUPTED_RESULT,
    INTERRUPTED_SOURCE,
    closing,
    finished_length,
)


def prompt(text: str) -> Message:
    return Message("user", [TextPart(text)])


def calls(*ids: str) -> Message:
    return Message("assistant", [ToolCallPart(ToolCall(i, "run_command", {})) for i in ids])


def results(*ids: str) -> Message:
    return Message("user", [ToolResultPart(i, "ok") for i in ids])


def answer(text: str) -> Message:
    return Message("assistant", [TextPart(text)])


def test_a_prompt_cut_while_its_calls_ran_is_closed_with_interrupted_results() -> None:
    history = [prompt("fix it"), calls("a", "b")]
    closed = closing(history, [(2, UsageReport(1, 1, 2))])
    assert closed is not None
    message, ended = closed
    assert [(r.tool_call_id, r.content, r.is_error) for r in message.tool_results] == [
        ("a", INTERRUPTED_RESULT, True),
        ("b", INTERRUPTED_RESULT, True),
    ]
    assert [p.source for p in message.parts if isinstance(p, ReminderPart)] == [INTERRUPTED_SOURCE]
    assert isinstance(ended, PromptEnded) and ended.stop_reason == "error"
    assert ended.error is not None and ended.error["kind"] == "interrupted"
    # What the next request sends is valid for both APIs: every call answered
    # right after it, and the next prompt after the results.
    after = [*history, message, prompt("go on")]
    chat = to_chat_messages("", after)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "user", "user"]
    blocks = to_anthropic_messages(after)
    assert [m["role"] for m in blocks] == ["user", "assistant", "user"]
    kinds = [b["type"] for b in blocks[2]["content"]]
    assert kinds == ["tool_result", "tool_result", "text", "text"]


def test_a_prompt_cut_while_the_model_streamed_is_closed_with_the_reminder_only() -> None:
    for history in ([prompt("fix it")], [prompt("fix it"), calls("a"), results("a")]):
        closed = closing(history, [])
        assert closed is not None
        message, _ = closed
        assert message.tool_results == []
        assert [type(p) for p in message.parts] == [ReminderPart]
        # The closing message is no prompt of its own: a fork still leaves
        # the cut prompt out, from its user message on.
        assert finished_length([*history, message], []) == 0


def test_a_prompt_that_ended_is_not_closed() -> None:
    assert closing([], []) is None
    assert closing([prompt("hi"), answer("hello")], []) is None
    cancelled = [prompt("hi"), calls("a"), results("a")]
    assert closing(cancelled, [(3, PromptEnded("cancelled"))]) is None


def test_the_closing_lines_wait_for_the_sessions_next_line_and_load_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(prompt("fix it"))
    w.append(calls("a"))
    w.close()
    written = path.read_bytes()
    loaded = load(path)
    assert loaded is not None
    closed = closing(loaded.history, loaded.notes)
    assert closed is not None

    # A load, then the daemon closes the session: nothing is written.
    w2 = TranscriptWriter(path, "s", tmp_path, offset=loaded.total)
    assert w2.close_cut_turn(*closed) == 2
    w2.close()
    assert path.read_bytes() == written

    # A load, then a line of the session's own: the closing lines go first.
    w3 = TranscriptWriter(path, "s", tmp_path, offset=loaded.total)
    w3.close_cut_turn(*closed)
    assert w3.append(prompt("go on")) == 3
    w3.close()
    again = load(path)
    assert again is not None
    assert again.history == [*loaded.history, closed[0], prompt("go on")]
    assert (again.notes[-1][0], again.notes[-1][1]) == (3, closed[1])
    assert closing(again.history, again.notes) is not None  # "go on" has no answer yet
    assert again.total == 4


def test_an_older_transcript_continued_after_a_crash_loads_valid_and_aligned(
    tmp_path: Path,
) -> None:
    """Written before cut prompts were closed: the next prompt right after the
    unanswered call, then a compaction whose split counts the history as it
    was live. The missing results join the prompt's message, no message is
    added, so the split still falls where it fell."""
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    for message in [prompt("fix it"), calls("a"), prompt("go on"), answer("done")]:
        w.append(message)
    w.close()
    loaded = load(path)
    assert loaded is not None and len(loaded.history) == 4
    merged = loaded.history[2]
    assert [(r.tool_call_id, r.content) for r in merged.tool_results] == [("a", INTERRUPTED_RESULT)]
    assert merged.text == "go on"
    roles = [m["role"] for m in to_chat_messages("", loaded.history)]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]

    w2 = TranscriptWriter(path, "s", tmp_path, offset=loaded.total)
    done = CompactionReport("done", "manual", 90, 30, summarized=3, summary="S")
    w2.compaction(CompactionRecord(3, "the story so far", None, {}, done))
    w2.close()
    compacted = load(path)
    assert compacted is not None
    assert compacted.history[0].parts == [ReminderPart("the story so far", "compaction")]
    assert [m.text for m in compacted.history[1:]] == ["done"]


def test_the_first_line_after_a_torn_one_starts_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(prompt("one"))
    w.close()
    with path.open("ab") as f:
        f.write(b'{"type":"message","offset":1,"ts":1,"mess')
    loaded = load(path)
    assert loaded is not None and loaded.torn
    assert [m.text for m in loaded.history] == ["one"]
    w2 = TranscriptWriter(path, "s", tmp_path, offset=loaded.total, torn=loaded.torn)
    w2.append(prompt("two"))
    w2.close()
    again = load(path)
    assert again is not None and not again.torn
    assert [m.text for m in again.history] == ["one", "two"]
