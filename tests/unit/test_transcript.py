"""Transcripts: append-only JSON lines, monotonic offsets across resets, torn lines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd.messages import Message, TextPart, ToolCall, ToolCallPart
from agentd.transcript import (
    EMPTY_TITLE,
    SessionCatalog,
    TranscriptWriter,
    load,
    read_from,
    read_slice,
    sessions_dir,
)


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


def test_notes_after_the_last_reset_are_loaded_in_place_with_the_token_count(
    tmp_path: Path,
) -> None:
    from agentd.events import MemoryDelivered, PromptEnded, UsageReport

    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(msg("user", "before the reset"))
    w.note(UsageReport(1, 1, 2))
    w.reset()
    w.append(msg("user", "q"))
    w.note(MemoryDelivered("user_query", "local", ["/m/a.md"]))
    w.append(msg("assistant", "a"))
    w.note(UsageReport(10, 5, 15))
    w.note(PromptEnded("cancelled"))
    w.close()
    with path.open("a") as f:
        f.write('{"type":"note","ts":1,"note":{"kind":"unknown"}}\n')  # dropped, not fatal
    loaded = load(path)
    assert loaded is not None
    assert loaded.notes == [
        (1, MemoryDelivered("user_query", "local", ["/m/a.md"])),
        (2, UsageReport(10, 5, 15)),
        (2, PromptEnded("cancelled")),
    ]
    assert loaded.tokens_used == 15
    # Notes take no offset: extraction cursors still count messages only.
    assert loaded.total == 3 and [o for o, _ in read_slice(path, 0)] == [0, 1, 2]


def test_replay_puts_notes_where_they_happened_and_cancelled_calls_stay_cancelled() -> None:
    from agentd.agent.core import replay
    from agentd.agent.turn import CANCELLED_RESULT
    from agentd.events import (
        MemoryDelivered,
        MessageChunk,
        Note,
        PromptEnded,
        ToolCallStarted,
        ToolCallUpdate,
        UsageReport,
        UserMessage,
    )
    from agentd.messages import ToolResultPart

    history = [
        msg("user", "run it"),
        Message("assistant", [ToolCallPart(ToolCall("c1", "run_command", {"command": "x"}))]),
        Message("user", [ToolResultPart("c1", CANCELLED_RESULT, True)]),
    ]
    notes: list[tuple[int, Note]] = [
        (1, MemoryDelivered("user_query", "local", ["/m/a.md"])),
        (2, UsageReport(3, 4, 7)),
        (3, PromptEnded("cancelled")),
    ]
    assert list(replay(history, {"run_command"}, notes)) == [
        UserMessage("run it"),
        MemoryDelivered("user_query", "local", ["/m/a.md"]),
        ToolCallStarted("c1", "run_command", {"command": "x"}, "client"),
        UsageReport(3, 4, 7),
        ToolCallUpdate("c1", "cancelled"),
        PromptEnded("cancelled"),
    ]
    assert list(replay([msg("assistant", "hi")], set())) == [MessageChunk("hi")]


def test_the_listed_title_is_that_of_the_conversation_since_the_last_reset(
    tmp_path: Path,
) -> None:
    from agentd.transcript import list_sessions, sessions_dir

    root = tmp_path / "ws"
    root.mkdir()
    path = sessions_dir(root, tmp_path) / "s1.jsonl"
    w = TranscriptWriter(path, "s1", root)
    w.append(msg("user", "the old question"))
    w.reset()
    w.sync()
    assert [i.title for i in list_sessions(root, tmp_path)] == ["(empty session)"]
    w.append(msg("user", "the new question"))
    w.close()
    assert [i.title for i in list_sessions(root, tmp_path)] == ["the new question"]


def _fifty(tmp_path: Path) -> tuple[Path, list[int]]:
    from agentd.events import UsageReport

    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    for i in range(50):
        w.append(msg("user" if i % 2 == 0 else "assistant", f"message {i} " + "x" * i))
        if i % 7 == 0:
            w.note(UsageReport(1, 1, i))  # lines that are not messages, between them
    w.close()
    whole = read_from(path, 0)
    assert [o for o, _ in whole.messages] == list(range(50))
    assert whole.bytes_read == path.stat().st_size
    return path, whole.positions


def test_read_from_a_position_reads_only_the_bytes_after_it(tmp_path: Path) -> None:
    path, positions = _fifty(tmp_path)
    size = path.stat().st_size
    piece = read_from(path, 40, positions[39])
    assert [(o, m.text) for o, m in piece.messages] == [
        (o, m.text) for o, m in read_slice(path, 40)
    ]
    assert piece.bytes_read == size - positions[39]
    assert piece.positions == positions[40:]
    # At the end: nothing to read but what follows the last message (a note).
    empty = read_from(path, 50, positions[49])
    assert empty.messages == [] and empty.bytes_read == size - positions[49] > 0


def test_a_wrong_position_costs_a_full_read_never_a_message(tmp_path: Path) -> None:
    path, positions = _fifty(tmp_path)
    size = path.stat().st_size
    for hint in (positions[39] - 3, size + 10, -1, positions[41], positions[10]):
        piece = read_from(path, 40, hint)
        assert [o for o, _ in piece.messages] == list(range(40, 50)), hint
        assert piece.positions == positions[40:], hint


def test_read_from_stops_at_end_and_before_an_unfinished_line(tmp_path: Path) -> None:
    path, positions = _fifty(tmp_path)
    piece = read_from(path, 40, positions[39], end=45)
    assert [o for o, _ in piece.messages] == [40, 41, 42, 43, 44]
    with path.open("a") as f:
        f.write('{"type":"message","offset":50,"ts":1,"message":{"role":"user","parts":[]}}')
    tail = read_from(path, 49, positions[48])
    # The last line has no newline yet (being written): not read, not passed.
    assert [o for o, _ in tail.messages] == [49] and tail.positions == [positions[49]]


def test_thinking_keeps_its_signature_redacted_data_and_source(tmp_path: Path) -> None:
    from agentd.events import UsageReport
    from agentd.messages import Part, ThinkingPart, message_from_json

    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    parts: list[Part] = [
        ThinkingPart("I read it.", signature="c2lnbmVk"),
        ThinkingPart("", redacted="b3BhcXVl"),
        ThinkingPart("hmm", source="reasoning_content"),
        TextPart("Done."),
    ]
    w.append(Message("assistant", list(parts)))
    w.note(UsageReport(100, 5, 105, cache_read_tokens=90, cache_write_tokens=0))
    w.note(UsageReport(10, 5, 120))
    w.close()
    loaded = load(path)
    assert loaded is not None
    assert loaded.history == [Message("assistant", parts)]
    assert [n for _, n in loaded.notes] == [
        UsageReport(100, 5, 105, cache_read_tokens=90, cache_write_tokens=0),
        UsageReport(10, 5, 120, cache_read_tokens=None, cache_write_tokens=None),
    ]
    # Lines written before thinking had these fields still load.
    old = {"role": "assistant", "parts": [{"type": "thinking", "text": "t"}]}
    assert message_from_json(old) == Message("assistant", [ThinkingPart("t")])


def test_a_new_sessions_meta_file_is_written_once_and_off_the_prompts_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first message of a new session creates the transcript; its meta
    file (the listing's cache) is not written then, on the prompt's path to
    its model request, but by `write_due_meta` (which the core calls once the
    request is out), once, with the title."""
    replaced: list[str] = []
    real_replace = os.replace

    def counting(src: Any, dst: Any) -> None:
        replaced.append(Path(dst).name)
        real_replace(src, dst)

    # agentd.transcript calls os.replace through the os module: patch it there.
    monkeypatch.setattr(os, "replace", counting)
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    path, meta = folder / "s1.jsonl", folder / "s1.meta.json"
    w = TranscriptWriter(path, "s1", root)
    w.append(Message("user", [TextPart("why does the build fail?")]))
    assert path.exists() and replaced == []
    # Listed before the meta file is written: the title comes from the transcript.
    listed = SessionCatalog(tmp_path).list(root)
    assert [i.title for i in listed] == ["why does the build fail?"]
    w.write_due_meta()
    w.write_due_meta()
    assert replaced == ["s1.meta.json"]
    assert json.loads(meta.read_text())["title"] == "why does the build fail?"
    # Once the meta file exists, a title change is written before its line:
    # a listing would believe a meta file that the transcript contradicts.
    w.reset()
    assert json.loads(meta.read_text())["title"] == EMPTY_TITLE
    w.append(Message("user", [TextPart("second question")]))
    assert json.loads(meta.read_text())["title"] == "second question"
    w.close()
    # A writer closed before its meta file was written writes it then.
    w2 = TranscriptWriter(folder / "s2.jsonl", "s2", root)
    w2.append(Message("user", [TextPart("never sent")]))
    w2.close()
    assert json.loads((folder / "s2.meta.json").read_text())["title"] == "never sent"


