"""Which notes extraction created: the only ones it may delete or write over.

`<memory dir>/.extracted.json` maps each topic file that extraction created
to the content hash it last wrote there. A note the user wrote by hand is
not in it; a note extraction created and the user edited since no longer has
the recorded hash. Extraction's `delete`, and a `create` that would land on
an existing file, go through only for a note that is in the ledger with its
current hash: anything else is the user's, and is refused (`update`, an
edit the model proposes knowing the note, stays possible, checked against
the content hash read when the model was asked).

Written through the same atomic path as the notes, after them and before the
cursor: a crash in between leaves a note extraction created out of the
ledger, which only makes it the user's (kept), never the other way round.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from agentd.memory.extraction.writer import read_current, write_atomic

log = logging.getLogger(__name__)

LEDGER_FILE = ".extracted.json"


def load_ledger(directory: Path) -> dict[str, str]:
    """File name -> content hash of the notes extraction created (missing: none)."""
    try:
        data = read_current(directory / LEDGER_FILE)
        raw = json.loads(data.decode("utf-8")) if data is not None else {}
    except (OSError, UnicodeDecodeError, ValueError):
        # Unreadable: every note counts as the user's, which only keeps more.
        log.warning("%s unreadable; no note counts as created by extraction", LEDGER_FILE)
        return {}
    files = raw.get("created") if isinstance(raw, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def save_ledger(directory: Path, created: dict[str, str]) -> None:
    body = {"version": 1, "created": dict(sorted(created.items()))}
    write_atomic(directory, LEDGER_FILE, (json.dumps(body, indent=1) + "\n").encode(), check=False)
