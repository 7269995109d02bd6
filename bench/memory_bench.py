"""Memory store benchmark: index build (cold, and warm from the index cache),
recall latency, edit-to-recall latency, RSS.

    python bench/memory_bench.py [--sizes 100,1000,10000] [--queries 300] [--edits 50]
                                 [--runs 1] [--baseline-src DIR] [--dense]

Each size runs in its own process (so RSS is that size's alone) on generated
topic files in a temp folder: English technical notes with identifiers and
numbers, about a tenth in Chinese, Japanese or Korean, last modified an hour
ago (a folder that has not changed since the last start). The cold build
starts with no index cache; the project is then closed (which writes the
cache, timed too) and a second one started on the same folder and cache:
the warm start, a daemon's next start; then the same warm start in a fresh
process (no cold build's leftovers in its heap: a daemon's next start),
timed with its RSS. With ``--baseline-src DIR`` (``git
archive main | tar -x -C DIR``) each size also runs on that checkout's
``agentd`` (the same script, ``PYTHONPATH=DIR``), alternating with this
tree's, ``--runs`` times each. Recall goes through
``ProjectMemory.recall`` (the path a prompt uses); edits go through the real
watcher (watchfiles, debounce 50 ms) and are timed from the write until a
recall returns the edited doc. Prints JSON, then a markdown table. ``--dense``
draws every word from 300 common ones, so most words sit in half the docs: a
worst case for posting lengths.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The checkout measured: this tree, or `--baseline-src`'s (set by `main` for
# the per-size process).
sys.path.insert(0, os.environ.get("MEMORY_BENCH_SRC") or str(Path(__file__).resolve().parents[1]))

from agentd.memory import ProjectMemory

_COMMON = """
deploy rollout canary rollback release pipeline build cache redis postgres schema migration index
query latency throughput timeout retry backoff circuit breaker queue kafka consumer producer offset
partition replica leader election lock mutex thread async await cancel scope task supervisor
logging metrics tracing span grafana dashboard alert oncall pager incident postmortem runbook
config secret vault token credential auth login session cookie oauth scope permission role policy
test fixture mock fake pytest vitest coverage flaky snapshot golden benchmark profile memory leak
heap stack garbage collector allocation buffer stream socket http grpc websocket header payload
json yaml toml parser lexer token grammar compiler linker module package dependency version pin
docker image container kubernetes pod node cluster ingress service mesh proxy gateway loadbalancer
frontend backend api endpoint route handler middleware request response status error exception
review commit branch merge rebase conflict hook lint format style naming convention refactor
editor buffer cursor selection diagnostic completion hover rename workspace folder watcher debounce
user preference concise answer verbose summary explanation feedback reference project team owner
"""
WORDS = _COMMON.split()
CJK_DOCS = [
    ("部署流程", "发布检查清单", "上线前确认监控和回滚开关。灰度发布后观察错误率。"),
    ("接口延迟排查", "API 性能看板", "记录服务响应时间和告警入口。"),
    ("認証設定ガイド", "ユーザーログイン構成", "セッション設定の確認手順。トークンの有効期限。"),
    ("レビュー方針", "コードレビューの基準", "小さな変更に分割する。テストを必ず追加する。"),
    ("배포 절차", "릴리스 체크리스트", "운영 반영 전에 모니터링을 확인한다."),
    ("성능 목표", "분기 성능 지표", "콜드 스타트 시간을 줄인다."),
]
TYPES = ("user", "feedback", "project", "reference")
_SYLLABLES = "ka lo mi ren tas vor quel dun pix bra nor sel tum gri fal zen cor hup"
SYLLABLES = _SYLLABLES.split()
CJK_QUERIES = ["部署 回滚", "ログイン 設定", "배포 절차", "接口延迟", "レビュー"]


def long_tail(n: int) -> list[str]:
    """Project-specific words (names, identifiers): most of a real vocabulary."""
    rng = random.Random(7)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen["".join(rng.choices(SYLLABLES, k=rng.randint(2, 4)))] = None
    return list(seen)


VOCABULARY = WORDS + long_tail(6000)
WEIGHTS = [1.0 / (i + 1) ** 0.9 for i in range(len(VOCABULARY))]
DENSE_WEIGHTS = [1.0 / (i + 1) ** 0.8 for i in range(len(WORDS))]


DENSE = False  # --dense: only the 300 common words, a worst case for posting lengths


def zipf_words(rng: random.Random, n: int) -> list[str]:
    # Rank-weighted choice approximates the skew of real prose.
    if DENSE:
        return rng.choices(WORDS, weights=DENSE_WEIGHTS, k=n)
    return rng.choices(VOCABULARY, weights=WEIGHTS, k=n)


def make_doc(rng: random.Random, i: int) -> tuple[str, str, str, str]:
    if i % 10 == 9:
        title, desc, body = CJK_DOCS[i % len(CJK_DOCS)]
        return f"{title} {i}", desc, body * rng.randint(1, 6), rng.choice(TYPES)
    title = " ".join(w.capitalize() for w in zipf_words(rng, rng.randint(2, 4)))
    desc = " ".join(zipf_words(rng, rng.randint(4, 9)))
    lines = []
    for _ in range(rng.randint(2, 12)):
        words = zipf_words(rng, rng.randint(6, 18))
        if rng.random() < 0.4:
            words.append(f"`{rng.choice(WORDS)}_{rng.choice(WORDS)}()`")
        if rng.random() < 0.3:
            words.append(f"svc{rng.randint(1, 400)}")
        if rng.random() < 0.2:
            words.append(f"{rng.randint(1, 999)}ms")
        lines.append("- " + " ".join(words) + ".")
    return title, desc, "\n".join(lines), rng.choice(TYPES)


def write_doc(folder: Path, i: int, doc: tuple[str, str, str, str]) -> None:
    title, desc, body, kind = doc
    text = f"---\nname: {title}\ndescription: {desc}\ntype: {kind}\n---\n{body}\n"
    (folder / f"topic-{i:05d}.md").write_text(text, encoding="utf-8")


def make_queries(rng: random.Random, n: int, size: int) -> list[str]:
    queries = []
    for k in range(n):
        roll = k % 10
        if roll < 6:
            queries.append(" ".join(zipf_words(rng, rng.randint(2, 5))))
        elif roll < 7:
            queries.append(f"why does svc{rng.randint(1, 400)} time out")
        elif roll < 8:
            queries.append(rng.choice(CJK_QUERIES))
        elif roll < 9:
            queries.append("how do I " + " ".join(zipf_words(rng, 8)) + " in the new module?")
        else:
            queries.append(rng.choice(["quantum entanglement", "weather tomorrow", "部", "zebra"]))
    return queries


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_size(size: int, n_queries: int, n_edits: int) -> dict[str, Any]:
    rng = random.Random(size)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        ws.mkdir()
        folder = root / "memory"
        folder.mkdir()
        for i in range(size):
            write_doc(folder, i, make_doc(rng, i))
        an_hour_ago = time.time_ns() - 3600 * 10**9
        for path in folder.iterdir():
            os.utime(path, ns=(an_hour_ago, an_hour_ago))
        home = root / "home"
        rss_before = rss_kib()
        memory = ProjectMemory(ws, directory=folder, watch=True, **cache_args(home))
        t0 = time.perf_counter()
        await memory.start()
        build_s = time.perf_counter() - t0
        rss_after = rss_kib()
        t0 = time.perf_counter()
        await memory.aclose()  # writes the index cache (where this code has one)
        close_s = time.perf_counter() - t0
        memory = ProjectMemory(ws, directory=folder, watch=True, **cache_args(home))
        t0 = time.perf_counter()
        await memory.start()
        warm_s = time.perf_counter() - t0
        rss_warm = rss_kib()
        assert len(memory.list_docs()) == size
        fresh = fresh_warm_start(ws, folder, home)
        cache_dir = home / "cache" / "memory-index"
        cache_bytes = sum(f.stat().st_size for f in cache_dir.glob("*.jsonl"))
        # The whole index saved beside it (`agentd.memory.index_snapshot`), where there is one.
        saved_bytes = sum(f.stat().st_size for f in cache_dir.glob("*.index"))
        try:
            queries = make_queries(rng, n_queries, size)
            for q in queries[:20]:  # warm caches (stemmer, allocator)
                memory.recall(q)
            latencies = []
            hits = 0
            for q in queries:
                t = time.perf_counter()
                result = memory.recall(q)
                latencies.append((time.perf_counter() - t) * 1000)
                hits += bool(result.docs)
            edit_ms = []
            for e in range(n_edits):
                i = rng.randrange(size)
                token = f"editmarker{e}x{rng.randrange(10**6)}"
                title, desc, body, kind = make_doc(rng, i)
                target = f"topic-{i:05d}.md"
                t = time.perf_counter()
                write_doc(folder, i, (title, desc, body + f"\n{token}", kind))
                while [d.path.name for d in memory.recall(token).docs] != [target]:
                    await asyncio.wait_for(
                        memory.wait_indexed_generation(memory.generation + 1), 10
                    )
                edit_ms.append((time.perf_counter() - t) * 1000)
            saves = {k: await save_after_edits(memory, folder, rng, size, k) for k in (1, 10)}
        finally:
            await memory.aclose()
    return {
        "docs": size,
        "index_build_s": round(build_s, 3),
        "warm_start_s": round(warm_s, 3),
        "close_with_cache_write_s": round(close_s, 3),
        "cache_mib": round(cache_bytes / 2**20, 1),
        "saved_index_mib": round(saved_bytes / 2**20, 1),
        "recall_p50_ms": round(pct(latencies, 0.5), 3),
        "recall_p99_ms": round(pct(latencies, 0.99), 3),
        "recall_max_ms": round(max(latencies), 3),
        "queries": len(latencies),
        "queries_with_results": hits,
        "edit_visible_p50_ms": round(pct(edit_ms, 0.5), 1),
        "edit_visible_p99_ms": round(pct(edit_ms, 0.99), 1),
        "edits": len(edit_ms),
        "save_after_1_edit_s": saves[1][0],
        "save_after_1_edit_stall_ms": saves[1][1],
        "save_after_10_edits_s": saves[10][0],
        "save_after_10_edits_stall_ms": saves[10][1],
        "rss_mib": round(rss_after / 1024, 1),
        "rss_index_delta_mib": round((rss_after - rss_before) / 1024, 1),
        "rss_after_warm_start_mib": round(rss_warm / 1024, 1),
        "fresh_warm_start_s": fresh["warm_start_s"],
        "fresh_warm_start_rss_mib": fresh["rss_mib"],
    }


async def save_after_edits(
    memory: ProjectMemory, folder: Path, rng: random.Random, size: int, count: int
) -> tuple[float, float]:
    """The debounced save after ``count`` notes were edited (through the
    watcher): how long it takes, and the event loop's longest stall while it
    runs in its worker thread (a 1 ms ticker's longest gap, less the 1 ms)."""
    # Saved by these calls alone: the debounced saver stopped, and any
    # save under way finished (two saves at once are not the daemon's case).
    import agentd.memory.project as project_module

    project_module.SAVE_DELAY_S = project_module.MAX_SAVE_DELAY_S = 1e6
    saver, memory._saver = memory._saver, None
    if saver is not None:
        saver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await saver
    if memory._saving is not None:
        await asyncio.wait([memory._saving])
    await memory._save_cache()  # what earlier edits left, untimed
    tokens = []
    # Distinct notes: a second edit of one note would drop the first's token,
    # which the wait below would then look for in vain.
    for e, i in enumerate(rng.sample(range(size), min(count, size))):
        token = f"savemarker{count}x{e}x{rng.randrange(10**6)}"
        title, desc, body, kind = make_doc(rng, i)
        write_doc(folder, i, (title, desc, body + f"\n{token}", kind))
        tokens.append(token)
    for token in tokens:
        while not memory.recall(token).docs:
            await asyncio.wait_for(memory.wait_indexed_generation(memory.generation + 1), 10)
    loop = asyncio.get_running_loop()
    longest = 0.0
    saving = True

    async def tick() -> None:
        nonlocal longest
        while saving:
            before = loop.time()
            await asyncio.sleep(0.001)
            longest = max(longest, loop.time() - before - 0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    t = time.perf_counter()
    await memory._save_cache()
    took = time.perf_counter() - t
    saving = False
    await ticker
    return round(took, 4), round(longest * 1000, 1)


def fresh_warm_start(ws: Path, folder: Path, home: Path) -> dict[str, Any]:
    """The warm start again in a fresh process (a daemon's next start: no
    cold build's leftovers in its heap), and its RSS after it."""
    out = subprocess.run(
        [sys.executable, "-P", __file__, "--fresh-warm", str(ws), str(folder), str(home)],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=sys.path[0]),
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def warm_start_only(ws: Path, folder: Path, home: Path) -> dict[str, Any]:
    memory = ProjectMemory(ws, directory=folder, watch=True, **cache_args(home))
    t0 = time.perf_counter()
    await memory.start()
    warm_s = time.perf_counter() - t0
    rss = rss_kib()
    await memory.aclose()
    return {"warm_start_s": round(warm_s, 3), "rss_mib": round(rss / 1024, 1)}


def cache_args(home: Path) -> dict[str, Any]:
    """The index cache's argument, where this checkout has one (a baseline
    checkout from before it runs the same bench without)."""
    import inspect

    if "index_cache_home" in inspect.signature(ProjectMemory).parameters:
        return {"index_cache_home": home}
    return {}


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| checkout | docs | index build (cold) | warm start | cache (+ saved index) "
        "| recall p50 | recall p99 | edit->recall p50 | edit->recall p99 "
        "| RSS (index delta) | warm start, fresh process (RSS) "
        "| save after 1 / 10 edits (longest loop stall) | load |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.get('checkout', 'this')} | {r['docs']:,} | {r['index_build_s']:.2f} s | "
            f"{r['warm_start_s']:.2f} s | "
            f"{r['cache_mib']} (+{r.get('saved_index_mib', 0.0)}) MiB | "
            f"{r['recall_p50_ms']:.3f} ms | "
            f"{r['recall_p99_ms']:.3f} ms | {r['edit_visible_p50_ms']:.1f} ms | "
            f"{r['edit_visible_p99_ms']:.1f} ms | {r['rss_mib']} MiB "
            f"(+{r['rss_index_delta_mib']} MiB) | {r['fresh_warm_start_s']:.2f} s "
            f"({r['fresh_warm_start_rss_mib']} MiB) | "
            f"{r['save_after_1_edit_s'] * 1000:.0f} / {r['save_after_10_edits_s'] * 1000:.0f} ms "
            f"({r['save_after_1_edit_stall_ms']:.0f} / "
            f"{r['save_after_10_edits_stall_ms']:.0f} ms) | "
            f"{r.get('loadavg_1m', '')} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--dense", action="store_true", help="300-word vocabulary (worst case)")
    parser.add_argument("--runs", type=int, default=1, help="runs per size and checkout")
    parser.add_argument("--baseline-src", type=Path, metavar="DIR")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fresh-warm", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fresh_warm is not None:
        print(json.dumps(asyncio.run(warm_start_only(*args.fresh_warm))))
        return 0
    global DENSE
    DENSE = args.dense
    if args.one is not None:
        print(json.dumps(asyncio.run(run_size(args.one, args.queries, args.edits))))
        return 0
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    here = str(Path(__file__).resolve().parents[1])
    sources = [here] + ([str(args.baseline_src.resolve())] if args.baseline_src else [])
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for run in range(args.runs):
            for src in sources:
                env = dict(os.environ, MEMORY_BENCH_SRC=src, PYTHONPATH=src)
                out = subprocess.run(
                    [
                        sys.executable,
                        "-P",
                        __file__,
                        "--one",
                        str(size),
                        "--queries",
                        str(args.queries),
                        "--edits",
                        str(args.edits),
                        *(["--dense"] if args.dense else []),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                )
                row = json.loads(out.stdout.strip().splitlines()[-1])
                row["checkout"] = "this" if src == here else "baseline"
                row["run"] = run + 1
                row["loadavg_1m"] = round(os.getloadavg()[0], 2)
                rows.append(row)
    print(json.dumps(rows, indent=2))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
