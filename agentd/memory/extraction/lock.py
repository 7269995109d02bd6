"""One extraction at a time per memory folder, across daemons.

`<memory dir>/.extract.lock` is created with O_EXCL and holds the owner's pid
and start time. A lock whose owner process is gone (`os.kill(pid, 0)` raises
ProcessLookupError) is stale and may be broken; a live owner's lock never is.
Breaking happens under an `flock` on a guard file, so two daemons that both
find the same stale lock cannot each delete the other's fresh one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from pathlib import Path

from agentd.files import open_regular, read_regular

log = logging.getLogger(__name__)

LOCK_FILE = ".extract.lock"
MAX_LOCK_BYTES = 4096
GUARD_FILE = ".extract.lock.guard"

# Locks this process holds (by path): a lock file carrying our own pid that is
# not in here is a leftover of an earlier process that had the same pid.
_held: set[str] = set()


def _owner_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if pid == os.getpid():
        return False  # caller checks `_held` for our own locks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def _read_owner(path: Path) -> int | None:
    try:
        # A regular file only (a FIFO here must not block), and small.
        raw = json.loads(read_regular(path, MAX_LOCK_BYTES).decode("utf-8"))
        pid = raw.get("pid") if isinstance(raw, dict) else None
        return pid if isinstance(pid, int) else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return -1  # unreadable, torn or not a file: treated as ownerless


class FolderLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self.guard = directory / GUARD_FILE
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if free (or stale); False when a live owner holds it."""
        if self.held:
            return True
        fd = open_regular(self.guard, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Another daemon is taking or checking the lock: busy, as when
                # it holds it (the caller polls). Never waited for in this
                # thread: a guard held for ever would hold the daemon's exit.
                return False
            if self._create():
                return True
            owner = _read_owner(self.path)
            if owner is None:
                return self._create()  # released meanwhile
            ours = owner == os.getpid() and str(self.path) in _held
            if ours or _owner_alive(owner):
                return False
            log.warning("breaking a stale extraction lock of pid %s (process is gone)", owner)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return self._create()
        finally:
            os.close(fd)  # releases the flock

    def _create(self) -> bool:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            return False
        try:
            os.write(fd, json.dumps({"pid": os.getpid(), "startedAt": time.time()}).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self.held = True
        _held.add(str(self.path))
        return True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        _held.discard(str(self.path))
        if _read_owner(self.path) == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
