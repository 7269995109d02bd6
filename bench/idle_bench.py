"""What an idle daemon costs the machine: wake-ups and CPU a second.

    python bench/idle_bench.py [--window 10] [--runs 3] [--baseline-src DIR]

An editor keeps agentd running all day, mostly idle: every wake-up of an
idle process costs a laptop power. Each run spawns the daemon over stdio
(LSP, memory on, `bench_env`), opens one session in a fresh workspace (so
its project memory and the memory folder watcher run), waits 3 s for the
warm-up and the first scans to finish, then counts over `--window` seconds
the context switches of each of the daemon's threads (voluntary and not,
from /proc: each one a wake-up) and its CPU time (user + system). With
``--baseline-src DIR`` (``git archive main | tar -x -C DIR``) each run also
measures that checkout's daemon, alternating. Linux only (/proc). Prints
JSON, then a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.testing.model_server import ModelServer
from bench._common import (
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    markdown_table,
    start_agentd,
)

SETTLE_S = 3.0


def thread_switches(pid: int) -> dict[str, int]:
    """Context switches so far of each thread of `pid`, by `tid:name`."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread ended meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        switches = int(fields["voluntary_ctxt_switches"]) + int(
            fields["nonvoluntary_ctxt_switches"]
        )
        out[f"{tid}:{name}"] = switches
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_run(base_url: str, src: Path | None, window: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentd-idle-") as tmp:
        home = Path(tmp)
        workspace = home / "ws"
        workspace.mkdir()
        args, env = baseline_daemon(bench_env(base_url, home), src)
        client = await start_agentd(env, args=args)
        try:
            await client.request("agent/newSession", {"workspaceRoot": str(workspace)})
            await asyncio.sleep(SETTLE_S)  # the warm-up and first scans end: idle from here
            pid = client.proc.pid
            before, cpu_before, t0 = thread_switches(pid), cpu_seconds(pid), time.monotonic()
            await asyncio.sleep(window)  # the measured idle time itself
            after, cpu_after = thread_switches(pid), cpu_seconds(pid)
            elapsed = time.monotonic() - t0
        finally:
            await client.shutdown()
    per_thread = {k: (v - before.get(k, 0)) / elapsed for k, v in after.items()}
    return {
        "wakeups_per_s": round(sum(per_thread.values()), 1),
        "busiest_thread_wakeups_per_s": round(max(per_thread.values()), 1),
        "cpu_ms_per_s": round((cpu_after - cpu_before) / elapsed * 1000, 2),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    targets: list[tuple[str, Path | None]] = [("agentd", None)]
    if args.baseline_src is not None:
        targets.append(("baseline", args.baseline_src))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in targets}
    async with ModelServer() as server:
        for _ in range(args.runs):
            for name, src in targets:
                runs[name].append(await one_run(server.openai_base_url, src, args.window))
    result: dict[str, Any] = {"window_s": args.window, "runs": args.runs}
    for name, got in runs.items():
        result[name] = {
            key: statistics.median(r[key] for r in got)
            for key in ("wakeups_per_s", "busiest_thread_wakeups_per_s", "cpu_ms_per_s")
        }
        result[name]["per_run"] = got
    result["load_average_at_start"] = args.load
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=10.0, help="idle seconds measured")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, metavar="DIR")
    add_output_args(parser)
    args = parser.parse_args()
    args.load = round(os.getloadavg()[0], 2)
    result = asyncio.run(run(args))
    rows = [
        [
            name,
            f"{result[name]['wakeups_per_s']:.1f}",
            f"{result[name]['busiest_thread_wakeups_per_s']:.1f}",
            f"{result[name]['cpu_ms_per_s']:.2f}",
        ]
        for name in ("agentd", "baseline")
        if name in result
    ]
    table = (
        markdown_table(["daemon", "wake-ups / s", "busiest thread / s", "CPU ms / s"], rows)
        + f"\n\nmedians of {args.runs} runs of {args.window:g} s; load average at start {args.load}"
    )
    emit(args, result, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
