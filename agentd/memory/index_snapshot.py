"""A project's memory index saved whole, so that a restart takes it as is.

The index cache (`agentd.memory.index_cache`) spares a start the reading and
tokenising of the notes that did not change. What it left was most of a warm
start at 10,000 notes (about 1 s of 1.5): each note's term weights and the
postings, which depend on the whole collection (the average field lengths:
one changed note changes every weight). This file keeps, per project (its
memory folder and its team folder together, the notes in scan order), what
a fresh build of those notes gave: the postings, each note's distinct terms
and field lengths, and per note the key the build depends on (folder, file
name, content hash, problems: a note's terms are a function of its name, its
first `MAX_TOPIC_BYTES` and whether it was cut there, which a problem says).
A scan that finds the same keys in the same order (the notes it took from
the index cache, and those it read) takes the postings from here: the index
a fresh build of these notes gives. The notes edited since it was written
are in its delta (`agentd.memory.index_delta`), applied to it at a start as
the live index took them; anything else (a note changed, added, removed
while no daemon ran) builds from the terms as before, and the next write
saves the new build.

Format: JSON lines. A header (format, tokenizer and agentd versions, the
weighting constants, the doc count, a CRC-32 of the lines after it, a
random id that the edits saved after it name: `agentd.memory.index_delta`); the
docs (key, lengths, term count, identity, name, description, type, head);
the terms in postings order; then the numbers, each line one JSON string of
base64 of a little-endian array: per term its posting count, the postings'
doc ids, their weights as indices into the next line's table of distinct
weights (shared float objects, as a build shares them), each doc's terms as
indices into the terms. Arrays decoded in C instead of a million JSON
numbers (about 0.4 s less at 10,000 notes). JSON, not pickle: loading it
runs no code; every count and index is checked against the others before
use, and a file that fails any check is ignored with one log line. It is
written in the index cache's worker thread, 0600, under the same cap.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import logging
import math
import operator
import secrets
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from agentd import __version__
from agentd.memory import index as index_module
from agentd.memory.index import IndexedDoc, InvertedIndex
from agentd.memory.index_cache import MAX_CACHE_BYTES, read_cache_file, write_atomically
from agentd.memory.store import HEAD_CHARS, MAX_TOPIC_BYTES, DocInfo
from agentd.memory.tokenize import TOKENIZER_VERSION

log = logging.getLogger(__name__)

FORMAT = 1
WHAT = "memory index snapshot"

# An unsigned 32-bit array type code (`I` is 32 bits wherever CPython runs;
# `L` is the fallback the standard allows).
_U32 = next(code for code in "IL" if array(code).itemsize == 4)

# (team, file name, content hash, problems): what a note's indexed terms
# depend on, with its place in the folders' scan order.
DocKey = tuple[bool, str, str, tuple[str, ...]]
Identity = tuple[int, int, int, int]  # st_size, st_mtime_ns, st_ino, st_dev
# The identity its file had when a note was read, as the index cache holds it
# (`agentd.memory.index_cache`: only once its read is trusted), or None.
IdentityOf = Callable[[DocKey], Identity | None]


def _header() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "tokenizer": TOKENIZER_VERSION,
        "agentd": __version__,
        "headChars": HEAD_CHARS,
        "maxTopicBytes": MAX_TOPIC_BYTES,
        "weighting": [
            list(index_module.FIELD_WEIGHTS),
            index_module.K1,
            index_module.B,
        ],
    }


def key_of(info: DocInfo, content_hash: str) -> DocKey:
    return (info.team, info.path.name, content_hash, info.problems)


# The numbers, one line each after the docs and the terms, in this order.
PACKED = ("df", "ids", "weights", "table", "docTerms")


def _packed(values: array[int] | array[float]) -> bytes:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes())


def _unpacked(code: str, text: object) -> array[Any]:
    """Raises ValueError (binascii.Error is one) on anything but base64 (of
    whole items): what was between a line's quotes is a JSON string then."""
    if type(text) is not memoryview:
        raise ValueError("not packed")
    values: array[Any] = array(code)
    values.frombytes(binascii.a2b_base64(text, strict_mode=True))
    if sys.byteorder != "little":
        values.byteswap()
    return values


def new_id() -> str:
    """A saved index's name for itself: what a delta written after it names
    (`agentd.memory.index_delta`)."""
    return secrets.token_hex(8)


