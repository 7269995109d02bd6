"""Files the daemon opens on its own: regular files only, never a blocking open.

A workspace, and the team memory folder in it (anyone who can commit to the
repository writes there), may hold a FIFO, a device or a symlink where
agentd expects a markdown file. `open()` of a FIFO waits for a writer
forever; a device reads without end. Every file the daemon reads without
the model asking for it (memory notes, MEMORY.md, AGENTS.md and its
imports, the cursor, lock and state files of extraction, transcripts) is
opened here:

- with `O_NONBLOCK` (a FIFO opens at once instead of waiting for a writer),
  `O_NOFOLLOW` unless the caller allows symlinks (or resolved the path
  itself and wants a link swapped in meanwhile refused), and `O_CLOEXEC`;
- checked with `fstat` to be a regular file, else `NotRegularFile`;
- read up to a bound.

These calls still block for as long as a regular file takes to read, so the
daemon makes them in worker threads, never on the event loop.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# Linux's `fallocate(2)` flag: blocks given, the file's size unchanged.
FALLOC_FL_KEEP_SIZE = 1
FIRST_BLOCK = 4096
# `fallocate(fd, mode, offset, length)` from the C library once
# `bind_fallocate` ran (in the warm-up thread: ctypes is loaded there
# anyway), else None: the loop never imports ctypes for it.
_fallocate: Callable[[int, int, int, int], int] | None = None


class NotRegularFile(OSError):
    """A FIFO, device, socket or directory where a regular file was expected."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", str(path))


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a file"


def open_regular(
    path: str | os.PathLike[str],
    flags: int = os.O_RDONLY,
    mode: int = 0o600,
    *,
    follow: bool = False,
    dir_fd: int | None = None,
) -> int:
    """A descriptor of the regular file at `path` (`flags` as for `os.open`;
    a relative `path` is `dir_fd`'s when given).

    Raises `NotRegularFile` for anything else, `OSError` (ELOOP) for a symlink
    unless `follow`, and what `os.open` raises (FileNotFoundError, ...).
    """
    flags |= os.O_NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
    fd = os.open(path, flags, mode, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, _kind(st.st_mode))
        # Blocking again for what follows (no effect on a regular file's reads,
        # but a descriptor handed on keeps the usual semantics).
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from `fd`'s position (ask for one more than a cap
    to learn whether the file goes past it)."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_regular(path: str | os.PathLike[str], limit: int, *, follow: bool = False) -> bytes:
    """Up to `limit` bytes of the regular file at `path` (see `open_regular`).

    Ask for one byte more than you keep to learn whether the file was longer.
    """
    fd = open_regular(path, follow=follow)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_regular_or_none(
    path: str | os.PathLike[str], limit: int, *, follow: bool = False
) -> bytes | None:
    """`read_regular`, or None when nothing is at `path`."""
    try:
        return read_regular(path, limit, follow=follow)
    except FileNotFoundError:
        return None


# The user's config file is a few kilobytes: one past this is no config file
# (read and parsed whole, it would hold up the settings of every session).
MAX_CONFIG_BYTES = 1 << 20


def read_config_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the user's config file at `path`, a symlink followed
    (dotfiles are often linked from a repository). `FileNotFoundError` when
    there is none; `OSError` for a FIFO, device, socket or directory (opened
    without blocking: a FIFO there used to hang the start for ever) and for
    a file over `MAX_CONFIG_BYTES`."""
    data = read_regular(path, MAX_CONFIG_BYTES + 1, follow=True)
    if len(data) > MAX_CONFIG_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_CONFIG_BYTES} bytes", str(path))
    return data


def size_of(path: Path) -> int:
    """The size of the regular file at `path` (0 when it is gone)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def bind_fallocate() -> bool:
    """Find the C library's `fallocate` for `reserve_first_block`; False
    where there is none (not Linux, or a C library without it)."""
    global _fallocate
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fallocate = ctypes.CDLL(None).fallocate
    except (AttributeError, OSError):
        return False
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    fallocate.restype = ctypes.c_int
    _fallocate = fallocate
    return True


def reserve_first_block(fd: int) -> bool:
    """Give the empty file open as `fd` its first block now, its size left
    at 0 (`FALLOC_FL_KEEP_SIZE`: `os.posix_fallocate` would make it 4 KiB of
    zeros). A new session's transcript is made ahead, empty, and an empty
    transcript is no session; its first line, written on the first prompt's
    way to its request, then finds its block allocated (ext4: 0.068 -> 0.054
    ms after the file had sat 0.1 s, against 0.039 for a later line).
    Whether it was done: not before `bind_fallocate`, nor on a file system
    that cannot (the first write allocates, as without it)."""
    if _fallocate is None:
        return False
    return _fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, FIRST_BLOCK) == 0
