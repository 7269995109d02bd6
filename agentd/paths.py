"""Confinement of paths to a root folder.

Every path a tool or a memory write touches goes through here. Containment is
checked on fully resolved real paths, by path component (`/w/p-evil` is not
inside `/w/p`), and again on the opened file descriptor so that a symlink
swapped in between the check and the open is caught.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentd.errors import PathOutsideWorkspace


def is_within(path: Path, root: Path) -> bool:
    """True when `path` is `root` or below it, comparing whole components."""
    return path == root or root in path.parents


def resolve_inside(root: Path, user_path: str) -> Path:
    """Resolve `user_path` (relative to `root`, or absolute) and refuse escapes."""
    if "\x00" in user_path:
        raise PathOutsideWorkspace("path contains a NUL byte")
    real_root = Path(os.path.realpath(root))
    candidate = Path(user_path)
    if not candidate.is_absolute():
        candidate = real_root / candidate
    resolved = Path(os.path.realpath(candidate))
    if not is_within(resolved, real_root):
        raise PathOutsideWorkspace(f"{user_path!r} is outside the workspace {real_root}")
    return resolved


def open_inside(root: Path, user_path: str, flags: int = os.O_RDONLY) -> tuple[int, Path]:
    """Open a file confined to `root`; returns (fd, resolved path).

    The descriptor's own path (from /proc) is checked after the open, which
    closes the window between resolving the path and opening it.
    """
    resolved = resolve_inside(root, user_path)
    fd = os.open(resolved, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        proc = Path(f"/proc/self/fd/{fd}")
        if proc.exists():
            actual = Path(os.readlink(proc))
            if not is_within(actual, Path(os.path.realpath(root))):
                raise PathOutsideWorkspace(f"{user_path!r} changed to point outside the workspace")
    except BaseException:
        os.close(fd)
        raise
    return fd, resolved
