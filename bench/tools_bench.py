"""Workspace tools benchmark (issue 18): search and glob on generated trees.

    python bench/tools_bench.py [--sizes 1000,20000,200000] [--runs 10]
                                [--py-runs 3] [--daemon-runs 5] [--keep]
                                [--json FILE] [--table]

For each size a tree of that many files is generated under /tmp (removed at
the end unless --keep): folders of 100 files, ~1 KB each, a `.gitignore`
that excludes half of them (a quarter in `build/` folders, a quarter named
`*.gen.py`), and an empty `.git` so that plain `rg` honours the
`.gitignore` too. Then, side by side, interleaved run by run:

- in process (the tool itself, `DaemonTools.run`, what the daemon runs in
  its worker thread): `search` for a literal and for a regex, and `glob`
  `**/*.py`, on the ripgrep engine and on the Python engine;
- plain `rg` run directly, the floor: `rg -n -F LITERAL`, `rg -n REGEX`,
  `rg --files -t py` (with `--sortr modified` for newest first), output read
  to the end;
- through the real daemon (spawned over stdio, the model server asking for
  the tool call): time from the `tool_call` update to its completed
  `tool_call_update`, as an editor sees it, and the latency of
  `agent/listSessions` requests sent every 20 ms while the search runs,
  against the same requests on the idle daemon;
- peak RSS (VmHWM) of each daemon, and of plain `rg` (wait4);
- correctness: the number of matching files reported (shown + "N more")
  equals the number of matching files the `.gitignore` keeps, and no
  excluded path appears, on both engines.

Times are wall-clock milliseconds, p50 / p99 over the runs (nearest rank).
Goal: the ripgrep engine within 1.5x of plain rg on the large tree, and the
daemon keeps answering during a search.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.agent.tools import DaemonTools, ToolConfig
from agentd.agent.tools.ripgrep import find_rg
from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import StdioClient
from bench._common import bench_env, pct

LITERAL = "needle_literal_token"
REGEX = r"def handler_[a-z]+_\d{3}\("
BODY = (
    "import os\nimport sys\n\n\nclass Thing:\n    def __init__(self, value):\n"
    "        self.value = value\n\n    def render(self):\n"
    "        return f'<thing {{self.value}}>'\n\n\n"
    "def compute(items):\n    total = 0\n    for item in items:\n"
    "        total += len(str(item))\n    return total\n\n\n"
    "def main(argv=None):\n    return compute(argv or sys.argv)\n{extra}"
)


# --- the tree --------------------------------------------------------------------


def generate(root: Path, n: int) -> dict[str, int]:
    """n files; returns the expected counts of kept files with each kind of match."""
    (root / ".git").mkdir(parents=True)
    (root / ".gitignore").write_text("build/\n*.gen.py\n")
    expected = {"literal": 0, "regex": 0, "py": 0}
    for k in range(n):
        folder = root / "src" / f"p{k // 1000:03}" / f"m{(k // 100) % 10}"
        kind = k % 4
        if kind == 1:
            folder = folder / "build"
        name = f"f{k:06}.gen.py" if kind == 3 else f"f{k:06}.py"
        folder.mkdir(parents=True, exist_ok=True)
        extra = ""
        if k % 10 == 0:
            extra += f"# {LITERAL} here\n"
        if k % 7 == 0:
            extra += "def handler_alpha_123(x):\n    return x\n"
        (folder / name).write_text(BODY.format(extra=extra))
        kept = kind in (0, 2)
        if kept:
            expected["py"] += 1
            expected["literal"] += k % 10 == 0
            expected["regex"] += k % 7 == 0
    return expected


def excluded(path: str) -> bool:
    return "/build/" in path or path.endswith(".gen.py")


# --- in-process runs ----------------------------------------------------------------


async def tool_ms(tools: DaemonTools, name: str, args: dict[str, Any]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = await tools.run(name, args)
    return (time.perf_counter() - t0) * 1000, out.text


def plain_rg(rg: str, args: list[str], cwd: Path) -> tuple[float, int]:
    """Wall ms and peak RSS (KiB) of `rg ARGS`, its output read to the end."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([rg, "--no-config", *args], cwd=cwd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    while proc.stdout.read(1 << 16):
        pass
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return (time.perf_counter() - t0) * 1000, usage.ru_maxrss


def reported_files(text: str) -> tuple[list[str], int]:
    """(paths shown, total matching files) of a files_only search."""
    shown = [line.rsplit(" (", 1)[0] for line in text.split("\n") if line.endswith(" line)")]
    shown += [line.rsplit(" (", 1)[0] for line in text.split("\n") if line.endswith(" lines)")]
    more = re.search(r"\[([\d,]+) more files", text)
    return shown, len(shown) + (int(more.group(1).replace(",", "")) if more else 0)