def encode(index: InvertedIndex, identity_of: IdentityOf, snapshot_id: str) -> list[bytes] | None:
    """The file's lines for ``index``, which must be built whole
    (`InvertedIndex.whole`); None when it is not, or stops being so while
    this reads it (a change on the event loop: this runs in a thread).
    Each doc goes with its file's identity (``identity_of``, None when the
    index cache has none for that content): a start that finds every
    regular note with its identity takes the docs from here too.
    ``snapshot_id`` (`new_id`) goes in the header."""
    if not index.whole:
        return None
    try:
        docs = list(index.docs())
        postings = index.postings()
        terms = list(postings)
        df: array[int] = array(_U32)
        ids: array[int] = array(_U32)
        weights: array[float] = array("d")
        for term in terms:
            found = postings[term]
            df.append(len(found))
            ids.extend(found)
            weights.extend(found.values())
        position = {term: i for i, term in enumerate(terms)}
        doc_terms: array[int] = array(_U32)
        rows: list[list[object]] = []
        for expected_id, doc in enumerate(docs):
            if doc.id != expected_id:
                return None
            doc_terms.extend(map(position.__getitem__, doc.terms))
            info = doc.info
            key = key_of(info, doc.content_hash)
            identity = identity_of(key)
            rows.append(
                [
                    info.team,
                    info.path.name,
                    doc.content_hash,
                    list(info.problems),
                    *doc.lengths,
                    doc.about_count,
                    len(doc.terms),
                    list(identity) if identity is not None else None,
                    info.name,
                    info.description,
                    info.type,
                    doc.head,
                ]
            )
    except (RuntimeError, KeyError):
        return None  # changed under us (a dict resized, a term gone)
    if not index.whole:
        return None
    table = sorted(set(weights))
    slot = {weight: i for i, weight in enumerate(table)}
    packed: dict[str, array[int] | array[float]] = {
        "df": df,
        "ids": ids,
        "weights": array(_U32, map(slot.__getitem__, weights)),
        "table": array("d", table),
        "docTerms": doc_terms,
    }
    try:
        lines = [
            json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
            for value in (rows, terms)
        ]
    except UnicodeEncodeError:
        return None  # a file name that is not UTF-8: such a folder builds each start
    lines.extend(b'"' + _packed(packed[name]) + b'"\n' for name in PACKED)
    header = _header()
    header["docs"] = len(rows)
    header["id"] = snapshot_id
    crc = 0
    for line in lines:
        crc = zlib.crc32(line, crc)
    header["crc32"] = crc
    return [json.dumps(header).encode() + b"\n", *lines]


def save(target: Path, lines: list[bytes]) -> bool:
    """Write ``lines`` (`encode`'s) to ``target``; False when too large or
    not written (logged). Blocking."""
    if sum(map(len, lines)) > MAX_CACHE_BYTES:
        log.info("%s for %s left out: past %d bytes", WHAT, target, MAX_CACHE_BYTES)
        return False
    return write_atomically(target, lines, WHAT)


@dataclass(slots=True)
class Snapshot:
    """A saved index: its docs' keys (checked at load), the rest decoded by
    `index` once a scan found the same keys."""

    keys: list[DocKey]
    rows: list[list[Any]]
    payload: dict[str, Any]
    source: Path
    # Its header's `id` (`new_id`); None in a file from before ids.
    id: str | None = None
    size: int = 0  # the file's bytes
    damaged: bool = False  # found so by `index` (said once)

    def places(self) -> dict[tuple[bool, str], int]:
        """(team, file name) -> the doc's place in `keys`."""
        return {(row[0], row[1]): i for i, row in enumerate(self.rows)}

    def identity(self, place: int) -> Identity | None:
        found = self.rows[place][9]
        return None if found is None else (found[0], found[1], found[2], found[3])

    def doc(self, place: int, path: Path, mtime: float) -> tuple[DocInfo, str, str]:
        """The doc saved at ``place``, found at ``path`` with this ``mtime``:
        its info, head and content hash."""
        row = self.rows[place]
        info = DocInfo(path, row[10], row[11], row[12], mtime, row[0], self.keys[place][3])
        return info, row[13], row[2]

    def index(self, docs: Sequence[tuple[DocInfo, str, str]]) -> InvertedIndex | None:
        """The saved index, with each doc's (info, head, content hash) from
        ``docs`` (this scan's, in key order). None, logged once, when the
        numbers do not hold together."""
        if self.damaged:
            return None
        try:
            return self._assemble(docs)
        except (ValueError, TypeError, IndexError, OverflowError, MemoryError):
            self.damaged = True
            log.warning("%s %s is damaged; ignored", WHAT, self.source)
            return None

    def _assemble(self, docs: Sequence[tuple[DocInfo, str, str]]) -> InvertedIndex | None:
        payload = self.payload
        terms = payload["terms"]
        if type(terms) is not list or not all(type(t) is str for t in terms):
            raise ValueError("terms")
        df = _unpacked(_U32, payload["df"])
        ids = _unpacked(_U32, payload["ids"])
        slots = _unpacked(_U32, payload["weights"])
        table = _unpacked("d", payload["table"]).tolist()
        doc_terms = _unpacked(_U32, payload["docTerms"])
        n_docs = len(self.rows)
        if len(docs) != n_docs or len(df) != len(terms) or len(set(terms)) != len(terms):
            raise ValueError("counts")
        if sum(df) != len(ids) or len(slots) != len(ids) or len(doc_terms) != len(ids):
            raise ValueError("postings")
        if not all(0.0 < w < 1.0 and math.isfinite(w) for w in table):
            raise ValueError("weights")
        # Checked now: a term's postings are made at its first use, which
        # must not fail (a query, an edit).
        if ids and (max(ids) >= n_docs or max(slots) >= len(table) or min(df) == 0):
            raise ValueError("a posting past the docs or the weights, or a term without")
        if doc_terms and max(doc_terms) >= len(terms):
            raise ValueError("a doc's term past the terms")
        # One int object per doc id, shared by every posting (as a build's are).
        id_of = list(range(n_docs))
        postings = SavedPostings(terms, df, _Packed(ids, slots, table, id_of))
        indexed: list[IndexedDoc] = []
        start = 0
        for doc_id, (row, (info, head, digest)) in enumerate(zip(self.rows, docs, strict=True)):
            lengths = (row[4], row[5], row[6])
            end = start + row[8]
            indexed.append(
                IndexedDoc(
                    id=id_of[doc_id],
                    info=info,
                    head=head,
                    content_hash=digest,
                    lengths=lengths,
                    terms=SavedTerms(terms, doc_terms, start, end),
                    about_count=row[7],
                )
            )
            start = end
        if start != len(doc_terms):
            raise ValueError("doc terms")
        return InvertedIndex.assemble(indexed, postings)


