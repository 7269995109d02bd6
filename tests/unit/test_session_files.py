"""Forking and deleting transcripts (`agentd.session_files`, the `fork` record
of `agentd.transcript`): what a fork restores, what extraction sees of it,
and what a deletion removes (and never follows)."""

from __future__ import annotations

import base64
import fcntl
import os
from pathlib import Path

import pytest

from agentd.events import PlanEntry, PlanUpdated, PromptEnded, UsageReport
from agentd.messages import ImagePart, Message, TextPart, ToolCall, ToolCallPart, ToolResultPart
from agentd.session_files import LiveSessions, delete_session_files, write_fork
from agentd.transcript import (
    ForkBase,
    SessionCatalog,
    TranscriptWriter,
    fork_lines,
    images_dir,
    load,
    meta_bytes,
    read_from,
    sessions_dir,
    summary_message,
    valid_session_id,
)
from agentd.turn_ends import finished_length

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-pixels").decode()


def msg(role: str, text: str) -> Message:
    return Message(role, [TextPart(text)])  # type: ignore[arg-type]


def source_session(home: Path, root: Path) -> Path:
    """A finished turn with an image, a usage note and a plan, then the start
    of a second prompt (its user line) that a fork must leave out."""
    path = sessions_dir(root, home) / "src.jsonl"
    w = TranscriptWriter(path, "src", root)
    w.append(Message("user", [TextPart("look at this"), ImagePart("image/png", PNG)]))
    w.append(msg("assistant", "a pixel"))
    w.note(UsageReport(10, 2, 12))
    w.note(PlanUpdated([PlanEntry("check the pixel", "high", "in_progress")]))
    w.config(mode="ask")
    w.append(msg("user", "half a turn"))
    w.close()
    return path


def test_a_fork_restores_the_sources_finished_turns_and_shares_its_images(
    tmp_path: Path,
) -> None:
    home, root = tmp_path / "home", tmp_path / "w"
    path = source_session(home, root)
    stored = load(path, images=False, end=2)
    assert stored is not None and len(stored.history) == 2
    base = ForkBase.of("src", stored)
    target = sessions_dir(root, home) / "fk.jsonl"
    hashes = [p.sha256 for m in base.history for p in m.images]
    write_fork(
        target,
        fork_lines(base, "fk", root, {"mode": "ask"}),
        meta_bytes("fk", root, base.title),
        hashes,
        path,
    )

    fork = load(target)
    whole = load(path, end=2)
    assert fork is not None and whole is not None
    assert fork.session_id == "fk" and fork.history == whole.history
    assert fork.history[0].images[0].data == PNG  # read back from the fork's own folder
    assert fork.notes == whole.notes and fork.plan == whole.plan
    assert (fork.mode, fork.turns, fork.tokens_used, fork.title) == ("ask", 1, 12, "look at this")
    assert fork.total == 0  # its own messages count from 0
    (digest,) = hashes
    linked, original = images_dir(target) / digest, images_dir(path) / digest
    assert os.stat(linked).st_ino == os.stat(original).st_ino
    # Extraction reads message lines only: the copied turn stays the source's.
    assert read_from(target, 0).messages == []
    # The listing reads the meta file written with it.
    listed = {i.session_id: i.title for i in SessionCatalog(home).list(root)}
    assert listed == {"src": "look at this", "fk": "look at this"}
    with pytest.raises(FileExistsError):
        write_fork(target, b"", b"", [], None)


def test_a_session_id_is_never_a_path() -> None:
    assert valid_session_id("0123abcd-ef_9")
    for bad in ("", "..", "a/b", "a\\b", "é", "\ud800", "x\x00", "x" * 129):
        assert not valid_session_id(bad)