async def in_process(
    root: Path, expected: dict[str, int], runs: int, py_runs: int, rg: str
) -> dict[str, Any]:
    engines = {
        "ripgrep": DaemonTools(root, ToolConfig("ripgrep", 600)),
        "python": DaemonTools(root, ToolConfig("python", 600)),
    }
    cases = {
        "search literal": ("search", {"query": LITERAL}, ["-n", "-F", LITERAL]),
        "search regex": ("search", {"query": REGEX, "regex": True}, ["-n", REGEX]),
        # The same job for plain rg: it has to read every file's time too.
        "glob **/*.py newest first": (
            "glob",
            {"pattern": "**/*.py"},
            ["--files", "-t", "py", "--sortr", "modified"],
        ),
        "glob **/*.py by path": (
            "glob",
            {"pattern": "**/*.py", "sort": "path"},
            ["--files", "-t", "py"],
        ),
    }
    times: dict[str, dict[str, list[float]]] = {c: {} for c in cases}
    rg_rss = 0
    for run in range(runs):
        for case, (name, args, rg_args) in cases.items():
            ms, rss = await asyncio.to_thread(plain_rg, rg, rg_args, root)
            times[case].setdefault("plain rg", []).append(ms)
            rg_rss = max(rg_rss, rss)
            for engine, tools in engines.items():
                if engine == "python" and run >= py_runs:
                    continue
                ms, _ = await tool_ms(tools, name, args)
                times[case].setdefault(engine, []).append(ms)
    checks: dict[str, Any] = {}
    for engine, tools in engines.items():
        for what, args in (
            ("literal", {"query": LITERAL}),
            ("regex", {"query": REGEX, "regex": True}),
        ):
            _, text = await tool_ms(
                tools, "search", {**args, "files_only": True, "max_results": 500}
            )
            shown, total = reported_files(text)
            checks[f"{engine} {what}"] = {
                "expected": expected[what],
                "reported": total,
                "excludedShown": sum(excluded(p) for p in shown),
            }
        _, text = await tool_ms(tools, "glob", {"pattern": "**/*.py", "max_results": 1000})
        shown = [line for line in text.split("\n") if line.endswith(".py")]
        more = re.search(r"\[([\d,]+) more files", text)
        total = len(shown) + (int(more.group(1).replace(",", "")) if more else 0)
        checks[f"{engine} glob"] = {
            "expected": expected["py"],
            "reported": total,
            "excludedShown": sum(excluded(p) for p in shown),
        }
    return {"times": times, "plainRgPeakRssKiB": rg_rss, "checks": checks}


# --- through the daemon ------------------------------------------------------------------


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


async def through_daemon(
    root: Path, home: Path, engine: str, runs: int, query: dict[str, Any]
) -> dict[str, Any]:
    async with ModelServer() as model:
        events: dict[str, float] = {}

        def on_note(method: str, params: Any) -> None:
            if method != "agent/update":
                return
            u = params.get("update", {})
            if u.get("kind") == "tool_call":
                events[u["toolCallId"] + ":start"] = time.perf_counter()
            elif u.get("kind") == "tool_call_update" and u.get("status") == "completed":
                events[u["toolCallId"] + ":done"] = time.perf_counter()

        env = bench_env(model.openai_base_url, home)
        env["AGENTD_MEMORY"] = "off"
        client = await StdioClient.spawn(env, on_note)
        await client.initialize({"tools": {"searchEngine": engine, "searchTimeout": 600}})
        sid = (await client.request("agent/newSession", {"workspaceRoot": str(root)}))["sessionId"]

        async def ping_ms() -> float:
            t0 = time.perf_counter()
            await client.request("agent/listSessions", {"workspaceRoot": str(root)})
            return (time.perf_counter() - t0) * 1000

        idle = [await ping_ms() for _ in range(50)]
        result_ms: list[float] = []
        busy: list[float] = []
        for i in range(runs):
            call_id = f"s{i}"
            model.enqueue({"toolCalls": [{"id": call_id, "name": "search", "arguments": query}]})
            prompt = asyncio.ensure_future(
                client.request("agent/prompt", {"sessionId": sid, "prompt": f"run {i}"})
            )
            while call_id + ":start" not in events:
                await asyncio.sleep(0.001)
            while call_id + ":done" not in events:
                busy.append(await ping_ms())
                await asyncio.sleep(0.02)
            await prompt
            result_ms.append((events[call_id + ":done"] - events[call_id + ":start"]) * 1000)
        peak = vm_hwm_kib(client.proc.pid)
        await client.shutdown()
    return {"resultMs": result_ms, "idlePingMs": idle, "busyPingMs": busy, "peakRssKiB": peak}


