"""Confined file access for the daemon tools: what is read is what was checked.

A path from the model is resolved to a real path and checked for containment
by component (`agentd.paths.resolve_inside`). It is then opened one
component at a time from a descriptor of the workspace root, each with
`O_NOFOLLOW`: a folder swapped for a symlink between the check and the use
makes the open fail (`ELOOP`/`ENOTDIR`) instead of following the link out
of the workspace. Walks descend the same way (`openat` from the parent's
descriptor, `scandir` on the descriptor), so no step ever goes back to a
path string that someone could have re-pointed meanwhile.

Only regular files are read. A file is `fstatat`-ed before it is opened
(devices are never opened, since opening some has side effects), opened with
`O_NONBLOCK` (a FIFO swapped in meanwhile cannot block the open), checked
again with `fstat` on the descriptor, and read with a byte bound.

Hardlinks: a hardlink inside the workspace is the same file as its other
names, wherever they are, and is read like any workspace file. Git cannot
carry hardlinks, and with Linux's `fs.protected_hardlinks` (the default) a
user can only hardlink files they own or can read and write, so a hostile
repository cannot plant one; a local user who can write the workspace could
as well copy the file. This is documented in docs/reliability.md.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agentd.agent.tools.fence import Fence
from agentd.errors import PathOutsideWorkspace, ToolError
from agentd.paths import real_root, resolve_inside

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | _CLOEXEC
_SWAPPED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


def kind_of(mode: int) -> str:
    """A word for a file type, for messages to the model."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


class Root:
    """An open descriptor of a workspace root, and confined opens below it;
    agentd's own folders in or around it are fenced off (`fence.py`)."""

    def __init__(self, root: Path, own: Sequence[tuple[Path, str]] | None = None) -> None:
        self.path = real_root(root)
        self.fence = Fence(self.path, own)
        try:
            self.fd = os.open(self.path, DIR_FLAGS)
        except OSError as exc:
            raise ToolError(f"cannot open the workspace {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def parts(self, user_path: str) -> tuple[str, ...]:
        """The components of `user_path` below the root, after the containment check."""
        resolved = resolve_inside(self.path, user_path or ".")
        parts = () if resolved == self.path else resolved.relative_to(self.path).parts
        if self.fence:
            why = self.fence.refusal(parts, None, user_path or ".")
            if why is not None:
                raise PathOutsideWorkspace(why)
        return parts

    def display(self, parts: tuple[str, ...] | list[str]) -> str:
        """A root-relative path for the model ('.' for the root)."""
        return "/".join(parts) or "."

    def open_dir(self, parts: tuple[str, ...] | list[str], shown: str = "") -> int:
        """A descriptor of the folder `parts`, opened component by component."""
        fd = os.dup(self.fd)
        try:
            for name in parts:
                nxt = open_dir_at(fd, name, shown or self.display(parts))
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextmanager
    def dir(self, parts: tuple[str, ...] | list[str], shown: str = "") -> Iterator[int]:
        fd = self.open_dir(parts, shown)
        try:
            yield fd
        finally:
            os.close(fd)

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result:
        """`lstat` of `parts`, through the confined parent folder."""
        if not parts:
            return os.fstat(self.fd)
        with self.dir(parts[:-1], self.display(parts)) as parent:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)

    def open_file(self, parts: tuple[str, ...], shown: str = "") -> tuple[int, os.stat_result]:
        """A descriptor of the regular file `parts`; anything else is refused unread."""
        shown = shown or self.display(parts)
        if not parts:
            raise ToolError(f"{shown} is a directory")
        with self.dir(parts[:-1], shown) as parent:
            return open_file_at(parent, parts[-1], shown)


def open_dir_at(dir_fd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SWAPPED:
            # Resolved paths have no symlinks in them: a link here was swapped
            # in after the check, or the component is not a folder.
            raise PathOutsideWorkspace(
                f"{shown!r} changed while it was being opened (a symlink or a file "
                "where a folder was); refused"
            ) from exc
        raise


def open_file_at(dir_fd: int, name: str, shown: str) -> tuple[int, os.stat_result]:
    """Open `name` in `dir_fd` if it is a regular file; never opens anything else."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is a {kind_of(st.st_mode)}, not a regular file; not read")
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SWAPPED:
            raise PathOutsideWorkspace(f"{shown!r} changed while it was being opened") from exc
        raise
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise ToolError(f"{shown} changed while it was being opened; not read")
    except BaseException:
        os.close(fd)
        raise
    return fd, now