def test_a_new_sessions_first_line_creates_its_file_without_asking_the_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer for an id made just now (`fresh`) knows that neither the
    transcript nor its meta file exists: its first line stats neither and
    creates the file, and its folder when missing, with the header first; the
    meta file waits for `write_due_meta` as for any new transcript."""
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    path = folder / "s1.jsonl"
    stats: list[str] = []
    real_stat = Path.stat

    def stat(self: Path, **kwargs: Any) -> os.stat_result:
        stats.append(self.name)
        return real_stat(self, **kwargs)

    w = TranscriptWriter(path, "s1", root, fresh=True)
    w.config(mode="ask")  # chosen before the first prompt: still no file
    assert not folder.exists()
    monkeypatch.setattr(Path, "stat", stat)
    w.append(msg("user", "the first question"))
    monkeypatch.undo()
    assert [name for name in stats if name.startswith("s1.")] == []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "config", "message"]
    assert records[0]["sessionId"] == "s1" and records[1]["mode"] == "ask"
    assert not (folder / "s1.meta.json").exists()
    w.write_due_meta()
    assert json.loads((folder / "s1.meta.json").read_text())["title"] == "the first question"
    w.append(msg("assistant", "an answer"))
    w.close()
    loaded = load(path)
    assert loaded is not None and [m.text for m in loaded.history] == [
        "the first question",
        "an answer",
    ]
    assert loaded.mode == "ask"


def test_a_new_sessions_writer_that_finds_a_file_there_appends_to_it_as_it_is(
    tmp_path: Path,
) -> None:
    """The file of an id thought new exists after all (an id given twice, a
    file made by hand): it is appended to with no second header, and its meta
    file gets the new title before the line, as for any existing transcript."""
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    path = folder / "s1.jsonl"
    first = TranscriptWriter(path, "s1", root)
    first.append(msg("user", "written before"))
    first.write_due_meta()
    first.close()
    again = TranscriptWriter(path, "s1", root, offset=1, fresh=True)
    again.append(msg("user", "written after"))
    assert json.loads((folder / "s1.meta.json").read_text())["title"] == "written after"
    again.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "message", "message"]
    assert [o for o, _ in read_slice(path, 0)] == [0, 1]


def test_a_symlink_where_a_new_transcript_goes_is_never_followed(tmp_path: Path) -> None:
    """A link planted at a new session's transcript path is refused: nothing is
    written through it, and the line is kept for a later write (with no
    header: the path held a file, as a stat would have said)."""
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    folder.mkdir(parents=True)
    target = tmp_path / "elsewhere.txt"
    target.write_text("untouched\n")
    (folder / "s1.jsonl").symlink_to(target)
    w = TranscriptWriter(folder / "s1.jsonl", "s1", root, fresh=True)
    with pytest.raises(OSError):
        w.append(msg("user", "q"))
    assert target.read_text() == "untouched\n"
    assert w.pending == 1


def test_a_new_sessions_file_made_ahead_is_no_session_until_its_first_line(
    tmp_path: Path,
) -> None:
    """`prepare` makes a new session's file ahead, empty: no listing shows it
    and no load finds it (a session never prompted is no session), the first
    line writes the header first, and an unused one is removed at close, or
    when pushed out by newer ones. The folders made for it go with it
    (`test_the_folders_made_ahead_go_with_an_unused_file`)."""
    from agentd.transcript import OpenFiles

    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    files = OpenFiles(limit=2)
    missing = TranscriptWriter(folder / "s0.jsonl", "s0", root, files=files, fresh=True)
    missing.prepare()
    assert os.listdir(folder) == ["s0.jsonl"]
    missing.close()
    assert not (tmp_path / "projects").exists()
    folder.mkdir(parents=True)
    used = TranscriptWriter(folder / "s1.jsonl", "s1", root, files=files, fresh=True)
    unused = TranscriptWriter(folder / "s2.jsonl", "s2", root, files=files, fresh=True)
    used.prepare()
    unused.prepare()
    assert sorted(os.listdir(folder)) == ["s1.jsonl", "s2.jsonl"]
    assert (folder / "s2.jsonl").stat().st_size == 0
    assert SessionCatalog(tmp_path).list(root) == []
    assert load(folder / "s2.jsonl") is None
    used.append(msg("user", "the first question"))
    records = [json.loads(line) for line in (folder / "s1.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "message"]
    assert records[0]["sessionId"] == "s1"
    used.append(msg("assistant", "an answer"))
    unused.close()
    used.close()
    assert sorted(os.listdir(folder)) == ["s1.jsonl", "s1.meta.json"]
    loaded = load(folder / "s1.jsonl")
    assert loaded is not None and [m.text for m in loaded.history] == [
        "the first question",
        "an answer",
    ]
    # Past the limit, the oldest file made ahead goes; its session's first
    # line then creates the file as usual.
    a, b, c = (
        TranscriptWriter(folder / f"{n}.jsonl", n, root, files=files, fresh=True)
        for n in ("a", "b", "c")
    )
    for w in (a, b, c):
        w.prepare()
    assert not (folder / "a.jsonl").exists()
    assert (folder / "b.jsonl").exists() and (folder / "c.jsonl").exists()
    a.append(msg("user", "pushed out, still kept"))
    assert [r["type"] for r in map(json.loads, (folder / "a.jsonl").read_text().splitlines())] == [
        "session",
        "message",
    ]
    for w in (a, b, c):
        w.close()
    assert not (folder / "b.jsonl").exists() and not (folder / "c.jsonl").exists()
    # A file that appeared under the name first is kept, and appended to.
    (folder / "s3.jsonl").write_text('{"type":"session","sessionId":"s3"}\n')
    late = TranscriptWriter(folder / "s3.jsonl", "s3", root, files=files, fresh=True)
    late.prepare()
    late.append(msg("user", "after all"))
    late.close()
    records = [json.loads(line) for line in (folder / "s3.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "message"]
    # An empty one made by hand still gets the session's header.
    (folder / "s4.jsonl").write_bytes(b"")
    hand = TranscriptWriter(folder / "s4.jsonl", "s4", root, files=files, fresh=True)
    hand.append(msg("user", "into an empty file"))
    hand.close()
    loaded = load(folder / "s4.jsonl")
    assert loaded is not None and [m.text for m in loaded.history] == ["into an empty file"]


def test_the_folders_made_ahead_go_with_an_unused_file(tmp_path: Path) -> None:
    """A project's first session: `prepare` makes the missing folders and
    the file in them; an unused file's close removes the folders it made
    while they are empty (not those that were there, not one holding
    another file), and a file that gets its first line keeps its folder for
    good (the first line writes, it makes nothing)."""
    from agentd.transcript import OpenFiles

    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    (tmp_path / "projects").mkdir()
    files = OpenFiles()

    def made_ahead(name: str) -> TranscriptWriter:
        w = TranscriptWriter(folder / f"{name}.jsonl", name, root, files=files, fresh=True)
        w.prepare()
        assert (folder / f"{name}.jsonl").stat().st_size == 0
        return w

    a, b = made_ahead("a"), made_ahead("b")
    a.close()
    assert os.listdir(folder) == ["b.jsonl"]  # b's file is in it: kept
    b.close()
    assert os.listdir(tmp_path / "projects") == []  # made for them: gone; `projects` was there
    # Something else in the folder meanwhile: never removed.
    c = made_ahead("c")
    (folder / "notes.txt").write_text("the user's\n")
    c.close()
    assert os.listdir(folder) == ["notes.txt"]
    (folder / "notes.txt").unlink()
    folder.rmdir()
    # Prompted: its folder stays after the other one made ahead there goes.
    used, unused = made_ahead("used"), made_ahead("unused")
    used.append(msg("user", "the first question"))
    unused.close()
    used.close()
    assert sorted(os.listdir(folder)) == ["used.jsonl", "used.meta.json"]


def test_a_file_made_ahead_has_its_first_block_and_is_still_no_session(
    tmp_path: Path,
) -> None:
    """The file made ahead gets its first block (`fallocate`, size kept 0):
    still empty, so no listing shows it, no load finds it and the next
    start removes it when its daemon is gone; the first line is the file's
    whole content (no zeros before or after it)."""
    from agentd.files import bind_fallocate, reserve_first_block
    from agentd.transcript import OpenFiles, collect_unused_transcripts

    if not bind_fallocate():
        pytest.skip("no fallocate in this C library")
    fd = os.open(tmp_path / "probe", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if not reserve_first_block(fd):
            pytest.skip("this file system gives no blocks ahead")
    finally:
        os.close(fd)
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    folder.mkdir(parents=True)
    files = OpenFiles()
    used = TranscriptWriter(folder / "s1.jsonl", "s1", root, files=files, fresh=True)
    used.prepare()
    st = (folder / "s1.jsonl").stat()
    assert st.st_size == 0 and st.st_blocks > 0
    assert SessionCatalog(tmp_path).list(root) == []
    assert load(folder / "s1.jsonl") is None
    used.append(msg("user", "the first question"))
    data = (folder / "s1.jsonl").read_bytes()
    assert b"\0" not in data and data.endswith(b"\n")
    assert (folder / "s1.jsonl").stat().st_size == len(data)
    assert [r["type"] for r in map(json.loads, data.splitlines())] == ["session", "message"]
    used.close()
    # A daemon killed before the first prompt left one, its block given, its lock gone.
    dead = OpenFiles()
    left = TranscriptWriter(folder / "s2.jsonl", "s2", root, files=dead, fresh=True)
    left.prepare()
    assert (folder / "s2.jsonl").stat().st_blocks > 0
    for spare in dead._spares.values():
        spare.close()  # as the kernel does at a SIGKILL: no removal
    assert collect_unused_transcripts(tmp_path) == 1
    assert not (folder / "s2.jsonl").exists()


def test_the_start_up_removes_only_a_dead_daemons_unused_files(tmp_path: Path) -> None:
    """`collect_unused_transcripts` removes an empty transcript left by a
    daemon that died (its lock gone with it), never one a live daemon holds
    (made ahead, locked), nor a transcript with lines, nor an empty one that
    has a meta file, nor a FIFO or a symlink in a transcript's place."""
    from agentd.transcript import OpenFiles, collect_unused_transcripts

    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    folder.mkdir(parents=True)
    (folder / "dead.jsonl").write_bytes(b"")
    (folder / "metad.jsonl").write_bytes(b"")
    (folder / "metad.meta.json").write_text("{}")
    os.mkfifo(folder / "fifo.jsonl")
    (tmp_path / "outside.jsonl").write_bytes(b"")
    (folder / "link.jsonl").symlink_to(tmp_path / "outside.jsonl")
    kept = TranscriptWriter(folder / "kept.jsonl", "kept", root, fresh=True)
    kept.append(msg("user", "a real session"))
    kept.close()
    files = OpenFiles()
    live = TranscriptWriter(folder / "live.jsonl", "live", root, files=files, fresh=True)
    live.prepare()
    assert collect_unused_transcripts(tmp_path) == 1
    assert sorted(os.listdir(folder)) == [
        "fifo.jsonl",
        "kept.jsonl",
        "kept.meta.json",
        "link.jsonl",
        "live.jsonl",
        "metad.jsonl",
        "metad.meta.json",
    ]
    assert (tmp_path / "outside.jsonl").exists()
    live.append(msg("user", "prompted after the other daemon started"))
    live.close()
    loaded = load(folder / "live.jsonl")
    assert loaded is not None and [m.text for m in loaded.history] == [
        "prompted after the other daemon started"
    ]


