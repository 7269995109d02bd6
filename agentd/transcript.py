"""Session transcripts: JSON lines, appended as the session goes, never rewritten
(but for one taken away behind the daemon, below).

One file per session, `$AGENTD_HOME/projects/<slug>/sessions/<sessionId>.jsonl`:

    {"type": "session", "sessionId", "workspaceRoot", "createdAt"}      first line
    {"type": "message", "offset": n, "ts", "message": {...}}             one per message
    {"type": "reset", "offset": n, "ts"}                                 agent/resetSession
    {"type": "note", "ts", "note": {"kind", ...}}                        what the view showed
    {"type": "config", "ts", "mode"?, "model"?,                          the session's settings
     "additionalDirectories"?}
    {"type": "compaction", "offset": n, "ts", "split", "summary",        the history was compacted
     "summaryText", "cleared", "note"}
    {"type": "fork", "ts", "from", "history", "notes", "plan",           a fork's copied history
     "summary", "turns", "tokensUsed", "title", "offset"?}              (second line, once)

A note is something the editor was shown beside the messages and that a
replay must show again: a memory delivery, a model step's token usage, the
plan, how a prompt ended (a cancel, an error). It belongs after the message
lines before it and counts no offset, so extraction, which reads messages
only, never sees it. A config line records a mode or model the user chose,
or the folders beside the workspace the session may work in (ACP
`additionalDirectories`, the whole list each time it changes); unlike notes
it survives a reset (a reset clears the conversation, not how the session
runs).

Images of a prompt are not inlined: each is written once, decoded, to
`<sessionId>.images/<sha256>` beside the transcript, and the message line
holds `{"type": "image", "mimeType", "sha256"}`. Lines stay small whatever
the pictures weigh (each is capped at `limits.maxImageBytes`), the same
image sent twice is stored once, and a loaded session sends them to the
model again; an image whose file is gone becomes a line of text saying so.
A folder of images whose transcript is gone (deleted by hand) is removed at
start-up (`collect_orphan_images`). The images folder is reached by
descriptors from the sessions folder, never through a symlink
(`open_images_folder`): a symlink, FIFO, device or file in its place is
replaced by a new folder when an image is written, and a load shows the
images it would have held as missing.

A new session's file is made ahead, empty (its first block given, its
size left 0: `files.reserve_first_block`), once its `session/new` is
answered (`OpenFiles.prepare`), so that its first prompt only writes: an
empty transcript is no session (no listing shows it, no load finds it),
and it is removed when its session closes or the daemon exits, or, left by
a killed daemon, at the next start (`collect_unused_transcripts`).

`<sessionId>.meta.json` beside it holds what `session/list` shows (the title
of the conversation since its last reset, the workspace and the additional
directories), rewritten when one of them changes, so that listing a
thousand sessions reads a thousand small files instead of every transcript
(`SessionCatalog`, which also caches by file status). A transcript without
one (older, or its write failed) is read whole instead.

A compaction record says how the model's view of the history changed at
that point (`apply_compaction`): the first `split` messages since the last
reset or compaction were replaced by one summary message (`summaryText`, and
`summary`, the structured summary the next compaction builds on), and the
output of the tool calls in `cleared` by a stub. The message lines stay as
they were: extraction reads every turn, summarised or not. `note` is the
compaction's report, which a replay shows as the divider.

`offset` counts message lines from the start of the file and never goes
back, resets included: it is the coordinate the extraction cursor
(`processedOffset`) points into, so after a restart the cursor still points
into a history that exists. A torn last line (a crash mid-write) is ignored
on reading. Because the file is only ever appended to, a byte position at
the end of a line stays valid too: `read_from` starts at the one a cursor
remembers, so extracting a turn reads that turn's bytes, not the file.

A fork (`session/fork`, `agent/forkSession`) starts its transcript with the
source session's state as one `fork` record: its history as the model sees
it (a compacted one with its summary message first), the notes a replay
shows, the plan, the structured summary the next compaction builds on, and
the counters. The copied messages are not message lines, so memory
extraction, which reads message lines only, never extracts them a second
time (the source's transcript has them, under its own cursor); the fork's
own messages count offsets from 0. Its images are links to the source's
image files (`agentd.session_files`).

A live session's file removed, renamed or replaced behind the daemon (by
hand, by an older agentd, by a sync tool) is written again whole
(`TranscriptWriter._rebuild`): its header, then a `fork` record that names
the session itself and holds its state as the daemon has it, with
`offset`, the offset its next message line takes, then its settings;
written under a temporary name and renamed into place. With memory
extraction on, the message lines it had not read yet (past its cursor, as
the extraction last told the writer; those this writer wrote) come again,
as they were written, between the header and the fork record: a cursor
pointing among them finds them, and a load, which takes the session's
state from the record, sees each message once (a fork's cut at an offset
looks only past the record). The other message lines before it are gone
with the old file; a cursor pointing among them finds nothing there.
Found as a closed file is opened again (never created: a session's file
that is not there was taken away) and, for a file kept open, at a
prompt's start and at close (`check_file`), where any `lstat` error counts
(the sessions folder replaced by a file gives ENOTDIR, not "the file is
there"). A rebuild that cannot be made (no folder can be made there; the
sessions folder replaced by a symlink to another folder than the one the
file was found in, which is not written through) lets go of the kept
file, so that lines wait in memory instead of going to an unlinked one,
and the owner says so. A session deleted through agentd is never written
again: its writer is `discard`ed first.

Written by the core (`agentd.agent.core`), read back by `session/load` and by
memory extraction (`agentd.memory.extraction`): it lives below both, so that
neither imports the other.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import shutil
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from agentd.events import (
    CompactionReport,
    MemoryDelivered,
    Note,
    PlanEntry,
    PlanUpdated,
    PromptEnded,
    UsageReport,
)
from agentd.files import open_regular, read_fd, read_regular, reserve_first_block
from agentd.jsonenc import compact_utf8
from agentd.layout import agentd_home, project_slug
from agentd.messages import (
    ImagePart,
    Message,
    Part,
    ReminderPart,
    TextPart,
    ToolResultPart,
    forget_prefix,
    message_from_json,
    message_to_json,
)
from agentd.turn_ends import (
    SUMMARY_SOURCE,
    answer_missing,
    finished_length,
    holds_prompt,
    results_of,
)

log = logging.getLogger(__name__)


def sessions_dir(workspace_root: Path, home: Path | None = None) -> Path:
    return (home or agentd_home()) / "projects" / project_slug(workspace_root) / "sessions"


# The longest session id agentd takes (its own are 32 hex digits).
MAX_SESSION_ID = 128


def valid_session_id(session_id: str) -> bool:
    """Could `session_id` name a transcript? ASCII letters, digits, `-` and `_`
    only, at most `MAX_SESSION_ID` of them: an id is never a path (no
    separator, no `..`, nothing a file system reads differently)."""
    return (
        0 < len(session_id) <= MAX_SESSION_ID
        and session_id.isascii()
        and all(c.isalnum() or c in "-_" for c in session_id)
    )


@dataclass(frozen=True)
class TranscriptInfo:
    session_id: str
    workspace_root: Path
    title: str
    updated_at: float
    # The folders beside the workspace root (ACP `additionalDirectories`).
    additional_roots: tuple[str, ...] = ()


@dataclass
class LoadedTranscript:
    session_id: str
    workspace_root: Path
    # Messages after the last reset: the session's live history.
    history: list[Message]
    # Offset of history[0] in the file, and the number of message lines in all.
    history_start: int
    total: int
    # Notes after the last reset, each with the number of history messages before it.
    notes: list[tuple[int, Note]] = field(default_factory=list)
    # The session's token count after its last model step (0 after a reset).
    tokens_used: int = 0
    # The plan of the conversation since the last reset (its last plan note).
    plan: list[PlanEntry] = field(default_factory=list)
    # The last mode and model chosen (config lines; a reset keeps them).
    mode: str | None = None
    model: str | None = None
    # Prompts since the last reset, and the first one's first line: both count
    # the summarised turns too (the compacted `history` no longer holds them).
    turns: int = 0
    title: str = "(empty session)"  # EMPTY_TITLE, defined below
    # The structured summary of the last compaction (None: none yet).
    summary: dict[str, Any] | None = None
    # The file ends in the middle of a line: a crash cut its last write short.
    torn: bool = False
    # The folders beside the workspace root (the last config line that named them).
    additional_roots: list[str] = field(default_factory=list)
    # The message lines memory extraction has not read yet (`load`'s
    # `unextracted_from`), by offset, as a live writer keeps its own
    # (`TranscriptWriter._unextracted`): a file taken away before they are
    # extracted is written again with them.
    unextracted: list[tuple[int, bytes]] = field(default_factory=list)


EMPTY_TITLE = "(empty session)"
MISSING_IMAGE = "[an image of this prompt: its stored copy is missing]"


def images_dir(path: Path) -> Path:
    """Where a transcript's images live (`<sessionId>.images/`)."""
    return path.with_suffix(".images")


