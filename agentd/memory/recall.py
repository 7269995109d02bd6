"""The local recall tier: a query in, at most five budgeted docs out.

Plain synchronous code over a prebuilt index (it runs on the event loop at
the user-query point, so it must never await and must stay around a
millisecond). Recall keeps unrelated prompts empty rather than padding the
answer with notes that share a word with them ("write a haiku about the
release of spring" is not about the release checklist). A doc is recalled
only with enough evidence that it is about the query:

- evidence comes from the query's distinct informative terms (not stopwords,
  not a lone CJK character, not generic across a large folder), each weighed
  by its idf relative to a term found in a single doc, in full when the doc's
  name or description holds it and half when only its body does
  (`InvertedIndex.evidence`);
- it must reach `EVIDENCE_SHARE` of the query's own mass (the weight of all
  its informative terms, including those no note holds), capped at
  `EVIDENCE_CAP`: a short query must be mostly explained by the doc, a long
  prompt by more than any single term can give (two terms of its name or
  description, one and a body term, or three of its body);
- and its score at least `RELATIVE_SCORE_FLOOR` of the best such doc's.

The model tier's candidates (`rank`) skip these rules: the model judges them.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from agentd.memory.index import Hit, IndexedDoc, InvertedIndex
from agentd.memory.tokenize import terms

TIER_LOCAL = "local"
MAX_DOCS = 5
DOC_CHARS = 1_200
DELIVERY_CHARS = 6_000
# A doc scoring under this share of the best doc is filler, not a match.
RELATIVE_SCORE_FLOOR = 0.25
# A doc's evidence must reach this share of the query's informative mass...
EVIDENCE_SHARE = 0.4
# ... or, for a long prompt, this many terms' worth: more than one term can give.
EVIDENCE_CAP = 1.5
# Below this many characters left in the delivery budget, stop adding docs.
MIN_USEFUL_CHARS = 200
TRUNCATION_MARK = "\n[... truncated]"
# A pasted log can be huge; its start and its end (where the question usually
# is) are what recall looks at.
MAX_QUERY_CHARS = 8_000


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


def budgeted(
    scored: Iterable[tuple[IndexedDoc, float]], *, tier: str, now: float | None = None
) -> RecallResult:
    """At most MAX_DOCS docs, each excerpt within DOC_CHARS, all within DELIVERY_CHARS."""
    now = time.time() if now is None else now
    remaining = DELIVERY_CHARS
    docs: list[RecalledDoc] = []
    for indexed, score in scored:
        if len(docs) >= MAX_DOCS or remaining < MIN_USEFUL_CHARS:
            break
        info = indexed.info
        # Name and description count against the delivery budget too.
        overhead = len(info.name) + len(info.description)
        text = excerpt(indexed.head, max(0, min(DOC_CHARS, remaining - overhead)))
        remaining -= overhead + len(text)
        docs.append(
            RecalledDoc(
                path=info.path,
                name=info.name,
                description=info.description,
                type=info.type,
                score=round(score, 4),
                age_text=age_text(info.mtime, now),
                team=info.team,
                excerpt=text,
            )
        )
    return RecallResult(docs=tuple(docs), tier=tier)


def query_terms(query: str) -> list[str]:
    """The terms recall looks at: a huge query's start and end only."""
    if len(query) > MAX_QUERY_CHARS:
        half = MAX_QUERY_CHARS // 2
        query = query[:half] + "\n" + query[-half:]
    return terms(query)


def rank(
    index: InvertedIndex, query: str, *, exclude: Collection[str] = (), limit: int = MAX_DOCS
) -> list[Hit]:
    """Docs sharing a telling term with ``query``, best first (no evidence rule,
    no relative floor, no budget): the candidates of the model tier."""
    if limit <= 0 or not query.strip():
        return []
    return index.search(query_terms(query), exclude=exclude, limit=limit)


def recall_index(
    index: InvertedIndex,
    query: str,
    *,
    exclude: Collection[str] = (),
    limit: int = MAX_DOCS,
    now: float | None = None,
) -> RecallResult:
    # An empty memory (a project with no notes yet) finds nothing: its query
    # is neither tokenised nor planned (0.02-0.05 ms of the prompt's path).
    if limit <= 0 or not len(index) or not query.strip():
        return EMPTY
    hits, evidence = index.search_with_evidence(
        query_terms(query), exclude=exclude, limit=min(limit, MAX_DOCS)
    )
    if not hits:
        return EMPTY
    need = min(EVIDENCE_CAP, EVIDENCE_SHARE * evidence.mass)
    # The tolerance keeps exact ties (three single-doc body terms: 1.5) on the
    # side the rule intends, whatever the float rounding of the idf units.
    about = [h for h in hits if evidence.of(h.doc) >= need - 1e-9]
    if not about:
        return EMPTY
    floor = about[0].score * RELATIVE_SCORE_FLOOR
    kept = [(h.doc, h.score) for h in about if h.score >= floor]
    return budgeted(kept, tier=TIER_LOCAL, now=now)
