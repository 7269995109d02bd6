"""A memory folder's parsed notes, kept across daemon starts.

Every start used to read, parse and tokenise each note of a project before
its first index existed; editors restart the daemon often (window reloads)
and most starts find the folder as it was. One file per memory folder
(`agentd.layout.memory_index_cache_file`, under ``$AGENTD_HOME``, never in the
folder itself: a team folder is shared through git) keeps, per note, what
is costly to recompute: front matter fields and problems, the head kept for
excerpts, the content hash, and the terms of its name, description and body.
The next scan reuses an entry when the file's identity (`st_size`,
`st_mtime_ns`, `st_ino`, `st_dev`) is the one the entry was read with, and
reads the file otherwise; the index is then built from those terms exactly
as from freshly tokenised ones (the weights depend on the whole folder's
average lengths, so they are recomputed), unless the project's saved index
(`agentd.memory.index_snapshot`) was built from the same notes: then it is
taken as is, and this file not even read when every note checks out.

The file is JSON lines: a header (format, tokenizer and agentd versions, the
parsing bounds, the entry count), then one JSON array per note. JSON, not
pickle or marshal: loading it cannot run code. Anything but a file this code
wrote (corrupt, truncated, another version, a FIFO, a device, a symlink,
past `MAX_CACHE_BYTES`) is ignored with one log line, and the folder is read
as if there were no cache. The cache holds derived terms of the notes' text:
what the notes hold, nothing more (notes pass the secret filter before they
are written), in a file readable by the user only.

A file modified within `RACY_NS` of the moment it was read could be modified
again within the same timestamp tick, at the same size, and look unchanged
(git's "racy clean" entries): such an entry is kept only once a later read
(`save`, seconds after) finds the same content with its modification time
that far in the past.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agentd import __version__
from agentd.files import NotRegularFile, open_regular, read_fd
from agentd.layout import MEMORY_INDEX_CACHE_PARTS
from agentd.memory.index import Fields
from agentd.memory.store import HEAD_CHARS, MAX_TOPIC_BYTES, DocInfo, TopicDoc, content_hash
from agentd.memory.tokenize import TOKENIZER_VERSION

log = logging.getLogger(__name__)

FORMAT = 1
# A cache past this size is not read, and entries past it are not written
# (those notes are read from the folder at the next start): 10,000 notes of
# generated prose take about 18 MB.
MAX_CACHE_BYTES = 64 * 1024 * 1024
# Timestamps of some filesystems have a granularity of up to 2 s (FAT).
RACY_NS = 2_000_000_000

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

Identity = tuple[int, int, int, int]  # st_size, st_mtime_ns, st_ino, st_dev

_HEADER = {
    "format": FORMAT,
    "tokenizer": TOKENIZER_VERSION,
    "agentd": __version__,
    "headChars": HEAD_CHARS,
    "maxTopicBytes": MAX_TOPIC_BYTES,
}
# One entry's JSON array: file name, identity, content hash, name, description,
# type, problems, head, and the name's, description's and body's terms, each
# joined by spaces (a term never holds whitespace: `tokenize.terms`).
_ROW_TYPES = (str, int, int, int, int, str, str, str, str, list, str, str, str, str)


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One note as parsed: enough to index it without reading it again."""

    identity: Identity
    content_hash: str
    name: str
    description: str
    type: str
    problems: tuple[str, ...]
    head: str
    terms: tuple[str, str, str]
    # Its file was last modified `RACY_NS` or more before it was read.
    verified: bool

    def doc(self, path: Path, *, team: bool, mtime: float) -> TopicDoc:
        info = DocInfo(path, self.name, self.description, self.type, mtime, team, self.problems)
        # The index keeps only the head of a body (`HEAD_CHARS`).
        return TopicDoc(info, self.head, self.content_hash)

    def fields(self, pool: dict[str, str]) -> Fields:
        """The terms of the name, description and body; each term the one
        object ``pool`` holds for it (a folder's docs share their terms, as
        the tokenizer's cache makes fresh ones share them: a term split
        out of each doc's text would cost the index one string per use)."""
        keep = pool.setdefault
        name, description, body = (joined.split() for joined in self.terms)
        return (
            list(map(keep, name, name)),
            list(map(keep, description, description)),
            list(map(keep, body, body)),
        )


