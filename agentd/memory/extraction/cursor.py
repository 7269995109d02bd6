"""Per-session extraction cursors, stored in the memory folder.

`<memory dir>/.cursors.json` maps each session id to `processedOffset`: the
first transcript offset not yet extracted. It lives next to the memory files
so that it travels with them, and it is written through the same atomic path
(temp, fsync, rename, fsync of the folder) *after* the memory writes it
vouches for are durable: a crash can leave the cursor behind the disk (the
slice is extracted again, idempotently) but never ahead of it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from agentd.memory.extraction.writer import checkpoint, read_current, write_atomic

log = logging.getLogger(__name__)

CURSOR_FILE = ".cursors.json"


def load_cursors(directory: Path) -> dict[str, int]:
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
    out: dict[str, int] = {}
    sessions = raw.get("sessions") if isinstance(raw, dict) else None
    if isinstance(sessions, list):
        for item in sessions:
            if not isinstance(item, dict):
                continue
            sid, offset = item.get("sessionId"), item.get("processedOffset")
            if isinstance(sid, str) and isinstance(offset, int) and offset >= 0:
                out[sid] = offset
    return out


def save_cursors(directory: Path, cursors: dict[str, int]) -> None:
    """Persist all cursors atomically (call only after the writes they cover are durable)."""
    body = {
        "version": 1,
        "sessions": [
            {"sessionId": sid, "processedOffset": off} for sid, off in sorted(cursors.items())
        ],
    }
    data = (json.dumps(body, indent=1) + "\n").encode("utf-8")
    checkpoint("before_cursor")
    write_atomic(directory, CURSOR_FILE, data, check=False)
    checkpoint("after_cursor")
