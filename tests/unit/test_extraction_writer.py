"""The write path: containment, atomicity, conflicts, secrets; and the lock file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.memory.extraction.extractor import validate
from agentd.memory.extraction.lock import LOCK_FILE, FolderLock
from agentd.memory.extraction.secrets import REDACTED, redact
from agentd.memory.extraction.writer import (
    RefusedPath,
    WriteConflict,
    clean_temps,
    confined,
    content_hash,
    topic_name,
    write_atomic,
)

BODY = "The project deploys with make ship after the smoke tests pass on CI."


@pytest.mark.parametrize(
    "name",
    [
        "../../.bashrc",
        "/etc/passwd",
        "a\x00b.md",
        "sub/dir.md",
        "..\\x.md",
        "..",
        ".hidden.md",
        "MEMORY.md",
        "",
    ],
)
def test_escaping_names_are_refused(name: str) -> None:
    with pytest.raises(RefusedPath):
        topic_name(name)


def test_validate_rejects_escapes_and_keeps_good_ops() -> None:
    raw = [
        {"action": "create", "file": f, "name": "n", "type": "project", "body": BODY}
        for f in ("../../.bashrc", "/abs/x.md", "nul\x00.md", "good.md")
    ]
    ops, notes = validate(raw, [])
    assert [o.file for o in ops] == ["good.md"]
    assert len(notes) == 3 and all("refused" in n for n in notes)


def test_topic_symlinked_to_a_file_outside_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "mem"
    folder.mkdir()
    outside = tmp_path / "outside.md"
    outside.write_text("precious")
    (folder / "topic.md").symlink_to(outside)
    with pytest.raises(RefusedPath):
        write_atomic(folder, "topic.md", b"evil", expected=content_hash(b"precious"))
    assert outside.read_text() == "precious"


def test_symlinked_memory_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "mem"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(RefusedPath):
        write_atomic(link, "topic.md", b"x")
    assert list(real.iterdir()) == []


def test_confined_checks_real_paths_by_component(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    (tmp_path / "p-evil").mkdir()
    assert confined(folder, "ok.md") == folder / "ok.md"
    with pytest.raises(RefusedPath):
        confined(folder, "../p-evil/x.md")


def test_atomic_write_create_update_and_conflicts(tmp_path: Path) -> None:
    write_atomic(tmp_path, "a.md", b"one")
    assert (tmp_path / "a.md").read_bytes() == b"one"
    with pytest.raises(WriteConflict):  # a create never clobbers a file that appeared
        write_atomic(tmp_path, "a.md", b"two", expected=None)
    write_atomic(tmp_path, "a.md", b"two", expected=content_hash(b"one"))
    with pytest.raises(WriteConflict):  # the user's edit since planning wins
        write_atomic(tmp_path, "a.md", b"three", expected=content_hash(b"one"))
    assert (tmp_path / "a.md").read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"]  # no temp left


def test_stale_temps_are_cleaned(tmp_path: Path) -> None:
    (tmp_path / ".agentd-tmp-1-abcd-x.md").write_text("half")
    (tmp_path / "keep.md").write_text("k")
    assert clean_temps(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["keep.md"]


def test_redaction_leaves_prose_alone() -> None:
    text = "the tokenizer = fast; see docs at https://example.com/a-b"
    assert redact(text) == (text, [])
    assert redact("API_TOKEN: abcd1234")[0] == f"API_TOKEN: {REDACTED}"


# --- the lock file ---------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # spawned and reaped: this pid is gone
    return proc.pid


def test_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    a, b = FolderLock(tmp_path), FolderLock(tmp_path)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert not (tmp_path / LOCK_FILE).exists()
    assert b.try_acquire()
    b.release()


def test_stale_lock_is_broken_only_when_its_owner_is_gone(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_FILE
    lock.write_text(f'{{"pid": {dead_pid()}, "startedAt": 0}}')
    mine = FolderLock(tmp_path)
    assert mine.try_acquire()
    assert f'"pid": {os.getpid()}' in lock.read_text()
    mine.release()


def test_live_owner_lock_is_never_broken(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / LOCK_FILE).write_text(f'{{"pid": {proc.pid}, "startedAt": 0}}')
        assert not FolderLock(tmp_path).try_acquire()
        assert str(proc.pid) in (tmp_path / LOCK_FILE).read_text()
    finally:
        proc.kill()
        proc.wait()
    assert FolderLock(tmp_path).try_acquire()  # now its owner is gone


def test_lock_with_our_pid_but_not_held_is_a_leftover(tmp_path: Path) -> None:
    # A previous process that had our pid (pid reuse after a restart in a container).
    (tmp_path / LOCK_FILE).write_text(f'{{"pid": {os.getpid()}, "startedAt": 0}}')
    lock = FolderLock(tmp_path)
    assert lock.try_acquire()
    assert not FolderLock(tmp_path).try_acquire()
    lock.release()


def test_two_daemons_one_extraction_at_a_time(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path;"
        "from agentd.memory.extraction.lock import FolderLock;"
        "l = FolderLock(Path(sys.argv[1])); ok = l.try_acquire(); print(ok, flush=True);"
        "time.sleep(2 if ok else 0); l.release()"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert outs.count("True") == 1
