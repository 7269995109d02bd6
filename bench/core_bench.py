"""Daemon core benchmark (issue 2): start-up, RSS, prompt path, streaming, cancel.

    python bench/core_bench.py [--runs 20] [--baseline-src DIR] [--json FILE] [--table]

Measured side by side in one run, medians and p90 over `--runs` runs each:

- spawn -> `initialize` reply: `python -m agentd serve` against a bare pygls 2
  server (`bench/bare_pygls_server.py`), same interpreter, spawned the same
  way, runs interleaved (goal: ratio <= 1.1);
- VmRSS of the daemon at the initialize reply, after the post-initialize
  warm-up has finished (goal <= 60 MB), and after the first prompt;
- prompt -> first request at the model server: from writing `agent/prompt`
  to the model server's `request` log entry (one clock, time.time(), in this
  process), memory off and memory on (20 topic files, default settings),
  after one warm-up prompt per daemon; the cold first prompt is reported
  apart (goal <= 2 ms);
- model first token -> chunk at the client: the server's `first_chunk` ts to
  the arrival of the first `agent/update` message_chunk (goal <= 1 ms);
- cancel: `$/cancelRequest` mid-stream -> the -32800 reply, and -> the
  model server's `disconnect` entry (goal <= 10 ms each);
- cold first prompt -> first request bytes (the model server's `arrivedTs`), a
  fresh daemon per run, against the bare pygls server sending agentd's request
  with httpx (goal: within 2x), a warm prompt in the same daemon (a new
  session's first; goal <= 2 ms), and a steady one (the same session prompted
  again once its last turn has settled; goal <= 2 ms): `_cold.py`.

With `--baseline-src DIR` (a checkout of another commit, `git archive main | tar
-x -C DIR`) the spawn / RSS runs, the prompt -> first model request rows
(memory off and on, interleaved with agentd's) and the cold rows also run
that code's daemon.

JSON goes to stdout (or --json FILE), the markdown table to stderr (or stdout
with --table).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cold import bench_cold, cold_rows
from _common import (
    AGENTD_ARGS,
    BARE_ARGS,
    PROMPT_WORDS,
    Updates,
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    fmt,
    markdown_table,
    project_memory_dir,
    start_agentd,
    summary,
    write_topics,
)

from agentd.testing.daemon import rss_mib
from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import RpcError, StdioClient

GOALS = {
    "spawn_ratio": 1.1,
    "rss_mb": 60.0,
    "prompt_to_request_ms": 2.0,
    "chunk_ms": 1.0,
    "cancel_ms": 10.0,
}
REPLY = {"chunks": ["Hello", ", ", "world", "."], "ttft": 0.03}
LONG_REPLY = {"chunks": ["word "] * 400, "chunkDelay": 0.01}


# --- spawn -> initialize ----------------------------------------------------------


async def spawn_once(args: list[str], env: dict[str, str], warmup_probe: bool) -> dict[str, float]:
    t0 = time.perf_counter()
    client = await StdioClient.spawn(env, None, args=args)
    try:
        await client.request(
            "initialize",
            {"processId": os.getpid(), "capabilities": {}, "initializationOptions": {}},
        )
        out = {
            "init_ms": (time.perf_counter() - t0) * 1000,
            "rss_init_mb": rss_mib(client.proc.pid),
        }
        client.notify("initialized", {})
        if warmup_probe:
            # A request that needs the warmed-up App and changes nothing: an unknown
            # session answers -32001 once the post-initialize imports are done.
            try:
                await client.request("agent/resetSession", {"sessionId": "no-such-session"})
            except RpcError:
                pass
            out["rss_warm_mb"] = rss_mib(client.proc.pid)
        return out
    finally:
        await client.shutdown()


async def bench_spawn(
    runs: int, env: dict[str, str], baseline: Path | None = None
) -> dict[str, Any]:
    agentd: list[dict[str, float]] = []
    bare: list[dict[str, float]] = []
    base: list[dict[str, float]] = []
    order = [("agentd", AGENTD_ARGS, env), ("bare", BARE_ARGS, env)]
    if baseline is not None:
        order.append(("baseline", *baseline_daemon(env, baseline)))
    # One untimed spawn of each first: the OS file cache, .pyc files.
    for _, args, run_env in order:
        await spawn_once(args, run_env, False)
    for i in range(runs):
        # Alternate which goes first, so that drift in machine load hits both.
        for name, args, run_env in order if i % 2 == 0 else order[::-1]:
            res = await spawn_once(args, run_env, warmup_probe=name != "bare")
            {"agentd": agentd, "bare": bare, "baseline": base}[name].append(res)
    a, b = summary(r["init_ms"] for r in agentd), summary(r["init_ms"] for r in bare)
    extra: dict[str, Any] = {}
    if base:
        extra = {
            "baseline_ms": summary(r["init_ms"] for r in base),
            "baseline_rss_after_warmup_mb": summary((r["rss_warm_mb"] for r in base), 1),
        }
    return {
        **extra,
        "agentd_ms": a,
        "bare_pygls_ms": b,
        "ratio_median": round(a["median"] / b["median"], 3),
        "ratio_p90": round(a["p90"] / b["p90"], 3),
        "agentd_rss_at_init_mb": summary((r["rss_init_mb"] for r in agentd), 1),
        "agentd_rss_after_warmup_mb": summary((r["rss_warm_mb"] for r in agentd), 1),
        "bare_pygls_rss_at_init_mb": summary((r["rss_init_mb"] for r in bare), 1),
    }


# --- the prompt path ----------------------------------------------------------------


class Daemon:
    def __init__(
        self, server: ModelServer, tmp: Path, memory: bool, baseline: Path | None = None
    ) -> None:
        self.server = server
        self.memory = memory
        self.baseline = baseline
        self.tmp = tmp
        self.ws = tmp / "ws"
        self.ws.mkdir(parents=True)
        (self.ws / "main.py").write_text("print('hi')\n")
        if memory:
            write_topics(project_memory_dir(self.ws, tmp), 20)
        self.updates = Updates()
        self.client: StdioClient | None = None

    async def start(self) -> None:
        options = {} if self.memory else {"memory": {"enabled": False}}
        env = bench_env(self.server.openai_base_url, self.tmp)
        # This tree's daemon launched as the baseline checkout's is.
        args, env = baseline_daemon(env, self.baseline)
        self.client = await start_agentd(env, options, self.updates, args=args)
        # The warm-up over, as the cold rows have always had it (agent/newSession
        # no longer waits for it): a request that needs the App, changing nothing.
        try:
            await self.client.request("agent/resetSession", {"sessionId": "no-such-session"})
        except RpcError:
            pass

    async def new_session(self) -> str:
        assert self.client is not None
        sid = (await self.client.request("agent/newSession", {"workspaceRoot": str(self.ws)}))[
            "sessionId"
        ]
        if self.memory:
            await self.client.request(
                "memory/status", {"workspaceRoot": str(self.ws)}
            )  # index ready
        return str(sid)

    def last_id(self) -> int:
        return max((e["id"] for e in self.server.log if "id" in e), default=0)

    async def timed_prompt(self, text: str) -> dict[str, float]:
        """One prompt in a fresh session: prompt -> request, first token -> client chunk."""
        assert self.client is not None
        server = self.server
        sid = await self.new_session()
        await asyncio.sleep(0.02)  # let the session's background start-up settle
        server.enqueue(REPLY)
        after = self.last_id()
        first_chunk_at = self.updates.wait(
            lambda s, u: s == sid and u.get("kind") == "message_chunk"
        )
        t0 = time.time()
        _, fut = self.client.send_request("agent/prompt", {"sessionId": sid, "prompt": text})
        req = await server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > after
        )
        first = await server.wait_for(lambda e: e["type"] == "first_chunk" and e["id"] == req["id"])
        at_client = await asyncio.wait_for(first_chunk_at, 10)
        result = await asyncio.wait_for(fut, 10)
        assert result["stopReason"] == "end_turn", result
        memory = [u for u in self.updates.of(sid, "memory")]
        return {
            "prompt_to_request_ms": (req["ts"] - t0) * 1000,
            "chunk_ms": (at_client - first["ts"]) * 1000,
            "memory_delivered": float(bool(memory)),
        }

    async def timed_cancel(self) -> dict[str, float]:
        assert self.client is not None
        server = self.server
        sid = await self.new_session()
        await asyncio.sleep(0.02)
        server.enqueue(LONG_REPLY)
        after = self.last_id()
        chunk_seen = self.updates.wait(lambda s, u: s == sid and u.get("kind") == "message_chunk")
        msg_id, fut = self.client.send_request(
            "agent/prompt", {"sessionId": sid, "prompt": "write an essay"}
        )
        replied: list[float] = []
        fut.add_done_callback(lambda f: replied.append(time.time()))
        req = await server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > after
        )
        await asyncio.wait_for(chunk_seen, 10)
        await asyncio.sleep(0.025)  # mid-stream, between two chunks
        t0 = time.time()
        self.client.notify("$/cancelRequest", {"id": msg_id})
        try:
            await asyncio.wait_for(fut, 10)
            raise AssertionError("the cancelled prompt was answered with a result")
        except RpcError as exc:
            assert exc.code == -32800, exc
        gone = await server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == req["id"])
        return {
            "cancel_reply_ms": (replied[0] - t0) * 1000,
            "cancel_disconnect_ms": (gone["ts"] - t0) * 1000,
        }

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.shutdown()


async def bench_prompts(
    server: ModelServer, tmp: Path, runs: int, baseline: Path | None = None
) -> dict[str, Any]:
    """Memory off and memory on, each its own daemon, runs interleaved between
    them; with a baseline checkout, its two daemons too (prompt rows only)."""
    daemons = {
        "memory_off": Daemon(server, tmp / "off", False),
        "memory_on": Daemon(server, tmp / "on", True),
    }
    if baseline is not None:
        daemons["baseline_memory_off"] = Daemon(server, tmp / "b-off", False, baseline)
        daemons["baseline_memory_on"] = Daemon(server, tmp / "b-on", True, baseline)
    try:
        for d in daemons.values():
            await d.start()
        cold: dict[str, dict[str, float]] = {}
        rss_first: dict[str, float] = {}
        for key, d in daemons.items():
            assert d.client is not None
            cold[key] = await d.timed_prompt(PROMPT_WORDS[0])
            rss_first[key] = rss_mib(d.client.proc.pid)
        warm: dict[str, list[dict[str, float]]] = {k: [] for k in daemons}
        cancels: dict[str, list[dict[str, float]]] = {k: [] for k in daemons}
        order = list(daemons)
        for i in range(runs):
            for key in order if i % 2 == 0 else order[::-1]:
                text = PROMPT_WORDS[(i + 1) % len(PROMPT_WORDS)]
                warm[key].append(await daemons[key].timed_prompt(text))
        for i in range(runs):
            for key in order if i % 2 == 0 else order[::-1]:
                if daemons[key].baseline is None:
                    cancels[key].append(await daemons[key].timed_cancel())
        out: dict[str, Any] = {}
        for key, d in daemons.items():
            if d.baseline is not None:
                out[key] = {
                    "prompt_to_request_ms": summary(r["prompt_to_request_ms"] for r in warm[key])
                }
                continue
            res: dict[str, Any] = {
                "cold_prompt_to_request_ms": round(cold[key]["prompt_to_request_ms"], 3),
                "cold_chunk_ms": round(cold[key]["chunk_ms"], 3),
                "rss_after_first_prompt_mb": round(rss_first[key], 1),
                "prompt_to_request_ms": summary(r["prompt_to_request_ms"] for r in warm[key]),
                "chunk_ms": summary(r["chunk_ms"] for r in warm[key]),
                "cancel_reply_ms": summary(r["cancel_reply_ms"] for r in cancels[key]),
                "cancel_disconnect_ms": summary(r["cancel_disconnect_ms"] for r in cancels[key]),
            }
            if d.memory:
                assert d.client is not None
                res["prompts_with_memory_delivered"] = (
                    sum(r["memory_delivered"] for r in warm[key]) / runs
                )
                status = await d.client.request("memory/status", {"workspaceRoot": str(d.ws)})
                res["deliveries"] = status.get("deliveries")
            out[key] = res
        return out
    finally:
        for d in daemons.values():
            await d.stop()


# --- report -------------------------------------------------------------------------


def verdict(value: float, goal: float) -> str:
    return "PASS" if value <= goal else "FAIL"


def ms(s: dict[str, Any]) -> str:
    return f"{fmt(s.get('median'), ' ms')} (p90 {fmt(s.get('p90'), ' ms')})"


def pair(a: Any, b: Any, unit: str, digits: int = 2) -> str:
    return f"{fmt(a, unit, digits)} / {fmt(b, unit, digits)}"


def build_table(r: dict[str, Any]) -> str:
    sp, off, on = r["spawn"], r["memory_off"], r["memory_on"]
    rows = [
        [
            "spawn -> initialize reply",
            ms(sp["agentd_ms"]),
            f"bare pygls {ms(sp['bare_pygls_ms'])}",
            f"{sp['ratio_median']:.2f} (p90 {sp['ratio_p90']:.2f}) "
            f"{verdict(sp['ratio_median'], GOALS['spawn_ratio'])} (goal <= {GOALS['spawn_ratio']})",
        ],
    ]
    if "baseline_ms" in sp:
        rows.append(
            ["spawn -> initialize reply (baseline checkout)", ms(sp["baseline_ms"]), "-", "info"]
        )
    rows += [
        [
            "RSS after initialize + warm-up",
            f"{fmt(sp['agentd_rss_after_warmup_mb']['median'], ' MB', 1)}",
            f"goal <= {GOALS['rss_mb']:.0f} MB"
            + (
                f"; baseline checkout {fmt(sp['baseline_rss_after_warmup_mb']['median'], ' MB', 1)}"
                if "baseline_rss_after_warmup_mb" in sp
                else ""
            ),
            verdict(sp["agentd_rss_after_warmup_mb"]["median"], GOALS["rss_mb"]),
        ],
        [
            "RSS at the initialize reply",
            f"{fmt(sp['agentd_rss_at_init_mb']['median'], ' MB', 1)}",
            f"bare pygls {fmt(sp['bare_pygls_rss_at_init_mb']['median'], ' MB', 1)}",
            "info",
        ],
        [
            "RSS after first prompt (memory off / on)",
            pair(off["rss_after_first_prompt_mb"], on["rss_after_first_prompt_mb"], " MB", 1),
            "-",
            "info",
        ],
    ]
    for label, res in (("memory off", off), ("memory on, 20 topics", on)):
        s = res["prompt_to_request_ms"]
        rows.append(
            [
                f"prompt -> first model request ({label})",
                ms(s),
                f"goal <= {GOALS['prompt_to_request_ms']:g} ms",
                verdict(s["median"], GOALS["prompt_to_request_ms"]),
            ]
        )
    base_off, base_on = r.get("baseline_memory_off"), r.get("baseline_memory_on")
    if base_off is not None and base_on is not None:
        for label, res in (("memory off", base_off), ("memory on, 20 topics", base_on)):
            rows.append(
                [
                    f"prompt -> first model request ({label}), baseline checkout",
                    ms(res["prompt_to_request_ms"]),
                    "interleaved with the rows above",
                    "info",
                ]
            )
    rows.append(
        [
            "cold first prompt -> first model request (memory off / on)",
            pair(off["cold_prompt_to_request_ms"], on["cold_prompt_to_request_ms"], " ms"),
            "-",
            "info",
        ]
    )
    for label, res in (("memory off", off), ("memory on", on)):
        s = res["chunk_ms"]
        rows.append(
            [
                f"model first token -> client chunk ({label})",
                ms(s),
                f"goal <= {GOALS['chunk_ms']:g} ms",
                verdict(s["median"], GOALS["chunk_ms"]),
            ]
        )
    for key, label in (
        ("cancel_reply_ms", "cancel -> -32800 reply"),
        ("cancel_disconnect_ms", "cancel -> model disconnect"),
    ):
        for mem, res in (("memory off", off), ("memory on", on)):
            s = res[key]
            rows.append(
                [
                    f"{label} ({mem})",
                    ms(s),
                    f"goal <= {GOALS['cancel_ms']:g} ms",
                    verdict(s["median"], GOALS["cancel_ms"]),
                ]
            )
    head = ["metric", "agentd", "baseline/goal", "ratio/verdict"]
    table = markdown_table(head, rows)
    cold = r["cold"]
    table += "\n\n" + markdown_table(
        ["metric", "agentd", "baseline checkout", "bare pygls + httpx", "verdict"],
        cold_rows(cold, "LSP"),
    )
    note = (
        f"\n{r['runs']} runs per figure; verdicts on medians; load average at start "
        f"{r['machine']['loadavg_start']}, at end {r['machine']['loadavg_end']}; "
        f"{r['elapsed_s']} s."
    )
    return table + note


async def run(runs: int, baseline: Path | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    load0 = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="agentd-core-bench-") as tmp_s:
        tmp = Path(tmp_s)
        async with ModelServer() as server:
            env = bench_env(server.openai_base_url, tmp / "spawn")
            spawn = await bench_spawn(runs, env, baseline)
            prompts = await bench_prompts(server, tmp, runs, baseline)
            cold = await bench_cold("lsp", server, tmp, runs, baseline)
            off, on = prompts["memory_off"], prompts["memory_on"]
    return {
        "runs": runs,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": load0,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "goals": GOALS,
        "spawn": spawn,
        "memory_off": off,
        "memory_on": on,
        "baseline_memory_off": prompts.get("baseline_memory_off"),
        "baseline_memory_on": prompts.get("baseline_memory_on"),
        "cold": cold,
        "baseline_src": str(baseline) if baseline is not None else None,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="runs per figure (default 20)")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        metavar="DIR",
        help="also run the daemon of this checkout (spawn, RSS, prompt and cold rows)",
    )
    add_output_args(parser)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    result = asyncio.run(run(args.runs, args.baseline_src))
    emit(args, result, build_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