def open_images_folder(parent_fd: int, name: str, *, create: bool) -> int:
    """A descriptor of the images folder `name` in the sessions folder open as
    `parent_fd`, opened without following a symlink: image files are written
    and read only relative to it, never by a path someone could re-point.

    Not a folder there (a symlink, a FIFO, a device, a file: the kernel
    refuses it without opening it, so nothing hangs): OSError (ELOOP or
    ENOTDIR) when only reading; when `create`, it is removed (the name is
    agentd's, in agentd's folder: a link goes, never what it points at) and
    the folder made again, as a missing one is."""
    try:
        return os.open(name, _FOLDER_FLAGS | _NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if not create or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        log.warning("%s was not a folder (a symlink or a special file): made again", name)
        os.unlink(name, dir_fd=parent_fd)
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass  # made meanwhile (a fork beside); opened as any
    return os.open(name, _FOLDER_FLAGS | _NOFOLLOW, dir_fd=parent_fd)


def _images_folder(transcript: Path, *, create: bool) -> int:
    """`open_images_folder` for the images of `transcript`, from its folder
    as the writer reaches it (a sessions folder the user moved elsewhere
    with a symlink included)."""
    parent = os.open(transcript.parent, _FOLDER_FLAGS)
    try:
        return open_images_folder(parent, images_dir(transcript).name, create=create)
    finally:
        os.close(parent)


# A sessions folder as listed: its path, its entries and their names.
FolderListing = tuple[str, list[os.DirEntry[str]], set[str]]


def _list_folder(folder: str) -> FolderListing | None:
    """One sessions folder's entries, or None when it cannot be listed
    (missing, unreadable, or not a folder: a file or a FIFO in its place)."""
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError:
        return None
    return folder, entries, {e.name for e in entries}


def sessions_folders(home: Path | None, *, follow_symlinks: bool) -> Iterator[FolderListing]:
    """Every project's sessions folder under `<home>/projects` that can be
    listed, with its entries; one directory listing each. A project entry
    that is not a folder (a file, a FIFO) is skipped, and so is a symlink to
    one unless `follow_symlinks` (reading through it is harmless; removing
    through it is not). No projects folder, or an unreadable one: nothing."""
    projects = (home or agentd_home()) / "projects"
    try:
        with os.scandir(projects) as it:
            folders = [
                os.path.join(e.path, "sessions")
                for e in it
                if e.is_dir(follow_symlinks=follow_symlinks)
            ]
    except OSError:
        return
    for folder in folders:
        listing = _list_folder(folder)
        if listing is not None:
            yield listing


def collect_orphan_images(home: Path | None = None) -> int:
    """Remove the `<sessionId>.images/` folders whose transcript is gone (deleted
    by hand or by a tool: nothing can show those images again); returns how many.

    Run once at start-up. Confined to the sessions folders: a project or images
    folder that is a symlink is left alone, and `shutil.rmtree` does not follow
    symlinks inside the folders it removes. The writer creates a transcript
    before its first image, so a live session's folder never looks orphaned.
    """
    removed = 0
    for folder, entries, names in sessions_folders(home, follow_symlinks=False):
        removed += _collect_orphans(folder, entries, names)
    return removed


def collect_at_start(home: Path | None = None) -> tuple[int, int]:
    """The start-up's collection, one listing per sessions folder: the empty
    transcripts a killed daemon left (`collect_unused_transcripts`), then the
    orphaned images (`collect_orphan_images`); how many of each went."""
    unused = orphans = 0
    for folder, entries, names in sessions_folders(home, follow_symlinks=False):
        unused += _collect_unused(folder, entries, names)
        orphans += _collect_orphans(folder, entries, names)
    return unused, orphans


def _collect_orphans(folder: str, entries: list[os.DirEntry[str]], names: set[str]) -> int:
    removed = 0
    for entry in entries:
        if not entry.name.endswith(".images"):
            continue
        transcript = entry.name.removesuffix(".images") + ".jsonl"
        if transcript in names:
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        if os.path.lexists(os.path.join(folder, transcript)):
            continue
        try:
            shutil.rmtree(entry.path)
        except OSError as exc:
            log.warning("cannot remove orphaned images %s: %s", entry.path, exc)
            continue
        removed += 1
    return removed


def meta_path(path: Path) -> Path:
    return path.with_suffix(".meta.json")


@dataclass
class CompactionRecord:
    """How a compaction changed the model's view of the history."""

    # history[:split] was replaced by the summary (0: nothing was summarised).
    split: int
    # The summary message's text and the structured summary behind it.
    summary_text: str | None
    summary: dict[str, Any] | None
    # Tool call id -> the stub that replaced its output.
    cleared: dict[str, str]
    report: CompactionReport

    def to_json(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "summary": self.summary,
            "summaryText": self.summary_text,
            "cleared": self.cleared,
            "note": note_to_json(self.report),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompactionRecord:
        """Raises KeyError, ValueError or TypeError for a record it cannot read."""
        report = note_from_json(data["note"])
        if not isinstance(report, CompactionReport):
            raise ValueError("a compaction record's note must be a compaction")
        text = data.get("summaryText")
        summary = data.get("summary")
        cleared = data.get("cleared") or {}
        if not isinstance(cleared, dict):
            raise TypeError("cleared must be an object")
        return cls(
            split=int(data["split"]),
            summary_text=str(text) if text is not None else None,
            summary=summary if isinstance(summary, dict) else None,
            cleared={str(k): str(v) for k, v in cleared.items()},
            report=report,
        )


def summary_message(text: str) -> Message:
    return Message("user", [ReminderPart(text, source=SUMMARY_SOURCE)])


def apply_compaction(
    history: list[Message], notes: list[tuple[int, Note]], record: CompactionRecord
) -> tuple[list[Message], list[tuple[int, Note]]]:
    """The history and notes after `record`: the one function both a live
    session and a reload use, so a restored session is the compacted one.

    The summary message replaces `history[:split]`; the notes of the
    summarised turns go with them (a note at index `split` closed the last
    summarised prompt). The report becomes the divider: first when a summary
    replaced the start, else where the compaction happened (the end).

    The tail starts at a prompt (`history_index.starts_prompt`), whose
    message answers no call. A record written before that rule may split at
    a prompt that also holds the results of the calls just before it (an
    older transcript continued after a crash, its missing results folded in
    by `turn_ends.answer_missing`): those results, whose calls the summary
    replaced, are left out, or both APIs would refuse every later request.
    """
    split = max(0, min(record.split, len(history)))
    head = [summary_message(record.summary_text)] if record.summary_text is not None else []
    tail = [_cleared(m, record.cleared) for m in history[split:]]
    if split and tail:
        tail[0] = _without_results(tail[0])
    shift = len(head) - split
    kept = [(i + shift, n) for i, n in notes if split == 0 or i > split]
    new = head + tail
    # The last request's assembly, kept on the newest message, holds the
    # messages just replaced: a megabyte of a long session's, let go now.
    forget_prefix(new)
    divider = (0, record.report) if head else (len(new), record.report)
    return new, [divider, *kept] if head else [*kept, divider]


def _without_results(message: Message) -> Message:
    """`message` without its tool results, when it holds more than those (a
    prompt's words); else `message` itself. Results alone are never the
    start of a tail (`history_index.starts_prompt`)."""
    if not message.tool_results:
        return message
    rest: list[Part] = [p for p in message.parts if not isinstance(p, ToolResultPart)]
    if not rest:
        return message
    return Message(message.role, rest, interrupted=message.interrupted)


def _cleared(message: Message, cleared: dict[str, str]) -> Message:
    hit = any(isinstance(p, ToolResultPart) and p.tool_call_id in cleared for p in message.parts)
    if not hit:
        return message
    parts: list[Part] = [
        ToolResultPart(p.tool_call_id, cleared[p.tool_call_id], p.is_error)
        if isinstance(p, ToolResultPart) and p.tool_call_id in cleared
        else p
        for p in message.parts
    ]
    return Message(message.role, parts, interrupted=message.interrupted)


def _stands_in(path: Path) -> bool:
    """Is what `path` names now something other than a file or a folder (a
    symlink, a FIFO, a device, a socket), which a rename replaces?"""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


class OpenFiles:
    """The transcripts a daemon keeps open: at most `limit`, least recently
    written closed first. A session is not a file descriptor held forever
    (ACP clients never close sessions; a long-lived daemon gathers hundreds):
    a writer whose file was closed opens it again at its next write."""

    def __init__(self, limit: int = 32) -> None:
        self.limit = max(1, limit)
        self._files: OrderedDict[Path, IO[bytes]] = OrderedDict()
        # New sessions' files made ahead, empty until `create` (`prepare`).
        self._spares: OrderedDict[Path, IO[bytes]] = OrderedDict()
        # The folders `prepare` made for them (none of them written in yet).
        self._made: set[Path] = set()

    def prepare(self, path: Path) -> None:
        """Make the file `create(path)` will create, ahead: `create` then
        only hands it over. Creating a file and naming it (the inode, the
        directory entry, the open file object) took 0.1-0.15 ms of a new
        session's first prompt, after the half second its editor idled.

        The file is empty until that prompt's first line, which is what
        keeps a session never prompted out of sight: an empty transcript is
        no session to a listing or a load (`load` finds no header), its
        writer's `close` (a closed session, the daemon's exit, a spare
        pushed out past `limit`) removes it, and one a killed daemon left
        is removed at the next start (`collect_unused_transcripts`). The
        daemon holds an exclusive `flock` on it while it is open, so that
        a daemon starting beside it tells a live session's file from a
        dead daemon's. Nothing when a file has the name already, or the
        file system takes no `flock`.

        A project's first session finds no sessions folder: it is made now
        too (`_make_folders`: making it on the first prompt's way, an open
        refused, pathlib's `mkdir` and the open again, took 0.2-0.4 ms of
        it), and the folders made for a file made ahead are removed with
        the file if that session is never prompted and they are empty then
        (`_discard`): a session never prompted leaves no folder either,
        but after a kill (its file is collected at the next start, the
        empty folder stays)."""
        if path in self._spares or path in self._files:
            return
        flags = _APPEND | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            made = _make_folders(path.parent)
            if not made:
                return
            self._made.update(made)
            try:
                fd = os.open(path, flags, 0o600)
            except OSError:
                self._remove_made(path)
                return
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A daemon starting meanwhile may have taken it for a dead one's
            # between the open and the lock: then it is gone, and not used.
            held = os.fstat(fd)
            named = os.lstat(path)
            if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
                raise FileNotFoundError(errno.ENOENT, "removed before it was locked", str(path))
        except OSError:
            _remove_unused(path, fd)
            os.close(fd)
            self._remove_made(path)
            return
        # Its first line's block too (its size stays 0).
        reserve_first_block(fd)
        while len(self._spares) >= self.limit:
            self._discard(*self._spares.popitem(last=False))
        self._spares[path] = io.FileIO(fd, "a")

    def get(self, path: Path, *, create: bool = True) -> IO[bytes]:
        """The file kept open for `path`, else opened (created unless not
        `create`: then FileNotFoundError when it is not there)."""
        f = self.kept(path)
        if f is not None:
            return f
        # Appending, never through a symlink, and never waiting on a FIFO.
        if not create:
            fd = open_regular(path, _APPEND, 0o600)
        else:
            fd = _in_folder(path, lambda: open_regular(path, _APPEND | os.O_CREAT, 0o600))
        return self._keep(path, io.FileIO(fd, "a"))

    def kept(self, path: Path) -> IO[bytes] | None:
        """The file open for `path` if it is kept (now the most recently
        used); None when it was closed, or never opened."""
        f = self._files.get(path)
        if f is not None:
            self._files.move_to_end(path)
        return f

    def replace(self, path: Path, f: IO[bytes]) -> IO[bytes]:
        """Keep `f` for `path` in place of what was open for it (a file
        rewritten under its name: the old descriptor holds the old file)."""
        old = self._files.pop(path, None)
        if old is not None:
            old.close()
        return self._keep(path, f)

    def create(self, path: Path) -> IO[bytes]:
        """`get` for a file that must not exist yet (a new session's
        transcript): FileExistsError if one does. Created exclusively, so
        nothing else is there to check (no symlink, FIFO or other file can
        be: the kernel refuses), which spares the `fstat` and the mode
        changes `open_regular` makes on the prompt's path. A file made ahead
        (`prepare`) is that file already."""
        if path in self._files:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
        spare = self._spares.pop(path, None)
        folder = path.parent
        while folder in self._made:
            # A session's folder now: never removed by this daemon.
            self._made.discard(folder)
            folder = folder.parent
        if spare is not None:
            return self._keep(path, spare)
        flags = _APPEND | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW
        fd = _in_folder(path, lambda: os.open(path, flags, 0o600))
        return self._keep(path, io.FileIO(fd, "a"))

    def _keep(self, path: Path, f: IO[bytes]) -> IO[bytes]:
        while len(self._files) >= self.limit:
            _, oldest = self._files.popitem(last=False)
            oldest.close()
        self._files[path] = f
        return f

    def close(self, path: Path) -> None:
        f = self._files.pop(path, None)
        if f is not None:
            f.close()
        spare = self._spares.pop(path, None)
        if spare is not None:
            self._discard(path, spare)

    def _discard(self, path: Path, spare: IO[bytes]) -> None:
        """A file made ahead and never written: removed, then closed (which
        lets go of its lock), and the folders made for it if they are empty."""
        try:
            _remove_unused(path, spare.fileno())
        finally:
            spare.close()
            self._remove_made(path)

    def _remove_made(self, path: Path) -> None:
        """Remove the folders `prepare` made above `path`, deepest first,
        while they are empty (`rmdir` refuses one that is not: another
        session's file, another daemon's)."""
        folder = path.parent
        while folder in self._made:
            try:
                os.rmdir(folder)
            except OSError:
                return  # in use: the next discard there tries again
            self._made.discard(folder)
            folder = folder.parent

    def __len__(self) -> int:
        return len(self._files)


def _make_folders(folder: Path) -> list[Path]:
    """Make `folder` and those above it that are missing (mode 0700, as
    `_in_folder` makes them); the ones this call made, deepest first. One
    made meanwhile by someone else is not this call's; a failure stops."""
    missing: list[Path] = []
    while not os.path.lexists(folder):
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    made: list[Path] = []
    for each in reversed(missing):
        try:
            os.mkdir(each, 0o700)
        except FileExistsError:
            continue
        except OSError:
            break
        made.append(each)
    made.reverse()
    return made


def _remove_unused(path: Path | str, fd: int) -> bool:
    """Remove `path` if it is still the empty file open as `fd`; whether it was."""
    try:
        held = os.fstat(fd)
        named = os.lstat(path)
        if held.st_size or (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
            return False
        os.unlink(path)
    except OSError:
        return False
    return True


def collect_unused_transcripts(home: Path | None = None) -> int:
    """Remove the empty transcripts a killed daemon left: files made ahead
    for new sessions that were never prompted (`OpenFiles.prepare`); returns
    how many. Run once at start-up, beside `collect_orphan_images`.

    Only a transcript without a meta file can be one (a prompted session's
    meta file is written once its first request is out), so the others cost
    no `stat`. An empty file is removed only when its `flock` can be taken:
    a live daemon holds that lock on its sessions' files made ahead. Never
    through a symlink; a FIFO is opened without waiting and left alone.
    """
    removed = 0
    for folder, entries, names in sessions_folders(home, follow_symlinks=False):
        removed += _collect_unused(folder, entries, names)
    return removed


def _collect_unused(folder: str, entries: list[os.DirEntry[str]], names: set[str]) -> int:
    removed = 0
    for entry in entries:
        name = entry.name
        if not name.endswith(".jsonl") or name.removesuffix(".jsonl") + ".meta.json" in names:
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live daemon's session, not prompted yet
            removed += _remove_unused(entry.path, fd)
        finally:
            os.close(fd)
    return removed


class TranscriptWriter:
    """Appends one session's records, one line each, flushed as they come.

    Its file is one of `files` (shared by the daemon's writers, so open files
    are bounded) and reopened when needed. A line that cannot be written (a
    full disk, no file descriptor left) is kept and written before the next
    one, so the transcript never skips a message the history holds: it is
    behind for as long as the disk refuses, never out of step. Offsets are
    given when a message is appended, whether or not its line got out yet.
    """

    def __init__(
        self,
        path: Path,
        session_id: str,
        workspace_root: Path,
        offset: int = 0,
        title: str = "",
        files: OpenFiles | None = None,
        *,
        fresh: bool = False,
        torn: bool = False,
        additional_roots: Iterable[str] = (),
        snapshot: Callable[[], tuple[ForkBase, dict[str, Any]]] | None = None,
        keep_unextracted: bool = False,
    ) -> None:
        self.path = path
        self.session_id = session_id
        self.workspace_root = workspace_root
        # The folders beside the workspace root, as the last config line (or
        # the fork record's) names them; the meta file says them too.
        self.additional_roots = list(additional_roots)
        self.offset = offset
        # Set by the owner after a failed append, so that it reports the failure once.
        self.failed = False
        # Why the owner last found the file unwritable ("": never), and
        # whether the user was told in the chat (once per session: the lines
        # are kept and written when the disk takes them, so there is no
        # second thing to say while it refuses).
        self.failure = ""
        self.told = False
        # Set by the owner while a prompt runs: called when a failure is
        # found (`failed` or `rebuild_failed` set), to tell the user then.
        self.on_failure: Callable[[], None] | None = None
        # Set by the owner when the file was taken away and writing it again
        # failed (`check_file`); cleared by the next check that does not fail.
        self.rebuild_failed = False
        # The title of the conversation since the last reset ("" before its first prompt).
        self.title = title
        self._files = files if files is not None else OpenFiles(limit=1)
        self._pending: list[bytes] = []
        self._started = False
        # Settings chosen before anything was written: a session that never
        # gets a prompt leaves no file behind.
        self._pending_config: dict[str, Any] = {}
        # The meta file is to be written: before the first line if there is
        # one (its title is out of date), else by `write_due_meta`, which the
        # core calls once the prompt's model request is out (never on the
        # prompt's path to it), after the reply, and at `close`.
        self._meta_due = False
        # Image files (their names in the images folder) written since the
        # last sync (made durable with it).
        self._unsynced: list[str] = []
        # The session's id was made just now (a new session): neither its
        # transcript nor its meta file can exist but for what this writer
        # writes, so its first line asks the file system nothing (two `stat`s
        # of a new session's first prompt) and creates the file exclusively;
        # a file found there after all is appended to as any other
        # (`_found_existing`). Cleared once the file is open.
        self._fresh = fresh
        self._wrote_meta = False
        self._header: bytes | None = None
        # The session was deleted: nothing is written any more (a cancelled
        # prompt's last lines would otherwise bring its file back).
        self.discarded = False
        # The file ends in the middle of a line (a crash cut a write short):
        # the first line written starts a line of its own, or it would be
        # glued to the torn one and lost with it to every reader.
        self._torn = torn
        # Lines that close a prompt a crash cut short (`close_cut_turn`),
        # written before this writer's first line, never on their own.
        self._held: list[bytes] = []
        # The session as it is now (its history as the model sees it, with
        # notes, plan, counters, and its settings as a config line's values),
        # for a file taken away behind the daemon (`_rebuild`). None: such a
        # file is created again as any missing one (a writer of no session).
        self._snapshot = snapshot
        # (st_dev, st_ino) of the file last seen open (None: not learned yet):
        # another file found under the name was put there behind the daemon.
        self._identity: tuple[int, int] | None = None
        # The open file `_identity` was read from: a descriptor's file never
        # changes, so a prompt's check (`_taken_away`) asks it only of another.
        self._identity_file: IO[bytes] | None = None
        # (st_dev, st_ino) of the sessions folder the file was last found in
        # (`_taken_away`; None: not learned yet).
        self._folder: tuple[int, int] | None = None
        # Rebuilds so far: a line whose state a rebuild wrote is not written again.
        self._rebuilds = 0
        # The lines of the messages this writer gave offsets that memory
        # extraction has not read yet, by offset (None: extraction is off):
        # a rebuilt file holds them as message lines again, before its fork
        # record, or the cursor, behind the record's offset, would find no
        # line of theirs and they would never be extracted. Dropped as the
        # extraction's cursor passes them (`extracted`).
        self._unextracted: OrderedDict[int, bytes] | None = (
            OrderedDict() if keep_unextracted else None
        )
        self._unextracted_bytes = 0
        self._said_unextracted = False

    @property
    def pending(self) -> int:
        """Lines kept because writing them failed (0 when the file is up to date)."""
        return len(self._pending)

    def _start(self) -> None:
        """Before the first line: the session header of a new file, the
        settings chosen before there was a file; its meta file is due."""
        self._started = True
        # A session's file that is not there was taken away: its first write
        # rebuilds it whole (`_reopen`), never a file of new lines alone.
        new = self._fresh or (self._snapshot is None and not self.path.exists())
        # The meta file says the additional roots too: it follows their change.
        roots_changed = CONFIG_ROOTS in self._pending_config
        if self._torn and not new:
            self._pending.append(b"\n")
        if new:
            if self._header is None:
                self._header = self._header_line()
            self._pending.append(self._header)
        if not (self._wrote_meta if self._fresh else meta_path(self.path).exists()):
            # A listing reads the transcript instead, which has the title: the
            # meta file waits until the prompt's request is out (`write_due_meta`).
            self._meta_due = True
        elif new or self._meta_due or roots_changed:
            # A meta file that no longer says what the transcript does (a new
            # title) is never left behind a line: a listing would believe it.
            self._meta_due = False
            self._write_meta()
        if self._held:
            self._pending.extend(self._held)
            self._held = []
        if self._pending_config:
            self._pending.append(
                _encode({"type": "config", "ts": time.time(), **self._pending_config})
            )
            self._pending_config = {}

    def _line(self, record: dict[str, Any], *, flush: bool = True) -> None:
        self._put(_encode(record), flush=flush)

    def _put(self, line: bytes, *, flush: bool = True) -> None:
        if self.discarded:
            return
        if not self._started:
            self._start()
        self._pending.append(line)
        if flush:
            self.flush()

    def flush(self) -> None:
        """Write what is pending; OSError when the disk (or the fd table) refuses."""
        if not self._pending or self.discarded:
            return
        f = self._open()
        if not self._pending:
            return  # the file was rebuilt: it holds what they said
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        try:
            # Unbuffered: one `write` call, no buffer to copy into and flush
            # (0.01 ms of the prompt line's path once the process had idled).
            # A regular file takes all of it but on an error; the rest of a
            # short write goes in another call.
            done = 0
            while done < len(data):
                wrote = f.write(data[done:] if done else data)
                if not wrote:
                    raise OSError(errno.EIO, "the transcript took no bytes")
                done += wrote
        except OSError:
            # Reopened for the next write, as when a buffer had to be dropped.
            self._files.close(self.path)
            raise
        self._pending.clear()

    def _header_line(self) -> bytes:
        return _encode(
            {
                "type": "session",
                "sessionId": self.session_id,
                "workspaceRoot": str(self.workspace_root),
                "createdAt": time.time(),
            }
        )

    def prepare(self) -> None:
        """A new session's file (`OpenFiles.prepare`) and header line made
        ahead, for its first line; nothing for another writer, or once a
        line was written. The header says when the session was made."""
        if self._fresh and not self._started and not self.discarded:
            self._files.prepare(self.path)
            self._learn_folder()
            if self._header is None:
                self._header = self._header_line()

    def _learn_folder(self) -> None:
        """Note which folder the sessions folder is now (once; see `_check_folder`)."""
        if self._folder is None:
            with contextlib.suppress(OSError):
                self._folder = _identity_of(os.stat(self.path.parent))

    def _open(self) -> IO[bytes]:
        if not self._fresh:
            if self._snapshot is None:
                return self._files.get(self.path)
            return self._reopen()
        try:
            f = self._files.create(self.path)
        except FileExistsError:
            self._found_existing()
            return self._files.get(self.path)
        self._fresh = False
        if self._folder is None:
            # Not learned ahead (`prepare` found no folder: made just now,
            # or by someone else since): learned now, not at the meta file
            # (after the request, or never if it cannot be written), or a
            # symlink put in its place meanwhile would be the folder
            # `_check_folder` follows. One `stat`, and only then.
            self._learn_folder()
        return f

    def _reopen(self) -> IO[bytes]:
        """The session's file, kept open or opened again (never created: a
        session's file that is gone was taken away behind the daemon, and
        is rebuilt whole, as is one another file stands in for; a symlink,
        a FIFO or a device put in its place is replaced so, never written
        through)."""
        f = self._files.kept(self.path)
        if f is not None:
            return f
        try:
            f = self._files.get(self.path, create=False)
        except FileNotFoundError:
            return self._rebuild()
        except OSError:
            if not _stands_in(self.path):
                raise
            # A symlink (to /etc/passwd, to another session's file), a FIFO
            # or a device put in its place: replaced by the session's own
            # file, never written through (the open refused it).
            return self._rebuild()
        held = os.fstat(f.fileno())
        if self._identity not in (None, (held.st_dev, held.st_ino)):
            return self._rebuild()
        self._identity = (held.st_dev, held.st_ino)
        self._identity_file = f
        self._learn_folder()
        return f

    def check_file(self) -> None:
        """Rebuild the session's transcript (`_rebuild`) if its file was
        taken away behind the daemon while the daemon kept it open: removed
        (the descriptor's `st_nlink` is 0), renamed, or replaced by another.
        A closed one is checked as it is opened again (`_reopen`); this
        checks the kept one, at a prompt's start (before its first line, so
        that the prompt's messages are message lines of the new file, which
        memory extraction reads) and at `close` (a daemon's exit): an
        `lstat`, once per prompt, not on every line (and an `fstat` of a
        file opened since the last check: `_identity_file`).
        Nothing for a writer that has written nothing yet: a load alone
        writes nothing, and a new session's file is its first prompt's."""
        if self._snapshot is None or not self._started or self._fresh or self.discarded:
            return
        if self._taken_away():
            try:
                self._rebuild()
            except OSError:
                # Not written again now: the file kept open is no longer the
                # session's (unlinked with its folder, or moved away with
                # it), and a line written to it would be lost without a
                # word. Let go of it: the next lines wait in memory (the
                # owner says why, once) until a check finds the place again.
                self._files.close(self.path)
                raise

    def _taken_away(self) -> bool:
        """Is the session's file not known to be there and ours? Removed,
        renamed, replaced by another, or its place unreachable: any `lstat`
        error (ENOTDIR: its folder, or one above, replaced by a file, a FIFO
        or a device; ELOOP; EACCES) counts, as only the file found there can
        prove that lines written to the one kept open are kept."""
        try:
            named = os.lstat(self.path)
        except OSError:
            return True
        f = self._files.kept(self.path)
        if f is not None and f is not self._identity_file:
            held = os.fstat(f.fileno())
            # An unlinked file (st_nlink 0) is no longer the one at the path:
            # the identity check covers it, and a rename or a replacement too.
            self._identity = (held.st_dev, held.st_ino)
            self._identity_file = f
        if self._identity not in (None, (named.st_dev, named.st_ino)):
            return True
        self._learn_folder()
        return False

    def _check_folder(self) -> None:
        """Before a rebuild: OSError when the sessions folder is now a symlink
        to another folder than the one the file was found in (a symlink
        there from the start, the user's move of the folder, is followed)."""
        folder = self.path.parent
        try:
            if not stat.S_ISLNK(os.lstat(folder).st_mode):
                return
            now = _identity_of(os.stat(folder))
        except FileNotFoundError:
            return  # a dangling symlink or nothing: the rebuild says why
        if self._folder is not None and now != self._folder:
            raise OSError(
                errno.ELOOP,
                f"the sessions folder was replaced by a symlink to {os.readlink(folder)}; "
                "not written through",
                str(folder),
            )

    def _rebuild(self) -> IO[bytes]:
        """Write the session's transcript again, whole, under its name: the
        header, its state now as one `fork` record naming the session itself
        (the history as the model sees it, notes, plan, summary, counters,
        title, and `offset`, where the next message line counts on from),
        and its settings as a config line. Written under a temporary name,
        synced, and renamed into place: a reader sees the old file, none, or
        the whole new one. The lines waiting to be written are dropped: what
        they said is in the state (the core changes a session before it
        writes the line). The images of the history are written again if
        they went too. Returns the new file, kept open.

        For a file removed or renamed behind the daemon (by hand, by an
        older agentd, by a sync tool): written as it was, the next line
        would start a file without a header, listed but never loadable, and
        the history before it gone from disk. A session deleted through
        agentd is `discard`ed first: it is never rebuilt."""
        assert self._snapshot is not None
        self._check_folder()
        base, config = self._snapshot()
        images: dict[str, bytes] = {}
        base = replace(base, title=self.title or EMPTY_TITLE, offset=self.offset)
        data = fork_lines(
            base,
            self.session_id,
            self.workspace_root,
            config,
            lambda m: self._message_json(m, images),
            self._unextracted.values() if self._unextracted else (),
        )
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        flags = _APPEND | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW
        try:
            os.unlink(tmp)  # left by a crash
        except FileNotFoundError:
            pass
        fd = _in_folder(tmp, lambda: os.open(tmp, flags, 0o600))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        f = self._files.replace(self.path, io.FileIO(fd, "a"))
        held = os.fstat(fd)
        self._identity = (held.st_dev, held.st_ino)
        self._identity_file = f
        _sync_folder(self.path.parent)
        for digest, raw in images.items():
            try:
                self._write_image(digest, raw)
            except OSError as exc:
                log.warning("transcript %s: cannot store an image again: %s", self.path, exc)
        self._pending.clear()
        self._held = []
        self._pending_config = {}
        self._started = True
        self._torn = False
        self._meta_due = False
        self._rebuilds += 1
        self._write_meta()
        log.warning(
            "the transcript %s was taken away behind the daemon: written again whole "
            "(%d messages of the history)",
            self.path,
            len(base.history),
        )
        return f

    def _message_json(self, message: Message, images: dict[str, bytes]) -> dict[str, Any]:
        """A message as its line holds it: a prompt's images by their hash,
        their bytes put in `images` to be written beside the transcript."""
        record = message_to_json(message)
        if message.images:
            for part in record["parts"]:
                if part["type"] == "image" and "data" in part:
                    digest, raw = _image_bytes(part.pop("data"))
                    part["sha256"] = digest
                    images[digest] = raw
        return record

    def _found_existing(self) -> None:
        """A new session's file was there after all (made by hand, or an id
        given twice): appended to as `_start` treats an existing file, with
        no second header, and its meta file brought up to date if it has one."""
        self._fresh = False
        if self._header in self._pending and _holds_data(self.path):
            self._pending.remove(self._header)
        if self._meta_due and meta_path(self.path).exists():
            self._meta_due = False
            self._write_meta()

    def append(self, message: Message) -> int:
        """Write one message; returns its offset (given even when the write fails)."""
        offset = self.offset
        self.offset += 1
        if self.discarded:
            return offset
        if not self.title and message.role == "user":
            title = _title(message)
            if title:
                self.title = title
                if self._started:
                    self._write_meta()
                else:
                    # The first prompt's path: one meta file write, not two.
                    self._meta_due = True
        record = message_to_json(message)
        if message.images and self._unextracted is not None:
            # Kept before the flush below, which may rebuild the file: its
            # images by their hash (extraction reads no image's bytes).
            shown = self._message_json(message, {})
            self._keep_unextracted(offset, _encode(_message_record(offset, shown)))
        if message.images and not self._started:
            # The transcript before its images: an images folder without its
            # transcript is garbage to `collect_orphan_images`, even for an instant.
            rebuilds = self._rebuilds
            self._start()
            try:
                self.flush()
            except OSError:
                pass  # kept pending; the message line below tries again
            if self._rebuilds != rebuilds:
                return offset  # the rebuilt file holds the message already
        if message.images:
            for part in record["parts"]:
                if part["type"] == "image" and "data" in part:
                    try:
                        part["sha256"] = self._store_image(part["data"])
                    except OSError as exc:
                        # Kept inline: the line is bigger, but the image is not lost.
                        log.warning("transcript %s: cannot store an image: %s", self.path, exc)
                        continue
                    del part["data"]
        line = _encode(_message_record(offset, record))
        if not message.images:
            self._keep_unextracted(offset, line)
        self._put(line)
        return offset

    def _keep_unextracted(self, offset: int, line: bytes) -> None:
        if self._unextracted is None or self.discarded:
            return
        self._unextracted[offset] = line
        self._unextracted_bytes += len(line)
        while self._unextracted_bytes > MAX_UNEXTRACTED_BYTES and len(self._unextracted) > 1:
            # Extraction far behind (its model down for hours): the oldest
            # go, and only a rebuild would miss them. Said once per writer.
            _, dropped = self._unextracted.popitem(last=False)
            self._unextracted_bytes -= len(dropped)
            if not self._said_unextracted:
                self._said_unextracted = True
                log.warning(
                    "transcript %s: more than %d MiB not extracted to memory yet; the "
                    "oldest would not be extracted if the file were taken away",
                    self.path,
                    MAX_UNEXTRACTED_BYTES >> 20,
                )

    def keep_unextracted(self, lines: Iterable[tuple[int, bytes]]) -> None:
        """Keep message lines read back from the file that memory extraction
        has not read yet (a restored session's: `LoadedTranscript.unextracted`)
        as this writer keeps those it writes itself: a file taken away before
        extraction reads them is written again with them."""
        for offset, line in lines:
            self._keep_unextracted(offset, line)

    def extracted(self, offset: int) -> None:
        """Memory extraction's cursor of this session is at `offset`: the lines
        before it are no longer kept for a rebuild."""
        kept = self._unextracted
        while kept:
            first = next(iter(kept))
            if first >= offset:
                break
            self._unextracted_bytes -= len(kept.pop(first))

    def close_cut_turn(self, message: Message, note: Note) -> int:
        """The lines that close a prompt a crash cut short (`agentd.turn_ends`),
        given their offset now and written just before the next line this
        writer writes, never by themselves: a load alone writes nothing (the
        session may be running in another daemon, which a line from here
        would cut short), and `close` drops them (the next load closes the
        prompt again, the same way). Returns the message's offset."""
        offset = self.offset
        self.offset += 1
        record = {"type": "message", "offset": offset, "ts": time.time()}
        lines = [
            _encode({**record, "message": message_to_json(message)}),
            _encode({"type": "note", "ts": time.time(), "note": note_to_json(note)}),
        ]
        self._keep_unextracted(offset, lines[0])
        if self._started:
            self._pending.extend(lines)  # written with the next line
        else:
            self._held.extend(lines)
        return offset

    def reset(self) -> None:
        self.title = ""
        self._meta_due = False
        self._write_meta()
        self._line({"type": "reset", "offset": self.offset, "ts": time.time()})

    def note(self, note: Note, *, flush: bool = True) -> None:
        """With ``flush`` False the line waits in order for the next write or
        `flush` (a memory delivery's, until its request is out)."""
        self._line({"type": "note", "ts": time.time(), "note": note_to_json(note)}, flush=flush)

    def config(self, **values: str | list[str]) -> None:
        """Record a setting the user chose for the session (`mode`, `model`,
        `additionalDirectories`)."""
        if not self._started and (self._fresh or not self.path.exists()):
            self._pending_config.update(values)
            return
        self._line({"type": "config", "ts": time.time(), **values})

    def set_additional_roots(self, roots: list[str]) -> None:
        """Record the folders beside the workspace root when they changed (a
        new session that has some, a load or resume that names others): a
        config line, and the meta file a listing reads. Before this writer's
        first line (a load) both wait for it, as `close_cut_turn`'s lines do:
        a load alone writes nothing."""
        if roots == self.additional_roots:
            return
        self.additional_roots = list(roots)
        if not self._started:
            self._pending_config[CONFIG_ROOTS] = list(roots)
            return
        self._line({"type": "config", "ts": time.time(), CONFIG_ROOTS: list(roots)})
        self._write_meta()

    def discard(self) -> None:
        """The session is being deleted: drop what waits, write nothing again,
        and let its file go."""
        self.discarded = True
        self._pending.clear()
        self._held.clear()
        self._files.close(self.path)

    def _store_image(self, data: str) -> str:
        """Write an image's bytes once, named by their hash; returns the hash."""
        digest, raw = _image_bytes(data)
        self._write_image(digest, raw)
        return digest

    def _write_image(self, digest: str, raw: bytes) -> None:
        """The image file `digest` in the session's images folder, unless a
        regular file has that name already (the same bytes: named by their
        hash). Reached by descriptors (`open_images_folder`): a folder or an
        image replaced by a symlink is replaced, never written through."""
        folder = _images_folder(self.path, create=True)
        try:
            try:
                if stat.S_ISREG(os.stat(digest, dir_fd=folder, follow_symlinks=False).st_mode):
                    return
            except FileNotFoundError:
                pass
            tmp = f".{digest}.tmp"
            _write_temporary(tmp, raw, dir_fd=folder)
            # Over whatever stands at the name (a symlink, a FIFO): replaced.
            os.replace(tmp, digest, src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            os.close(folder)
        self._unsynced.append(digest)

    def write_due_meta(self) -> None:
        """Write the meta file of a new transcript. Until then there is none,
        and a listing reads the transcript, which holds the same title."""
        if self._meta_due and not self.discarded:
            self._meta_due = False
            self._write_meta()

    def _write_meta(self) -> None:
        """The listing's summary of this session; a cache, so a failure only
        makes listing read the transcript instead."""
        if self.discarded:
            return
        target = meta_path(self.path)
        tmp = target.with_name(f".{target.name}.tmp")
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_temporary(
                tmp,
                meta_bytes(self.session_id, self.workspace_root, self.title, self.additional_roots),
            )
            os.replace(tmp, target)
        except OSError as exc:
            log.info("cannot write %s: %s", target, exc)
            return
        self._wrote_meta = True
        # Off the prompt's path to its request (this runs once it is out).
        self._learn_folder()

    def compaction(self, record: CompactionRecord) -> None:
        self._line(
            {"type": "compaction", "offset": self.offset, "ts": time.time(), **record.to_json()}
        )

    def sync(self) -> None:
        """Make what was written durable (end of a prompt); may run in a thread:
        it opens descriptors of its own, never one the event loop may close."""
        if not self._started or self.discarded:
            return
        fd = open_regular(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        images, self._unsynced = self._unsynced, []
        if not images:
            return
        # By descriptors, as they were written: nothing is followed, and a
        # FIFO put at an image's name is never opened (`open_regular`).
        folder = _images_folder(self.path, create=False)
        try:
            for image in images:
                fd = open_regular(image, dir_fd=folder)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.fsync(folder)
        finally:
            os.close(folder)

    def close(self) -> None:
        try:
            self.check_file()  # the daemon's exit: the session's file, not lost with it
        except OSError as exc:
            log.error("transcript %s taken away; cannot write it again: %s", self.path, exc)
        self.write_due_meta()
        try:
            self.flush()
        except OSError as exc:
            log.error("transcript %s: %d line(s) not written: %s", self.path, self.pending, exc)
        self._files.close(self.path)


def _message_record(offset: int, message: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "offset": offset, "ts": time.time(), "message": message}


# At most this much of a session's transcript is kept in memory for a
# rebuild (`TranscriptWriter._unextracted`): many turns' worth of lines.
MAX_UNEXTRACTED_BYTES = 16 * 1024 * 1024

_APPEND = os.O_WRONLY | os.O_APPEND
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC


def _write_temporary(tmp: Path | str, data: bytes, *, dir_fd: int | None = None) -> None:
    """`data` as the new file `tmp` (to be renamed into place; relative to
    `dir_fd` when given). Whatever is
    at that name (a crash's leftover, or a FIFO or a symlink put there: the
    name is predictable) is removed first, and the file is created, never
    opened: a write never waits on a FIFO nor goes through a symlink."""
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _image_bytes(data: str) -> tuple[str, bytes]:
    """An image's bytes (from base64) and their hash, which names its file."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raw = data.encode("ascii", "replace")  # validated at the boundary; keep what came
    return hashlib.sha256(raw).hexdigest(), raw


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable; best effort (the file is there)."""
    try:
        fd = os.open(folder, os.O_RDONLY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _identity_of(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _holds_data(path: Path) -> bool:
    """Whether `path` is a file with something in it (an empty one, made by
    hand or left unused, still wants the session's header)."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _in_folder(path: Path, open_fd: Callable[[], int]) -> int:
    """`open_fd()`, the file's folder made first if it is missing. Opened
    first and the folder made only when the open says it is missing: a
    `mkdir` of an existing folder (a failed syscall, an exception and a
    `stat`) took part of every new session's first prompt."""
    try:
        return open_fd()
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return open_fd()


def _encode(record: dict[str, Any]) -> bytes:
    # One kept encoder for every line (`agentd.jsonenc`): `json.dumps` with
    # options makes new ones on each call, a part of the prompt line's 0.04
    # ms to encode once the process had idled. A lone surrogate that got past
    # the core's boundaries is escaped: the line is still valid JSON and
    # UTF-8 (a record is never lost to it).
    return compact_utf8(record) + b"\n"


# Message lines are written by `TranscriptWriter.append` with this prefix, so a
# reader can tell a line's offset without decoding the whole (possibly long) line.
_MESSAGE_PREFIX = '{"type":"message","offset":'


def _prefix_offset(line: str) -> int | None:
    if not line.startswith(_MESSAGE_PREFIX):
        return None
    digits = line[len(_MESSAGE_PREFIX) : line.find(",", len(_MESSAGE_PREFIX))]
    return int(digits) if digits.isdigit() else None


@dataclass
class _Tail:
    """Whether the lines read so far end in the middle of one."""

    torn: bool = False


# The longest transcript line read. A message line holds one message, and
# the longest message agentd takes is a prompt as long as the wire allows
# (256 MiB: LSP's `MAX_BODY`, ACP's `MAX_LINE`; a string's transcript JSON is
# never longer than its wire JSON, and images are stored apart); tool results
# are cut to `toolResultMaxChars`, and the other records are small. The 64
# KiB cover the record around the message. A longer line is no line agentd
# wrote (a hand-edited or hostile file): it is skipped unread, as an
# unreadable line is, and what follows it is read.
MAX_LINE_BYTES = 256 * 1024 * 1024 + 64 * 1024
# How much of an over-long line is held at once while it is skipped.
_SKIP_CHUNK = 1024 * 1024


def _lines(f: IO[bytes], path: Path, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes, int]]:
    """The file's lines from where `f` (seekable) stands, each with its
    length in bytes. A line longer than `limit` comes as a blank line
    (`b"\\n"`; `b""` when the file ends inside it) with its length: at most
    `limit` of it is held, in pieces, the rest is scanned for its newline
    chunk by chunk, and a warning names the file and where the line starts."""
    # Pieces of at most this much, so that no line over `limit` is taken whole.
    step = min(_SKIP_CHUNK, limit + 1)
    at = f.tell()
    while True:
        line = f.readline(step)
        if not line:
            return
        if not line.endswith(b"\n"):
            line, over = _rest_of_line(f, line, limit, step)
            if over:
                log.warning(
                    "transcript %s: the line at byte %d is %d bytes, longer than any agentd "
                    "writes (%d): skipped",
                    path,
                    at,
                    over,
                    limit,
                )
                yield line, over
                at += over
                continue
        yield line, len(line)
        at += len(line)


def _rest_of_line(f: IO[bytes], first: bytes, limit: int, step: int) -> tuple[bytes, int]:
    """(the line that starts with `first`, 0), read on to its newline or the
    file's end; or, past `limit`, (a blank line, its whole length), its
    bytes dropped as they are read."""
    pieces = [first]
    size = len(first)
    while size <= limit:
        piece = f.readline(step)
        if not piece:
            return b"".join(pieces), 0
        pieces.append(piece)
        size += len(piece)
        if piece.endswith(b"\n"):
            if size <= limit:
                return b"".join(pieces), 0
            return b"\n", size
    del pieces
    while True:
        chunk = f.read(step)
        if not chunk:
            return b"", size
        newline = chunk.find(b"\n")
        if newline >= 0:
            # Read past the line's end: give the rest back to the next line.
            f.seek(newline + 1 - len(chunk), os.SEEK_CUR)
            return b"\n", size + newline + 1
        size += len(chunk)


def _iter_records(
    path: Path, skip_below: int = 0, tail: _Tail | None = None
) -> Iterator[dict[str, Any]]:
    """The file's records, one line at a time: a reader that keeps only a
    slice (extraction, after every reply) holds one decoded line at once, not
    the whole append-only file, whose size grows for the daemon's lifetime.
    Message lines with an offset below `skip_below` are not even decoded.
    `tail` is told whether the last line read lacks its newline. A line
    longer than `MAX_LINE_BYTES` is skipped (`_lines`)."""
    try:
        f = os.fdopen(open_regular(path), "rb")
    except OSError:
        return
    with f:
        for raw, _ in _lines(f, path):
            line = raw.decode("utf-8", errors="replace")
            if tail is not None:
                tail.torn = not line.endswith("\n")
            if not line.strip():
                continue
            if skip_below:
                offset = _prefix_offset(line)
                if offset is not None and offset < skip_below:
                    continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn line from a crash: what follows it is still read
            if isinstance(record, dict):
                yield record


def _records(path: Path, tail: _Tail | None = None) -> list[dict[str, Any]]:
    return list(_iter_records(path, tail=tail))


def note_to_json(note: Note) -> dict[str, Any]:
    if isinstance(note, MemoryDelivered):
        return {"kind": "memory", "point": note.point, "tier": note.tier, "docs": note.docs}
    if isinstance(note, PlanUpdated):
        return {
            "kind": "plan",
            "entries": [
                {"content": e.content, "priority": e.priority, "status": e.status}
                for e in note.entries
            ],
        }
    if isinstance(note, UsageReport):
        return usage_to_json(note)
    if isinstance(note, CompactionReport):
        return compaction_to_json(note)
    out: dict[str, Any] = {"kind": "prompt_end", "stopReason": note.stop_reason}
    if note.error is not None:
        out["error"] = note.error
    return out


def usage_to_json(report: UsageReport) -> dict[str, Any]:
    """A usage report as the LSP wire, ACP's `_agentd/usage` (without `kind`)
    and the transcript all write it."""
    out: dict[str, Any] = {
        "kind": "usage",
        "inputTokens": report.input_tokens,
        "outputTokens": report.output_tokens,
        "sessionTotalTokens": report.session_total_tokens,
    }
    # Only when the provider reported them: absent is "unknown", not 0.
    if report.cache_read_tokens is not None:
        out["cacheReadTokens"] = report.cache_read_tokens
    if report.cache_write_tokens is not None:
        out["cacheWriteTokens"] = report.cache_write_tokens
    if report.context_window:
        out["contextTokens"] = report.context_tokens
        out["contextWindow"] = report.context_window
    return out


def compaction_to_json(report: CompactionReport) -> dict[str, Any]:
    """A compaction report as the wire and the transcript both write it."""
    out: dict[str, Any] = {
        "kind": "compaction",
        "status": report.status,
        "trigger": report.trigger,
        "tokensBefore": report.tokens_before,
        "tokensAfter": report.tokens_after,
        "cleared": report.cleared,
        "summarized": report.summarized,
    }
    if report.summary is not None:
        out["summary"] = report.summary
    if report.message is not None:
        out["message"] = report.message
    return out


def note_from_json(data: dict[str, Any]) -> Note:
    """Raises KeyError, ValueError or TypeError for a note it cannot read."""
    kind = data["kind"]
    if kind == "memory":
        point = data["point"]
        if point not in ("user_query", "tool_result"):
            raise ValueError(f"unknown memory point {point!r}")
        return MemoryDelivered(point, str(data["tier"]), [str(d) for d in data["docs"]])
    if kind == "usage":
        read, write = data.get("cacheReadTokens"), data.get("cacheWriteTokens")
        return UsageReport(
            int(data["inputTokens"]),
            int(data["outputTokens"]),
            int(data["sessionTotalTokens"]),
            int(data.get("contextTokens", 0)),
            int(data.get("contextWindow", 0)),
            None if read is None else int(read),
            None if write is None else int(write),
        )
    if kind == "compaction":
        status, trigger = data["status"], data["trigger"]
        if status not in ("started", "done", "failed", "cancelled"):
            raise ValueError(f"unknown compaction status {status!r}")
        if trigger not in ("threshold", "window", "overflow", "manual"):
            raise ValueError(f"unknown compaction trigger {trigger!r}")
        summary, message = data.get("summary"), data.get("message")
        return CompactionReport(
            status,
            trigger,
            int(data.get("tokensBefore", 0)),
            int(data.get("tokensAfter", 0)),
            int(data.get("cleared", 0)),
            int(data.get("summarized", 0)),
            str(summary) if summary is not None else None,
            str(message) if message is not None else None,
        )
    if kind == "prompt_end":
        error = data.get("error")
        return PromptEnded(str(data["stopReason"]), error if isinstance(error, dict) else None)
    if kind == "plan":
        entries = []
        for e in data["entries"]:
            if e["priority"] not in ("high", "medium", "low"):
                raise ValueError(f"unknown plan priority {e['priority']!r}")
            if e["status"] not in ("pending", "in_progress", "completed"):
                raise ValueError(f"unknown plan status {e['status']!r}")
            entries.append(PlanEntry(str(e["content"]), e["priority"], e["status"]))
        return PlanUpdated(entries)
    raise ValueError(f"unknown note kind {kind!r}")


# A header line holds a session id, a workspace path and a time: far below
# this. A first line past it is no transcript's.
MAX_HEADER_BYTES = 64 * 1024


def _starts_with_header(path: Path) -> bool:
    """Whether the file at `path` begins with a session header line, read
    within `MAX_HEADER_BYTES`. Checked before the lines are read: a file of
    2 GB without a newline (zeros, a sparse file) in the sessions folder was
    read whole as one line, by every listing and load, to be refused after."""
    try:
        fd = open_regular(path)
    except OSError:
        return False
    try:
        head = read_fd(fd, MAX_HEADER_BYTES)
    finally:
        os.close(fd)
    line, newline, _ = head.partition(b"\n")
    try:
        record = json.loads(line) if newline else None
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("type") == "session"


def load(
    path: Path,
    images: bool = True,
    end: int | None = None,
    unextracted_from: Callable[[Path], int] | None = None,
) -> LoadedTranscript | None:
    """The session as it stands (after its last reset); `images=False` leaves
    image parts without their bytes. With `end`, as it stood before its
    message at offset `end` was written: the line of that message and every
    line after it are not read (a running prompt's half turn, for a fork).
    With `unextracted_from` (the workspace root -> the offset where memory
    extraction's cursor of this session stands), the message lines from that
    offset on are kept (`LoadedTranscript.unextracted`)."""
    if not _starts_with_header(path):
        return None
    tail = _Tail()
    records = _records(path, tail)
    if not records or records[0].get("type") != "session":
        return None
    unextracted: list[tuple[int, bytes]] = []
    if unextracted_from is not None and isinstance(records[0].get("workspaceRoot"), str):
        start = unextracted_from(Path(records[0]["workspaceRoot"]))
        unextracted = _unextracted_lines(records, start)
    if end is not None:
        # Message lines before a fork record (a rebuilt file's, kept for
        # extraction) are in the record's state: the cut is among those after it.
        forked = max((i for i, r in enumerate(records) if r.get("type") == "fork"), default=0)
        cut = next(
            (
                i
                for i, r in enumerate(records)
                if i > forked and r.get("type") == "message" and _int(r.get("offset"), -1) >= end
            ),
            len(records),
        )
        records = records[:cut]
    head = records[0]
    history: list[Message] = []
    notes: list[tuple[int, Note]] = []
    plan: list[PlanEntry] = []
    config: dict[str, Any] = {}
    tokens = 0
    start = 0
    total = 0
    turns = 0
    title = ""
    summary: dict[str, Any] | None = None
    for record in records[1:]:
        kind = record.get("type")
        if kind == "message":
            try:
                message = message_from_json(record["message"])
            except (KeyError, ValueError, TypeError):
                log.warning("skipping an unreadable message in %s", path)
                continue
            if history:
                # Calls a crash left unanswered, in a transcript from before
                # cut prompts were closed (`agentd.turn_ends`).
                message = answer_missing(history[-1], message)
            history.append(message)
            total = int(record.get("offset", total)) + 1
            if holds_prompt(message):
                turns += 1  # as a live session counts them (an image alone too)
            if not title and message.role == "user":
                first = title_of([message])
                title = "" if first == EMPTY_TITLE else first
        elif kind == "reset":
            history = []
            notes = []
            plan = []
            tokens = 0
            turns = 0
            title = ""
            summary = None
            start = int(record.get("offset", total))
        elif kind == "compaction":
            try:
                compaction = CompactionRecord.from_json(record)
            except (KeyError, ValueError, TypeError):
                log.warning("skipping an unreadable compaction record in %s", path)
                continue
            history, notes = apply_compaction(history, notes, compaction)
            summary = compaction.summary if compaction.summary_text is not None else summary
        elif kind == "note":
            try:
                note = note_from_json(record["note"])
            except (KeyError, ValueError, TypeError):
                continue  # a note is for display only: a bad one is dropped
            notes.append((len(history), note))
            if isinstance(note, UsageReport):
                tokens = note.session_total_tokens
            elif isinstance(note, PlanUpdated):
                plan = note.entries
        elif kind == "config":
            config.update({k: v for k, v in record.items() if k in ("mode", "model", CONFIG_ROOTS)})
        elif kind == "fork":
            try:
                base = ForkBase.from_json(record)
            except (KeyError, ValueError, TypeError):
                log.warning("skipping an unreadable fork record in %s", path)
                continue
            history, notes, plan = base.history, base.notes, base.plan
            summary, turns, tokens = base.summary, base.turns, base.tokens_used
            total = max(total, base.offset)
            title = "" if base.title == EMPTY_TITLE else base.title
    for msg in history if images else ():
        if msg.images:
            _read_images(path, msg)
    return LoadedTranscript(
        str(head["sessionId"]),
        Path(head["workspaceRoot"]),
        history,
        start,
        total,
        notes,
        tokens,
        list(plan),
        _str_or_none(config.get("mode")),
        _str_or_none(config.get("model")),
        turns,
        title or EMPTY_TITLE,
        summary,
        tail.torn,
        _str_list(config.get(CONFIG_ROOTS)),
        unextracted,
    )


def _unextracted_lines(records: list[dict[str, Any]], start: int) -> list[tuple[int, bytes]]:
    """The message lines of ``records`` from offset ``start`` on, the newest
    `MAX_UNEXTRACTED_BYTES` of them (as a live writer bounds its own)."""
    kept: list[tuple[int, bytes]] = []
    size = 0
    for record in reversed(records):
        if record.get("type") != "message":
            continue
        offset = _int(record.get("offset"), -1)
        if offset < start:
            continue
        line = _encode(record)
        size += len(line)
        if size > MAX_UNEXTRACTED_BYTES and kept:
            break
        kept.append((offset, line))
    kept.reverse()
    return kept


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass
class ForkBase:
    """What a fork copies of its source: the session as it stood after its
    last completed turn (a `LoadedTranscript` read with `end`)."""

    source_id: str
    history: list[Message]
    notes: list[tuple[int, Note]]
    plan: list[PlanEntry]
    summary: dict[str, Any] | None
    turns: int
    tokens_used: int
    title: str
    # The offset the next message line takes (a rebuilt transcript's, whose
    # earlier lines are gone; 0 for a fork, whose own messages count from 0).
    offset: int = 0

    @classmethod
    def of(cls, source_id: str, loaded: LoadedTranscript) -> ForkBase:
        """The finished turns of `loaded`: a prompt that had not ended when
        its transcript was read (running in another daemon, or cut short by
        a crash) is left out, so the fork never starts with tool calls
        that have no results."""
        history = loaded.history
        cut = finished_length(history, loaded.notes)
        kept = history[:cut]
        if cut < len(history) and history[cut].tool_results:
            # An older transcript's prompt that holds the results of the turn
            # before it (`turn_ends.holds_prompt`): they finish that turn,
            # which is kept whole; the prompt's words go with its turn.
            kept.append(results_of(history[cut]))
        dropped = sum(1 for m in history[cut:] if holds_prompt(m))
        return cls(
            source_id,
            kept,
            [(i, n) for i, n in loaded.notes if i <= cut],
            loaded.plan,
            loaded.summary,
            max(0, loaded.turns - dropped),
            loaded.tokens_used,
            loaded.title,
        )

    def to_json(
        self, message_json: Callable[[Message], dict[str, Any]] = message_to_json
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "fork",
            "ts": time.time(),
            "from": self.source_id,
            "history": [message_json(m) for m in self.history],
            "notes": [[i, note_to_json(n)] for i, n in self.notes],
            "plan": note_to_json(PlanUpdated(self.plan))["entries"],
            "summary": self.summary,
            "turns": self.turns,
            "tokensUsed": self.tokens_used,
            "title": self.title,
        }
        if self.offset:
            out["offset"] = self.offset
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ForkBase:
        """Raises KeyError, ValueError or TypeError for a record it cannot read."""
        history = [message_from_json(m) for m in data["history"]]
        notes: list[tuple[int, Note]] = []
        for index, note in data.get("notes") or []:
            try:
                notes.append((int(index), note_from_json(note)))
            except (KeyError, ValueError, TypeError):
                continue  # a note is for display only: a bad one is dropped
        plan = note_from_json({"kind": "plan", "entries": data.get("plan") or []})
        summary = data.get("summary")
        return cls(
            str(data.get("from", "")),
            history,
            notes,
            plan.entries if isinstance(plan, PlanUpdated) else [],
            summary if isinstance(summary, dict) else None,
            max(0, _int(data.get("turns"), 0)),
            max(0, _int(data.get("tokensUsed"), 0)),
            str(data.get("title") or EMPTY_TITLE),
            max(0, _int(data.get("offset"), 0)),
        )


def fork_lines(
    base: ForkBase,
    session_id: str,
    workspace_root: Path,
    config: dict[str, Any],
    message_json: Callable[[Message], dict[str, Any]] = message_to_json,
    unextracted: Iterable[bytes] = (),
) -> bytes:
    """A fork's transcript as first written: its header, the `fork` record,
    and the settings it starts with (`mode`, `model`, `additionalDirectories`)
    as a config line. A rebuilt transcript (`TranscriptWriter._rebuild`) is
    written the same way, its record naming its own session, and with the
    `unextracted` message lines (as they were written) between the header
    and the record."""
    now = time.time()
    lines = [
        _encode(
            {
                "type": "session",
                "sessionId": session_id,
                "workspaceRoot": str(workspace_root),
                "createdAt": now,
            }
        ),
        *unextracted,
        _encode(base.to_json(message_json)),
    ]
    if config:
        lines.append(_encode({"type": "config", "ts": now, **config}))
    return b"".join(lines)


def meta_bytes(
    session_id: str, workspace_root: Path, title: str, additional_roots: Iterable[str] = ()
) -> bytes:
    """A meta file's content (`TranscriptWriter._write_meta` writes the same)."""
    data: dict[str, Any] = {
        "sessionId": session_id,
        "workspaceRoot": str(workspace_root),
        "title": title or EMPTY_TITLE,
    }
    roots = list(additional_roots)
    if roots:
        data[CONFIG_ROOTS] = roots
    return _encode(data)


# The config line's (and meta file's) key for the folders beside the workspace root.
CONFIG_ROOTS = "additionalDirectories"


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _str_list(value: Any) -> list[str]:
    """A stored list of paths; anything else (a hand-edited file) is none."""
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, str) and v]


# No stored image is larger: none a model's API takes is (OpenAI's limit is
# 20 MB, Anthropic's 5 MB). A file past it in the images folder is not the
# one stored (a 2 GB file there was read whole, then base64'd, at a load).
MAX_STORED_IMAGE_BYTES = 64 << 20


def _read_images(path: Path, msg: Message) -> None:
    """Give a loaded message's images their bytes again (from their files,
    reached by descriptors: an images folder or an image that is a symlink
    is not followed, a FIFO planted there must not hang a load, and a file
    past `MAX_STORED_IMAGE_BYTES` is not read; such an image shows as
    missing)."""
    folder = -1
    try:
        for i, part in enumerate(msg.parts):
            if not isinstance(part, ImagePart) or part.data:
                continue
            try:
                if not part.sha256 or "/" in part.sha256 or part.sha256.startswith("."):
                    raise FileNotFoundError(part.sha256)
                if folder < 0:
                    folder = _images_folder(path, create=False)
                fd = open_regular(part.sha256, dir_fd=folder)
                try:
                    raw = read_fd(fd, MAX_STORED_IMAGE_BYTES + 1)
                finally:
                    os.close(fd)
                if len(raw) > MAX_STORED_IMAGE_BYTES:
                    raise FileNotFoundError(part.sha256)  # not what was stored
            except OSError:
                msg.parts[i] = TextPart(MISSING_IMAGE)
                continue
            part.data = base64.b64encode(raw).decode("ascii")
    finally:
        if folder >= 0:
            os.close(folder)


def read_slice(path: Path, start: int, end: int | None = None) -> list[tuple[int, Message]]:
    """Messages with offsets in [start, end), whatever resets happened between."""
    out: list[tuple[int, Message]] = []
    for record in _iter_records(path, skip_below=start):
        if record.get("type") != "message":
            continue
        offset = int(record.get("offset", -1))
        if offset < start or (end is not None and offset >= end):
            continue
        try:
            out.append((offset, message_from_json(record["message"])))
        except (KeyError, ValueError, TypeError):
            continue
    return out


_MESSAGE_PREFIX_BYTES = _MESSAGE_PREFIX.encode()


@dataclass
class TranscriptSlice:
    """Messages read after a cursor, and where each one's line ends in the file."""

    messages: list[tuple[int, Message]] = field(default_factory=list)
    # positions[i]: the byte position just after the line of messages[i], where
    # a reader that has processed messages[: i + 1] starts next time.
    positions: list[int] = field(default_factory=list)
    # Bytes read to produce the slice (the file's tail when `position` was usable).
    bytes_read: int = 0


def _line_start(f: IO[bytes], position: int, size: int) -> bool:
    """Is `position` the start of a line of the file (or its end)?"""
    if position == 0:
        return True
    if position > size:
        return False
    f.seek(position - 1)
    return f.read(1) == b"\n"


def read_from(path: Path, start: int, position: int = 0, end: int | None = None) -> TranscriptSlice:
    """Messages with offsets in [start, end), reading from byte `position` on.

    `position` is where an earlier read of the same file stopped (a
    `TranscriptSlice.positions` entry). It is a hint: one that is not at the
    start of a line, lies past the end of the file, or skips the message at
    `start` is dropped for a read from the beginning, so a wrong hint costs
    a full read, never a lost message. A last line without its newline is
    being written (or was torn by a crash) and is not read.
    """
    out = TranscriptSlice()
    try:
        f = os.fdopen(open_regular(path), "rb")
    except OSError:
        return out
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
        except OSError:
            return out
        if position < 0 or not _line_start(f, position, size):
            position = 0
        f.seek(position)
        at = position
        for line, length in _lines(f, path):
            line_end = at + length
            out.bytes_read += length
            at = line_end
            if not line.endswith(b"\n"):
                break
            offset = _prefix_offset_bytes(line)
            if offset is not None and offset < start:
                continue
            if (
                offset is None
                and line.startswith(b'{"type":"')
                and not line.startswith(b'{"type":"message"')
            ):
                continue  # the session header, a reset marker, a note: not decoded
            try:
                record = json.loads(line.decode("utf-8", errors="replace"))
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("type") != "message":
                continue
            found = int(record.get("offset", -1))
            if found < start:
                continue
            if position and not out.messages and found > start:
                # The hint skipped the message at `start`: read the whole file.
                return read_from(path, start, 0, end)
            if end is not None and found >= end:
                break
            try:
                out.messages.append((found, message_from_json(record["message"])))
            except (KeyError, ValueError, TypeError):
                continue
            out.positions.append(line_end)
    return out


def _prefix_offset_bytes(line: bytes) -> int | None:
    if not line.startswith(_MESSAGE_PREFIX_BYTES):
        return None
    digits = line[len(_MESSAGE_PREFIX_BYTES) : line.find(b",", len(_MESSAGE_PREFIX_BYTES))]
    return int(digits) if digits.isdigit() else None


def _title(message: Message) -> str:
    for part in message.parts:
        if isinstance(part, TextPart) and part.text.strip():
            return part.text.strip().splitlines()[0][:80]
    return ""


def title_of(history: list[Message]) -> str:
    for msg in history:
        if msg.role == "user":
            title = _title(msg)
            if title:
                return title
    return EMPTY_TITLE


def list_sessions(workspace_root: Path, home: Path | None = None) -> list[TranscriptInfo]:
    return SessionCatalog(home).list(workspace_root)


class SessionCatalog:
    """The saved sessions, newest first, listed without reading transcripts.

    One directory listing and one `stat` per session: what a session shows
    (its `.meta.json`: title, workspace) is read again only when its
    transcript's size or time changed, since the writer rewrites the meta
    file only beside a transcript write. A transcript without a readable
    meta file is loaded whole instead (and cached the same way): so is a new
    session's between its first line and its first request, whose meta file
    is written once that request is out and says what the loaded
    transcript does."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home
        self._cache: dict[str, tuple[tuple[int, int], TranscriptInfo | None]] = {}

    def list(self, workspace_root: Path | None = None) -> list[TranscriptInfo]:
        """The sessions of one workspace, or of every workspace (None)."""
        listings: Iterable[FolderListing]
        if workspace_root is not None:
            one = _list_folder(str(sessions_dir(workspace_root, self.home)))
            listings = [] if one is None else [one]
        else:
            listings = sessions_folders(self.home, follow_symlinks=True)
        out: list[TranscriptInfo] = []
        for folder, entries, names in listings:
            for entry in entries:
                if entry.name.endswith(".jsonl"):
                    info = self._info(folder, entry, names)
                    if info is not None:
                        out.append(info)
        out.sort(key=lambda i: (i.updated_at, i.session_id), reverse=True)
        return out

    def forget(self, session_id: str) -> None:
        """Drop what is cached of a deleted session's transcripts."""
        name = f"{session_id}.jsonl"
        for path in [p for p in self._cache if os.path.basename(p) == name]:
            del self._cache[path]

    def _info(self, folder: str, entry: os.DirEntry[str], names: set[str]) -> TranscriptInfo | None:
        try:
            st = entry.stat()
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self._cache.get(entry.path)
        if cached is not None and cached[0] == key:
            return cached[1]  # the time shown is part of the key: nothing to redo
        meta = entry.name.removesuffix(".jsonl") + ".meta.json"
        info = _read_meta(Path(folder, meta)) if meta in names else None
        if info is None:
            info = _info_from_transcript(Path(entry.path))
        if info is not None:
            info = replace(info, updated_at=st.st_mtime)
        self._cache[entry.path] = (key, info)
        return info


# A meta file holds a title, the workspace and at most 64 more roots: far
# below this. One past it is not the writer's (read whole, it would be parsed
# on every listing).
MAX_META_BYTES = 1 << 20


def _read_meta(path: Path) -> TranscriptInfo | None:
    """What the meta file at `path` says; None when it is unreadable, which
    a FIFO, a device or a symlink in its place is (opened without blocking
    and never followed: a FIFO there used to hang `session/list`, and the
    exit behind it; `/dev/zero` read without end)."""
    try:
        raw = read_regular(path, MAX_META_BYTES + 1)
        if len(raw) > MAX_META_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
        return TranscriptInfo(
            str(data["sessionId"]),
            Path(data["workspaceRoot"]),
            str(data["title"]),
            0.0,
            tuple(_str_list(data.get(CONFIG_ROOTS))),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _info_from_transcript(path: Path) -> TranscriptInfo | None:
    loaded = load(path, images=False)
    if loaded is None:
        return None
    # The title is that of the conversation since the last reset (a reset
    # session is a new one, as it is for the model), summarised turns included.
    return TranscriptInfo(
        loaded.session_id,
        loaded.workspace_root,
        loaded.title,
        0.0,
        tuple(loaded.additional_roots),
    )
