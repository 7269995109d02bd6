"""Confinement of paths to a root folder.

Every path a tool or a memory write touches goes through here. Containment is
checked on fully resolved real paths, by path component (`/w/p-evil` is not
inside `/w/p`). The daemon tools then open what was checked one component at
a time from the root's descriptor with O_NOFOLLOW (`agentd/agent/tools/fs.py`),
so a symlink swapped in between the check and the open is never followed.
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