def test_a_discarded_writer_never_brings_its_file_back(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(msg("user", "hi"))
    w.discard()
    path.unlink()
    assert w.append(msg("assistant", "late")) == 1
    w.note(UsageReport(1, 1, 2))
    w.flush()
    w.write_due_meta()
    w.sync()
    w.close()
    assert list(tmp_path.iterdir()) == []


def test_delete_removes_every_copy_inside_the_sessions_folders_and_follows_no_link(
    tmp_path: Path,
) -> None:
    home, outside = tmp_path / "home", tmp_path / "outside"
    (outside / "sessions").mkdir(parents=True)
    (outside / "sessions" / "x.jsonl").write_text("not agentd's")
    (outside / "keep").write_text("precious")
    for project in ("a", "b"):
        folder = home / "projects" / project / "sessions"
        folder.mkdir(parents=True)
        (folder / "x.jsonl").write_text("{}\n")
        (folder / "x.meta.json").write_text("{}")
        (folder / "y.jsonl").write_text("{}\n")
    images = home / "projects" / "a" / "sessions" / "x.images"
    images.mkdir()
    (images / "link").symlink_to(outside / "keep")
    (home / "projects" / "c").symlink_to(outside, target_is_directory=True)
    (home / "projects" / "d").mkdir()
    (home / "projects" / "d" / "sessions").symlink_to(outside / "sessions")

    assert delete_session_files("x", home) == 2
    for project in ("a", "b"):
        left = sorted(p.name for p in (home / "projects" / project / "sessions").iterdir())
        assert left == ["y.jsonl"]
    assert (outside / "keep").read_text() == "precious"
    assert (outside / "sessions" / "x.jsonl").read_text() == "not agentd's"
    assert delete_session_files("x", home) == 0
    with pytest.raises(ValueError):
        delete_session_files("../x", home)


def test_a_prompt_that_had_not_ended_is_not_copied(tmp_path: Path) -> None:
    """A transcript read while another daemon ran a prompt in it (or left by a
    crash): the fork starts from the last finished prompt, never with a tool
    call that has no result; a prompt that ended cancelled mid-tool is kept."""
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(msg("user", "first"))
    w.append(msg("assistant", "done"))
    w.note(PromptEnded("end_turn"))
    w.append(msg("user", "second"))
    w.append(Message("assistant", [ToolCallPart(call)]))
    w.append(Message("user", [ToolResultPart("c1", "cancelled", True)]))
    w.note(PromptEnded("cancelled"))
    w.append(msg("user", "third"))
    w.append(Message("assistant", [TextPart("let me look"), ToolCallPart(call)]))
    w.close()
    loaded = load(path)
    assert loaded is not None and loaded.turns == 3
    base = ForkBase.of("s", loaded)
    assert [m.text for m in base.history] == ["first", "done", "second", "", ""]
    assert base.turns == 2
    assert isinstance(base.notes[-1][1], PromptEnded) and base.notes[-1][0] == 5
    # Older transcripts have no end notes: an answer without tool calls ends a prompt.
    history = [msg("user", "a"), msg("assistant", "b"), msg("user", "c")]
    assert finished_length(history, []) == 2
    assert finished_length(history[:2], []) == 2
    assert finished_length([summary_message("the story so far")], []) == 1
    tail = [summary_message("so far"), msg("user", "c"), Message("assistant", [ToolCallPart(call)])]
    assert finished_length(tail, []) == 1


OLDER_MERGED = Path(__file__).resolve().parents[1] / "data" / "older-merged-prompt.jsonl"


def test_a_fork_of_an_older_transcript_keeps_the_turn_its_merged_prompt_closed() -> None:
    """Written before cut prompts were closed: "fix it" made a call a crash
    left unanswered, and the next prompt ("go on") was written right after
    it (`load` folds the interrupted result into that prompt's message),
    then its own turn had not ended. The fork keeps "fix it" with its call
    and result, leaves "go on" out, and counts the turns it holds."""
    loaded = load(OLDER_MERGED)
    assert loaded is not None and loaded.turns == 3
    merged = loaded.history[4]
    assert merged.text == "go on" and [r.tool_call_id for r in merged.tool_results] == ["call_cut"]
    assert finished_length(loaded.history, loaded.notes) == 4
    base = ForkBase.of("older-merged-prompt", loaded)
    assert [m.role for m in base.history] == ["user", "assistant", "user", "assistant", "user"]
    assert [m.text for m in base.history] == ["first question", "Hello.", "fix it", "", ""]
    assert [r.tool_call_id for r in base.history[-1].tool_results] == ["call_cut"]
    assert base.turns == 2
    assert [i for i, _ in base.notes] == [2]  # the usage note of the first turn


@pytest.mark.skipif(not hasattr(fcntl, "F_OFD_SETLK"), reason="open file description locks")
def test_a_session_held_by_one_daemon_cannot_be_claimed_by_another(tmp_path: Path) -> None:
    """Two daemons' `LiveSessions` on one home (here two descriptors, which
    conflict as two processes do)."""
    here, there = LiveSessions(tmp_path), LiveSessions(tmp_path)
    try:
        assert there.hold("s1") and there.hold("s1") and there.hold("s2")
        assert not here.claim("s1")
        assert here.hold("s1")  # open in both: both only read the byte
        assert not here.claim("s1")
        there.release("s1")
        assert here.claim("s1")  # its own hold does not count
        assert not there.hold("s1")  # being deleted
        here.release("s1")
        here.unclaim("s1")
        assert there.hold("s1")
        assert not here.claim("s2") and not here.claim("s1")
        there.close()  # a daemon that ends lets go of all
        assert here.claim("s1") and here.claim("s2")
    finally:
        here.close()
        there.close()