def test_a_line_is_written_whole_through_short_writes(tmp_path: Path) -> None:
    """Transcripts are written unbuffered, one `write` per line; a write that
    takes part of the bytes is followed by another for the rest, and a write
    that takes none is a failure: the line is kept and written whole later."""
    import io

    from agentd.transcript import OpenFiles

    class Trickle(io.FileIO):
        # At most `step` bytes a call; 0 (nothing taken) while `step` is 0.
        step = 5

        def write(self, data: Any) -> int:
            return super().write(bytes(data)[: Trickle.step]) if Trickle.step else 0

    class TrickleFiles(OpenFiles):
        def get(self, path: Path, *, create: bool = True) -> Any:
            f = super().get(path, create=create)
            if not isinstance(f, Trickle):
                f.close()
                f = self._keep(path, Trickle(os.open(path, os.O_WRONLY | os.O_APPEND), "a"))
            return f

    path = tmp_path / "s.jsonl"
    writer = TranscriptWriter(path, "s", tmp_path, files=TrickleFiles(limit=1))
    writer.append(msg("user", "a question long enough to take many writes"))
    Trickle.step = 0
    with pytest.raises(OSError):
        writer.append(msg("assistant", "the answer"))
    assert writer.pending == 1
    Trickle.step = 7
    writer.append(msg("user", "and the next one"))
    assert writer.pending == 0
    writer.close()
    assert [(o, m.text) for o, m in read_slice(path, 0)] == [
        (0, "a question long enough to take many writes"),
        (1, "the answer"),
        (2, "and the next one"),
    ]


def test_no_message_the_wire_accepts_makes_a_line_a_reader_skips() -> None:
    from agentd.acp.rpc import MAX_LINE
    from agentd.lsp.transport import MAX_BODY
    from agentd.transcript import MAX_LINE_BYTES

    assert max(MAX_BODY, MAX_LINE) < MAX_LINE_BYTES


def test_a_line_past_the_bound_is_skipped_in_pieces_and_the_rest_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import io

    from agentd.transcript import _lines

    data = b"short\n" + b"x" * 25 + b"\n" + b"exactly10\n" + b"y" * 11 + b"\nend" + b"z" * 30
    got = list(_lines(io.BufferedReader(io.BytesIO(data), 4), tmp_path / "t.jsonl", limit=10))
    # Over-long lines come blank (with their lengths, so positions stay
    # true); the one the file ends inside has no newline, as a torn line.
    assert got == [(b"short\n", 6), (b"\n", 26), (b"exactly10\n", 10), (b"\n", 12), (b"", 33)]
    assert sum(n for _, n in got) == len(data)
    assert "t.jsonl: the line at byte 6 is 26 bytes" in caplog.text
