"""An inverted index over topic docs, ranked with BM25F.

Fields are weighted (name > description > body). Each posting stores the
doc's saturated, length-normalised term weight, computed once when the doc
is added, so a query costs one multiply-add per posting. Length
normalisation uses the average field lengths of the last full build (or
defaults for an empty folder); single-doc updates keep those averages rather
than reweighing every doc, which is what keeps an edit O(doc size).

Word terms (scripts with spaces) are kept in a sorted vocabulary as well, for
prefix matching: "deploy" finds "deployment" and the reverse, at half weight.

Ranking says which docs match best; `evidence` says whether a doc is about the
query at all. It measures both in units of one informative term (a term found
in a single doc weighs 1, a term in more docs its idf relative to that): the
query's mass is the weight of its distinct terms, known to the index or not,
and a doc's evidence is the weight of the query terms it holds, full when the
term is in its name or description (what the note is about), half when only
in its body. The recall tier compares the two (`agentd/memory/recall.py`).
Only the event loop mutates an index; a full build happens on a fresh object
(possibly in a worker thread) that is then swapped in.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from agentd.memory.store import HEAD_CHARS, DocInfo, TopicDoc
from agentd.memory.tokenize import is_weak, is_word_term, terms

FIELD_WEIGHTS = (3.0, 2.0, 1.0)  # name, description, body
DEFAULT_AVG_LENGTHS = (3.0, 6.0, 40.0)
K1 = 1.2
B = 0.6
PREFIX_FACTOR = 0.5
PREFIX_MIN_CHARS = 4
# A prefix must cover at least half of the longer word ("owner" ~ "ownership").
PREFIX_MIN_RATIO = 0.5
MAX_PREFIX_EXPANSIONS = 16
# A term found in more than this share of docs is not evidence by itself
# (only in folders of 20 docs or more: in a small folder, a word shared by 3 of
# 5 docs can still be exactly what the user asks about).
GENERIC_DF_RATIO = 0.5
GENERIC_MIN_DOCS = 20
# A long pasted prompt keeps this many of its rarest terms.
MAX_QUERY_TERMS = 32
# Evidence of a query term found only in a doc's body, relative to one found in
# its name or description: a body mentions many things a note is not about.
BODY_EVIDENCE = 0.5
# Query terms whose plan is kept between queries (`InvertedIndex._term_plans`);
# past this many the cache starts over, so a long session's words stay bounded.
MAX_KEPT_TERM_PLANS = 4096


def _prefixable(term: str) -> bool:
    # Prefixes are for inflected words; "body19" is not a form of "body191",
    # and CJK terms are bigrams already.
    if term.isascii():
        # ASCII letters are a word's (no regex match, on a prompt's path).
        return term.isalpha()
    return term.isalpha() and is_word_term(term)


Fields = tuple[list[str], list[str], list[str]]  # name, description, body terms


@dataclass(slots=True)
class IndexedDoc:
    id: int
    info: DocInfo
    head: str
    content_hash: str
    lengths: tuple[int, int, int]
    # Distinct terms, those of the name and description first (`_weights` adds
    # fields in order), so that `terms[:about_count]` is what the note says it
    # is about, at no extra memory per doc. A tuple, or for an index taken
    # from a saved one a sequence made into a tuple at its first use
    # (`index_snapshot.SavedTerms`).
    terms: Sequence[str]
    about_count: int = 0


@dataclass(frozen=True)
class Hit:
    doc: IndexedDoc
    score: float


_Scaled = tuple[dict[int, float], float]  # postings, idf x variant factor


@dataclass(slots=True)
class _TermPlan:
    """One query term: its matching index terms and the most it can add to a score."""

    bound: float
    strong: list[_Scaled]  # may create candidates (evidence)
    other: list[_Scaled]  # weak or generic: only add to candidates


_Evidence = tuple[str, dict[int, float], float]  # index term, postings, weight in units


@dataclass(frozen=True, slots=True)
class _TermInfo:
    """What one distinct query term brings to a query: how to score it (None:
    no doc holds it), the evidence it gives, and its share of the query's mass."""

    plan: _TermPlan | None
    gives: tuple[_Evidence, ...]
    mass: float


