"""Confinement of paths to a root folder.

Every path a tool or a memory write touches goes through here. Containment is
checked on fully resolved real paths, by path component (`/w/p-evil` is not
inside `/w/p`). The daemon tools then open what was checked one component at
a time from the root's descriptor with O_NOFOLLOW (`agentd/agent/tools/fs.py`),
so a symlink swapped in between the check and the open is never followed.

A root is confined to the folder it resolved to when it was first used in
this process (`real_root`). A session's root is resolved when the session
starts: if the editor named a symlink, re-pointing that link later moves
nothing (following it would let whatever can re-point it, a command the
agent ran among others, move the confinement anywhere). If the resolved
folder itself, or one on its way, is later replaced by a symlink, the
root is refused rather than followed there.

A session may have more than one root (ACP `additionalDirectories`): the
first is its working directory, which relative paths start from; an absolute
path may be inside any of them (`root_of`), each pinned and checked as the
first is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from agentd.errors import PathOutsideWorkspace

log = logging.getLogger(__name__)

# Each root's real path when first used (`real_root`); bounded, as the roots
# a daemon serves are few: past the bound a new root is only resolved.
_FIRST_REAL: dict[Path, Path] = {}
FIRST_REAL_MAX = 4096


def real_root(root: Path) -> Path:
    """`root`'s real path, which must still be the one it had when first used:
    a root that now resolves elsewhere is refused (`PathOutsideWorkspace`)."""
    real = Path(os.path.realpath(root))
    first = _FIRST_REAL.get(root)
    if first is None:
        if len(_FIRST_REAL) >= FIRST_REAL_MAX:
            return real
        # setdefault: two threads seeing a new root at once keep one answer.
        first = _FIRST_REAL.setdefault(root, real)
    if real != first:
        raise PathOutsideWorkspace(
            f"the workspace {root} now leads to {real}, not to the folder {first} it was "
            "(a symlink was put in its way): refused; start a new session to work there"
        )
    return real


def pin_root(real: Path) -> Path:
    """Record `real` (a root just resolved, as the editor named it) as its own
    folder from now on, for `real_root`; returns it."""
    if real in _FIRST_REAL or len(_FIRST_REAL) < FIRST_REAL_MAX:
        _FIRST_REAL[real] = real
    return real


def pin_first(root: Path) -> None:
    """Record the folder `root` resolves to now unless one is recorded (a
    session's start: a new session's root was pinned by `pin_root` already,
    and this costs it no symlink walk)."""
    if root not in _FIRST_REAL:
        real_root(root)


def is_within(path: Path, root: Path) -> bool:
    """True when `path` is `root` or below it, comparing whole components."""
    return path == root or root in path.parents


def resolve_inside(root: Path, user_path: str) -> Path:
    """Resolve `user_path` (relative to `root`, or absolute) and refuse escapes."""
    if "\x00" in user_path:
        raise PathOutsideWorkspace("path contains a NUL byte")
    real = real_root(root)
    candidate = Path(user_path)
    if not candidate.is_absolute():
        candidate = real / candidate
    resolved = Path(os.path.realpath(candidate))
    if not is_within(resolved, real):
        raise PathOutsideWorkspace(f"{user_path!r} is outside the workspace {real}")
    return resolved


def root_of(roots: Sequence[Path], user_path: str) -> Path:
    """The root of `roots` that `user_path` belongs to. The first root is the
    working directory: a relative path is its, as is every path when it is
    the only root (`resolve_inside` then checks it and says why not). An
    absolute path is the first root's whose real path holds its real path;
    one inside none of them is refused (`PathOutsideWorkspace`)."""
    if "\x00" in user_path:
        raise PathOutsideWorkspace("path contains a NUL byte")
    if len(roots) == 1 or not os.path.isabs(user_path):
        return roots[0]
    resolved = Path(os.path.realpath(user_path))
    swapped: PathOutsideWorkspace | None = None
    for root in roots:
        try:
            real = real_root(root)
        except PathOutsideWorkspace as exc:
            swapped = swapped or exc  # a root put elsewhere counts for nothing
            continue
        if is_within(resolved, real):
            return root
    if swapped is not None:
        raise swapped
    shown = ", ".join(str(r) for r in roots)
    raise PathOutsideWorkspace(f"{user_path!r} is outside the workspace roots ({shown})")


def refuse_agentd_state(resolved: Path, own_folders: Sequence[tuple[Path, str]]) -> Path:
    """`resolved` (a real path) unless it is inside one of agentd's own
    folders, `own_folders` (`agentd.layout.agentd_folders`), each with its
    name (`PathOutsideWorkspace`): a workspace root that holds them (a home
    folder) gives no tool a way to rewrite the daemon's transcripts, locks
    or settings."""
    for own, name in own_folders:
        if is_within(resolved, own):
            raise PathOutsideWorkspace(f"{resolved} is in agentd's own {name} ({own}): refused")
    return resolved


def stored_roots(values: Sequence[str], own_folders: Sequence[tuple[Path, str]]) -> list[Path]:
    """A transcript's additional roots, as a session restored from it may
    use them: each absolute, and none inside agentd's own folders. The
    check of `params.additional_roots` is the editor's list's; a stored list
    was written by an older agentd, or by hand, so what it would not take
    now is left out (and logged), not trusted (`own_folders` as for
    `refuse_agentd_state`). A folder missing now is kept:
    the tools say so when it is used, and it may come back (a mount)."""
    out: list[Path] = []
    for value in values:
        path = Path(value)
        try:
            if "\x00" in value or not path.is_absolute():
                raise PathOutsideWorkspace(f"{value!r} is not an absolute path")
            refuse_agentd_state(Path(os.path.realpath(path)), own_folders)
        except (PathOutsideWorkspace, OSError, ValueError) as exc:
            log.warning("a stored additional root is left out: %s", exc)
            continue
        out.append(path)
    return out


def resolve_in_roots(roots: Sequence[Path], user_path: str) -> Path:
    """`resolve_inside` for a session of several roots (`root_of`)."""
    return resolve_inside(root_of(roots, user_path), user_path)
