"""The notes changed since a project's saved index, appended beside it.

A saved index (`agentd.memory.index_snapshot`) is the whole index; writing
it again after each edit cost a save about 1 s of CPU at 10,000 notes (a
fresh build, then the encoding), in a worker thread that holds the GIL from
the event loop's point of view. Instead, a save after edits appends the
edited notes' index cache entries (`agentd.memory.index_cache.CacheEntry`:
identity, content hash, front matter, head, terms) to this file, one line
per save: the cost is that of the notes that changed. The next start takes
the saved index and applies these entries to it as the live index applied
the edits (an upsert with the saved index's average lengths), and its index
cache files are read with these entries over theirs. Once the file has
grown past a share of the saved index, the next save writes both whole
again and removes it (`agentd.memory.project`).

Format: a header line (format, tokenizer and agentd versions, the parsing
bounds, and ``base``: the id of the saved index these edits follow), then
one line per save: eight hex digits of the CRC-32 of the rest of the line,
a space, and a JSON array of records ``[team, file name, entry row or
null]`` (null: the note has no entry any more, gone or not one to keep).
Later records win. A line cut short or failing its CRC ends the file there
(what followed is ignored, and the next save writes everything whole); a
header naming another saved index, another version or anything else makes
the whole file ignored. Every entry checks out against its file's identity
at the next start, as the index cache's do: a stale entry is never used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd import __version__
from agentd.memory.index_cache import (
    MAX_CACHE_BYTES,
    CacheEntry,
    entry_of_row,
    open_cache_folder,
    read_cache_file,
    row_of,
    write_atomically,
)
from agentd.memory.store import HEAD_CHARS, MAX_TOPIC_BYTES
from agentd.memory.tokenize import TOKENIZER_VERSION

log = logging.getLogger(__name__)

FORMAT = 1
WHAT = "memory index delta"
SUFFIX = ".delta"

# (team, file name) -> its entry, or None: what the delta says of a note.
Records = dict[tuple[bool, str], CacheEntry | None]


def delta_file(snapshot_file: Path) -> Path:
    """The delta of the saved index ``snapshot_file``, beside it."""
    return snapshot_file.with_suffix(SUFFIX)


def _header(base: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "tokenizer": TOKENIZER_VERSION,
        "agentd": __version__,
        "headChars": HEAD_CHARS,
        "maxTopicBytes": MAX_TOPIC_BYTES,
        "base": base,
    }


def _header_line(base: str) -> bytes:
    return json.dumps(_header(base)).encode() + b"\n"


def encode(records: Iterable[tuple[bool, str, CacheEntry | None]]) -> bytes | None:
    """One save's line; None when no record can be written (a file name that
    is not UTF-8 is left out: its note is read again at the next start)."""
    rows: list[bytes] = []
    for team, name, entry in records:
        row = [team, name, row_of(name, entry) if entry is not None else None]
        try:
            rows.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode())
        except UnicodeEncodeError:
            continue
    if not rows:
        return None
    body = b"[" + b",".join(rows) + b"]"
    return b"%08x " % zlib.crc32(body) + body + b"\n"


@dataclass
class Delta:
    """A delta file as read: its records (later ones applied over earlier),
    its size, and whether it ended cleanly (False: a torn or damaged line
    ended it; the records before it are kept)."""

    records: Records = field(default_factory=dict)
    size: int = 0
    clean: bool = True


def _record(value: object) -> tuple[tuple[bool, str], CacheEntry | None] | None:
    if type(value) is not list or len(value) != 3:
        return None
    team, name, row = value
    if type(team) is not bool or type(name) is not str:
        return None
    if row is None:
        return (team, name), None
    parsed = entry_of_row(row)
    if parsed is None or parsed[0] != name:
        return None
    return (team, name), parsed[1]


def load(target: Path, base: str) -> Delta:
    """The delta in ``target`` of the saved index whose id is ``base``; an
    empty one when there is none, or it follows another saved index or is
    not one this code wrote (said in one log line). Blocking; never raises."""
    data = read_cache_file(target, WHAT)
    if not data:
        return Delta()
    end = data.find(b"\n")
    try:
        header = json.loads(data[:end]) if end > 0 else None
    except (ValueError, RecursionError):
        header = None
    if header != _header(base):
        # After another saved index (written since by another daemon, or
        # this one's last fold was cut short): nothing in it applies.
        log.info("%s %s does not follow the saved index beside it; ignored", WHAT, target)
        return Delta(clean=False)
    delta = Delta(size=len(data))
    start = end + 1
    while start < len(data):
        end = data.find(b"\n", start)
        parsed = _line(data[start:end]) if end > 0 else None
        if parsed is None:
            log.warning("%s %s is damaged at byte %d; rest ignored", WHAT, target, start)
            delta.clean = False
            break
        for key, entry in parsed:
            delta.records[key] = entry
        start = end + 1
    return delta


def _line(line: bytes) -> list[tuple[tuple[bool, str], CacheEntry | None]] | None:
    if len(line) < 10 or line[8:9] != b" ":
        return None
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return None
    body = line[9:]
    if zlib.crc32(body) != crc:
        return None
    try:
        values = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if type(values) is not list:
        return None
    out = []
    for value in values:
        record = _record(value)
        if record is None:
            return None
        out.append(record)
    return out


def append(target: Path, base: str, line: bytes, expected_size: int) -> int | None:
    """Add ``line`` (`encode`'s) to the delta of saved index ``base``; the
    file's size after it, or None when this save must write everything whole
    instead (logged): the file is not the one this daemon wrote to (its
    header names another saved index, it was cut short or removed: another
    daemon's fold), or past `MAX_CACHE_BYTES`. ``expected_size`` 0: there
    is no delta yet (one found is replaced). Blocking."""
    if expected_size == 0:
        header = _header_line(base)
        if not write_atomically(target, [header, line], WHAT):
            return None
        return len(header) + len(line)
    if expected_size + len(line) > MAX_CACHE_BYTES:
        return None
    try:
        folder = open_cache_folder(target, create=False)
    except OSError as exc:
        log.info("%s %s not appended to: %s", WHAT, target, exc)
        return None
    try:
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(target.name, flags, dir_fd=folder)
    except OSError as exc:
        log.info("%s %s not appended to: %s", WHAT, target, exc)
        return None
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        header = _header_line(base)
        # Another daemon of the same project may have appended (its lines
        # are whole: one `write` each, in append mode); a file shorter than
        # this daemon left it, or not ending a line, is not that file.
        if not stat.S_ISREG(st.st_mode) or st.st_size < expected_size:
            return None
        if os.pread(fd, len(header), 0) != header:
            return None
        if os.pread(fd, 1, st.st_size - 1) != b"\n":
            return None
        written = os.write(fd, line)
        if written != len(line):
            # Cut short (a full disk): the next start stops reading there.
            return None
        return os.fstat(fd).st_size
    except OSError as exc:
        log.info("%s %s not appended to: %s", WHAT, target, exc)
        return None
    finally:
        os.close(fd)


def remove(target: Path) -> None:
    """Remove the delta (a fold wrote what it held). Blocking; never raises."""
    try:
        folder = open_cache_folder(target, create=False)
    except OSError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target.name, dir_fd=folder)
    except OSError as exc:
        log.info("%s %s not removed: %s", WHAT, target, exc)
    finally:
        os.close(folder)
