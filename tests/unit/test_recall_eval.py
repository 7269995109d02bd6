"""qwen-code's public recall eval, and agentd's no-result set, scored through
ProjectMemory.recall.

The corpus becomes topic files in a temporary memory folder; every query goes
through the same code path a prompt uses, with at most 5 docs. Metrics follow
shared/evals/README.md. The `semantic-no-lexical` cases share no word with
their target doc, so a lexical tier cannot reach them: they are reported
separately and left out of the floors (and of the no-result precision, since
an empty answer for them is a miss, not a no-result case); the model tier
delivers them (tests/e2e/test_memory_prefetch.py).

`tests/data/recall-no-result-eval.json` runs against the same corpus: prompts
no note is about (greetings, thanks, general knowledge, translation, creative
writing, coding questions, long prompts; English, Chinese, Japanese, Korean,
German, French, Spanish), many sharing a generic word with a note, and
questions in context that must still find their note. Its `split` says which
cases tuned the evidence rule and which were written after it was fixed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentd.memory import ProjectMemory
from agentd.memory.index import PREFIX_MIN_CHARS, PREFIX_MIN_RATIO
from agentd.memory.tokenize import terms

_SHARED = Path(__file__).resolve().parents[2].parent / "shared/evals/qwen-code-recall-eval.json"
_VENDORED = Path(__file__).resolve().parents[1] / "data" / "qwen-code-recall-eval.json"
EVAL_PATH = _SHARED if _SHARED.is_file() else _VENDORED
NO_RESULT_PATH = Path(__file__).resolve().parents[1] / "data" / "recall-no-result-eval.json"
LEXICALLY_UNREACHABLE = "semantic-no-lexical"


def _yaml_quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid YAML scalar


def _write_corpus(folder: Path, docs: list[dict[str, str]]) -> None:
    folder.mkdir(parents=True)
    for doc in docs:
        text = (
            "---\n"
            f"name: {_yaml_quote(doc['title'])}\n"
            f"description: {_yaml_quote(doc['description'])}\n"
            f"type: {doc['type']}\n"
            "---\n"
            f"{doc['body']}\n"
        )
        (folder / f"{doc['id']}.md").write_text(text, encoding="utf-8")


def _related(a: str, b: str) -> bool:
    short, long = sorted((a, b), key=len)
    return a == b or (
        len(short) >= PREFIX_MIN_CHARS
        and long.startswith(short)
        and len(short) / len(long) >= PREFIX_MIN_RATIO
    )


def _lexically_reachable(case: dict[str, Any], docs: dict[str, dict[str, str]]) -> bool:
    """Does the query share a term (or a prefix-related word) with a relevant doc?"""
    query_terms = set(terms(case["query"]))
    for doc_id in case["relevantIds"]:
        doc = docs[doc_id]
        doc_terms = set(terms(" ".join((doc["title"], doc["description"], doc["body"]))))
        if any(_related(q, t) for q in query_terms for t in doc_terms):
            return True
    return False


def _score(cases: list[dict[str, Any]], returned: dict[str, list[str]]) -> dict[str, float]:
    with_relevant = [c for c in cases if c["relevantIds"]]
    with_top = [c for c in cases if c.get("expectedTopId")]
    no_result = [c for c in cases if not c["relevantIds"]]
    empty = [c for c in cases if not returned[c["id"]]]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    recall_at_5 = mean(
        [
            len(set(c["relevantIds"]) & set(returned[c["id"]])) / len(c["relevantIds"])
            for c in with_relevant
        ]
    )
    top1 = mean([1.0 if returned[c["id"]][:1] == [c["expectedTopId"]] else 0.0 for c in with_top])
    nr_recall = mean([1.0 if not returned[c["id"]] else 0.0 for c in no_result])
    nr_precision = mean([1.0 if not c["relevantIds"] else 0.0 for c in empty])
    return {
        "cases": len(cases),
        "recall@5": recall_at_5,
        "top1": top1,
        "no_result_recall": nr_recall,
        "no_result_precision": nr_precision,
    }


def _fmt(v: float) -> str:
    return "-" if v != v else f"{v:.3f}"  # NaN: metric not applicable


async def _recall_all(
    tmp_path: Path, docs: list[dict[str, str]], cases: list[dict[str, Any]]
) -> dict[str, list[str]]:
    """Each case's recalled doc ids, from a memory folder holding ``docs``."""
    folder = tmp_path / "memory"
    _write_corpus(folder, docs)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    memory = ProjectMemory(workspace, directory=folder, watch=False)
    await memory.start()
    try:
        assert len(memory.list_docs()) == len(docs)
        returned: dict[str, list[str]] = {}
        for case in cases:
            result = memory.recall(case["query"], limit=5)
            assert len(result.docs) <= 5 and result.tier == "local"
            returned[case["id"]] = [Path(d.path).stem for d in result.docs]
    finally:
        await memory.aclose()
    return returned


