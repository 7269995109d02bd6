"""The fast paths of a full index build give exactly what the plain algorithm
gives: the same terms, the same posting weights (to the bit), the same
vocabulary, hence the same recall.

The references here are the straightforward versions the fast code replaced:
`_general_terms` (one token at a time, every script) for the tokenizer, and a
term-by-term BM25F weighting for the index.
"""

from __future__ import annotations

import codecs
import json
import random
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.memory.index import FIELD_WEIGHTS, K1, B, InvertedIndex, _prefixable, field_terms
from agentd.memory.project import ProjectMemory
from agentd.memory.store import (
    _CONTROL,
    _WHITESPACE,
    DocInfo,
    TopicDoc,
    _one_line,
    decode,
    list_topics,
    read_topic,
)
from agentd.memory.tokenize import _general_terms, normalize, terms

EVAL = Path(__file__).resolve().parents[1] / "data" / "qwen-code-recall-eval.json"
NO_RESULT = Path(__file__).resolve().parents[1] / "data" / "recall-no-result-eval.json"

# Pieces that exercise every branch: camelCase and acronyms, digits, stopwords,
# suffixes the stemmer strips, separators of other scripts (dashes, arrows,
# curly quotes, the katakana middle dot, a combining mark), letters of other
# scripts (accents, Greek, the Kelvin sign and a dotted capital I that NFKC and
# casefold change), full-width Latin, CJK, kana and Hangul.
PIECES = [
    *("deploy", "Deploy", "DEPLOY", "getUserName", "HTTPServer", "parseJSONBody", "x", "a"),
    *("the", "running", "policies", "shipped", "classes", "svc42", "3ms", "v2", "A1b2"),
    *("test_memory_recall", "--", "\u2014", "\u2192", "\u201cquoted\u201d", "\u2019", "\u2026"),
    *(" ", "  ", "\n", "\t", ".", ",", "`code()`", "#", "\u00e9", "caf\u00e9", "Stra\u00dfe"),
    *("\u03a9mega", "\u212a", "\u0130stanbul", "x\u0301", "\uff21\uff30\uff29", "\uff76\uff80"),
    *("\u30fb", "\u30fc", "部署", "部署怎么做", "コードレビューの基準", "배포 절차", "これは"),
    *("_", "__init__", "e\u0308", "\u00a0", "\u2028", "\u00bd", "\u00b2"),
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30))
def test_terms_equal_the_general_path(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert terms(text) == _general_terms(normalize(text))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_terms_equal_the_general_path_on_any_text(text: str) -> None:
    assert terms(text) == _general_terms(normalize(text))


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40) | st.lists(st.sampled_from([*PIECES, "\x00", "\x7f", "\r\n"])).map("".join)
)
def test_one_line_fields_equal_the_substitutions(value: str) -> None:
    slow = _WHITESPACE.sub(" ", _CONTROL.sub("", value)).strip()[:10]
    assert _one_line(value, 10) == slow


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=40) | st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass"))
)
def test_decoding_equals_the_replacing_decoder(data: bytes) -> None:
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data, final=True)
    invalid = text.count("\ufffd") > data.count("\ufffd".encode())
    assert decode(data, truncated=False) == (text, invalid)


def _reference(
    tokenised: list[tuple[TopicDoc, tuple[list[str], list[str], list[str]]]],
) -> tuple[dict[str, dict[int, float]], list[tuple[tuple[str, ...], int]], list[str]]:
    """Postings, each doc's (terms, about_count) and the vocabulary, computed
    term by term as the index did before its build was made fast."""
    n = len(tokenised)
    avg = tuple(max(1.0, sum(len(f[i]) for _, f in tokenised) / n) for i in range(3))
    postings: dict[str, dict[int, float]] = {}
    per_doc: list[tuple[tuple[str, ...], int]] = []
    for doc_id, (_, fields) in enumerate(tokenised):
        tf: dict[str, float] = {}
        for i, field in enumerate(fields):
            if not field:
                continue
            norm = FIELD_WEIGHTS[i] / (1.0 - B + B * len(field) / avg[i])
            for term, count in Counter(field).items():
                tf[term] = tf.get(term, 0.0) + count * norm
        weights = {term: t / (K1 + t) for term, t in tf.items()}
        per_doc.append((tuple(weights), len(set(fields[0]) | set(fields[1]))))
        for term, weight in weights.items():
            postings.setdefault(term, {})[doc_id] = weight
    vocab = sorted(t for t in postings if _prefixable(t))
    return postings, per_doc, vocab


