"""The local recall tier: a query in, at most five budgeted docs out.

Plain synchronous code over a prebuilt index (it runs on the event loop at
the user-query point, so it must never await and must stay around a
millisecond). The minimum-evidence rule keeps unrelated queries empty rather
than padding the answer with filler: a doc needs a matched term that is not a
stopword, not a lone CJK character and not generic across the folder, and a
score of at least a fixed share of the best doc's.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from agentd.memory.index import InvertedIndex
from agentd.memory.tokenize import terms

TIER_LOCAL = "local"
MAX_DOCS = 5
DOC_CHARS = 1_200
DELIVERY_CHARS = 6_000
# A doc scoring under this share of the best doc is filler, not a match.
RELATIVE_SCORE_FLOOR = 0.25
# Below this many characters left in the delivery budget, stop adding docs.
MIN_USEFUL_CHARS = 200
TRUNCATION_MARK = "\n[... truncated]"


@dataclass(frozen=True)
class RecalledDoc:
    path: Path
    name: str
    description: str
    type: str
    score: float
    age_text: str
    team: bool
    excerpt: str


@dataclass(frozen=True)
class RecallResult:
    docs: tuple[RecalledDoc, ...]
    tier: str = TIER_LOCAL


EMPTY = RecallResult(docs=(), tier=TIER_LOCAL)


def age_text(mtime: float, now: float | None = None) -> str:
    """'saved 3 days ago' and friends, from a file's mtime."""
    seconds = max(0.0, (time.time() if now is None else now) - mtime)

    def ago(n: int, unit: str) -> str:
        return f"saved {n} {unit}{'' if n == 1 else 's'} ago"

    if seconds < 60:
        return "saved just now"
    if seconds < 3600:
        return ago(int(seconds // 60), "minute")
    if seconds < 86400:
        return ago(int(seconds // 3600), "hour")
    days = int(seconds // 86400)
    if days < 60:
        return ago(days, "day")
    if days < 730:
        return ago(days // 30, "month")
    return ago(days // 365, "year")


def excerpt(body: str, budget: int) -> str:
    """``body`` cut to ``budget`` chars, at a line or word break when one is near."""
    body = body.strip()
    if len(body) <= budget:
        return body
    room = max(0, budget - len(TRUNCATION_MARK))
    cut = body[:room]
    for sep in ("\n", " "):
        at = cut.rfind(sep)
        if at >= room * 3 // 4:
            cut = cut[:at]
            break
    return cut.rstrip() + TRUNCATION_MARK


def recall_index(
    index: InvertedIndex,
    query: str,
    *,
    exclude: Collection[str] = (),
    limit: int = MAX_DOCS,
    now: float | None = None,
) -> RecallResult:
    limit = min(limit, MAX_DOCS)
    if limit <= 0 or not query.strip():
        return EMPTY
    hits = index.search(terms(query), exclude=exclude, limit=limit)
    if not hits:
        return EMPTY
    floor = hits[0].score * RELATIVE_SCORE_FLOOR
    now = time.time() if now is None else now
    remaining = DELIVERY_CHARS
    docs: list[RecalledDoc] = []
    for hit in hits:
        if hit.score < floor or remaining < MIN_USEFUL_CHARS:
            break
        info = hit.doc.info
        # Name and description count against the delivery budget too.
        overhead = len(info.name) + len(info.description)
        text = excerpt(hit.doc.head, max(0, min(DOC_CHARS, remaining - overhead)))
        remaining -= overhead + len(text)
        docs.append(
            RecalledDoc(
                path=info.path,
                name=info.name,
                description=info.description,
                type=info.type,
                score=round(hit.score, 4),
                age_text=age_text(info.mtime, now),
                team=info.team,
                excerpt=text,
            )
        )
    return RecallResult(docs=tuple(docs), tier=TIER_LOCAL)