def _old_enough(st: os.stat_result, read_ns: int) -> bool:
    return st.st_mtime_ns < read_ns - RACY_NS


def entry_of(doc: TopicDoc, fields: Fields, st: os.stat_result, read_ns: int) -> CacheEntry:
    """The entry of ``doc`` read from the file whose `fstat` is ``st``, at
    ``read_ns`` (`time.time_ns()` taken before the read)."""
    info = doc.info
    return CacheEntry(
        identity=identity_of(st),
        content_hash=doc.content_hash,
        name=info.name,
        description=info.description,
        type=info.type,
        problems=info.problems,
        head=doc.body[:HEAD_CHARS],
        terms=(" ".join(fields[0]), " ".join(fields[1]), " ".join(fields[2])),
        verified=_old_enough(st, read_ns),
    )


def row_of(file_name: str, entry: CacheEntry) -> list[object]:
    return [
        file_name,
        *entry.identity,
        entry.content_hash,
        entry.name,
        entry.description,
        entry.type,
        list(entry.problems),
        entry.head,
        *entry.terms,
    ]


def entry_of_row(row: object) -> tuple[str, CacheEntry] | None:
    if type(row) is not list or len(row) != len(_ROW_TYPES):
        return None
    if not all(map(isinstance, row, _ROW_TYPES)):
        return None
    file_name, size, mtime_ns, ino, dev, digest, name, description, kind, problems = row[:10]
    if not all(type(p) is str for p in problems):
        return None
    head, name_terms, description_terms, body_terms = row[10:]
    entry = CacheEntry(
        identity=(size, mtime_ns, ino, dev),
        content_hash=digest,
        name=name,
        description=description,
        type=kind,
        problems=tuple(problems),
        head=head,
        terms=(name_terms, description_terms, body_terms),
        verified=True,
    )
    return file_name, entry


def load(cache_file: Path) -> dict[str, CacheEntry]:
    """The entries of ``cache_file`` by file name; empty when there is none or
    it is not one this code wrote (said in one log line). Blocking; never raises."""
    data = read_cache_file(cache_file)
    if data is None:
        return {}
    entries = _parse(data)
    if entries is None:
        log.warning("memory index cache %s is damaged or of another version; ignored", cache_file)
        return {}
    return entries