class SavedTerms(Sequence[str]):
    """A saved doc's distinct terms (`IndexedDoc.terms`), made into a tuple
    the first time they are read: a start makes none (a tuple per doc,
    772,000 terms at 10,000 notes, about 0.08 s and 6 MB), a query only its
    candidates' (their name's and description's terms are evidence), an
    edit or a removal only that doc's. Equal to the tuple it stands for."""

    __slots__ = ("_doc_terms", "_end", "_made", "_start", "_terms")

    def __init__(self, terms: list[str], doc_terms: array[int], start: int, end: int) -> None:
        self._terms = terms
        self._doc_terms = doc_terms
        self._start = start
        self._end = end
        self._made: tuple[str, ...] | None = None

    def made(self) -> tuple[str, ...]:
        made = self._made
        if made is None:
            numbers = self._doc_terms[self._start : self._end]
            made = self._made = tuple(map(self._terms.__getitem__, numbers))
        return made

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return self.made()[i]

    def __len__(self) -> int:
        return self._end - self._start

    def __iter__(self) -> Iterator[str]:
        return iter(self.made())

    def __contains__(self, term: object) -> bool:
        return term in self.made()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SavedTerms):
            other = other.made()
        return self.made() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.made())


@dataclass(frozen=True, slots=True)
class _Packed:
    """The postings of every term, end to end, as the file holds them."""

    ids: array[int]
    slots: array[int]
    table: list[float]
    id_of: list[int]

    def postings(self, start: int, end: int) -> dict[int, float]:
        return dict(
            zip(
                map(self.id_of.__getitem__, self.ids[start:end]),
                map(self.table.__getitem__, self.slots[start:end]),
                strict=True,
            )
        )


class SavedPostings(dict[str, dict[int, float]]):
    """Term -> {doc id: weight}, as an index holds them, each term's made
    the first time it is read: a start makes none (772,000 postings at
    10,000 notes, about 0.15 s and 30 MB), a query only its terms'. Until
    then a term's value is its number (an int, never seen outside: every
    read of a value goes through the methods below). Only
    the event loop reads an index, and a save's thread reads one whole; a
    term made twice at once (those two) gives two equal dicts."""

    __slots__ = ("_bounds", "_packed")

    def __init__(self, terms: list[str], df: array[int], packed: _Packed) -> None:
        # Term k's postings are packed[bounds[k]:bounds[k + 1]].
        self._bounds = [0, *itertools.accumulate(df)]
        # Until made, a term's value is its number k.
        super().__init__(zip(terms, range(len(terms)), strict=True))  # type: ignore[arg-type]
        self._packed = packed

    def _made(self, term: str, value: Any) -> dict[int, float]:
        if type(value) is int:
            value = self._packed.postings(self._bounds[value], self._bounds[value + 1])
            dict.__setitem__(self, term, value)
        made: dict[int, float] = value
        return made

    def __getitem__(self, term: str) -> dict[int, float]:
        return self._made(term, dict.__getitem__(self, term))

    def get(self, term: str, default: Any = None) -> Any:
        value = dict.get(self, term, _MISSING)
        return default if value is _MISSING else self._made(term, value)

    def pop(self, term: str, *default: Any) -> Any:
        value = dict.pop(self, term, _MISSING)
        if value is _MISSING:
            if default:
                return default[0]
            raise KeyError(term)
        return self._made(term, value) if type(value) is int else value

    def _all(self) -> None:
        for term, value in list(dict.items(self)):
            self._made(term, value)

    def values(self) -> Any:
        self._all()
        return dict.values(self)

    def items(self) -> Any:
        self._all()
        return dict.items(self)

    def __eq__(self, other: object) -> bool:
        self._all()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def copy(self) -> dict[str, dict[int, float]]:
        self._all()
        return dict(dict.items(self))


