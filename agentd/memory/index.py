"""An inverted index over topic docs, ranked with BM25F.

Fields are weighted (name > description > body). Each posting stores the
doc's saturated, length-normalised term weight, computed once when the doc
is added, so a query costs one multiply-add per posting. Length
normalisation uses the average field lengths of the last full build (or
defaults for an empty folder); single-doc updates keep those averages rather
than reweighing every doc, which is what keeps an edit O(doc size).

Word terms (scripts with spaces) are kept in a sorted vocabulary as well, for
prefix matching: "deploy" finds "deployment" and the reverse, at half weight.
Only the event loop mutates an index; a full build happens on a fresh object
(possibly in a worker thread) that is then swapped in.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

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


def _prefixable(term: str) -> bool:
    # Prefixes are for inflected words; "body19" is not a form of "body191",
    # and CJK terms are bigrams already.
    return term.isalpha() and is_word_term(term)


Fields = tuple[list[str], list[str], list[str]]  # name, description, body terms


@dataclass(slots=True)
class IndexedDoc:
    id: int
    info: DocInfo
    head: str
    content_hash: str
    lengths: tuple[int, int, int]
    terms: tuple[str, ...]


@dataclass(frozen=True)
class Hit:
    doc: IndexedDoc
    score: float
    evidence: int


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
        index._vocab.sort()
        return index

    def _weights(self, fields: Fields) -> dict[str, float]:
        tf: dict[str, float] = {}
        for i, field in enumerate(fields):
            if not field:
                continue
            norm = FIELD_WEIGHTS[i] / (1.0 - B + B * len(field) / self._avg[i])
            for term, count in Counter(field).items():
                tf[term] = tf.get(term, 0.0) + count * norm
        return {term: t / (K1 + t) for term, t in tf.items()}

    def _add(
        self,
        doc: TopicDoc,
        fields: Fields,
        *,
        keep_vocab_sorted: bool,
    ) -> IndexedDoc:
        weights = self._weights(fields)
        doc_id = self._next_id
        self._next_id += 1
        indexed = IndexedDoc(
            id=doc_id,
            info=doc.info,
            head=doc.body[:HEAD_CHARS],
            content_hash=doc.content_hash,
            lengths=(len(fields[0]), len(fields[1]), len(fields[2])),
            terms=tuple(weights),
        )
        for term, weight in weights.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = {}
                if _prefixable(term):
                    if keep_vocab_sorted:
                        bisect.insort(self._vocab, term)
                    else:
                        self._vocab.append(term)
            postings[doc_id] = weight
        self._docs[doc_id] = indexed
        self._by_path[str(doc.info.path)] = indexed
        return indexed

    def upsert(self, doc: TopicDoc) -> None:
        self.remove(str(doc.info.path))
        self._add(doc, field_terms(doc), keep_vocab_sorted=True)

    def remove(self, path: str) -> bool:
        indexed = self._by_path.pop(path, None)
        if indexed is None:
            return False
        del self._docs[indexed.id]
        for term in indexed.terms:
            postings = self._postings[term]
            del postings[indexed.id]
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

    def search(
        self, query_terms: Iterable[str], *, exclude: Iterable[str] = (), limit: int = 5
    ) -> list[Hit]:
        """The ``limit`` best docs matching at least one evidence term, best first.

        Evidence: a matched query term that is not weak (a lone CJK character)
        and not generic (in more than half of a folder's docs).
        """
        n_docs = len(self._docs)
        if n_docs == 0:
            return []
        scores: dict[int, float] = {}
        evidence: dict[int, int] = {}
        generic_df = n_docs * GENERIC_DF_RATIO if n_docs >= GENERIC_MIN_DOCS else math.inf
        for qterm in dict.fromkeys(query_terms):
            weak = is_weak(qterm)
            best: dict[int, float] = {}
            strong_docs: set[int] = set()
            for term, factor in self._variants(qterm):
                postings = self._postings[term]
                scale = self._idf(len(postings)) * factor
                for doc_id, weight in postings.items():
                    value = scale * weight
                    if value > best.get(doc_id, 0.0):
                        best[doc_id] = value
                if not weak and len(postings) <= generic_df:
                    strong_docs.update(postings)
            # One query term counts once per doc, whichever variant matched best.
            for doc_id, value in best.items():
                scores[doc_id] = scores.get(doc_id, 0.0) + value
            for doc_id in strong_docs:
                evidence[doc_id] = evidence.get(doc_id, 0) + 1
        excluded = set(exclude)
        docs = self._docs
        candidates = [
            (score, docs[doc_id].info.mtime, doc_id)
            for doc_id, score in scores.items()
            if doc_id in evidence and (not excluded or str(docs[doc_id].info.path) not in excluded)
        ]
        # Highest score first; among equals, the most recently saved.
        top = heapq.nlargest(limit, candidates)
        return [Hit(docs[doc_id], score, evidence[doc_id]) for score, _, doc_id in top]
