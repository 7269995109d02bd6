"""NES sessions and the documents the editor keeps them in sync with (stdlib only).

An NES session (ACP `nes/start`) is not a chat session: its own ids, its
workspace folders, the text of the documents the editor opened in it
(`document/didOpen` and `didChange`), which one has the focus, and the
outcome of its last suggestions (`nes/accept`, `nes/reject`). Nothing of it
is written anywhere; `nes/close` (or the connection's end) forgets it.

Documents are only ever the editor's text: a URI that is not `file:` or
lies outside the session's folders is ignored, and nothing is read from
disk. A change that cannot be applied exactly (a version not above the
last one, a range that names no place) drops the document until the next
`didOpen`: a suggestion is then `[]`, never made on a wrong text.

Bounds (a hostile or leaking editor cannot grow the daemon):

    MAX_SESSIONS        8 per connection; a 9th `nes/start` closes the
                        least recently used one
    MAX_DOCUMENTS       64 per session; a 65th `didOpen` drops the least
                        recently touched document
    MAX_DOCUMENT_BYTES  1 MiB of UTF-8 per document; a bigger text is not
                        kept (a `didOpen` dropped, a `didChange` drops it)
    MAX_SESSION_BYTES   8 MiB per session; beyond, the least recently
                        touched documents are dropped until it fits
    MAX_CHANGES         64 `contentChanges` per `didChange` (each one copies
                        the text); more drop the document
    MAX_OUTCOMES        8 accepted/rejected suggestions remembered per session
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from agentd.nes.text import BadPosition, Edit, apply_change

log = logging.getLogger("agentd.nes")

MAX_SESSIONS = 8
MAX_DOCUMENTS = 64
MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_SESSION_BYTES = 8 * 1024 * 1024
MAX_OUTCOMES = 8
MAX_CHANGES = 64
# Suggestions issued and not yet accepted or rejected, remembered to describe an outcome.
MAX_ISSUED = 32
MAX_URI = 4096


@dataclass(slots=True)
class Document:
    uri: str
    language_id: str
    version: int
    text: str
    size: int
    saved_version: int | None = None


@dataclass(frozen=True, slots=True)
class Issued:
    """A suggestion agentd made: what its outcome will be remembered as."""

    uri: str
    edits: tuple[Edit, ...]
    old_texts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    accepted: bool
    uri: str
    summary: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Focus:
    uri: str
    version: int
    line: int
    character: int


@dataclass(eq=False)
class NesSession:
    id: str
    roots: tuple[Path, ...]
    documents: OrderedDict[str, Document] = field(default_factory=OrderedDict)
    size: int = 0
    focus: Focus | None = None
    issued: OrderedDict[str, Issued] = field(default_factory=OrderedDict)
    outcomes: deque[Outcome] = field(default_factory=lambda: deque(maxlen=MAX_OUTCOMES))
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    # --- documents -------------------------------------------------------------------

    def in_workspace(self, uri: str) -> bool:
        """A `file:` URI under one of the session's folders (judged by its
        text: the disk is not asked)."""
        path = uri_path(uri)
        if path is None:
            return False
        return any(path == root or root in path.parents for root in self.roots)

    def open(self, uri: str, language_id: str, version: int, text: str) -> None:
        self.drop(uri)
        size = _size(text)
        if size > MAX_DOCUMENT_BYTES:
            log.info("document/didOpen: a document over %d bytes is not kept", MAX_DOCUMENT_BYTES)
            return
        self.documents[uri] = Document(uri, language_id, version, text, size)
        self.size += size
        while len(self.documents) > MAX_DOCUMENTS or self.size > MAX_SESSION_BYTES:
            oldest = next(iter(self.documents))
            self.drop(oldest)

    def change(self, uri: str, version: int, changes: list[dict[str, Any]], encoding: str) -> None:
        """Apply `changes` in order; any doubt drops the document."""
        doc = self.documents.get(uri)
        if doc is None:
            return
        if version <= doc.version:
            log.info(
                "document/didChange: version %d after %d: document dropped", version, doc.version
            )
            self.drop(uri)
            return
        text = doc.text
        try:
            for change in changes:
                rng = change.get("range")
                if rng is None:
                    text = change["text"]
                else:
                    start, end = rng["start"], rng["end"]
                    text = apply_change(
                        text,
                        (start["line"], start["character"]),
                        (end["line"], end["character"]),
                        change["text"],
                        encoding,
                    )
                if len(text) > MAX_DOCUMENT_BYTES:
                    raise BadPosition("too long")
        except BadPosition as exc:
            log.info("document/didChange: %s: document dropped", exc)
            self.drop(uri)
            return
        size = _size(text)
        if size > MAX_DOCUMENT_BYTES:
            log.info("document/didChange: over %d bytes: document dropped", MAX_DOCUMENT_BYTES)
            self.drop(uri)
            return
        self.size += size - doc.size
        doc.text, doc.size, doc.version = text, size, version
        self.documents.move_to_end(uri)
        while self.size > MAX_SESSION_BYTES and len(self.documents) > 1:
            self.drop(next(iter(self.documents)))

    def drop(self, uri: str) -> None:
        doc = self.documents.pop(uri, None)
        if doc is not None:
            self.size -= doc.size
        if self.focus is not None and self.focus.uri == uri and doc is not None:
            self.focus = None

    def save(self, uri: str) -> None:
        doc = self.documents.get(uri)
        if doc is not None:
            doc.saved_version = doc.version

    def set_focus(self, uri: str, version: int, line: int, character: int) -> None:
        if uri in self.documents:
            self.documents.move_to_end(uri)
        self.focus = Focus(uri, version, line, character)

    # --- suggestions and their outcomes ---------------------------------------------

    def issue(self, item: Issued) -> str:
        suggestion_id = f"{self.id[:8]}-{next(self._ids)}"
        self.issued[suggestion_id] = item
        while len(self.issued) > MAX_ISSUED:
            self.issued.popitem(last=False)
        return suggestion_id

    def settle(self, suggestion_id: str, accepted: bool, reason: str | None = None) -> bool:
        """Remember the outcome of an issued suggestion; False for an unknown id."""
        item = self.issued.pop(suggestion_id, None)
        if item is None:
            return False
        parts = []
        for edit, old in zip(item.edits, item.old_texts, strict=True):
            parts.append(f"{_short(old)!r} -> {_short(edit.new_text)!r}")
        reason = reason[:200] if reason else None
        self.outcomes.append(Outcome(accepted, item.uri, "; ".join(parts)[:600], reason))
        return True


class NesSessions:
    """The NES sessions of one connection, least recently used first."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, NesSession] = OrderedDict()

    def start(self, roots: list[Path]) -> NesSession:
        session = NesSession(uuid.uuid4().hex, tuple(roots))
        self._sessions[session.id] = session
        while len(self._sessions) > MAX_SESSIONS:
            _, oldest = self._sessions.popitem(last=False)
            log.info("NES session %s closed: more than %d sessions", oldest.id, MAX_SESSIONS)
        return session

    def get(self, session_id: str) -> NesSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
        return session

    def close(self, session_id: str) -> NesSession | None:
        return self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


def uri_path(uri: str) -> Path | None:
    """The absolute path of a `file:` URI, normalised by its text; None otherwise."""
    if len(uri) > MAX_URI or not uri.startswith("file:"):
        return None
    try:
        parts = urlsplit(uri)
        path = unquote(parts.path, errors="strict")
    except (ValueError, UnicodeDecodeError):
        return None
    if parts.netloc not in ("", "localhost") or "\0" in path or not path.startswith("/"):
        return None
    # `..` is folded by the text, not by the disk: a URI cannot climb out of the folder.
    return Path(os.path.normpath(path))


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."
