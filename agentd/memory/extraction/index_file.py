"""MEMORY.md, rebuilt from the topic files after each extraction run.

One line per topic file, newest first, within the budget the prompt loader
uses (200 lines / 25,000 characters). When the folder has more than fits, the
*oldest* lines are dropped and a last line says how many were left out: the
newest memories are never the ones silently cut.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentd.memory.store import (
    INDEX_MAX_CHARS,
    INDEX_MAX_LINES,
    Skipped,
    TopicDoc,
    list_topics,
    read_topic,
)

HEADER = "# Memory index"


@dataclass(frozen=True)
class Entry:
    file: str
    name: str
    description: str
    type: str
    mtime: float


def scan(directory: Path, exclude: frozenset[str] = frozenset()) -> list[Entry]:
    """Headers of the topic files directly in `directory` (symlinks out are skipped)."""
    real = Path(os.path.realpath(directory))
    out: list[Entry] = []
    for path in list_topics(directory).paths:
        if path.name in exclude:
            continue
        doc = read_topic(path, real, team=False)
        if doc is None or isinstance(doc, Skipped) or not isinstance(doc, TopicDoc):
            continue
        i = doc.info
        out.append(Entry(path.name, i.name, i.description, i.type, i.mtime))
    return out


def _line(e: Entry) -> str:
    # Link text and description are one line each (store.py already flattened them).
    name = e.name.replace("[", "(").replace("]", ")") or e.file
    desc = f" — {e.description}" if e.description else ""
    kind = f" ({e.type})" if e.type else ""
    return f"- [{name}]({e.file}){kind}{desc}"


def render(entries: list[Entry]) -> str:
    ordered = sorted(entries, key=lambda e: (-e.mtime, e.file))
    lines = [_line(e)[:1000] for e in ordered]
    head = [HEADER, ""]
    # Room for the header and for the "left out" line, should one be needed.
    max_lines = INDEX_MAX_LINES - len(head) - 1
    max_chars = INDEX_MAX_CHARS - sum(len(h) + 1 for h in head) - 80
    kept: list[str] = []
    used = 0
    for line in lines:
        if len(kept) >= max_lines or used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    left_out = len(lines) - len(kept)
    if left_out:
        kept.append(f"- ({left_out} older memories not listed here; see the folder)")
    return "\n".join(head + kept) + "\n"
