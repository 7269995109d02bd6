"""Per-session extraction cursors, stored in the memory folder.

`<memory dir>/.cursors.json` maps each session id to `processedOffset`, the
first transcript offset not yet extracted, and `byteOffset`, where that
message's line starts in the transcript: a run reads the transcript from
there on, so its cost is that of the new turns, not of the whole session.
The byte offset is a hint the transcript reader checks (`read_from`); files
written before it existed (version 1, message offsets only) are read as
"scan from the start" once, and the next save records the byte offsets.

The file lives next to the memory files so that it travels with them, and it
is written through the same atomic path (temp, fsync, rename, fsync of the
folder) *after* the memory writes it vouches for are durable: a crash can
leave the cursor behind the disk (the slice is extracted again,
idempotently) but never ahead of it.

An entry lives as long as its session's transcript: a deleted session's is
removed with it (`forget_sessions`, which `session/delete` and
`agent/deleteSession` call after removing the files), and every write of
the file leaves out the entries whose transcript is gone from the
project's sessions folder (`transcripts`), as does a daemon's first look at
the project (`ExtractionService.resume`): a transcript removed by hand, or
by a daemon that was killed before it wrote the file, leaves nothing
behind for long. Only an entry whose transcript a listing of that folder
lacks goes; a folder that cannot be listed drops nothing.

Writers of the file take `<memory dir>/.cursors.lock` (an `flock`, waited
for at most `CURSOR_LOCK_WAIT_S`: one held longer is held by a stuck or
hostile process, and the writer gives up as a failed write does) around
what they read and write: a run (which holds the extraction lock, so only
it advances cursors) and a deletion in another daemon (which holds only
this one) never interleave, and neither loses the other's change. A run
writes the cursors it holds, less the entries whose transcript is gone at
that moment, under the lock; a deletion removes the transcript first, then
the entry under the lock: whichever writes second, the entry is gone.
`clean_temps` runs under it too, so no run removes the temp file of a
cursor write in flight.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from agentd.files import open_regular
from agentd.layout import MEMORY_FOLDER
from agentd.memory.extraction.writer import (
    RefusedPath,
    check_root,
    checkpoint,
    clean_temps,
    read_current,
    write_atomic,
)
from agentd.transcript import sessions_folders

log = logging.getLogger(__name__)

CURSOR_FILE = ".cursors.json"
CURSOR_LOCK = ".cursors.lock"
# How long a writer waits for that lock before it gives up (a run retries at
# its next trigger; a delete's entry goes at the file's next write).
CURSOR_LOCK_WAIT_S = 5.0
VERSION = 2


@dataclass(frozen=True)
class Cursor:
    # The first message offset not yet extracted (`processedOffset`).
    offset: int
    # The byte position in the transcript where reading resumes; 0 when unknown.
    position: int = 0


def load_cursors(directory: Path) -> dict[str, Cursor]:
    """The stored cursors; a missing or unreadable file means "nothing processed"."""
    try:
        data = read_current(directory / CURSOR_FILE)
    except OSError as exc:
        log.warning("cannot read %s: %s", CURSOR_FILE, exc.strerror or exc)
        return {}
    if data is None:
        return {}
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        # Re-extracting is safe (writes are idempotent); trusting garbage is not.
        log.warning("%s is corrupt; starting from the beginning", CURSOR_FILE)
        return {}
    out: dict[str, Cursor] = {}
    sessions = raw.get("sessions") if isinstance(raw, dict) else None
    if isinstance(sessions, list):
        for item in sessions:
            if not isinstance(item, dict):
                continue
            sid = item.get("sessionId")
            offset = _count(item.get("processedOffset"))
            if not isinstance(sid, str) or offset is None:
                continue
            # Version 1 has no byte offset: read from the start once (migration).
            out[sid] = Cursor(offset, _count(item.get("byteOffset")) or 0)
    return out


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@contextlib.contextmanager
def cursor_lock(directory: Path, wait: float = CURSOR_LOCK_WAIT_S) -> Iterator[None]:
    """Hold `<directory>/.cursors.lock`, waiting at most `wait` seconds for
    it (others hold it for a read and a write of a small file); then
    `TimeoutError` naming the file. Never through a symlink. Blocking."""
    path = directory / CURSOR_LOCK
    fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        pause = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    why = f"held by another process for more than {wait:g} s"
                    raise TimeoutError(errno.ETIMEDOUT, why, str(path)) from None
                # Polled: flock has no timeout, and a holder that never lets
                # go (a stuck or hostile process) must not hold a delete's
                # reply, or the daemon's exit, which waits for this thread.
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        yield
    finally:
        os.close(fd)  # lets go of the lock


def clean_temps_locked(directory: Path) -> int:
    """`clean_temps`, never beside a cursor write in flight (see the module docs)."""
    with cursor_lock(directory):
        return clean_temps(directory)


def _gone(session_ids: Collection[str], transcripts: Path | None) -> set[str]:
    """Of `session_ids`, those whose transcript the folder `transcripts` lacks;
    nothing when it cannot be listed (a folder moved or unreadable for now
    is no proof that its sessions are gone)."""
    if transcripts is None or not session_ids:
        return set()
    try:
        names = set(os.listdir(transcripts))
    except FileNotFoundError:
        if os.path.lexists(transcripts):
            return set()  # a symlink to a folder that is not there now
        names = set()  # removed, with every transcript in it
    except OSError:
        return set()
    return {sid for sid in session_ids if f"{sid}.jsonl" not in names}


def save_cursors(
    directory: Path, cursors: dict[str, Cursor], transcripts: Path | None = None
) -> set[str]:
    """Persist all cursors atomically (call only after the writes they cover
    are durable), less those whose transcript the folder `transcripts` no
    longer holds; returns the session ids left out so."""
    with cursor_lock(directory):
        gone = _gone(cursors.keys(), transcripts)
        _write(directory, {sid: c for sid, c in cursors.items() if sid not in gone})
    return gone


def _write(directory: Path, cursors: dict[str, Cursor]) -> None:
    body = {
        "version": VERSION,
        "sessions": [
            {"sessionId": sid, "processedOffset": c.offset, "byteOffset": c.position}
            for sid, c in sorted(cursors.items())
        ],
    }
    data = (json.dumps(body, indent=1) + "\n").encode("utf-8")
    checkpoint("before_cursor")
    write_atomic(directory, CURSOR_FILE, data, check=False)
    checkpoint("after_cursor")


def forget_sessions(
    directory: Path, session_ids: Collection[str], transcripts: Path | None
) -> set[str]:
    """Remove the entries of `session_ids` (deleted sessions) and of every
    session whose transcript the folder `transcripts` no longer holds from
    the cursor file of the memory folder `directory`, durably; returns the
    ids removed. Other entries are kept as they are on disk (read under the
    lock, so none that a run wrote meanwhile is lost). Nothing is written
    when nothing is removed, or there is no memory folder. Raises OSError
    or `RefusedPath` (a memory folder that is a symlink)."""
    try:
        check_root(directory)
    except RefusedPath:
        if not directory.exists() and not directory.is_symlink():
            return set()  # no memory of the project: no cursors
        raise
    with cursor_lock(directory):
        cursors = load_cursors(directory)
        drop = {sid for sid in session_ids if sid in cursors}
        drop |= _gone(cursors.keys() - drop, transcripts)
        if drop:
            _write(directory, {sid: c for sid, c in cursors.items() if sid not in drop})
    return drop


def forget_session_everywhere(home: Path, session_id: str) -> set[Path]:
    """`forget_sessions` of a deleted session in the memory folder of every
    project whose sessions folder can be listed (where its transcripts
    were); returns the memory folders whose file changed. A folder that
    refuses is logged and skipped: its entry goes at its next write."""
    changed: set[Path] = set()
    for folder, _, _ in sessions_folders(home, follow_symlinks=False):
        transcripts = Path(folder)
        directory = transcripts.parent / MEMORY_FOLDER
        try:
            if forget_sessions(directory, {session_id}, transcripts):
                changed.add(directory)
        except (OSError, RefusedPath) as exc:
            log.warning("cannot drop session %s's cursor in %s: %s", session_id, directory, exc)
    return changed
