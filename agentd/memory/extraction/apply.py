"""Applying validated operations to a memory folder (blocking; runs in a worker thread).

`snapshot_folder` reads every topic file's content hash (a `FileVersion`)
into a `FolderSnapshot` *before* the model is asked; each write then carries
that hash, and `writer.write_atomic` re-checks it right before its rename. A
file the user saved meanwhile comes back as a conflict (with its new content)
for the caller to re-plan, never overwritten.

Order within one batch keeps MEMORY.md pointing only at files that exist:
creates and updates first, then the index without the files about to be
deleted, then the deletes.

With `ownership` (extraction's operations), a delete, or a create that would
land on an existing file, goes through only for a note extraction created
and nobody changed since (`ownership.py`); the others are the user's and are
refused. One bad operation (a name the OS rejects, text that cannot be
encoded) is refused alone; a failing disk fails the batch.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from agentd.layout import INDEX_FILE
from agentd.memory.extraction import index_file
from agentd.memory.extraction.extractor import HEADER_EXCERPT_CHARS, Header, Op, render_topic
from agentd.memory.extraction.ownership import load_ledger, save_ledger
from agentd.memory.extraction.writer import (
    RefusedPath,
    WriteConflict,
    content_hash,
    delete,
    read_current,
    write_atomic,
)
from agentd.memory.store import MAX_TOPIC_BYTES, decode, list_topics, parse_topic


@dataclass(frozen=True)
class FileVersion:
    """One file's content, as hashed for the compare-and-swap write."""

    hash: str
    text: str


@dataclass
class FolderSnapshot:
    """What the folder held when the model was asked."""

    files: dict[str, FileVersion] = field(default_factory=dict)
    headers: list[Header] = field(default_factory=list)


@dataclass
class Applied:
    written: list[tuple[Path, str]] = field(default_factory=list)
    conflicts: list[tuple[Op, FileVersion | None]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


# OS errors that condemn one operation (its name, its target), not the disk:
# the operation is refused and the others go on. Any other OSError (ENOSPC,
# EACCES, EROFS, EIO...) fails the chunk, so the cursor stays and a later run
# retries it.
_OP_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ, errno.EISDIR})


def _refusal(op: Op, exc: Exception) -> str | None:
    """Why `op` alone failed, or None when the failure is the disk's (re-raise)."""
    if isinstance(exc, RefusedPath):
        return f"{op.file}: {exc}"
    if isinstance(exc, ValueError):  # UnicodeEncodeError among them
        return f"{op.file}: refused ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.errno in _OP_ERRNOS:
        return f"{op.file}: refused ({exc.strerror or exc})"
    return None


def snapshot_folder(directory: Path) -> FolderSnapshot:
    out = FolderSnapshot()
    created = load_ledger(directory)
    docs = []
    for path in list_topics(directory).paths:
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                continue  # never planned against, never written through
            data = read_current(path)
        except OSError:
            continue
        if data is None:
            continue
        text, _ = decode(data[:MAX_TOPIC_BYTES], truncated=len(data) > MAX_TOPIC_BYTES)
        out.files[path.name] = FileVersion(content_hash(data), text)
        doc = parse_topic(path, data, size=len(data), mtime=os.path.getmtime(path), team=False)
        docs.append(doc)
    docs.sort(key=lambda d: -d.info.mtime)
    out.headers = [
        Header(
            d.info.path.name,
            d.info.name,
            d.info.description,
            d.info.type,
            " ".join(d.body.split())[:HEADER_EXCERPT_CHARS],
            by_user=created.get(d.info.path.name) != out.files[d.info.path.name].hash,
        )
        for d in docs
    ]
    return out


def sync_index(directory: Path, exclude: frozenset[str] = frozenset()) -> tuple[Path, str] | None:
    """Rebuild MEMORY.md; returns (path, text) when it was written (unchanged: None)."""
    text = index_file.render(index_file.scan(directory, exclude))
    if read_current(directory / INDEX_FILE) == text.encode("utf-8"):
        return None
    path = write_atomic(directory, INDEX_FILE, text.encode("utf-8"), check=False)
    return path, text


def _current(directory: Path, name: str) -> FileVersion | None:
    data = read_current(directory / name)
    if data is None:
        return None
    return FileVersion(content_hash(data), decode(data[:MAX_TOPIC_BYTES], truncated=False)[0])


def apply_ops(
    directory: Path, ops: list[Op], files: dict[str, FileVersion], *, ownership: bool = False
) -> Applied:
    """Write `ops` against the snapshot's `files`; a disk's OSError propagates
    (the chunk fails). `ownership`: extraction's rules for notes it did not create."""
    out = Applied()
    created = load_ledger(directory) if ownership else {}
    ledger_before = dict(created)
    deletes: list[Op] = []
    for op in ops:
        prior = files.get(op.file)
        mine = prior is not None and created.get(op.file) == prior.hash
        if op.action == "delete":
            if prior is None:
                continue
            if ownership and not mine:
                out.refused.append(f"{op.file}: not created by extraction (or edited since); kept")
                continue
            deletes.append(op)
            continue
        try:
            content = render_topic(op)
            data = content.encode("utf-8")
            # A create of an existing file (a retry after a partial run, or a model
            # that missed the header) is an update of what was planned against.
            if prior is not None and prior.hash == content_hash(data):
                continue  # already on disk: retrying never duplicates
            if ownership and op.action == "create" and prior is not None and not mine:
                out.refused.append(f"{op.file}: exists and is not extraction's; not overwritten")
                continue
            path = write_atomic(directory, op.file, data, expected=prior.hash if prior else None)
        except WriteConflict:
            out.conflicts.append((op, _current(directory, op.file)))
            continue
        except (OSError, ValueError) as exc:
            # One bad operation is refused; the others of the reply are written.
            why = _refusal(op, exc)
            if why is None:
                raise
            out.refused.append(why)
            continue
        out.written.append((path, content))
        if prior is None or mine:
            # Created here, or extraction's own note rewritten: still extraction's.
            created[op.file] = content_hash(data)
    if deletes:
        gone = frozenset(op.file for op in deletes)
        written = sync_index(directory, exclude=gone)
        if written is not None:
            out.written.append(written)
        kept = False
        for op in deletes:
            try:
                delete(directory, op.file, expected=files[op.file].hash)
                created.pop(op.file, None)
            except WriteConflict:
                # The user edited a note we meant to delete: their edit wins.
                out.refused.append(f"{op.file}: changed by the user; not deleted")
                kept = True
            except (OSError, ValueError) as exc:
                why = _refusal(op, exc)
                if why is None:
                    raise
                out.refused.append(why)
                kept = True
        if kept:
            written = sync_index(directory)
            if written is not None:
                out.written.append(written)
    if ownership and created != ledger_before:
        save_ledger(directory, created)
    return out
