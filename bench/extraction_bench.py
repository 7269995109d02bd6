"""Memory extraction benchmark: does extraction delay replies, does it keep up,
and does a run cost what its slice costs?

Two daemons on one local model server, the fast model's extractor answering
after `--latency` seconds (default 2 s):

1. Reply latency with extraction off vs on: `--prompts` prompts, interleaved
   between the two daemons so drift hits both alike.
2. A burst of `--burst` prompts (several sessions at once) on the daemon with
   extraction on: extraction requests issued, coverage of the burst's user
   messages in extraction request bodies (goal 100%), and the time from the
   last reply until every cursor reaches the end of its transcript.

3. Run time at transcript sizes (`--sizes`, default 100,10000,100000
   messages): one extraction run of a new turn in a session whose transcript
   already holds that many extracted messages, timed from `schedule` to the
   run's end, `--size-runs` times per size (`bench/_extraction_worker.py`, a
   process per size: the real provider over loopback HTTP to the bundled
   model server, the service as the daemon wires it). With `--baseline-src
   DIR` (another commit's `agentd/`) the same worker runs that code, sizes
   alternating between the two. Goal: flat across sizes.

`--skip daemons,sizes` leaves parts out (daemons: 1 and 2). Prints the JSON result and a
markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    add_output_args,
    bench_env,
    emit,
    fmt,
    markdown_table,
    start_agentd,
    summary,
)

from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import StdioClient


async def new_session(client: StdioClient, ws: Path) -> str:
    return str((await client.request("agent/newSession", {"workspaceRoot": str(ws)}))["sessionId"])


async def timed_prompt(client: StdioClient, sid: str, text: str) -> float:
    t0 = time.perf_counter()
    await client.request("agent/prompt", {"sessionId": sid, "prompt": text})
    return (time.perf_counter() - t0) * 1000


async def caught_up(client: StdioClient, ws: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await client.request("memory/status", {"workspaceRoot": str(ws)})
        ext = status["extraction"]
        rows = ext["cursors"]
        if (
            rows
            and ext["state"] == "idle"
            and not ext["trailingPending"]
            and all(r["processedOffset"] == r["transcriptEnd"] for r in rows)
        ):
            return True
        await asyncio.sleep(0.05)
    return False


WORKER = Path(__file__).resolve().parent / "_extraction_worker.py"
REPO = Path(__file__).resolve().parents[1]


def size_run(size: int, runs: int, src: Path) -> dict[str, Any]:
    """One worker process measuring `size` with the agentd package of `src`."""
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [sys.executable, "-P", str(WORKER), str(size), str(runs)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def sizes_part(args: argparse.Namespace) -> dict[str, Any]:
    codes = {"agentd": REPO}
    if args.baseline_src is not None:
        codes["baseline"] = args.baseline_src
    out: dict[str, Any] = {name: {} for name in codes}
    for k, size in enumerate(args.sizes):
        names = list(codes) if k % 2 == 0 else list(reversed(codes))
        for name in names:
            r = size_run(size, args.size_runs, codes[name])
            out[name][str(size)] = {
                "run_ms": summary(r["run_ms"]),
                "transcript_mb": round(r["transcript_bytes"] / 2**20, 1),
                "caught_up": r["caught_up"],
                "last_error": r["last_error"],
            }
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"extractorLatencyS": args.latency}
    if "daemons" not in args.skip:
        result.update(await daemons_part(args))
    if "sizes" not in args.skip and args.sizes:
        result["runTimeBySize"] = sizes_part(args)
        result["sizeRuns"] = args.size_runs
        result["baselineSrc"] = str(args.baseline_src) if args.baseline_src else None
    return result


async def daemons_part(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-extraction-bench-"))
    server = ModelServer()
    await server.start()
    server.set_latency("extract", args.latency)
    clients: dict[str, StdioClient] = {}
    try:
        for name, on in (("off", False), ("on", True)):
            ws = tmp / f"ws-{name}"
            ws.mkdir()
            env = bench_env(server.openai_base_url, tmp / name)
            memory = {"extraction": on, "modelTier": False}
            clients[name] = await start_agentd(env, {"memory": memory})
        sids = {n: await new_session(c, tmp / f"ws-{n}") for n, c in clients.items()}
        for n, c in clients.items():  # warm-up (HTTP client, project start): not counted
            await timed_prompt(c, sids[n], "hello")
        latency: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(args.prompts):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for n in order:
                latency[n].append(await timed_prompt(clients[n], sids[n], f"latency prompt {i}"))
        on = clients["on"]
        ws_on = tmp / "ws-on"
        await caught_up(on, ws_on, 120)

        # The burst: several sessions at once, prompts back to back in each.
        before = len(server.requests("extract"))
        sessions = [await new_session(on, ws_on) for _ in range(args.sessions)]
        texts: list[str] = []

        async def burst(k: int, sid: str) -> None:
            for j in range(k, args.burst, args.sessions):
                text = f"burst message {j} remember fact-{j}"
                texts.append(text)
                await on.request("agent/prompt", {"sessionId": sid, "prompt": text})

        t0 = time.perf_counter()
        await asyncio.gather(*(burst(k, sid) for k, sid in enumerate(sessions)))
        replies_done = time.perf_counter()
        ok = await caught_up(on, ws_on, 300)
        cursor_done = time.perf_counter()
        requests = server.requests("extract")[before:]
        bodies = "\n".join(json.dumps(r["body"], ensure_ascii=False) for r in requests)
        covered = sum(t in bodies for t in texts)
        return {
            "replyLatencyMs": {n: summary(v) for n, v in latency.items()},
            "burst": {
                "prompts": args.burst,
                "sessions": args.sessions,
                "burstSeconds": round(replies_done - t0, 3),
                "extractionRequests": len(requests),
                "coverage": round(covered / len(texts), 4) if texts else None,
                "caughtUp": ok,
                "secondsUntilCursorAtEnd": round(cursor_done - replies_done, 3),
            },
        }
    finally:
        for c in clients.values():
            await c.shutdown()
        await server.stop()


def build_table(r: dict[str, Any]) -> str:
    rows: list[list[str]] = []
    if "replyLatencyMs" in r:
        rows += daemon_rows(r)
    by_size = r.get("runTimeBySize") or {}
    ours, base = by_size.get("agentd", {}), by_size.get("baseline", {})
    for size, row in ours.items():
        s = row["run_ms"]
        cell = f"{fmt(s['median'])} / {fmt(s['p99'])} ms ({row['transcript_mb']} MB)"
        if size in base:
            b = base[size]["run_ms"]
            cell += f"; baseline {fmt(b['median'])} / {fmt(b['p99'])} ms"
        rows.append([f"extraction run, transcript of {int(size):,} messages (p50 / p99)", cell])
    return markdown_table(["measure", "value"], rows)


def daemon_rows(r: dict[str, Any]) -> list[list[str]]:
    off, on = r["replyLatencyMs"]["off"], r["replyLatencyMs"]["on"]
    b = r["burst"]
    return [
        [
            "reply latency, extraction off (median / p90 / p99)",
            f"{fmt(off['median'])} / {fmt(off['p90'])} / {fmt(off['p99'])} ms",
        ],
        [
            f"reply latency, extraction on, {r['extractorLatencyS']:g} s extractor",
            f"{fmt(on['median'])} / {fmt(on['p90'])} / {fmt(on['p99'])} ms",
        ],
        [
            f"burst: {b['prompts']} prompts over {b['sessions']} sessions took",
            f"{b['burstSeconds']} s",
        ],
        ["burst: extraction requests issued", str(b["extractionRequests"])],
        ["burst: user messages covered (goal 100%)", f"{100 * (b['coverage'] or 0):.1f}%"],
        ["burst: last reply -> every cursor at the end", f"{b['secondsUntilCursorAtEnd']} s"],
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=2.0, help="extractor latency (s)")
    parser.add_argument("--prompts", type=int, default=40, help="prompts per daemon for latency")
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
        default=[100, 10_000, 100_000],
        help="transcript sizes in messages for the run-time part (default 100,10000,100000)",
    )
    parser.add_argument("--size-runs", type=int, default=20, help="timed runs per size")
    parser.add_argument("--baseline-src", type=Path, metavar="DIR")
    parser.add_argument(
        "--skip",
        type=lambda s: {x for x in s.split(",") if x},
        default=set(),
        help="parts to leave out: daemons (reply latency and burst), sizes",
    )
    add_output_args(parser)
    args = parser.parse_args()
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    result = asyncio.run(run(args))
    emit(args, result, build_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
