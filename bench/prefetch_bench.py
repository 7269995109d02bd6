"""Recall prefetch benchmark (issues 4, 12): what memory costs and delivers per prompt.

    python bench/prefetch_bench.py [--prompts 200] [--latencies 0,0.5,3]
                                   [--tool-margin 0.2] [--concurrency 12]
                                   [--headers both|at-once|held]
                                   [--start-ttft 3] [--baseline-src DIR]
                                   [--json FILE] [--table]

Configurations: memory off, and memory on (20 topic files, model tier on) with
the recall side query answering after each of `--latencies` seconds
(`set_latency("recall", s)`), and memory on with the model tier off (which
separates the local tier's cost; `--no-local-only` skips it). One daemon per
configuration, a fresh session per prompt, `--prompts` prompts each. Every
prompt shares words with one topic, so the local tier matches it; every other
prompt is tool-using: its first main reply (ttft = recall latency +
`--tool-margin`, a main step that outlasts the side query) calls `read_file`
on a file of the workspace, and the model server's default responder answers
the forced `select_memories` side query with a topic no prompt matches
lexically.

Per configuration:
- prompt -> first main request at the model server, p50/p99 (one clock);
  goal: memory adds <= 2 ms p99 over memory off, at every latency;
- share of prompts whose first main request carried memory (its last user
  message contains "<system-reminder>") among those the local tier matched
  (`memory/recall` on the same text); goal >= 99%;
- share of tool-using prompts that received model-tier memory (an
  `agent/update` memory with tier "model"), and `memory/status` deliveries;
- main request -> recall side query at the model server, p50/p99 (both
  `request` log entries, one clock), how many side queries reached the server
  before their main request (goal: none) and how many were never sent.

Model server behaviour (`--headers`, default both): headers of a stream sent
at once, or held until the first token as several OpenAI-compatible servers
do (`ModelServer(hold_headers=True)`); each configuration above runs with
each. Side-query start (`--start-ttft S`, default 3, 0 skips): two more
configurations (headers held / at once) where every prompt's main reply has
a first token S seconds away and no prompt uses a tool, so the side query's
start is measured while the main request waits for its first token. With
`--baseline-src DIR` (a checkout of another commit, e.g. `git worktree add
/tmp/base main`) those two also run against a daemon of that code, side by
side in the same run.

The configurations run side by side (a daemon and a model server each) and
their prompts are interleaved, so that machine noise hits them alike. Prompts
are launched one at a time. Plain prompts run to their end before the next
one; tool-using prompts keep running in the background (at most
`--concurrency` at once, below the daemon's 32-connection pool), and no
prompt is launched within 20 ms before or 30 ms after the moment a background
prompt is due to wake (its scripted ttft or its side query's latency), so the
timed prompt path does not share the CPU with another prompt's burst.
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

from _common import (
    PROMPT_WORDS,
    TOPICS,
    Updates,
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    fmt,
    last_user_text,
    markdown_table,
    project_memory_dir,
    start_agentd,
    summary,
    write_topics,
)

from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import StdioClient

GOAL_ADDED_P99_MS = 2.0
GOAL_LOCAL_SHARE = 0.99
WAKE_BEFORE = 0.02
WAKE_AFTER = 0.03
GAP = 0.01
REMINDER = "<system-reminder>"


class Config:
    def __init__(
        self,
        memory: bool,
        latency: float,
        model_tier: bool = True,
        *,
        hold: bool = False,
        main_ttft: float = 0.0,
        baseline: Path | None = None,
    ) -> None:
        self.memory = memory
        self.latency = latency
        self.model_tier = memory and model_tier
        self.hold = hold  # the model server holds a stream's headers until its first token
        self.main_ttft = main_ttft  # > 0: every main reply's first token this far away
        self.baseline = baseline  # run the daemon of this source tree

    @property
    def name(self) -> str:
        if not self.memory:
            base = "off"
        elif self.main_ttft:
            base = f"on, main ttft {self.main_ttft:g} s"
        else:
            base = f"on, recall {self.latency:g} s" if self.model_tier else "on, model tier off"
        held = ", headers held" if self.hold else ""
        return f"{base}{held}{' [baseline]' if self.baseline else ''}"

    @property
    def key(self) -> str:
        if not self.memory:
            base = "memory_off"
        elif self.main_ttft:
            base = f"memory_on_main_ttft_{self.main_ttft:g}s"
        elif self.model_tier:
            base = f"memory_on_recall_{self.latency:g}s"
        else:
            base = "memory_on_local_only"
        return f"{base}{'_held' if self.hold else ''}{'_baseline' if self.baseline else ''}"

    @property
    def off_key(self) -> str:
        """The memory-off configuration this one is compared with (same server)."""
        return f"memory_off{'_held' if self.hold else ''}"

    @property
    def options(self) -> dict[str, Any]:
        if not self.memory:
            return {"memory": {"enabled": False}}
        return {} if self.model_tier else {"memory": {"modelTier": False}}


class Wakes:
    """When background prompts are due to do work, shared by every configuration."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def add(self, t: float) -> None:
        self.times.append(t)

    async def quiet(self) -> None:
        """Sleep until no background prompt is due to wake around now."""
        while True:
            now = time.time()
            self.times = [w for w in self.times if w + WAKE_AFTER > now]
            busy = [w for w in self.times if w - WAKE_BEFORE <= now]
            if not busy:
                return
            await asyncio.sleep(max(busy) + WAKE_AFTER - now)


