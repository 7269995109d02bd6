"""The one write path into a memory folder: confined, atomic, never over a user's edit.

Every file extraction writes (topic files, MEMORY.md, the cursor file) goes
through `write_atomic`:

    before_temp -> temp file created (O_EXCL, O_NOFOLLOW) in the same folder
    after_temp_write -> fsync(temp) -> after_fsync
    content hash of the target re-checked (a user's edit since planning wins)
    rename over the target (or link, for a create: never clobbers) -> after_rename
    fsync(folder) -> after_dir_fsync

so a crash at any point leaves the old file or the new one, plus at worst a
temp file that `clean_temps` removes on the next run (under the lock).
`AGENTD_TEST_KILL_AT=<step>[@n]` SIGKILLs the process at the n-th time a step
is reached: the testing seam of the crash-safety tests.

Containment is checked on resolved real paths, by whole path component: a
name with a separator, `..`, a NUL byte, an absolute path, a symlinked target
(or a FIFO, a device: anything but a regular file) or a symlinked memory root
is refused before anything is opened. Files are read through
`agentd.files` (non-blocking open, regular files only, bounded).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import signal
import stat
from collections import Counter
from pathlib import Path

from agentd.files import read_regular_or_none
from agentd.layout import INDEX_FILE, TOPIC_SUFFIX

KILL_ENV = "AGENTD_TEST_KILL_AT"
STEPS = (
    "before_temp",
    "after_temp_write",
    "after_fsync",
    "after_rename",
    "after_dir_fsync",
    "before_cursor",
    "after_cursor",
)
TEMP_PREFIX = ".agentd-tmp-"
MAX_NAME_CHARS = 100
# Files of a memory folder are small; one bigger than this is not read whole.
MAX_READ_BYTES = 16 * 1024 * 1024

_reached: Counter[str] = Counter()


def checkpoint(step: str) -> None:
    """The crash-test seam: die here when `AGENTD_TEST_KILL_AT` names this step."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    name, _, nth = spec.partition("@")
    if name != step:
        return
    _reached[step] += 1
    if _reached[step] >= int(nth or "1"):
        os.kill(os.getpid(), signal.SIGKILL)


class RefusedPath(ValueError):
    """A file name or folder that would escape (or is not) the memory folder."""


class WriteConflict(Exception):
    """The target changed since it was read for planning: the user's edit wins."""


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_root(directory: Path) -> Path:
    """The memory folder's real path; refused when the folder itself is a symlink."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        raise RefusedPath(f"memory folder {directory} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise RefusedPath(f"memory folder {directory} is a symlink; not written")
    if not stat.S_ISDIR(st.st_mode):
        raise RefusedPath(f"memory folder {directory} is not a directory")
    return Path(os.path.realpath(directory))


def topic_name(raw: object) -> str:
    """A proposed topic file name, validated; RefusedPath says why not."""
    if not isinstance(raw, str) or not raw.strip():
        raise RefusedPath("no file name")
    name = raw.strip()
    if "\x00" in name:
        raise RefusedPath("file name contains a NUL byte")
    if os.path.isabs(name) or name.startswith("~"):
        raise RefusedPath("absolute file name")
    if "/" in name or "\\" in name or os.sep in name:
        raise RefusedPath("file name contains a path separator")
    if name in (".", "..") or name.startswith("."):
        raise RefusedPath("file name starts with a dot")
    if not name.endswith(TOPIC_SUFFIX):
        name += TOPIC_SUFFIX
    if name == INDEX_FILE:
        raise RefusedPath(f"{INDEX_FILE} is rebuilt by the daemon, not written as a topic")
    if len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise RefusedPath("file name too long or has control characters")
    if any("\ud800" <= c <= "\udfff" for c in name):
        raise RefusedPath("file name is not valid Unicode (a lone surrogate)")
    return name


def confined(directory: Path, name: str) -> Path:
    """`directory/name`, after checking it stays in the folder on real paths."""
    if "\x00" in name or "/" in name or "\\" in name or name in ("", ".", ".."):
        raise RefusedPath("file name is not a plain name")
    root_real = check_root(directory)
    target = directory / name
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode):
        raise RefusedPath(f"{name} is a symlink; not written through")
    if mode is not None and not stat.S_ISREG(mode):
        raise RefusedPath(f"{name} is not a regular file; not written over")
    real = Path(os.path.realpath(target))
    # By component: the parent must be the folder itself (no `/w/p-evil` next to `/w/p`).
    if real.parent != root_real or real.name != name:
        raise RefusedPath(f"{name} resolves outside the memory folder")
    return target


def read_current(path: Path) -> bytes | None:
    """The file's bytes (never through a symlink), or None when it does not exist.

    Only a regular file is read (a FIFO raises `NotRegularFile` at once instead
    of blocking), and only up to `MAX_READ_BYTES` (beyond: EFBIG).
    """
    data = read_regular_or_none(path, MAX_READ_BYTES + 1)
    if data is not None and len(data) > MAX_READ_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_READ_BYTES} bytes; not read", str(path))
    return data


def current_hash(path: Path) -> str | None:
    data = read_current(path)
    return None if data is None else content_hash(data)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _ensure_unchanged(target: Path, expected: str | None) -> None:
    now = current_hash(target)
    if now != expected:
        raise WriteConflict(f"{target.name} changed since it was read")


def write_atomic(
    directory: Path,
    name: str,
    data: bytes,
    *,
    expected: str | None = None,
    check: bool = True,
) -> Path:
    """Write `data` to `directory/name` atomically and durably.

    With `check`, the target's content hash must still be `expected` (None:
    the file must not exist) right before the rename, else WriteConflict.
    """
    target = confined(directory, name)
    checkpoint("before_temp")
    tmp = directory / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{name}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        try:
            _write_all(fd, data)
            checkpoint("after_temp_write")
            os.fsync(fd)
        finally:
            os.close(fd)
        checkpoint("after_fsync")
        if check:
            _ensure_unchanged(target, expected)
        if check and expected is None:
            _link_new(tmp, target)
        else:
            os.replace(tmp, target)
        checkpoint("after_rename")
        fsync_dir(directory)
        checkpoint("after_dir_fsync")
    finally:
        # Gone after a rename; after any failure, the temp file must not stay.
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return target


def _link_new(tmp: Path, target: Path) -> None:
    # A create must never replace a file that appeared meanwhile: link() fails
    # on an existing target where rename() would silently clobber it.
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise WriteConflict(f"{target.name} appeared since it was read") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        os.replace(tmp, target)  # a filesystem without hard links


def delete(directory: Path, name: str, *, expected: str | None) -> bool:
    """Remove a topic file if it still has the content planned against."""
    target = confined(directory, name)
    if current_hash(target) is None:
        return False
    _ensure_unchanged(target, expected)
    os.unlink(target)
    fsync_dir(directory)
    return True


def clean_temps(directory: Path) -> int:
    """Remove temp files a crashed run left (call only while holding the lock)."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if entry.name.startswith(TEMP_PREFIX):
            try:
                os.unlink(entry.path)
                removed += 1
            except OSError:
                pass
    return removed


def describe(exc: OSError, what: str) -> str:
    """One clear line for status: what failed and the OS reason (never file contents)."""
    code = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    return f"cannot write {what}: {reason}" + (f" ({code})" if code else "")


def describe_failure(exc: OSError | RefusedPath, what: str) -> str:
    """`describe` for a failed disk operation (naming the file), or the refusal."""
    if isinstance(exc, OSError):
        name = f"{what} ({exc.filename})" if getattr(exc, "filename", None) else what
        return describe(exc, name)
    return f"refused {what}: {exc}"
