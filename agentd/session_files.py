"""Whole-session file operations: a fork's first write, a session's deletion.

Both work inside agentd's sessions folders (`$AGENTD_HOME/projects/<slug>/
sessions/`) only, by names made from a session id that `valid_session_id`
accepted (no separator, no `..`), relative to a descriptor of the folder;
no file is written, read or removed through a symlink:

- `write_fork` creates a fork's transcript (`transcript.fork_lines`) under a
  temporary name and links it into place (never replacing a file), links
  the source's images into the fork's images folder (hard links: an image
  is never written twice; copied where a link is refused), writes its meta
  file, and makes it all durable (fsync of the files and folders) before it
  returns: a fork that was answered survives a crash.
- `delete_session_files` removes a session's transcript, then its meta file
  and its images folder, from every project's sessions folder (a listing
  shows them all), and makes the removal durable. A project or sessions
  folder that is a symlink is left alone (as `collect_orphan_images` does):
  what it points at is not agentd's to remove from. The transcript goes
  first: a meta file or an images folder left by a crash is never listed,
  and `collect_orphan_images` removes such a folder at the next start.

Blocking: the core runs both in a worker thread.

`LiveSessions` is how daemons sharing a home tell each other which sessions
they have open: a session live in one daemon (another editor window) is
not deleted by another, which would otherwise remove a transcript that the
first goes on writing (and brings back, headless, at its next write).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

from agentd.files import open_regular
from agentd.layout import agentd_home
from agentd.transcript import (
    images_dir,
    meta_path,
    open_images_folder,
    sessions_folders,
    valid_session_id,
)

log = logging.getLogger(__name__)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_HEX = frozenset("0123456789abcdef")


def _open_folder(folder: Path | str) -> int:
    """A descriptor of `folder`, refused (OSError) when it is a symlink."""
    return os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)


def _write_new(dir_fd: int, name: str, data: bytes) -> None:
    """`name` in the folder, created (never through a symlink), written and synced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fork(
    path: Path, data: bytes, meta: bytes, images: Iterable[str], source: Path | None
) -> None:
    """Create the fork's transcript `path` with `data`, its meta file with
    `meta`, and its images (the `sha256` names in `images`, from the images
    folder of the `source` transcript); all durable when it returns.
    FileExistsError if a transcript has that name already."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The folder as the transcript writer reaches it (a sessions folder the
    # user moved elsewhere with a symlink included); every name made in it
    # is created exclusively, never through a symlink.
    dir_fd = os.open(folder, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        tmp = f".{path.name}.tmp"
        try:
            os.unlink(tmp, dir_fd=dir_fd)  # left by a crash
        except FileNotFoundError:
            pass
        _write_new(dir_fd, tmp, data)
        try:
            # A link, not a rename: it never replaces a transcript that is there.
            os.link(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.unlink(tmp, dir_fd=dir_fd)
        wanted = sorted({h for h in images if len(h) == 64 and set(h) <= _HEX})
        if wanted and source is not None:
            _copy_images(images_dir(source), dir_fd, images_dir(path).name, wanted)
        meta_tmp = f".{meta_path(path).name}.tmp"
        try:
            os.unlink(meta_tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        _write_new(dir_fd, meta_tmp, meta)
        os.replace(meta_tmp, meta_path(path).name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _copy_images(source: Path, dir_fd: int, name: str, hashes: list[str]) -> None:
    """The images `hashes` of the folder `source`, linked (else copied) into
    the folder `name` of `dir_fd`. An image the source no longer has is left
    out: a load shows it as missing, as for the source."""
    # A symlink or a special file at the fork's folder name: replaced.
    target = open_images_folder(dir_fd, name, create=True)
    try:
        try:
            src = _open_folder(source)
        except OSError as exc:
            log.warning("cannot read the images of %s: %s", source, exc)
            return
        try:
            for digest in hashes:
                try:
                    os.link(
                        digest, digest, src_dir_fd=src, dst_dir_fd=target, follow_symlinks=False
                    )
                    continue
                except FileExistsError:
                    continue
                except FileNotFoundError:
                    log.info("an image of %s is missing; the fork has it missing too", source)
                    continue
                except OSError:
                    pass  # another file system, or links refused: copied
                _copy_one(src, source / digest, target, digest)
        finally:
            os.close(src)
        os.fsync(target)
    finally:
        os.close(target)


def _copy_one(src: int, source: Path, target: int, name: str) -> None:
    """The image `name` of the folder open as `src` (`source`, for the log)
    copied into the folder open as `target`."""
    try:
        with os.fdopen(open_regular(name, dir_fd=src), "rb") as f:
            data = f.read()
    except OSError as exc:
        log.warning("cannot copy the image %s: %s", source, exc)
        return
    _write_new(target, name, data)


def delete_session_files(session_id: str, home: Path | None = None) -> int:
    """Remove `session_id`'s transcript, meta file and images from every
    sessions folder; returns how many transcripts were removed (0: there
    was none). Raises OSError when one cannot be removed."""
    if not valid_session_id(session_id):
        raise ValueError("not a session id")
    transcript = f"{session_id}.jsonl"
    names = {transcript, f"{session_id}.meta.json", f"{session_id}.images"}
    removed = 0
    for folder, _, listed in sessions_folders(home, follow_symlinks=False):
        if not names & listed:
            continue
        try:
            dir_fd = _open_folder(folder)
        except OSError as exc:
            # A sessions folder that is a symlink: what it points at is not agentd's.
            log.warning("%s left alone: %s", folder, exc)
            continue
        try:
            for name in (transcript, f"{session_id}.meta.json"):
                try:
                    # Unlinks a symlink itself, never what it points at.
                    os.unlink(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                removed += name == transcript
            _remove_images(dir_fd, f"{session_id}.images")
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return removed


def _remove_images(dir_fd: int, name: str) -> None:
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        # The fd-based walk: symlinks inside are removed, never followed.
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


LIVE_FILE = "live-sessions.lock"
# Open file description locks (Linux): held per open file, so a daemon's
# one descriptor holds all its sessions' locks, and another descriptor (a
# test, a second core) conflicts with them as another process would.
# Elsewhere POSIX record locks, held per process, do the same between
# processes: the only descriptor of the file a daemon opens is its own.
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None) if sys.maxsize > 2**32 else None
# struct flock: l_type, l_whence, l_start, l_len, l_pid, padding (64-bit).
_FLOCK = "hhqqi4x"
# Where a session's byte lies: 62 bits of its id's hash (31 where offsets may be 32-bit).
_OFFSET_BITS = 62 if sys.maxsize > 2**32 else 31


def _offset(session_id: str) -> int:
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - _OFFSET_BITS)


def _lock(fd: int, kind: int, offset: int) -> bool:
    """One byte of `fd` locked `kind` (F_RDLCK, F_WRLCK) or unlocked
    (F_UNLCK), never waiting; False when another holder's lock conflicts."""
    try:
        if _OFD_SETLK is not None:
            fcntl.fcntl(fd, _OFD_SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0))
        else:
            cmd = {
                fcntl.F_RDLCK: fcntl.LOCK_SH | fcntl.LOCK_NB,
                fcntl.F_WRLCK: fcntl.LOCK_EX | fcntl.LOCK_NB,
            }.get(kind, fcntl.LOCK_UN)
            fcntl.lockf(fd, cmd, 1, offset)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class LiveSessions:
    """The sessions this daemon has open, shown to every daemon on the same
    home: each holds a shared lock on one byte of `$AGENTD_HOME/live-sessions.lock`
    (the byte named by the session id's hash), taken when the session is
    created, loaded or forked (`hold`) and let go when it closes (`release`)
    or the process ends, however it ends (the kernel drops the locks of a
    killed daemon). A deletion takes that byte exclusively (`claim`): it
    fails while another daemon holds the session, and a daemon that loads
    the session meanwhile waits for nothing (its `hold` fails: the session
    is being deleted). One descriptor per daemon, one lock per session; a
    file that cannot be opened (a read-only home) only means no daemon is
    told, as before these locks."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home
        self._fd: int | None = None
        self._failed = False
        # Sessions held (a lock is not counted: held twice, let go once).
        self._held: set[str] = set()
        # Sessions being deleted: their byte stays locked until `unclaim`.
        self._claimed: set[str] = set()

    def prepare(self) -> None:
        """Open the file ahead (the warm-up: not on a new session's reply
        path), when the home exists: a daemon that never opens a session
        makes no home."""
        if (self.home or agentd_home()).is_dir():
            self._file()

    def _file(self) -> int | None:
        if self._fd is not None or self._failed:
            return self._fd
        home = self.home or agentd_home()
        try:
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._fd = open_regular(home / LIVE_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            self._failed = True
            log.warning(
                "cannot open %s (other daemons are not told which sessions are open here): %s",
                home / LIVE_FILE,
                exc,
            )
        return self._fd

    def hold(self, session_id: str) -> bool:
        """Show `session_id` as open here; False when a deletion of it is
        under way in another daemon."""
        if session_id in self._held:
            return True
        fd = self._file()
        if fd is None:
            return True
        if session_id not in self._claimed and not _lock(fd, fcntl.F_RDLCK, _offset(session_id)):
            return False
        self._held.add(session_id)
        return True

    def release(self, session_id: str) -> None:
        """`session_id` is no longer open here."""
        if session_id not in self._held:
            return
        self._held.discard(session_id)
        if self._fd is not None and session_id not in self._claimed:
            _lock(self._fd, fcntl.F_UNLCK, _offset(session_id))

    def claim(self, session_id: str) -> bool:
        """Take `session_id` for a deletion: False when another daemon has it
        open (this one's own hold does not count). Until `unclaim`, no other
        daemon can open it."""
        fd = self._file()
        if fd is None:
            return True
        if not _lock(fd, fcntl.F_WRLCK, _offset(session_id)):
            return False
        self._claimed.add(session_id)
        return True

    def unclaim(self, session_id: str) -> None:
        if session_id not in self._claimed:
            return
        self._claimed.discard(session_id)
        if self._fd is not None:
            kind = fcntl.F_RDLCK if session_id in self._held else fcntl.F_UNLCK
            _lock(self._fd, kind, _offset(session_id))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # every lock of it goes
            self._fd = None
        self._held.clear()
        self._claimed.clear()