class Runner:
    """One configuration: its model server, its daemon, its prompts."""

    def __init__(
        self, tmp: Path, cfg: Config, n: int, margin: float, concurrency: int, wakes: Wakes
    ) -> None:
        self.tmp, self.cfg, self.n, self.wakes = tmp, cfg, n, wakes
        self.ttft = (cfg.latency if cfg.model_tier else 0.0) + margin
        self.server = ModelServer(hold_headers=cfg.hold)
        self.updates = Updates()
        self.client: StdioClient | None = None
        self.ws = tmp / "ws"
        self.root = {"workspaceRoot": str(self.ws)}
        self.style = ""
        self.texts = [f"{PROMPT_WORDS[i % len(PROMPT_WORDS)]} [p{i}]" for i in range(n)]
        self.matched = [False] * n
        self.style_matched = 0
        self.sessions: list[str] = []
        self.slots = asyncio.Semaphore(concurrency)
        self.background: set[asyncio.Task[Any]] = set()
        self.first_requests: list[dict[str, Any]] = [{} for _ in range(n)]
        self.latency_ms = [0.0] * n
        self.failures: list[str] = []

    async def start(self) -> None:
        self.ws.mkdir(parents=True)
        (self.ws / "notes.txt").write_text("Build with `make`; the tests run with `make test`.\n")
        topics = write_topics(project_memory_dir(self.ws, self.tmp), len(TOPICS))
        self.style = str(topics[-1])  # "Answer style": shares no word with any prompt
        await self.server.start()
        if self.cfg.model_tier:
            self.server.set_latency("recall", self.cfg.latency)
        self.server.set_default_arguments("select_memories", {"paths": [self.style]})
        options = self.cfg.options
        env = bench_env(self.server.openai_base_url, self.tmp)
        args = None
        if self.cfg.baseline is not None:
            args, env = baseline_daemon(env, self.cfg.baseline)
        self.client = await start_agentd(env, options, self.updates, args)
        client = self.client
        if self.cfg.memory:
            await client.request("memory/status", self.root)  # the index is built
            for i, text in enumerate(self.texts):
                docs = (await client.request("memory/recall", {**self.root, "query": text}))["docs"]
                self.matched[i] = bool(docs)
                self.style_matched += any(d["path"] == self.style for d in docs)
        # Warm-up: the first prompt creates the HTTP client; not counted.
        await client.request(
            "agent/prompt", {"sessionId": await self._new_session(), "prompt": "hello"}
        )
        self.sessions = [await self._new_session() for _ in range(self.n)]

    async def _new_session(self) -> str:
        assert self.client is not None
        return str((await self.client.request("agent/newSession", self.root))["sessionId"])

    async def _finish(self, fut: asyncio.Future[Any], i: int) -> None:
        try:
            result = await asyncio.wait_for(fut, 60)
            if result.get("stopReason") != "end_turn":
                self.failures.append(f"prompt {i}: {result}")
        except Exception as exc:
            self.failures.append(f"prompt {i}: {exc!r}")
        finally:
            self.slots.release()

    def is_tool(self, i: int) -> bool:
        return i % 2 == 1 and not self.cfg.main_ttft

    async def launch(self, i: int) -> None:
        """Prompt i: timed up to its first main request; plain ones without a
        slow first token run to their end, the others in the background."""
        assert self.client is not None
        server = self.server
        tool = self.is_tool(i)
        marker = f"[p{i}]"
        await self.slots.acquire()
        if tool:
            server.add_rule(
                marker,
                {
                    "toolCalls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
                    "ttft": self.ttft,
                },
                times=1,
            )
        elif self.cfg.main_ttft:
            # Streams for a while after its first token: a side query that waits
            # for the response still goes out (and is measured) before the end.
            reply = {"chunks": ["o", "k"], "ttft": self.cfg.main_ttft, "chunkDelay": 0.3}
            server.add_rule(marker, reply, times=1)
        await self.wakes.quiet()
        after = max((e["id"] for e in server.log if "id" in e), default=0)
        t0 = time.time()
        _, fut = self.client.send_request(
            "agent/prompt", {"sessionId": self.sessions[i], "prompt": self.texts[i]}
        )
        req = await server.wait_for(
            lambda e: (
                e["type"] == "request"
                and e["id"] > after
                and e["purpose"] == "main"
                and marker in last_user_text(e["body"])
            ),
            timeout=30,
        )
        self.latency_ms[i] = (req["ts"] - t0) * 1000
        self.first_requests[i] = req
        if tool or self.cfg.main_ttft:
            self.wakes.add(req["ts"] + (self.ttft if tool else self.cfg.main_ttft))
            if not tool:
                self.wakes.add(req["ts"] + self.cfg.main_ttft + 0.3)
            if self.cfg.model_tier:
                self.wakes.add(t0 + self.cfg.latency)
            task = asyncio.get_running_loop().create_task(self._finish(fut, i))
            self.background.add(task)
            task.add_done_callback(self.background.discard)
        else:
            await self._finish(fut, i)

    async def result(self) -> dict[str, Any]:
        assert self.client is not None
        if self.background:
            await asyncio.gather(*self.background)
        n, cfg, style = self.n, self.cfg, self.style
        carried = [REMINDER in last_user_text(r["body"]) for r in self.first_requests]
        tool_ids = [i for i in range(n) if self.is_tool(i)]
        mem = [self.updates.of(self.sessions[i], "memory") for i in tool_ids]
        model_got = [any(u.get("tier") == "model" for u in m) for m in mem]
        model_style = [
            any(u.get("tier") == "model" and style in u.get("docs", []) for u in m) for m in mem
        ]
        status = await self.client.request("memory/status", self.root) if cfg.memory else {}
        pairs = list(zip(carried, self.matched, strict=True))
        n_matched = sum(self.matched)
        n_carried = sum(c for c, m in pairs if m)
        return {
            "config": cfg.name,
            "memory": cfg.memory,
            "model_tier": cfg.model_tier,
            "headers_held": cfg.hold,
            "main_ttft_s": cfg.main_ttft,
            "baseline_src": str(cfg.baseline) if cfg.baseline else None,
            "off_key": cfg.off_key,
            "side_query": self.side_query_start() if cfg.model_tier else None,
            "recall_latency_s": cfg.latency if cfg.model_tier else None,
            "prompts": n,
            "tool_prompts": len(tool_ids),
            "tool_first_step_s": self.ttft,
            "prompt_to_request_ms": summary(self.latency_ms),
            "prompt_to_request_ms_plain": summary(
                self.latency_ms[i] for i in range(n) if i % 2 == 0
            ),
            "prompt_to_request_ms_tool": summary(self.latency_ms[i] for i in tool_ids),
            "local_matched": n_matched,
            "local_matched_and_carried": n_carried,
            "local_share": (n_carried / n_matched) if n_matched else None,
            "carried_without_match": sum(c for c, m in pairs if not m),
            "model_doc_matched_locally": self.style_matched,
            "tool_prompts_with_model_memory": sum(model_got),
            "tool_prompts_with_model_memory_doc": sum(model_style),
            "model_share": (sum(model_got) / len(tool_ids))
            if (tool_ids and cfg.model_tier)
            else None,
            "deliveries": status.get("deliveries"),
            "failures": self.failures[:10],
            "failure_count": len(self.failures),
        }

    def side_query_start(self) -> dict[str, Any]:
        """Each prompt's main request -> its recall side query, at the model server."""
        log = self.server.log
        position = {(e["type"], e.get("id")): k for k, e in enumerate(log)}
        recalls: dict[str, dict[str, Any]] = {}
        for r in self.server.requests("recall"):
            text = last_user_text(r["body"])
            for i in range(self.n):
                if f"[p{i}]" in text:
                    recalls.setdefault(f"[p{i}]", r)
        gaps: list[float] = []
        before = missing = before_first_token = 0
        for i, main in enumerate(self.first_requests):
            recall = recalls.get(f"[p{i}]")
            if recall is None:
                missing += 1
                continue
            gaps.append((recall["ts"] - main["ts"]) * 1000)
            before += recall["id"] < main["id"]
            first = position.get(("first_chunk", main["id"]), len(log))
            before_first_token += position[("request", recall["id"])] < first
        return {
            "main_to_recall_ms": summary(gaps),
            "recall_before_main": before,
            "recall_before_main_first_token": before_first_token,
            "recall_not_sent": missing,
        }

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.shutdown()
        await self.server.stop()


