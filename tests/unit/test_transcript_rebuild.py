"""A session's transcript taken away behind the daemon is written again whole
(`TranscriptWriter._rebuild`): what each way of losing it leaves on disk."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd.events import PlanEntry, PlanUpdated
from agentd.messages import ImagePart, Message, Role, TextPart
from agentd.transcript import (
    EMPTY_TITLE,
    MAX_UNEXTRACTED_BYTES,
    ForkBase,
    OpenFiles,
    TranscriptWriter,
    images_dir,
    load,
    meta_path,
    read_from,
    sessions_dir,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n a picture").decode("ascii")


class Live:
    """What the core keeps of a session, and the writer it feeds."""

    def __init__(
        self, tmp_path: Path, sid: str, files: OpenFiles, *, keep_unextracted: bool = False
    ) -> None:
        root = tmp_path / "ws"
        root.mkdir(exist_ok=True)
        self.history: list[Message] = []
        self.plan: list[PlanEntry] = []
        self.summary: dict[str, Any] | None = None
        self.mode = "code"
        self.path = sessions_dir(root, tmp_path) / f"{sid}.jsonl"
        self.writer = TranscriptWriter(
            self.path,
            sid,
            root,
            files=files,
            fresh=True,
            snapshot=self.snapshot,
            keep_unextracted=keep_unextracted,
        )

    def snapshot(self) -> tuple[ForkBase, dict[str, Any]]:
        turns = sum(1 for m in self.history if m.role == "user")
        base = ForkBase(
            "ignored", list(self.history), [], self.plan, self.summary, turns, 7, EMPTY_TITLE
        )
        return base, {"mode": self.mode}

    def say(self, role: Role, text: str, *images: ImagePart) -> int:
        message = Message(role, [TextPart(text), *images])
        self.history.append(message)  # the core changes the session first
        return self.writer.append(message)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_removed_file_is_written_again_on_its_next_write(tmp_path: Path) -> None:
    """Pushed out of the open files, removed with its meta file and images:
    the next line writes header, state and settings under a temporary name
    renamed into place, the images again, the meta file; the line that found
    it gone is in the state (not written twice), the next ones count on."""
    files = OpenFiles(limit=1)
    s = Live(tmp_path, "s1", files)
    s.say("user", "look at this", ImagePart("image/png", PNG))
    s.say("assistant", "a picture")
    s.plan = [PlanEntry("step", "high", "pending")]
    s.writer.note(PlanUpdated(s.plan))
    s.writer.write_due_meta()  # the core's, once the request is out
    other = Live(tmp_path, "s2", files)
    other.say("user", "pushes s1 out")
    os.unlink(s.path)
    os.unlink(meta_path(s.path))
    for image in images_dir(s.path).iterdir():
        image.unlink()
    s.mode = "ask"
    assert s.say("user", "still there?") == 2
    assert s.say("assistant", "yes") == 3
    records = lines(s.path)
    assert [r["type"] for r in records] == ["session", "fork", "config", "message"]
    assert records[1]["offset"] == 3 and records[1]["title"] == "look at this"
    assert records[2]["mode"] == "ask" and records[3]["offset"] == 3
    loaded = load(s.path)
    assert loaded is not None
    assert [m.text for m in loaded.history] == ["look at this", "a picture", "still there?", "yes"]
    assert loaded.history[0].images[0].data == PNG
    assert (loaded.total, loaded.turns, loaded.tokens_used) == (4, 2, 7)
    assert loaded.plan == s.plan and loaded.mode == "ask"
    assert json.loads(meta_path(s.path).read_text())["title"] == "look at this"
    assert sorted(p.name for p in s.path.parent.iterdir() if p.name.startswith(".")) == []
    s.writer.close()
    other.writer.close()


def test_a_file_unlinked_renamed_or_replaced_while_open_is_found_when_checked(
    tmp_path: Path,
) -> None:
    """`check_file` (a prompt's start, `close`): the descriptor's file is no
    longer the one under the name. Before any line, or once deleted through
    agentd (`discard`), nothing is checked or written."""
    files = OpenFiles()
    s = Live(tmp_path, "s1", files)
    s.writer.check_file()
    assert not s.path.exists()  # a new session's file is its first prompt's
    s.say("user", "one")
    s.writer.check_file()
    assert [r["type"] for r in lines(s.path)] == ["session", "message"]
    for take_away in (
        os.unlink,
        lambda p: os.rename(p, p.with_name("moved.jsonl")),
        lambda p: p.with_name("other.jsonl").rename(p),
    ):
        (s.path.parent / "other.jsonl").write_text('{"type":"session","sessionId":"x"}\n')
        take_away(s.path)
        s.writer.check_file()
        loaded = load(s.path)
        assert loaded is not None and loaded.session_id == "s1"
        assert [m.text for m in loaded.history] == ["one"]
    s.writer.discard()
    os.unlink(s.path)
    s.writer.close()
    assert not s.path.exists()


def test_a_prompts_check_asks_the_kept_descriptor_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file behind a descriptor never changes: a check `fstat`s a kept
    file once (then only `lstat`s the name), and a file opened again or
    rebuilt once more; a removal is still found after checks that found none."""
    s = Live(tmp_path, "s1", OpenFiles())
    s.say("user", "one")
    fstat = os.fstat
    asked: list[int] = []

    def counted(fd: int) -> os.stat_result:
        asked.append(fd)
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", counted)
    for _ in range(3):
        s.writer.check_file()
    assert len(asked) == 1
    os.unlink(s.path)
    s.writer.check_file()  # found: rebuilt
    asked.clear()
    s.writer.check_file()
    assert asked == []  # the rebuilt file's identity was read as it was made
    loaded = load(s.path)
    assert loaded is not None and [m.text for m in loaded.history] == ["one"]
    s.writer.close()


def test_a_replaced_file_is_rebuilt_when_opened_again_and_a_reset_holds(
    tmp_path: Path,
) -> None:
    """Closed, then another file put under its name (an older copy a sync
    tool brought back): opened again, it is not appended to but replaced.
    A reset written into a rebuild leaves the cleared session."""
    files = OpenFiles(limit=1)
    s = Live(tmp_path, "s1", files)
    s.say("user", "one")
    s.writer.check_file()  # learns the file's identity
    old = s.path.read_bytes()
    other = Live(tmp_path, "s2", files)
    other.say("user", "pushes s1 out")
    s.path.unlink()
    s.path.write_bytes(old)  # the same bytes, another file
    s.say("assistant", "two")
    loaded = load(s.path)
    assert loaded is not None and [m.text for m in loaded.history] == ["one", "two"]
    other.say("user", "pushes s1 out again")
    s.path.unlink()
    s.history.clear()
    s.writer.reset()
    loaded = load(s.path)
    assert loaded is not None and (loaded.history, loaded.total) == ([], 2)
    s.say("user", "after the reset")
    loaded = load(s.path)
    assert loaded is not None and [m.text for m in loaded.history] == ["after the reset"]
    assert loaded.title == "after the reset"
    s.writer.close()
    other.writer.close()


def test_a_rebuilt_file_keeps_the_lines_extraction_has_not_read(tmp_path: Path) -> None:
    """With extraction on, the messages past its cursor (`extracted`) are
    message lines again, as written, before the rebuilt file's fork record:
    a read from the cursor finds them (an image's by its hash), a load sees
    each message once, and a fork's cut at a prompt's start ignores them."""
    files = OpenFiles(limit=1)
    s = Live(tmp_path, "s1", files, keep_unextracted=True)
    for n in range(3):
        s.say("user", f"q{n}", *([ImagePart("image/png", PNG)] if n == 1 else []))
        s.say("assistant", f"a{n}")
    s.writer.extracted(2)  # the first turn is in memory
    other = Live(tmp_path, "s2", files)
    other.say("user", "pushes s1 out")
    os.unlink(s.path)
    s.say("user", "q3")  # reopening finds it gone: rebuilt
    written = lines(s.path)
    kinds = [r["type"] for r in written]
    fork = kinds.index("fork")
    assert [r["offset"] for r in written[1:fork]] == [2, 3, 4, 5, 6]
    assert written[fork]["offset"] == 7
    image = written[1]["message"]["parts"][1]
    assert image["type"] == "image" and "sha256" in image and "data" not in image
    piece = read_from(s.path, 2)
    assert [o for o, _ in piece.messages] == [2, 3, 4, 5, 6]
    loaded = load(s.path)
    assert loaded is not None and loaded.total == 7
    assert [m.text for m in loaded.history] == ["q0", "a0", "q1", "a1", "q2", "a2", "q3"]
    cut = load(s.path, end=6)  # the fork record holds offsets 0-6: nothing cut there
    assert cut is not None and len(cut.history) == 7
    # Extracted past them: none is kept for the next rebuild.
    s.writer.extracted(7)
    assert s.writer._unextracted == {}
    assert s.writer._unextracted_bytes == 0
    s.writer.close()
    other.writer.close()


def test_a_restored_session_keeps_the_lines_extraction_has_not_read(tmp_path: Path) -> None:
    """A session read back (`load` with `unextracted_from`, as the core
    restores one with extraction on) keeps the message lines past
    extraction's cursor from the file: taken away before extraction reads
    them, the file is written again with them, and a read from the cursor
    finds every one, the restored writer's own after them."""
    files = OpenFiles(limit=1)
    s = Live(tmp_path, "s1", files, keep_unextracted=True)
    for n in range(3):
        s.say("user", f"q{n}")
        s.say("assistant", f"a{n}")
    s.writer.close()  # the daemon stops; extraction's cursor stayed at 2
    asked: list[Path] = []

    def cursor(root: Path) -> int:
        asked.append(root)
        return 2

    loaded = load(s.path, unextracted_from=cursor)
    assert loaded is not None and asked == [tmp_path / "ws"]
    assert [offset for offset, _ in loaded.unextracted] == [2, 3, 4, 5]
    restored = Live(tmp_path, "s1", files, keep_unextracted=True)
    restored.history = loaded.history
    restored.writer = TranscriptWriter(
        s.path,
        "s1",
        tmp_path / "ws",
        loaded.total,
        files=files,
        fresh=False,
        snapshot=restored.snapshot,
        keep_unextracted=True,
    )
    restored.writer.keep_unextracted(loaded.unextracted)
    os.unlink(s.path)  # taken away before extraction read them
    restored.say("user", "q3")
    piece = read_from(s.path, 2)
    assert [o for o, _ in piece.messages] == [2, 3, 4, 5, 6]
    assert [m.text for _, m in piece.messages] == ["q1", "a1", "q2", "a2", "q3"]
    again = load(s.path)
    assert again is not None and [m.text for m in again.history][-2:] == ["a2", "q3"]
    # Without a cursor to go by (extraction off), nothing is kept.
    assert load(s.path).unextracted == []  # type: ignore[union-attr]
    restored.writer.close()


def test_lines_past_the_bound_are_dropped_oldest_first(tmp_path: Path) -> None:
    s = Live(tmp_path, "s1", OpenFiles(limit=1), keep_unextracted=True)
    big = "x" * (MAX_UNEXTRACTED_BYTES // 3)
    for n in range(5):
        s.say("user", f"{n} {big}")
    kept = s.writer._unextracted
    assert kept is not None and list(kept) == [3, 4]
    assert s.writer._unextracted_bytes == sum(map(len, kept.values()))
    s.writer.close()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "file", "dangling"])
def test_the_images_folder_is_reached_without_following_what_stands_in_for_it(
    tmp_path: Path, kind: str
) -> None:
    """`open_images_folder`: for reading, a stand-in is refused unopened; for
    writing, it is removed (a link, never its target) and the folder made."""
    import os

    from agentd.transcript import open_images_folder

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("theirs")
    folder = tmp_path / "sessions"
    folder.mkdir()
    name = "s.images"
    stand_in = folder / name
    if kind == "symlink":
        stand_in.symlink_to(outside, target_is_directory=True)
    elif kind == "dangling":
        stand_in.symlink_to(tmp_path / "nowhere")
    elif kind == "fifo":
        os.mkfifo(stand_in)
    else:
        stand_in.write_text("a file")
    parent = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            os.close(open_images_folder(parent, name, create=False))
        fd = open_images_folder(parent, name, create=True)
        os.close(fd)
    finally:
        os.close(parent)
    assert stand_in.is_dir() and not stand_in.is_symlink()
    assert [p.name for p in outside.iterdir()] == ["kept"]
