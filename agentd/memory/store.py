"""Reading memory topic files from disk, defensively.

Everything in a memory folder may be hostile or in flux: huge files, binary
files, invalid UTF-8, symlinks pointing elsewhere, files that vanish between
listing and reading. Each reader here returns a value (a parsed doc, a
`Skipped` entry with a problem for ``memory status``, or ``None`` for a file
that is simply gone) and never raises for a bad file.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import stat
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from agentd.files import NotRegularFile, open_regular, read_fd
from agentd.layout import INDEX_FILE, TOPIC_SUFFIX
from agentd.memory.frontmatter import parse_front_matter

TOPIC_TYPES = ("user", "feedback", "project", "reference")
# Read at most this much of a topic file; the rest is not indexed (and flagged).
MAX_TOPIC_BYTES = 256 * 1024
# A NUL byte in the first block means a binary file.
BINARY_SNIFF_BYTES = 8192
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 500
MAX_TYPE_CHARS = 40
# MEMORY.md budget, as the anchors use for the index loaded into a prompt.
INDEX_MAX_LINES = 200
INDEX_MAX_CHARS = 25_000
# Keep this much of a body in memory for excerpts (the recall budget is smaller).
HEAD_CHARS = 1_600
# More topic files than this in one folder are not indexed (and flagged).
MAX_TOPIC_FILES = 50_000

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_WHITESPACE = re.compile(r"\s+")
_REPLACEMENT_BYTES = "\ufffd".encode()


@dataclass(frozen=True)
class DocInfo:
    path: Path
    name: str
    description: str
    type: str
    mtime: float
    team: bool
    problems: tuple[str, ...]


@dataclass(frozen=True)
class TopicDoc:
    """A topic file as read: its info, its (bounded) body, and a content hash."""

    info: DocInfo
    body: str
    content_hash: str


@dataclass(frozen=True)
class Skipped:
    """A file that is not indexed, and why."""

    path: Path
    problem: str


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_topic_name(name: str) -> bool:
    # Dotfiles are editor locks and temp files (Emacs' ".#x.md" is a dangling symlink).
    return (
        name.endswith(TOPIC_SUFFIX)
        and name != INDEX_FILE
        and not name.startswith(".")
        and len(name) > len(TOPIC_SUFFIX)
    )


def _one_line(value: str, limit: int) -> str:
    if value.isprintable() and "  " not in value:
        # No control character and no whitespace but single spaces (every other
        # kind is unprintable): the substitutions below would change nothing.
        return value.strip()[:limit]
    value = _WHITESPACE.sub(" ", _CONTROL.sub("", value)).strip()
    return value[:limit]


def decode(data: bytes, truncated: bool) -> tuple[str, bool]:
    """UTF-8 with replacement; returns the text and whether bytes were invalid."""
    if not truncated:
        try:
            # Valid UTF-8, the common case: the same text, without a decoder object.
            return data.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # final=False on a truncated read keeps a split multi-byte character out of the text.
    text = decoder.decode(data, final=not truncated)
    invalid = text.count("\ufffd") > data.count(_REPLACEMENT_BYTES)
    return text, invalid


def parse_topic(
    path: Path,
    data: bytes,
    *,
    size: int,
    mtime: float,
    team: bool,
) -> TopicDoc:
    """Parse a topic file's bytes (at most MAX_TOPIC_BYTES of them are used)."""
    problems: list[str] = []
    truncated = size > MAX_TOPIC_BYTES or len(data) > MAX_TOPIC_BYTES
    data = data[:MAX_TOPIC_BYTES]
    if truncated:
        kib = MAX_TOPIC_BYTES // 1024
        problems.append(f"file is {size} bytes; only the first {kib} KiB is indexed")
    text, invalid = decode(data, truncated)
    if invalid:
        problems.append("invalid UTF-8 (decoded with replacement characters)")
    fm = parse_front_matter(text)
    problems.extend(fm.problems)
    name = _one_line(fm.fields.get("name", ""), MAX_NAME_CHARS)
    description = _one_line(fm.fields.get("description", ""), MAX_DESCRIPTION_CHARS)
    kind = _one_line(fm.fields.get("type", ""), MAX_TYPE_CHARS).lower()
    if fm.present:
        for key, value in (("name", name), ("description", description), ("type", kind)):
            if not value:
                problems.append(f"front matter has no '{key}'")
    if kind and kind not in TOPIC_TYPES:
        problems.append(f"unknown type '{kind}' (expected one of {', '.join(TOPIC_TYPES)})")
    if not name:
        name = path.stem
    info = DocInfo(
        path=path,
        name=name,
        description=description,
        type=kind,
        mtime=mtime,
        team=team,
        problems=tuple(problems),
    )
    return TopicDoc(info=info, body=fm.body, content_hash=content_hash(data))


def read_topic(path: Path, folder_real: Path, *, team: bool) -> TopicDoc | Skipped | None:
    """Read one topic file. ``None`` means it no longer exists (nothing to report)."""
    return read_topic_stat(path, folder_real, team=team)[0]