def cell(s: dict[str, Any]) -> str:
    return f"p50 {fmt(s['median'], ' ms')}, p99 {fmt(s['p99'], ' ms')} (min {fmt(s['min'], ' ms')})"


def ratio(k: int, n: int, share: float | None) -> str:
    return f"{k}/{n} ({fmt(None if share is None else share * 100, '%', 1)})"


def build_table(r: dict[str, Any]) -> str:
    configs = r["configs"]
    rows = []
    for c in configs.values():
        if not c["memory"]:
            rows.append(
                [
                    f"prompt -> first main request, memory {c['config']}",
                    cell(c["prompt_to_request_ms"]),
                    "baseline",
                    "-",
                ]
            )
    for c in configs.values():
        if not c["memory"]:
            continue
        s = c["prompt_to_request_ms"]
        off_s = configs[c["off_key"]]["prompt_to_request_ms"]
        added = s["p99"] - off_s["p99"]
        rows.append(
            [
                f"prompt -> first main request, memory {c['config']}",
                cell(s),
                f"off p99 + {GOAL_ADDED_P99_MS:g} ms",
                f"{added:+.2f} ms p99 (p50 {s['median'] - off_s['median']:+.2f}) "
                f"{'PASS' if added <= GOAL_ADDED_P99_MS else 'FAIL'}",
            ]
        )
    for c in configs.values():
        if not c["memory"]:
            continue
        share = c["local_share"]
        rows.append(
            [
                f"first request carried memory (local matched), {c['config']}",
                ratio(c["local_matched_and_carried"], c["local_matched"], share),
                f"goal >= {GOAL_LOCAL_SHARE * 100:g}%",
                "n/a" if share is None else ("PASS" if share >= GOAL_LOCAL_SHARE else "FAIL"),
            ]
        )
    for c in configs.values():
        if not c["memory"]:
            continue
        share = c["model_share"]
        if not c["model_tier"] or not c["tool_prompts"]:
            continue
        rows.append(
            [
                f"tool prompts given model-tier memory, {c['config']}",
                ratio(c["tool_prompts_with_model_memory"], c["tool_prompts"], share),
                f"main step = latency + {r['tool_margin_s']:g} s",
                "info",
            ]
        )
    for c in configs.values():
        sq = c["side_query"]
        if not sq:
            continue
        gap = sq["main_to_recall_ms"]
        before = sq["recall_before_main"]
        rows.append(
            [
                f"main request -> recall side query at the server, {c['config']}",
                cell(gap) if gap.get("n") else "n/a",
                "after the main request, within a few ms",
                f"before main: {before}, before main's first token: "
                f"{sq['recall_before_main_first_token']}/{gap.get('n', 0)}, "
                f"never sent: {sq['recall_not_sent']} {'PASS' if before == 0 else 'FAIL'}",
            ]
        )
    fails = sum(c["failure_count"] for c in configs.values())
    note = (
        f"\n{r['prompts']} prompts per configuration (half tool-using, except with a main "
        f"ttft); failed prompts: {fails}; "
        f"load average at start {r['machine']['loadavg_start']}, "
        f"at end {r['machine']['loadavg_end']}; "
        f"{r['elapsed_s']} s."
    )
    return markdown_table(["metric", "agentd", "baseline/goal", "ratio/verdict"], rows) + note


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    load0 = [round(x, 2) for x in os.getloadavg()]
    holds = {"at-once": [False], "held": [True], "both": [False, True]}[args.headers]
    configs: list[Config] = []
    for hold in holds:
        configs.append(Config(False, 0.0, hold=hold))
        configs += [Config(True, s, hold=hold) for s in args.latencies]
        if not args.no_local_only:
            configs.append(Config(True, 0.0, model_tier=False, hold=hold))
    if args.start_ttft > 0:
        for base in [None, args.baseline_src] if args.baseline_src else [None]:
            for hold in (True, False):
                configs.append(
                    Config(True, 0.0, hold=hold, main_ttft=args.start_ttft, baseline=base)
                )
    # Each memory-on configuration is compared with memory off on the same server.
    for off_key, hold in (("memory_off", False), ("memory_off_held", True)):
        keys = {c.key for c in configs}
        if off_key not in keys and any(c.off_key == off_key for c in configs):
            configs.insert(0, Config(False, 0.0, hold=hold))
    wakes = Wakes()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentd-prefetch-bench-") as tmp_s:
        runners = [
            Runner(
                Path(tmp_s) / f"c{k}", cfg, args.prompts, args.tool_margin, args.concurrency, wakes
            )
            for k, cfg in enumerate(configs)
        ]
        try:
            for r in runners:
                await r.start()
            await asyncio.sleep(0.5)
            for i in range(args.prompts):
                # Interleaved, the starting configuration rotating: machine noise hits all alike.
                k0 = i % len(runners)
                for r in runners[k0:] + runners[:k0]:
                    await r.launch(i)
                    await asyncio.sleep(GAP)
            for r in runners:
                out[r.cfg.key] = await r.result()
        finally:
            for r in runners:
                await r.stop()
    for c in out.values():
        if c["memory"]:
            off_s = out[c["off_key"]]["prompt_to_request_ms"]
            c["added_p99_ms"] = round(c["prompt_to_request_ms"]["p99"] - off_s["p99"], 3)
            c["added_p50_ms"] = round(c["prompt_to_request_ms"]["median"] - off_s["median"], 3)
    return {
        "prompts": args.prompts,
        "headers": args.headers,
        "start_ttft_s": args.start_ttft,
        "baseline_src": str(args.baseline_src) if args.baseline_src else None,
        "tool_margin_s": args.tool_margin,
        "concurrency": args.concurrency,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": load0,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "goals": {"added_p99_ms": GOAL_ADDED_P99_MS, "local_share": GOAL_LOCAL_SHARE},
        "configs": out,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--prompts", type=int, default=200, help="prompts per configuration (default 200)"
    )
    parser.add_argument(
        "--latencies",
        type=lambda s: [float(x) for x in s.split(",") if x.strip()],
        default=[0.0, 0.5, 3.0],
        help="recall side-query latencies in seconds (default 0,0.5,3)",
    )
    parser.add_argument(
        "--tool-margin",
        type=float,
        default=0.2,
        help="a tool-using prompt's first main step takes recall latency + this (default 0.2 s)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=12,
        help="tool-using prompts running at once (default 12)",
    )
    parser.add_argument(
        "--no-local-only",
        action="store_true",
        help="skip the extra configuration memory on with the model tier off",
    )
    parser.add_argument(
        "--headers",
        choices=["both", "at-once", "held"],
        default="both",
        help="the model server sends a stream's headers at once, holds them until the "
        "first token, or each in turn (default both)",
    )
    parser.add_argument(
        "--start-ttft",
        type=float,
        default=3.0,
        help="side-query start configurations: main first token this far away (default 3 s; "
        "0 skips them)",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        metavar="DIR",
        help="also run the side-query start configurations with the daemon of this checkout",
    )
    add_output_args(parser)
    args = parser.parse_args()
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    if args.prompts < 2:
        parser.error("--prompts must be >= 2")
    if not 1 <= args.concurrency <= 14:
        parser.error("--concurrency must be 1..14 (each holds 2 of the daemon's 32 connections)")
    result = asyncio.run(run(args))
    emit(args, result, build_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