@pytest.mark.asyncio
async def test_qwen_recall_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(EVAL_PATH.read_text(encoding="utf-8"))
    returned = await _recall_all(tmp_path, data["docs"], data["cases"])

    cases = data["cases"]
    docs = {d["id"]: d for d in data["docs"]}
    # Only cases that truly share no term with their doc leave the floors.
    unreachable = [
        c
        for c in cases
        if c["category"] == LEXICALLY_UNREACHABLE and not _lexically_reachable(c, docs)
    ]
    scored = [c for c in cases if c not in unreachable]
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        by_category[case["category"]].append(case)

    lines = ["", "| category | cases | Recall@5 | top-1 | no-result recall | no-result precision |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for category, group in by_category.items():
        m = _score(group, returned)
        lines.append(
            f"| {category} | {len(group)} | {_fmt(m['recall@5'])} | {_fmt(m['top1'])} | "
            f"{_fmt(m['no_result_recall'])} | {_fmt(m['no_result_precision'])} |"
        )
    overall = _score(scored, returned)
    everything = _score(cases, returned)
    lines.append(
        f"| **scored (floors)** | {len(scored)} | {_fmt(overall['recall@5'])} | "
        f"{_fmt(overall['top1'])} | {_fmt(overall['no_result_recall'])} | "
        f"{_fmt(overall['no_result_precision'])} |"
    )
    lines.append(
        f"| all cases (for reference) | {len(cases)} | {_fmt(everything['recall@5'])} | "
        f"{_fmt(everything['top1'])} | {_fmt(everything['no_result_recall'])} | "
        f"{_fmt(everything['no_result_precision'])} |"
    )
    lines.append(
        f"\n{len(unreachable)} {LEXICALLY_UNREACHABLE} cases share no term with their doc "
        "(checked with the same tokenizer), so no lexical tier can reach them; they are "
        "excluded from the floors. Returned for them:"
    )
    for case in unreachable:
        lines.append(f"  {case['query']!r}: {returned[case['id']] or 'nothing'}")
    misses = [
        f"  {c['id']}: query {c['query']!r} expected {c['relevantIds']} got {returned[c['id']]}"
        for c in scored
        if set(c["relevantIds"]) - set(returned[c["id"]])
        or (not c["relevantIds"] and returned[c["id"]])
        or (c.get("expectedTopId") and returned[c["id"]][:1] != [c["expectedTopId"]])
    ]
    if misses:
        lines.append("misses:")
        lines.extend(misses)
    with capsys.disabled():
        print("\n".join(lines))

    assert overall["recall@5"] >= 0.95
    assert overall["top1"] >= 0.92
    assert overall["no_result_recall"] == 1.0
    assert overall["no_result_precision"] == 1.0


@pytest.mark.asyncio
async def test_no_result_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Prompts no note is about recall nothing (>= 0.95 of them), while questions
    in context still find their note; qwen's scored cases join the precision."""
    corpus = json.loads(EVAL_PATH.read_text(encoding="utf-8"))
    own = json.loads(NO_RESULT_PATH.read_text(encoding="utf-8"))["cases"]
    qwen_scored = [c for c in corpus["cases"] if c["category"] != LEXICALLY_UNREACHABLE]
    returned = await _recall_all(tmp_path, corpus["docs"], own + qwen_scored)

    def empty_share(group: list[dict[str, Any]]) -> float:
        return sum(not returned[c["id"]] for c in group) / len(group)

    def recall_at_5(group: list[dict[str, Any]]) -> float:
        found = [len(set(c["relevantIds"]) & set(returned[c["id"]])) for c in group]
        return sum(f / len(c["relevantIds"]) for f, c in zip(found, group, strict=True)) / len(
            group
        )

    no_result = [c for c in own if not c["relevantIds"]]
    positive = [c for c in own if c["relevantIds"]]
    lines = [
        "",
        "| category | split | prompts | languages | nothing recalled | Recall@5 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for case in own:
        groups[(case["split"], case["category"])].append(case)
    for (split, category), group in sorted(groups.items(), reverse=True):
        langs = ", ".join(sorted({c["lang"] for c in group}))
        nothing = "-" if group[0]["relevantIds"] else _fmt(empty_share(group))
        found = _fmt(recall_at_5(group)) if group[0]["relevantIds"] else "-"
        lines.append(f"| {category} | {split} | {len(group)} | {langs} | {nothing} | {found} |")
    for split in ("tuning", "held-out"):
        nr = [c for c in no_result if c["split"] == split]
        pos = [c for c in positive if c["split"] == split]
        lines.append(f"| **no result** | {split} | {len(nr)} | | {_fmt(empty_share(nr))} | - |")
        lines.append(f"| **in context** | {split} | {len(pos)} | | - | {_fmt(recall_at_5(pos))} |")
    # qwen's no-result precision over everything: of the prompts that recalled
    # nothing, the share that no note is about.
    everything = own + qwen_scored
    empties = [c for c in everything if not returned[c["id"]]]
    precision = sum(not c["relevantIds"] for c in empties) / len(empties)
    lines.append(
        f"\nnothing recalled for {_fmt(empty_share(no_result))} of {len(no_result)} no-result "
        f"prompts; Recall@5 {_fmt(recall_at_5(positive))} on {len(positive)} questions in "
        f"context; with qwen's {len(qwen_scored)} scored cases, no-result precision "
        f"{_fmt(precision)} ({len(empties)} empty answers)."
    )
    wrong = [
        f"  {c['id']}: {c['query']!r} -> {returned[c['id']] or 'nothing'}"
        for c in own
        if (not c["relevantIds"] and returned[c["id"]])
        or set(c["relevantIds"]) - set(returned[c["id"]])
    ]
    if wrong:
        lines.append("misses:")
        lines.extend(wrong)
    with capsys.disabled():
        print("\n".join(lines))

    assert len(no_result) >= 40
    assert empty_share(no_result) >= 0.95
    assert empty_share([c for c in no_result if c["split"] == "held-out"]) >= 0.95
    assert recall_at_5(positive) >= 0.9
    assert precision >= 0.95