def _doc(i: int, name: str, description: str, body: str) -> TopicDoc:
    info = DocInfo(Path(f"/m/d{i}.md"), name, description, "project", float(i), False, ())
    return TopicDoc(info, body, f"h{i}")


def _corpus() -> list[TopicDoc]:
    docs = [
        _doc(i, d["title"], d["description"], d["body"])
        for i, d in enumerate(json.loads(EVAL.read_text(encoding="utf-8"))["docs"])
    ]
    rng = random.Random(12)
    for i in range(len(docs), len(docs) + 300):
        fields = [" ".join(rng.choices(PIECES, k=rng.randint(0, n))) for n in (4, 8, 120)]
        docs.append(_doc(i, *fields))
    return docs


def test_a_full_build_equals_the_term_by_term_index() -> None:
    docs = _corpus()
    tokenised = [(d, field_terms(d)) for d in docs]
    # The fields themselves are the general tokenizer's.
    for doc, fields in tokenised:
        general = tuple(
            _general_terms(normalize(t)) for t in (doc.info.name, doc.info.description, doc.body)
        )
        assert fields == general
    index = InvertedIndex.from_tokenised(tokenised)
    postings, per_doc, vocab = _reference(tokenised)
    assert index._postings == postings  # exact floats
    assert [(d.terms, d.about_count) for d in index.docs()] == per_doc
    assert index._vocab == vocab
    # An edit (one doc upserted) keeps the vocabulary sorted and complete.
    index.upsert(_doc(0, "zebraCrossing notes", "brand new words", "quokka wombat"))
    assert index._vocab == sorted(t for t in index._postings if _prefixable(t))


async def test_recall_after_a_build_equals_the_reference_ranking(tmp_path: Path) -> None:
    """The index a project builds from its folder holds the reference postings,
    and every eval query recalls the same docs, in the same order, with the
    same scores, as an exhaustive search over those postings."""
    data = json.loads(EVAL.read_text(encoding="utf-8"))
    folder = tmp_path / "memory"
    folder.mkdir()
    for doc in data["docs"]:
        text = (
            f"---\nname: {json.dumps(doc['title'], ensure_ascii=False)}\n"
            f"description: {json.dumps(doc['description'], ensure_ascii=False)}\n"
            f"type: {doc['type']}\n---\n{doc['body']}\n"
        )
        (folder / f"{doc['id']}.md").write_text(text, encoding="utf-8")
    memory = ProjectMemory(tmp_path / "ws", directory=folder, watch=False)
    await memory.start()
    index = memory._index
    # The same files, read again and tokenised one token at a time (ids follow
    # the sorted listing, as the scan's do).
    read = [read_topic(p, folder, team=False) for p in list_topics(folder).paths]
    tokenised = [
        (d, tuple(_general_terms(normalize(t)) for t in (d.info.name, d.info.description, d.body)))
        for d in read
        if isinstance(d, TopicDoc)
    ]
    postings, per_doc, vocab = _reference(tokenised)  # type: ignore[arg-type]
    assert index._postings == postings
    assert [(d.terms, d.about_count) for d in index.docs()] == per_doc
    reference = InvertedIndex(index._avg)
    reference._docs = dict(index._docs)
    reference._by_path = dict(index._by_path)
    reference._postings = postings
    reference._vocab = vocab
    cases = data["cases"] + json.loads(NO_RESULT.read_text(encoding="utf-8"))["cases"]
    for case in cases:
        query = terms(case["query"])
        got = [(h.doc.info.path, h.score) for h in index.search(query, limit=5)]
        want = [(h.doc.info.path, h.score) for h in reference.search_exhaustive(query, limit=5)]
        assert got == want, case["query"]
        recalled = [d.path for d in memory.recall(case["query"]).docs]
        assert recalled == [p for p, _ in got][: len(recalled)]