@dataclass(frozen=True, slots=True)
class QueryEvidence:
    """A query's informative mass, and for each of its terms the variants that
    give evidence, to weigh what a doc holds of the query against the mass."""

    mass: float
    variants: tuple[tuple[_Evidence, ...], ...]

    def of(self, doc: IndexedDoc) -> float:
        """The weight of the query terms ``doc`` holds (its best variant each):
        in full in its name or description, `BODY_EVIDENCE` in its body only."""
        about = doc.terms[: doc.about_count]
        total = 0.0
        for variants in self.variants:
            best = 0.0
            for term, postings, weight in variants:
                if doc.id in postings:
                    best = max(best, weight if term in about else weight * BODY_EVIDENCE)
            total += best
        return total


def field_terms(doc: TopicDoc) -> Fields:
    info = doc.info
    return terms(info.name), terms(info.description), terms(doc.body)


class InvertedIndex:
    def __init__(self, avg_lengths: Sequence[float] = DEFAULT_AVG_LENGTHS) -> None:
        self._avg = tuple(max(1.0, a) for a in avg_lengths)
        self._postings: dict[str, dict[int, float]] = {}
        self._docs: dict[int, IndexedDoc] = {}
        self._by_path: dict[str, IndexedDoc] = {}
        self._vocab: list[str] = []  # sorted prefixable terms
        self._next_id = 0
        # Built whole (`from_tokenised`, `assemble`) and not changed since: its
        # ids are 0..n-1 and every weight uses its own docs' average lengths,
        # as a fresh build of the same docs gives (`agentd.memory.index_snapshot`
        # saves such an index as is). Cleared before a change starts, so a
        # reader in another thread that finds it still set after reading saw
        # no change under way.
        self.whole = False
        # Query term -> its `_TermInfo` for the index as it is now: a term's
        # variants (a walk of the vocabulary and of its own prefixes) and
        # their idfs change only when a doc is added or removed, which
        # empties this. A prompt's local recall runs before its model
        # request; words seen before (the model tier's candidates for the
        # same prompt, a project's recurring words) are planned from here.
        self._term_plans: dict[str, _TermInfo] = {}

    # -- building ---------------------------------------------------------------

    @classmethod
    def build(
        cls,
        docs: Sequence[TopicDoc],
        progress: Callable[[int, int], None] | None = None,
    ) -> InvertedIndex:
        """Index ``docs``, reporting ``progress(done, total)`` while tokenising."""
        total = len(docs)
        step = max(1, total // 100)
        tokenised: list[tuple[TopicDoc, Fields]] = []
        for n, doc in enumerate(docs, 1):
            tokenised.append((doc, field_terms(doc)))
            if progress is not None and (n % step == 0 or n == total):
                progress(n, total)
        return cls.from_tokenised(tokenised)

    @classmethod
    def from_tokenised(cls, tokenised: Sequence[tuple[TopicDoc, Fields]]) -> InvertedIndex:
        """Index already-tokenised docs, with length averages taken from them."""
        if tokenised:
            n = len(tokenised)
            index = cls(tuple(sum(len(f[i]) for _, f in tokenised) / n for i in range(3)))
        else:
            index = cls()
        for doc, fields in tokenised:
            index._add(doc, fields, keep_vocab_sorted=False)
        index._rebuild_vocab()
        index.whole = True
        return index

    @classmethod
    def assemble(
        cls, docs: Sequence[IndexedDoc], postings: dict[str, dict[int, float]]
    ) -> InvertedIndex:
        """The index `from_tokenised` builds, from its parts as saved from one
        (`agentd.memory.index_snapshot`): ``docs`` with ids 0..n-1 in order,
        and the postings of their terms."""
        n = len(docs)
        # The averages as `from_tokenised` takes them (int sums, one division).
        avg = tuple(sum(d.lengths[i] for d in docs) / n for i in range(3)) if n else None
        index = cls(avg) if avg is not None else cls()
        index._postings = postings
        index._docs = {d.id: d for d in docs}
        index._by_path = {str(d.info.path): d for d in docs}
        index._next_id = n
        index._rebuild_vocab()
        index.whole = True
        return index

    def _weights(self, fields: Fields) -> tuple[dict[str, float], int]:
        """Each term's saturated weight in the doc, the terms of the name and
        description first; and how many those are (the doc's ``about_count``)."""
        name, description, body = fields
        avg = self._avg
        tf: dict[str, float] = {}
        for i, field in ((0, name), (1, description)):
            if field:
                norm = FIELD_WEIGHTS[i] / (1.0 - B + B * len(field) / avg[i])
                # A few words: counted here, cheaper than a Counter's set-up.
                counts = dict.fromkeys(field, 0)
                for term in field:
                    counts[term] += 1
                for term, count in counts.items():
                    tf[term] = tf.get(term, 0.0) + count * norm
        about = len(tf)
        if not body:
            return {term: t / (K1 + t) for term, t in tf.items()}, about
        # The body holds most of a doc's terms. Those it alone holds have a
        # weight that depends on their count only, and most counts are 1 or 2:
        # each count's weight is computed once (the same float a term-by-term
        # loop computes) and the terms take theirs through C-level `map`/`zip`.
        norm = FIELD_WEIGHTS[2] / (1.0 - B + B * len(body) / avg[2])
        counts = Counter(body)
        weights: dict[str, float] = {}
        for term, value in tf.items():
            count = counts.pop(term, 0)
            t = value + count * norm if count else value
            weights[term] = t / (K1 + t)
        of_count = {c: (x := c * norm) / (K1 + x) for c in set(counts.values())}
        weights.update(zip(counts.keys(), map(of_count.__getitem__, counts.values()), strict=True))
        return weights, about

    def _add(
        self,
        doc: TopicDoc,
        fields: Fields,
        *,
        keep_vocab_sorted: bool,
    ) -> IndexedDoc:
        """Index ``doc``. Without ``keep_vocab_sorted`` (a full build) the
        vocabulary is left for the caller to rebuild (`_rebuild_vocab`)."""
        weights, about = self._weights(fields)
        self._term_plans.clear()
        doc_id = self._next_id
        self._next_id += 1
        indexed = IndexedDoc(
            id=doc_id,
            info=doc.info,
            head=doc.body[:HEAD_CHARS],
            content_hash=doc.content_hash,
            lengths=(len(fields[0]), len(fields[1]), len(fields[2])),
            terms=tuple(weights),
            about_count=about,
        )
        postings_of = self._postings
        if keep_vocab_sorted:
            for term, weight in weights.items():
                postings = postings_of.get(term)
                if postings is None:
                    postings_of[term] = {doc_id: weight}
                    if _prefixable(term):
                        bisect.insort(self._vocab, term)
                else:
                    postings[doc_id] = weight
        else:
            for term, weight in weights.items():
                try:
                    postings_of[term][doc_id] = weight
                except KeyError:
                    postings_of[term] = {doc_id: weight}
        self._docs[doc_id] = indexed
        self._by_path[str(doc.info.path)] = indexed
        return indexed

    def _rebuild_vocab(self) -> None:
        self._vocab = sorted(term for term in self._postings if _prefixable(term))

    def upsert(self, doc: TopicDoc, fields: Fields | None = None) -> None:
        """Add or replace ``doc`` (``fields``: its terms, if already tokenised)."""
        self.whole = False
        self.remove(str(doc.info.path))
        self._add(doc, fields if fields is not None else field_terms(doc), keep_vocab_sorted=True)

    def remove(self, path: str) -> bool:
        indexed = self._by_path.pop(path, None)
        if indexed is None:
            return False
        self.whole = False
        del self._docs[indexed.id]
        self._term_plans.clear()
        for term in indexed.terms:
            # Tolerant: an index assembled from a saved snapshot holds what
            # that file said (checked, but a doc's terms are not matched
            # against every posting at load).
            postings = self._postings.get(term)
            if postings is None or postings.pop(indexed.id, None) is None:
                continue
            if not postings:
                del self._postings[term]
                if _prefixable(term):
                    i = bisect.bisect_left(self._vocab, term)
                    if i < len(self._vocab) and self._vocab[i] == term:
                        del self._vocab[i]
        return True

    def set_mtime(self, path: str, mtime: float) -> None:
        indexed = self._by_path.get(path)
        if indexed is not None:
            info = indexed.info
            indexed.info = DocInfo(
                info.path, info.name, info.description, info.type, mtime, info.team, info.problems
            )

    # -- reading ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._docs)

    def get(self, path: str) -> IndexedDoc | None:
        return self._by_path.get(path)

    def docs(self) -> Iterable[IndexedDoc]:
        return self._docs.values()

    def postings(self) -> Mapping[str, dict[int, float]]:
        """Term -> {doc id: weight}, in the order terms were first indexed (read only)."""
        return self._postings

    def _idf(self, df: int) -> float:
        n = len(self._docs)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _variants(self, term: str) -> list[tuple[str, float]]:
        """The index terms a query term matches, with their weight factor."""
        out: list[tuple[str, float]] = []
        if term in self._postings:
            out.append((term, 1.0))
        if len(term) < PREFIX_MIN_CHARS or not _prefixable(term):
            return out
        # Longer index terms that start with the query term.
        i = bisect.bisect_right(self._vocab, term)
        expansions = 0
        while i < len(self._vocab) and expansions < MAX_PREFIX_EXPANSIONS:
            other = self._vocab[i]
            if not other.startswith(term):
                break
            if len(term) / len(other) >= PREFIX_MIN_RATIO:
                out.append((other, PREFIX_FACTOR))
                expansions += 1
            i += 1
        # Shorter index terms that the query term starts with.
        for cut in range(len(term) - 1, PREFIX_MIN_CHARS - 1, -1):
            if cut / len(term) < PREFIX_MIN_RATIO:
                break
            prefix = term[:cut]
            if prefix in self._postings:
                out.append((prefix, PREFIX_FACTOR))
        return out

    def _plan(self, query_terms: Iterable[str]) -> tuple[list[_TermPlan], QueryEvidence]:
        """One pass over the query's distinct terms: how to score them (rarest
        first, a very long query keeping its most telling terms) and the
        evidence they can give, in units of one term found in a single doc.

        A term no doc holds weighs a full unit of the query's mass: it is part of
        what the user asks about that no note covers. Weak terms (a lone CJK
        character) weigh nothing; generic ones (in more than half of a large
        folder's docs) add their low idf to the mass but give no evidence."""
        kept = self._term_plans
        mass = 0.0
        plans: list[_TermPlan] = []
        evidence: list[tuple[_Evidence, ...]] = []
        for qterm in dict.fromkeys(query_terms):
            info = kept.get(qterm)
            if info is None:
                info = self._term_info(qterm)
                if len(kept) >= MAX_KEPT_TERM_PLANS:
                    kept.clear()
                kept[qterm] = info
            if info.plan is not None:
                plans.append(info.plan)
            if info.gives:
                evidence.append(info.gives)
            mass += info.mass
        plans.sort(key=lambda p: (not p.strong, -p.bound))
        return plans[:MAX_QUERY_TERMS], QueryEvidence(mass, tuple(evidence))

    def _term_info(self, qterm: str) -> _TermInfo:
        """`_plan`'s work for one distinct query term (kept in `_term_plans`)."""
        n_docs = len(self._docs)
        generic_df = n_docs * GENERIC_DF_RATIO if n_docs >= GENERIC_MIN_DOCS else math.inf
        unit = self._idf(1) or 1.0
        weak_term = is_weak(qterm)
        strong: list[_Scaled] = []
        other: list[_Scaled] = []
        gives: list[_Evidence] = []
        most_df = 0
        for term, factor in self._variants(qterm):
            postings = self._postings[term]
            most_df = max(most_df, len(postings))
            idf = self._idf(len(postings))
            scaled = (postings, idf * factor)
            if weak_term or len(postings) > generic_df:
                other.append(scaled)
            else:
                strong.append(scaled)
                gives.append((term, postings, idf / unit * factor))
        plan = None
        if strong or other:
            bound = max(scale for _, scale in (*strong, *other))
            plan = _TermPlan(bound, strong, other)
        mass = 0.0
        if not weak_term:
            # A word's family (its prefix variants) is about as common as its
            # most common member.
            mass = self._idf(most_df) / unit if most_df else 1.0
        return _TermInfo(plan, tuple(gives), mass)

    def evidence(self, query_terms: Iterable[str]) -> QueryEvidence:
        """The query's mass and what each doc holds of it (see `QueryEvidence`)."""
        return self._plan(query_terms)[1]

    def search(
        self, query_terms: Iterable[str], *, exclude: Iterable[str] = (), limit: int = 5
    ) -> list[Hit]:
        """The ``limit`` best docs with evidence, best first (same answer as
        ``search_exhaustive``, found with less work).

        Evidence: a matched query term that is not weak (a lone CJK character)
        and not generic (in more than half of a large folder's docs). Only
        such terms create candidates; the others add to existing ones.

        MaxScore pruning: every posting weight is below 1, so a term adds at
        most its scaled idf (``bound``) to a doc. Once the best ``limit``
        scores so far beat what a new doc could still collect from the terms
        left, those terms only update known candidates, and candidates that
        can no longer reach the top are dropped.
        """
        return self.search_with_evidence(query_terms, exclude=exclude, limit=limit)[0]

    def search_with_evidence(
        self, query_terms: Iterable[str], *, exclude: Iterable[str] = (), limit: int = 5
    ) -> tuple[list[Hit], QueryEvidence]:
        """`search`, and the query's `QueryEvidence` from the same planning pass."""
        if not self._docs or limit <= 0:
            return [], QueryEvidence(0.0, ())
        plans, evidence = self._plan(query_terms)
        excluded = {d.id for p in exclude if (d := self._by_path.get(p)) is not None}
        scores: dict[int, float] = {}
        rest = sum(p.bound for p in plans)
        threshold = 0.0  # the limit-th best score so far; final scores only grow
        for plan in plans:
            rest -= plan.bound
            reachable = plan.bound + rest  # the most a doc can still gain
            if plan.strong and (len(scores) < limit or reachable > threshold):
                _add_term(plan, scores, create=True)
                for doc_id in excluded:
                    scores.pop(doc_id, None)
            else:
                if threshold > 0.0 and len(scores) > 4 * limit:
                    scores = {d: v for d, v in scores.items() if v + reachable >= threshold}
                _add_term(plan, scores, create=False)
            if len(scores) >= limit:
                threshold = heapq.nlargest(limit, scores.values())[-1]
        return self._top(scores, limit), evidence

    def search_exhaustive(
        self, query_terms: Iterable[str], *, exclude: Iterable[str] = (), limit: int = 5
    ) -> list[Hit]:
        """The same ranking without pruning: the reference ``search`` is tested against."""
        if not self._docs or limit <= 0:
            return []
        excluded = {d.id for p in exclude if (d := self._by_path.get(p)) is not None}
        scores: dict[int, float] = {}
        evidence: set[int] = set()
        for plan in self._plan(query_terms)[0]:
            best: dict[int, float] = {}
            for postings, scale in (*plan.strong, *plan.other):
                for doc_id, weight in postings.items():
                    best[doc_id] = max(best.get(doc_id, 0.0), weight * scale)
            for postings, _ in plan.strong:
                evidence.update(postings)
            for doc_id, value in best.items():
                scores[doc_id] = scores.get(doc_id, 0.0) + value
        kept = {d: v for d, v in scores.items() if d in evidence and d not in excluded}
        return self._top(kept, limit)

    def _top(self, scores: dict[int, float], limit: int) -> list[Hit]:
        # A few extra so that ties at the edge are broken by recency, not by chance.
        top = heapq.nlargest(limit + 8, scores.items(), key=itemgetter(1))
        docs = self._docs
        top.sort(key=lambda kv: (-kv[1], -docs[kv[0]].info.mtime, str(docs[kv[0]].info.path)))
        return [Hit(docs[doc_id], score) for doc_id, score in top[:limit]]


def _max_into(
    best: dict[int, float], postings: dict[int, float], scale: float, members: Collection[int]
) -> None:
    """best[d] = max(best[d], weight * scale) for the docs in ``members`` only."""
    if len(postings) <= len(members):
        for doc_id, weight in postings.items():
            if doc_id in members:
                value = weight * scale
                if value > best.get(doc_id, 0.0):
                    best[doc_id] = value
    else:
        get = postings.get
        for doc_id in members:
            found = get(doc_id)
            if found is not None:
                value = found * scale
                if value > best.get(doc_id, 0.0):
                    best[doc_id] = value


def _add_term(plan: _TermPlan, scores: dict[int, float], *, create: bool) -> None:
    """Add one query term's contribution (its best variant per doc) to ``scores``."""
    if create and len(plan.strong) == 1 and not plan.other:
        # The common case, kept tight: one index term, straight into the scores.
        postings, scale = plan.strong[0]
        get = scores.get
        for doc_id, weight in postings.items():
            scores[doc_id] = get(doc_id, 0.0) + weight * scale
        return
    best: dict[int, float] = {}
    if create:
        for postings, scale in plan.strong:
            for doc_id, weight in postings.items():
                value = weight * scale
                if value > best.get(doc_id, 0.0):
                    best[doc_id] = value
        members: Collection[int] = scores.keys() | best.keys()
        updates = plan.other
    else:
        members = scores.keys()
        updates = [*plan.strong, *plan.other]
    for postings, scale in updates:
        _max_into(best, postings, scale, members)
    for doc_id, value in best.items():
        scores[doc_id] = scores.get(doc_id, 0.0) + value
