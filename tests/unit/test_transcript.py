"""Transcripts: append-only JSON lines, monotonic offsets across resets, torn lines."""

from __future__ import annotations

from pathlib import Path

from agentd.agent.messages import Message, TextPart, ToolCall, ToolCallPart
from agentd.agent.transcript import TranscriptWriter, load, read_slice


def msg(role: str, text: str) -> Message:
    return Message(role, [TextPart(text)])  # type: ignore[arg-type]


def test_offsets_survive_resets_and_slices_read_exactly(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(msg("user", "one"))
    w.append(msg("assistant", "two \u2028 with a line separator"))
    w.reset()
    w.append(msg("user", "three"))
    w.append(Message("assistant", [ToolCallPart(ToolCall("c", "read_file", {"path": "a"}))]))
    w.sync()
    w.close()
    loaded = load(path)
    assert loaded is not None
    assert [m.text for m in loaded.history] == ["three", ""]
    assert (loaded.history_start, loaded.total) == (2, 4)
    assert [(o, m.text) for o, m in read_slice(path, 1)] == [
        (1, "two \u2028 with a line separator"),
        (2, "three"),
        (3, ""),
    ]
    assert [o for o, _ in read_slice(path, 0, 2)] == [0, 1]
    # A writer reopened after a restart continues the offsets.
    w2 = TranscriptWriter(path, "s", tmp_path, offset=loaded.total)
    assert w2.append(msg("user", "four")) == 4
    w2.close()
    assert [o for o, _ in read_slice(path, 4)] == [4]


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(msg("user", "kept"))
    w.close()
    with path.open("a") as f:
        f.write('{"type":"message","offset":1,"ts":1,"message":{"role":"us')
    assert [m.text for _, m in read_slice(path, 0)] == ["kept"]
    loaded = load(path)
    assert loaded is not None and loaded.total == 1