# --- output ------------------------------------------------------------------------------


def stats(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": round(pct(values, 0.5), 1),
        "p99": round(pct(values, 0.99), 1),
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        "| files | case | plain rg p50 / p99 ms | ripgrep engine p50 / p99 ms | ratio p50 "
        "| Python engine p50 / p99 ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for size, r in report["sizes"].items():
        for case, by in r["inProcess"]["times"].items():
            plain, rgs, py = by["plain rg"], by["ripgrep"], by.get("python", {"n": 0})
            ratio = rgs["p50"] / plain["p50"] if plain["p50"] else float("nan")
            pys = f"{py['p50']} / {py['p99']}" if py["n"] else "-"
            lines.append(
                f"| {int(size):,} | {case} | {plain['p50']} / {plain['p99']} "
                f"| {rgs['p50']} / {rgs['p99']} | {ratio:.2f}x | {pys} |"
            )
    lines += [
        "",
        "| files | engine | tool_call -> result p50 / p99 ms | listSessions idle p50 / p99 ms "
        "| during the search p50 / p99 / max ms (n) | daemon peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for size, r in report["sizes"].items():
        for engine, d in r["daemon"].items():
            b = d["busyPingMs"]
            lines.append(
                f"| {int(size):,} | {engine} | {d['resultMs']['p50']} / {d['resultMs']['p99']} "
                f"| {d['idlePingMs']['p50']} / {d['idlePingMs']['p99']} "
                f"| {b['p50']} / {b['p99']} / {b['max']} ({b['n']}) "
                f"| {d['peakRssKiB'] / 1024:.0f} |"
            )
    lines += ["", "| files | check | expected | reported | excluded paths shown |"]
    lines += ["| --- | --- | --- | --- | --- |"]
    for size, r in report["sizes"].items():
        for name, c in r["inProcess"]["checks"].items():
            lines.append(
                f"| {int(size):,} | {name} | {c['expected']:,} | {c['reported']:,} "
                f"| {c['excludedShown']} |"
            )
        rss = r["inProcess"]["plainRgPeakRssKiB"] / 1024
        lines.append(f"| {int(size):,} | plain rg peak RSS | | {rss:.0f} MiB | |")
    return "\n".join(lines)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,20000,200000")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--py-runs", type=int, default=3)
    parser.add_argument("--daemon-runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    rg = find_rg()
    if rg is None:
        print("ripgrep not found (pip install ripgrep==14.1.0)", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "rg": rg,
        "sizes": {},
    }
    for size in [int(s) for s in args.sizes.split(",")]:
        base = Path(tempfile.mkdtemp(prefix=f"agentd-tools-bench-{size}-", dir="/tmp"))
        try:
            t0 = time.perf_counter()
            expected = generate(base / "tree", size)
            gen_s = time.perf_counter() - t0
            print(f"{size:,} files generated in {gen_s:.1f} s", file=sys.stderr)
            ip = await in_process(base / "tree", expected, args.runs, args.py_runs, rg)
            ip["times"] = {c: {e: stats(v) for e, v in by.items()} for c, by in ip["times"].items()}
            daemon: dict[str, Any] = {}
            for engine, runs in (("ripgrep", args.daemon_runs), ("python", min(args.py_runs, 3))):
                d = await through_daemon(
                    base / "tree", base, engine, runs, {"query": LITERAL, "max_results": 100}
                )
                busy = d["busyPingMs"]
                daemon[engine] = {
                    "resultMs": stats(d["resultMs"]),
                    "idlePingMs": stats(d["idlePingMs"]),
                    "busyPingMs": {**stats(busy), "max": round(max(busy, default=0), 1)},
                    "peakRssKiB": d["peakRssKiB"],
                }
            report["sizes"][str(size)] = {
                "generateSeconds": round(gen_s, 1),
                "expected": expected,
                "inProcess": ip,
                "daemon": daemon,
            }
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
            else:
                print(f"kept {base}", file=sys.stderr)
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    print(table(report), file=sys.stdout if args.table else sys.stderr)
    bad = [
        f"{size} {name}"
        for size, r in report["sizes"].items()
        for name, c in r["inProcess"]["checks"].items()
        if c["reported"] != c["expected"] or c["excludedShown"]
    ]
    if bad:
        print("WRONG RESULTS: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
