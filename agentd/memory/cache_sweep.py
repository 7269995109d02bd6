"""Old files of the memory index cache folder removed, never one in use.

Every memory folder agentd indexed leaves its index cache there
(`<hash>.jsonl`), every project its saved index and delta (`<hash>.index`,
`<hash>.delta`): up to 64 MiB each, kept after the folder or project is
gone. Files are grouped by their hash (a "stem"). A running project holds a
shared `flock` on `<stem>.lock` for each stem it uses (`hold`), and touches
it: the lock file's mtime says when the stem was last used (reading a cache
file leaves its mtime as it was). `sweep`, once per process and home, in a
worker thread seconds after a project started (nothing waits for it then),
removes each stem last used more than `MAX_AGE_S` ago, and past `MAX_STEMS`
the least recently used, each only under an exclusive `flock` taken without
waiting: a stem another daemon holds (two daemons, one project) is left.
A writer's temporary file left by a crash goes after `MAX_TMP_AGE_S`.

The lock files are unlinked with their stem; a holder that opened one just
as it was unlinked finds its path no longer names the file it locked, and
takes the new one (the usual lock-file protocol). Only names of the shapes
written here are ever removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import time
from pathlib import Path

from agentd.memory.index_cache import open_cache_folder

log = logging.getLogger(__name__)

MAX_AGE_S = 30 * 24 * 3600
MAX_STEMS = 64
MAX_TMP_AGE_S = 3600
_LOCK_TRIES = 20

_STEM_FILE = re.compile(r"([0-9a-f]{32})\.(jsonl|index|delta|lock)")
_TMP_FILE = re.compile(r"\.([0-9a-f]{32})\.(?:jsonl|index|delta)\.\d+\.[0-9a-f]+\.tmp")

# Homes swept by this process.
_swept: set[Path] = set()


def _lock_name(stem: str) -> str:
    return f"{stem}.lock"


def hold(cache_file: Path) -> int | None:
    """A descriptor holding the shared lock of ``cache_file``'s stem (a file of
    the cache folder), its lock file touched; None when it cannot be had
    (logged: the stem may then be swept, which costs a rebuild, nothing
    more). Blocking; close the descriptor to let it go."""
    stem = cache_file.name.split(".", 1)[0]
    try:
        folder = open_cache_folder(cache_file, create=True)
    except OSError as exc:
        log.info("memory index cache %s not held: %s", cache_file, exc)
        return None
    try:
        for _ in range(_LOCK_TRIES):
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(_lock_name(stem), flags, 0o600, dir_fd=folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                # A sweep is removing this stem: it is gone in a moment.
                os.close(fd)
                time.sleep(0.01)
                continue
            try:
                named = os.stat(_lock_name(stem), dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                named = None
            held = os.fstat(fd)
            if named is None or (named.st_ino, named.st_dev) != (held.st_ino, held.st_dev):
                os.close(fd)  # unlinked by a sweep since it was opened: take the new one
                continue
            os.utime(fd)
            return fd
        log.info("memory index cache %s not held: its lock stayed taken", cache_file)
        return None
    except OSError as exc:
        log.info("memory index cache %s not held: %s", cache_file, exc)
        return None
    finally:
        os.close(folder)


def sweep_once(any_cache_file: Path) -> None:
    """`sweep` the cache folder of ``any_cache_file``, once per process."""
    home = any_cache_file.parent
    if home in _swept:
        return
    _swept.add(home)
    sweep(any_cache_file)


def sweep(any_cache_file: Path, now: float | None = None) -> list[str]:
    """Remove the stems of the cache folder of ``any_cache_file`` that no one
    holds and that were last used `MAX_AGE_S` ago, or are past the
    `MAX_STEMS` most recently used; and writers' leftovers. The names
    removed. Blocking; never raises."""
    now = time.time() if now is None else now
    try:
        folder = open_cache_folder(any_cache_file, create=False)
    except OSError:
        return []
    removed: list[str] = []
    try:
        used: dict[str, float] = {}  # stem -> its files' latest mtime
        files: dict[str, list[str]] = {}
        for name in os.listdir(folder):
            match = _STEM_FILE.fullmatch(name) or _TMP_FILE.fullmatch(name)
            if match is None:
                continue
            try:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except OSError:
                continue
            stem = match.group(1)
            if name.endswith(".tmp"):
                if now - st.st_mtime > MAX_TMP_AGE_S:
                    removed.extend(_unlink(folder, [name]))
                continue
            files.setdefault(stem, []).append(name)
            used[stem] = max(used.get(stem, 0.0), st.st_mtime)
        newest_first = sorted(used, key=used.__getitem__, reverse=True)
        for rank, stem in enumerate(newest_first):
            if rank < MAX_STEMS and now - used[stem] <= MAX_AGE_S:
                continue
            removed.extend(_remove_stem(folder, stem, files[stem]))
    except OSError as exc:
        log.info("memory index cache folder not swept: %s", exc)
    finally:
        os.close(folder)
    if removed:
        log.info("memory index cache: removed %d old files", len(removed))
    return removed


def _remove_stem(folder: int, stem: str, names: list[str]) -> list[str]:
    """The stem's files removed under its exclusive lock, when no one holds it."""
    lock = _lock_name(stem)
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(lock, flags, 0o600, dir_fd=folder)
    except OSError:
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return []  # held: in use by a running project
            raise
        # Locked, and no one can take it until it is unlinked: the data
        # files first, the lock last (a holder arriving now retries on it).
        removed = _unlink(folder, [n for n in names if n != lock])
        removed.extend(_unlink(folder, [lock]))
        return removed
    except OSError:
        return []
    finally:
        os.close(fd)


def _unlink(folder: int, names: list[str]) -> list[str]:
    removed = []
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)
            removed.append(name)
    return removed