def read_topic_stat(
    path: Path, folder_real: Path, *, team: bool
) -> tuple[TopicDoc | Skipped | None, os.stat_result | None]:
    """`read_topic`, and the `fstat` of the file read when ``path`` itself is a
    regular file (not a symlink): what identifies the content read, for the
    index cache (`agentd.memory.index_cache`)."""
    try:
        lst = os.lstat(path)
        target = path
        if stat.S_ISLNK(lst.st_mode):
            # Followed only when it stays inside the folder; opened by its real
            # path with O_NOFOLLOW so a link swapped in meanwhile is refused.
            try:
                real = Path(os.path.realpath(path, strict=True))
            except (OSError, RuntimeError):
                return Skipped(path, "broken symlink; not followed"), None
            if not real.is_relative_to(folder_real):
                why = "symlink points outside the memory folder; not followed"
                return Skipped(path, why), None
            target = real
        elif not stat.S_ISREG(lst.st_mode):
            return Skipped(path, "not a regular file; skipped"), None
        try:
            fd = open_regular(target)
        except NotRegularFile:
            return Skipped(path, "not a regular file; skipped"), None
        try:
            st = os.fstat(fd)
            data = read_fd(fd, MAX_TOPIC_BYTES + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return Skipped(path, f"cannot read: {exc.strerror or exc}"), None
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return Skipped(path, "binary file (contains NUL bytes); skipped"), None
    size = max(st.st_size, len(data))
    doc = parse_topic(path, data, size=size, mtime=st.st_mtime, team=team)
    return doc, (st if target is path else None)


def with_mtime(doc: TopicDoc, mtime: float) -> TopicDoc:
    return replace(doc, info=replace(doc.info, mtime=mtime))


@dataclass(frozen=True)
class Listing:
    paths: list[Path]
    problems: list[Skipped]


def list_topics(folder: Path) -> Listing:
    """Topic files directly in ``folder`` (sorted); a missing folder is empty."""
    names: list[str] = []
    problems: list[Skipped] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if is_topic_name(entry.name):
                    names.append(entry.name)
    except FileNotFoundError:
        return Listing([], [])
    except NotADirectoryError:
        return Listing([], [Skipped(folder, "memory folder is not a directory")])
    except OSError as exc:
        return Listing([], [Skipped(folder, f"cannot list folder: {exc.strerror or exc}")])
    names.sort()
    if len(names) > MAX_TOPIC_FILES:
        why = f"{len(names)} topic files; only the first {MAX_TOPIC_FILES} are indexed"
        problems.append(Skipped(folder, why))
        names = names[:MAX_TOPIC_FILES]
    return Listing(_children(folder, names), problems)


def _children(folder: Path, names: list[str]) -> list[Path]:
    """``folder / name`` for each name of the folder's listing (no separator
    in one). On CPython 3.11 made from the folder's parsed parts and string
    instead of parsing each path again: 10,000 notes' paths (and their
    strings, which a restart's `lstat` and index need) took about 0.1 s of a
    restart's first index, 0.04 s this way. Equal to the parsed ones
    (tests/unit/test_memory_store.py); other versions parse."""
    make = getattr(type(folder), "_from_parsed_parts", None)
    parts = getattr(folder, "_parts", None)
    if sys.version_info[:2] != (3, 11) or os.sep != "/" or make is None or parts is None:
        return [folder / n for n in names]
    drv, root, prefix = folder._drv, folder._root, str(folder)  # type: ignore[attr-defined]
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    children = []
    for name in names:
        child = make(drv, root, [*parts, name])
        child._str = prefix + name
        children.append(child)
    return children


@dataclass(frozen=True)
class IndexFile:
    """MEMORY.md, budgeted for a prompt; ``problem`` set when it is over budget."""

    text: str
    problem: str | None


# Enough bytes for 25,000 characters of any script.
INDEX_READ_BYTES = INDEX_MAX_CHARS * 4 + 1


def read_index_file(folder: Path) -> IndexFile:
    """MEMORY.md of `folder`, budgeted. Blocking: call it in a worker thread.

    Only a regular file is read (a FIFO named MEMORY.md is a problem reported,
    never an open that waits); a symlink is not followed.
    """
    path = folder / INDEX_FILE
    try:
        fd = open_regular(path)
        try:
            size = os.fstat(fd).st_size
            data = read_fd(fd, INDEX_READ_BYTES)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return IndexFile("", None)
    except OSError as exc:
        return IndexFile("", f"cannot read {INDEX_FILE}: {exc.strerror or exc}")
    return index_file_of(data, size)


def index_file_of(data: bytes, size: int) -> IndexFile:
    """MEMORY.md's first `INDEX_READ_BYTES` (`size`: the whole file's), budgeted."""
    data = data[:INDEX_READ_BYTES]
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return IndexFile("", f"{INDEX_FILE} is a binary file; ignored")
    text, _ = decode(data, truncated=size > len(data))
    lines = text.splitlines()
    problem = None
    if size > len(data) or len(text) > INDEX_MAX_CHARS or len(lines) > INDEX_MAX_LINES:
        problem = (
            f"{INDEX_FILE} is over its budget ({size} bytes; {INDEX_MAX_LINES} lines / "
            f"{INDEX_MAX_CHARS} chars are used); it is never used for recall"
        )
    kept = "\n".join(lines[:INDEX_MAX_LINES])[:INDEX_MAX_CHARS]
    return IndexFile(kept, problem)