def read_cache_file(cache_file: Path, what: str = "memory index cache") -> bytes | None:
    """The bytes of ``cache_file`` when it is a regular file of at most
    `MAX_CACHE_BYTES`; None otherwise (said in one log line, unless there is
    no file). Blocking; never raises."""
    try:
        folder = open_cache_folder(cache_file, create=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s %s cannot be read (%s); ignored", what, cache_file, exc)
        return None
    try:
        fd = open_regular(cache_file.name, dir_fd=folder)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        log.warning("%s %s is not a regular file; ignored", what, cache_file)
        return None
    except OSError as exc:
        log.warning("%s %s cannot be read (%s); ignored", what, cache_file, exc)
        return None
    finally:
        os.close(folder)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_CACHE_BYTES:
            log.warning("%s %s is %d bytes; ignored", what, cache_file, size)
            return None
        return read_fd(fd, MAX_CACHE_BYTES + 1)
    except OSError as exc:
        log.warning("%s %s cannot be read (%s); ignored", what, cache_file, exc)
        return None
    finally:
        os.close(fd)


def _parse(data: bytes) -> dict[str, CacheEntry] | None:
    if len(data) > MAX_CACHE_BYTES or not data.endswith(b"\n"):
        return None  # cut short: every file written here ends with a newline
    lines = data.split(b"\n")
    lines.pop()
    try:
        header = json.loads(lines[0])
        if type(header) is not dict or header.pop("entries", None) != len(lines) - 1:
            return None
        if header != _HEADER:
            return None
        entries: dict[str, CacheEntry] = {}
        for line in lines[1:]:
            parsed = entry_of_row(json.loads(line))
            if parsed is None:
                return None
            entries[parsed[0]] = parsed[1]
    except (ValueError, RecursionError):
        # JSON (or UTF-8) errors are ValueErrors; deep nesting a RecursionError.
        return None
    return entries


def still_verified(folder: Path, file_name: str, entry: CacheEntry, now_ns: int) -> bool:
    """Is an entry read too soon after its file's last change still the file's
    content, now that its change is `RACY_NS` old? Read again to know."""
    try:
        fd = open_regular(folder / file_name)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if identity_of(st) != entry.identity or not _old_enough(st, now_ns):
            return False
        data = read_fd(fd, MAX_TOPIC_BYTES + 1)
    except OSError:
        return False
    finally:
        os.close(fd)
    return content_hash(data[:MAX_TOPIC_BYTES]) == entry.content_hash


def save(
    cache_file: Path, folder: Path, entries: Mapping[str, CacheEntry]
) -> dict[str, CacheEntry]:
    """Write ``entries`` (of the notes in ``folder``) to ``cache_file``: a
    temporary file renamed over it, and return those written. Blocking;
    failures are logged, never raised.

    Entries not yet `verified` are checked against their file first and left
    out unless they still hold its content. One `json.dumps` per entry: the
    GIL is given back between them, so the event loop is not held for the
    whole folder's serialisation."""
    now_ns = time.time_ns()
    header = dict(_HEADER)
    rows: list[bytes] = []
    written: dict[str, CacheEntry] = {}
    total = 0
    for file_name, entry in entries.items():
        if not entry.verified and not still_verified(folder, file_name, entry, now_ns):
            continue
        row = json.dumps(row_of(file_name, entry), ensure_ascii=False, separators=(",", ":"))
        try:
            line = row.encode("utf-8") + b"\n"
        except UnicodeEncodeError:
            continue  # a file name that is not UTF-8 (surrogate escapes): read each start
        total += len(line)
        if total > MAX_CACHE_BYTES - 4096:
            break
        rows.append(line)
        written[file_name] = entry
    header["entries"] = len(rows)
    if not write_atomically(cache_file, [json.dumps(header).encode() + b"\n", *rows]):
        return {}
    return written


def open_cache_folder(target: Path, *, create: bool) -> int:
    """A descriptor of the folder of ``target`` (a file of the cache folder),
    reached from ``$AGENTD_HOME`` one component at a time without following
    a symlink (created when ``create``): a cache folder replaced by a symlink
    out of the home is refused (ELOOP), never read from or written through."""
    home = target.parents[len(MEMORY_INDEX_CACHE_PARTS)]
    if create:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(home, _FOLDER_FLAGS)
    try:
        for part in MEMORY_INDEX_CACHE_PARTS:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            inner = os.open(part, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomically(
    target: Path, chunks: Iterable[bytes], what: str = "memory index cache"
) -> bool:
    """``chunks`` to ``target`` (0600, its folder 0700), a file of the cache
    folder: a temporary file renamed over it, in the folder reached by
    `open_cache_folder`, never written through a symlink. False when it failed
    (logged)."""
    tmp = f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        folder = open_cache_folder(target, create=True)
    except OSError as exc:
        log.warning("%s %s not written: %s", what, target, exc)
        return False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                out.writelines(chunks)
        finally:
            os.close(fd)
        os.replace(tmp, target.name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as exc:
        log.warning("%s %s not written: %s", what, target, exc)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        return False
    finally:
        os.close(folder)
    return True