_MISSING = object()


# One doc: team, file name, content hash, problems, its three field lengths,
# how many of its terms are its name's and description's, how many terms,
# its file's identity (or null), name, description, type, head.
_ROW_TYPES = (bool, str, str, list, int, int, int, int, int, object, str, str, str, str)


def _keys(rows: object) -> list[DocKey] | None:
    """Each doc's key, when every row has the types and bounds of `_ROW_TYPES`.
    Checked a column at a time (`map` and `set`, C loops): 10,000 rows a few
    milliseconds, where a row at a time took about 0.1 s."""
    if type(rows) is not list or not set(map(type, rows)) <= {list}:
        return None
    if not rows:
        return []
    if set(map(len, rows)) != {len(_ROW_TYPES)}:
        return None
    columns = list(zip(*rows, strict=True))
    for column, kind in zip(columns, _ROW_TYPES, strict=True):
        if kind is not object and not set(map(type, column)) <= {kind}:
            return None  # `type`, not `isinstance`: a bool is not a count
    problems, identities = columns[3], columns[9]
    if not set(map(type, itertools.chain.from_iterable(problems))) <= {str}:
        return None
    if min(map(min, columns[4:9])) < 0 or any(map(operator.gt, columns[7], columns[8])):
        return None  # a negative count, or more "about" terms than terms
    known = [identity for identity in identities if identity is not None]
    if not set(map(type, known)) <= {list} or not set(map(len, known)) <= {4}:
        return None
    if not set(map(type, itertools.chain.from_iterable(known))) <= {int}:
        return None
    return list(zip(columns[0], columns[1], columns[2], map(tuple, problems), strict=True))


def load(source: Path) -> Snapshot | None:
    """The snapshot in ``source``; None when there is none or it is not one
    this code wrote (said in one log line). Blocking; never raises."""
    data = read_cache_file(source, WHAT)
    if data is None:
        return None
    snapshot = _parse(data, source)
    if snapshot is None:
        log.warning("%s %s is damaged or of another version; ignored", WHAT, source)
    return snapshot


def _parse(data: bytes, source: Path) -> Snapshot | None:
    # Lines found by offset and the numbers' lines viewed, not copied: the
    # file is about 20 MB at 10,000 notes.
    bounds: list[tuple[int, int]] = []
    start = 0
    for _ in range(3 + len(PACKED)):
        end = data.find(b"\n", start)
        if end < 0:
            return None  # cut short: every file written here ends with a newline
        bounds.append((start, end))
        start = end + 1
    if start != len(data):
        return None
    view = memoryview(data)
    try:
        header = json.loads(data[: bounds[0][1]])
        if type(header) is not dict:
            return None
        crc, n_docs = header.pop("crc32", None), header.pop("docs", None)
        snapshot_id = header.pop("id", None)
        if snapshot_id is not None and type(snapshot_id) is not str:
            return None
        if header != _header() or crc != zlib.crc32(view[bounds[1][0] :]):
            return None
        rows, terms = (json.loads(data[a:b]) for a, b in bounds[1:3])
    except (ValueError, RecursionError):
        return None
    payload: dict[str, Any] = {"terms": terms}
    for name, (a, b) in zip(PACKED, bounds[3:], strict=True):
        # A JSON string of base64 (checked as it is decoded): taken between
        # its quotes rather than scanned as JSON, a character at a time.
        if b - a < 2 or data[a] != 0x22 or data[b - 1] != 0x22:
            return None
        payload[name] = view[a + 1 : b - 1]
    keys = _keys(rows)
    if keys is None or len(keys) != n_docs or type(rows) is not list:
        return None
    return Snapshot(keys, rows, payload, source, snapshot_id, len(data))
