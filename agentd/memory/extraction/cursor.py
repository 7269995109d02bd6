"""Per-session extraction cursors, stored in the memory folder.

`<memory dir>/.cursors.json` maps each session id to `processedOffset`, the
first transcript offset not yet extracted, and `byteOffset`, where that
message's line starts in the transcript: a run reads the transcript from
there on, so its cost is that of the new turns, not of the whole session.
The byte offset is a hint the transcript reader checks (`read_from`); files
written before it existed (version 1, message offsets only) are read as
"scan from the start" once, and the next save records the byte offsets.

The file lives next to the memory files so that it travels with them, and it
is written through the same atomic path (temp, fsync, rename, fsync of the
folder) *after* the memory writes it vouches for are durable: a crash can
leave the cursor behind the disk (the slice is extracted again,
idempotently) but never ahead of it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from agentd.memory.extraction.writer import checkpoint, read_current, write_atomic

log = logging.getLogger(__name__)

CURSOR_FILE = ".cursors.json"
VERSION = 2


@dataclass(frozen=True)
class Cursor:
    # The first message offset not yet extracted (`processedOffset`).
    offset: int
    # The byte position in the transcript where reading resumes; 0 when unknown.
    position: int = 0


def load_cursors(directory: Path) -> dict[str, Cursor]:
    """The stored cursors; a missing or unreadable file means "nothing processed"."""
    try:
        data = read_current(directory / CURSOR_FILE)
    except OSError as exc:
        log.warning("cannot read %s: %s", CURSOR_FILE, exc.strerror or exc)
        return {}
    if data is None:
        return {}
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        # Re-extracting is safe (writes are idempotent); trusting garbage is not.
        log.warning("%s is corrupt; starting from the beginning", CURSOR_FILE)
        return {}
    out: dict[str, Cursor] = {}
    sessions = raw.get("sessions") if isinstance(raw, dict) else None
    if isinstance(sessions, list):
        for item in sessions:
            if not isinstance(item, dict):
                continue
            sid = item.get("sessionId")
            offset = _count(item.get("processedOffset"))
            if not isinstance(sid, str) or offset is None:
                continue
            # Version 1 has no byte offset: read from the start once (migration).
            out[sid] = Cursor(offset, _count(item.get("byteOffset")) or 0)
    return out


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def save_cursors(directory: Path, cursors: dict[str, Cursor]) -> None:
    """Persist all cursors atomically (call only after the writes they cover are durable)."""
    body = {
        "version": VERSION,
        "sessions": [
            {"sessionId": sid, "processedOffset": c.offset, "byteOffset": c.position}
            for sid, c in sorted(cursors.items())
        ],
    }
    data = (json.dumps(body, indent=1) + "\n").encode("utf-8")
    checkpoint("before_cursor")
    write_atomic(directory, CURSOR_FILE, data, check=False)
    checkpoint("after_cursor")
