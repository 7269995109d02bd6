"""Compaction benchmark (issue 15): a long session inside a 32k-token window.

    python bench/compaction_bench.py [--turns 500] [--window 32768] [--seed 15]
                                     [--baseline-src DIR] [--json FILE] [--table]

A scripted session of `--turns` prompts against the bundled model server
with a context window of `--window` tokens (`ModelServer(context_window=)`:
a request over it is refused with OpenAI's 400 `context_length_exceeded`,
as the real API refuses it). The daemon is not told the window: it reads it
from the server's `/models` (before that, its 32k fallback). Every prompt
has the model call `read_file` on one of 40 workspace files of 5-50 KB
(seeded), then answer. 20 prompts spread over the session state a fact as a
constraint ("Constraint 7: always ..."), 10 more state one in passing ("By
the way, ..."); memory is off, so compaction alone decides what survives.
Requests of purpose `compact` are answered by the model server's stand-in
summariser (it quotes the user's sentences that hold a constraint word;
`agentd/testing/model_server/summarise.py`).

Figures:
- errors: prompts that did not end with `end_turn`, and requests the model
  server refused as over the window (an overflow is recovered by a
  compaction and a retry, but still counts here); goal 0;
- peak request: the largest main request's input tokens as the server
  counts them (and with its `max_tokens`), against the window; goal under it;
- compactions: `compaction` updates by status and trigger, summariser
  requests, tool outputs cleared, messages summarised;
- prompt -> first main request at the model server (one clock), p50/p99,
  split by what compaction did before that request: nothing; swapped in a
  summary made between turns or cleared old tool output (no wait); waited
  for a summary (the request would not have fit). Beside it, a baseline
  daemon with compaction off runs the same script against a server without
  a window, its session reset whenever its input passes the window less 4k
  (it would fail otherwise); with `--baseline-src DIR` (e.g. `git worktree
  add /tmp/base main`) the baseline runs that code instead. Both daemons'
  prompts are interleaved, so machine noise hits them alike. The time grows
  with the request's size (the body is written and parsed), so the baseline
  is given for its turns whose first request is as large as the compacting
  daemon's (between their 10th and 90th percentiles). It also grows with the
  number of messages (each is converted and parsed on its own): a compacted
  history holds many small ones (stubs of cleared output) where the
  baseline's holds a few large ones; `per_turn` in the JSON has each turn's
  time, tokens and messages;
- what compaction's own work costs, in process, on the compacting daemon's
  final history (loaded from its transcript): the check before each request
  (count, threshold, the answer's room, the re-anchoring after it), a
  clearing of old tool output and a summary swap, p50/p99 over many runs
  (load-proof figures: no I/O, no scheduler);
- fact survival: how many of the 20 constraint facts (and of the 10 facts
  in passing) are, verbatim, in the last main request. Goal 20/20 for
  constraints. What this proves and what not: the stand-in returns every
  constraint sentence it is given, so 20/20 shows that agentd carries what
  a summariser returns across every compaction and renders it into the
  request; it does not show that a real model quotes every constraint
  (that is what the summariser's instructions ask of it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Updates,
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    fmt,
    last_user_text,
    markdown_table,
    start_agentd,
    summary,
)

from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import StdioClient

FILES = 40
FACTS = 20
ASIDES = 10
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "vector",
    "matrix",
    "parser",
    "lexer",
    "token",
    "buffer",
    "socket",
    "stream",
    "queue",
    "worker",
    "thread",
    "cache",
    "index",
    "shard",
]

CONSTRAINTS = [
    "always run the integration tests against db-blue-{n}",
    "never push to the release-{n} branch on Fridays",
    "the API timeout must stay at {n}00 ms",
    "always pin the base image to python:3.11.{n}",
    "never log the user_id field in module m{n}",
    "use the feature flag ff-{n} for the new parser",
    "the retry budget must be {n} attempts at most",
    "always keep the public API of pkg{n} backwards compatible",
    "never call the billing service from worker-{n}",
    "use port 9{n:03d} for the local metrics exporter",
]
ASIDE = "By the way, the codename of milestone {n} is {word}-{n}{n}."


def fact_text(k: int) -> str:
    return f"Constraint {k}: {CONSTRAINTS[k % len(CONSTRAINTS)].format(n=k + 1)}."


def aside_text(k: int, rng: random.Random) -> str:
    return ASIDE.format(n=k + 1, word=rng.choice(WORDS).capitalize())


def write_workspace(root: Path, rng: random.Random) -> list[tuple[str, int]]:
    root.mkdir(parents=True)
    files = []
    for i in range(FILES):
        size = rng.randint(5_000, 50_000)
        lines: list[str] = []
        total = 0
        n = 0
        while total < size:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
            line = f"def f{i}_{n}(x):  # {words}"
            lines.append(line)
            total += len(line) + 1
            n += 1
        name = f"src/mod{i:02d}.py"
        path = root / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        files.append((name, path.stat().st_size))
    return files


class Script:
    """The session: one prompt per turn, the facts spread over it."""

    def __init__(self, turns: int, rng: random.Random, files: list[tuple[str, int]]) -> None:
        self.turns = turns
        step = max(1, turns // (FACTS + ASIDES))
        slots = list(range(step // 2, turns, step))[: FACTS + ASIDES]
        rng.shuffle(slots)
        self.fact_at = {t: k for k, t in enumerate(sorted(slots[:FACTS]))}
        self.aside_at = {t: k for k, t in enumerate(sorted(slots[FACTS:]))}
        self.asides = [aside_text(k, rng) for k in range(ASIDES)]
        self.files = [rng.choice(files)[0] for _ in range(turns)]

    def prompt(self, t: int) -> str:
        text = f"[t{t}] Please look at {self.files[t]} and tell me what f{t % 7} does."
        if t in self.fact_at:
            text += " " + fact_text(self.fact_at[t])
        if t in self.aside_at:
            text += " " + self.asides[self.aside_at[t]]
        return text


def request_tokens(body: dict[str, Any]) -> int:
    """A request's input tokens as the model server counts them."""
    chars = len(json.dumps(body["messages"])) + len(json.dumps(body.get("tools", [])))
    return chars // 4


class Runner:
    def __init__(
        self, name: str, tmp: Path, script: Script, window: int, baseline: Path | None
    ) -> None:
        self.name = name
        self.tmp = tmp
        self.script = script
        self.window = window
        self.baseline = baseline
        self.compacting = name == "compaction"
        # The baseline's server has no window: its daemon does not compact,
        # and its session is reset instead (see `reset_at`).
        self.server = ModelServer(context_window=window if self.compacting else None)
        self.updates = Updates()
        self.client: StdioClient | None = None
        self.sid = ""
        self.ws = tmp / "ws"
        self.latency_ms: list[float] = []
        self.sizes: list[int] = []  # the first request's input tokens, per turn
        self.counts: list[int] = []  # and its number of messages
        self.kind: list[str] = []  # none / swap / wait, per turn
        self.stops: list[str] = []
        self.resets = 0
        # The baseline has no compaction: its session is reset before its
        # requests would pass the window (its server has none, to be sure).
        self.reset_at = window - 4096

    async def start(self, files_from: Path) -> None:
        os.symlink(files_from, self.ws)
        await self.server.start()
        env = bench_env(self.server.openai_base_url, self.tmp)
        options: dict[str, Any] = {"memory": {"enabled": False}}
        args = None
        if not self.compacting:
            if self.baseline is not None:
                args, env = baseline_daemon(env, self.baseline)
            else:
                options["compaction"] = {"enabled": False}
        self.client = await start_agentd(env, options, self.updates, args)
        self.sid = await self.new_session()

    async def new_session(self) -> str:
        assert self.client is not None
        result = await self.client.request("agent/newSession", {"workspaceRoot": str(self.ws)})
        return str(result["sessionId"])

    async def turn(self, t: int) -> None:
        assert self.client is not None
        marker = f"[t{t}]"
        call = {"name": "read_file", "arguments": {"path": self.script.files[t]}}
        self.server.add_rule(marker, {"toolCalls": [call]}, times=1)
        if not self.compacting:
            usage = self.updates.of(self.sid, "usage")
            if usage and usage[-1]["inputTokens"] > self.reset_at:
                await self.client.request("agent/resetSession", {"sessionId": self.sid})
                self.resets += 1
        seen = len(self.updates.by_session.get(self.sid, []))
        after = max((e["id"] for e in self.server.log if "id" in e), default=0)
        t0 = time.time()
        _, fut = self.client.send_request(
            "agent/prompt", {"sessionId": self.sid, "prompt": self.script.prompt(t)}
        )
        req = await self.server.wait_for(
            lambda e: (
                e["type"] == "request"
                and e["id"] > after
                and e["purpose"] == "main"
                and e.get("replySource") != "overflow"
                and marker in last_user_text(e["body"])
            ),
            timeout=300,
        )
        self.latency_ms.append((req["ts"] - t0) * 1000)
        self.sizes.append(request_tokens(req["body"]))
        self.counts.append(len(req["body"]["messages"]))
        result = await asyncio.wait_for(fut, 300)
        self.stops.append(str(result.get("stopReason")))
        before = [
            u
            for ts, u in self.updates.by_session[self.sid][seen:]
            if u.get("kind") == "compaction" and ts <= req["ts"]
        ]
        if any(u["status"] == "started" for u in before):
            self.kind.append("wait")
        elif any(u["status"] == "done" for u in before):
            self.kind.append("swap")
        else:
            self.kind.append("none")

    def result(self) -> dict[str, Any]:
        mains = self.server.requests("main")
        peak_input = peak_total = 0
        for r in mains:
            body = r["body"]
            tokens = (
                len(json.dumps(body["messages"])) + len(json.dumps(body.get("tools", [])))
            ) // 4
            peak_input = max(peak_input, tokens)
            peak_total = max(peak_total, tokens + int(body.get("max_tokens") or 0))
        faults = [e for e in self.server.log if e["type"] == "fault"]
        reports = self.updates.of(self.sid, "compaction")
        done = [u for u in reports if u["status"] == "done"]
        last = mains[-1] if mains else None
        text = json.dumps(last["body"]["messages"], ensure_ascii=False) if last else ""
        facts = [fact_text(k) for k in range(FACTS)]
        usage = self.updates.of(self.sid, "usage")
        by_kind = {
            k: summary(v for v, kk in zip(self.latency_ms, self.kind, strict=True) if kk == k)
            for k in ("none", "swap", "wait")
        }
        return {
            "daemon": self.name,
            "baseline_src": str(self.baseline) if self.baseline and not self.compacting else None,
            "turns": len(self.stops),
            "not_end_turn": sum(s != "end_turn" for s in self.stops),
            "stop_reasons": {s: self.stops.count(s) for s in sorted(set(self.stops))},
            "overflows_refused": sum(f["kind"] == "overflow" for f in faults),
            "other_faults": sum(f["kind"] != "overflow" for f in faults),
            "main_requests": len(mains),
            "peak_input_tokens": peak_input,
            "peak_input_plus_max_tokens": peak_total,
            "window": self.window,
            "window_seen_by_daemon": usage[-1].get("contextWindow") if usage else None,
            "compact_requests": len(self.server.requests("compact")),
            "compactions": {
                f"{u['status']}/{u['trigger']}": sum(
                    1 for x in reports if (x["status"], x["trigger"]) == (u["status"], u["trigger"])
                )
                for u in reports
            },
            "compactions_with_summary": sum(1 for u in done if u["summarized"]),
            "compactions_clearing_only": sum(1 for u in done if not u["summarized"]),
            "tool_outputs_cleared": sum(u["cleared"] for u in done),
            "messages_summarised": sum(u["summarized"] for u in done),
            "resets": self.resets,
            "prompt_to_request_ms": summary(self.latency_ms),
            "first_request_tokens": summary(self.sizes, 0),
            "first_request_messages": summary(self.counts, 0),
            # Per turn: what compaction did before the first request, the
            # prompt -> first request time (ms), its input tokens and messages.
            "per_turn": [
                [k, round(ms, 3), size, count]
                for k, ms, size, count in zip(
                    self.kind or ["none"] * len(self.latency_ms),
                    self.latency_ms,
                    self.sizes,
                    self.counts,
                    strict=True,
                )
            ],
            "prompt_to_request_ms_by_compaction": by_kind,
            "turns_by_compaction": {k: self.kind.count(k) for k in ("none", "swap", "wait")},
            "facts_in_last_request": sum(f in text for f in facts),
            "facts_missing": [f for f in facts if f not in text],
            "asides_in_last_request": sum(a in text for a in self.script.asides),
        }

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.shutdown()
        await self.server.stop()


# --- compaction's own work, in process ------------------------------------------------------


class _NoModel:
    """The in-process measurement never asks a model."""

    name = "none"

    def stream(self, request: Any) -> Any:
        raise AssertionError("no model request expected")

    def warm(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def _timed(fn: Any, runs: int) -> dict[str, Any]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return summary(times, 1)


async def inprocess_costs(transcript: Path, window: int, runs: int) -> dict[str, Any]:
    """The work compaction adds, measured on a real compacted history."""
    from agentd.agent.compaction import (
        CompactionOptions,
        Compactor,
        choose_split,
        plan_clearing,
    )
    from agentd.agent.context import ContextWindow
    from agentd.agent.session import AwaitClientResult, Session
    from agentd.agent.tools import DAEMON_TOOL_SPECS
    from agentd.agent.turn import SYSTEM_PROMPT
    from agentd.events import CompactionReport
    from agentd.providers.base import Usage
    from agentd.tasks import Supervisor
    from agentd.transcript import CompactionRecord, apply_compaction, load

    loaded = load(transcript)
    assert loaded is not None
    session = Session("bench", loaded.workspace_root, AwaitClientResult([]))
    session.history, session.notes = loaded.history, loaded.notes
    system = SYSTEM_PROMPT.format(root=loaded.workspace_root)
    specs = list(DAEMON_TOOL_SPECS.values())
    supervisor = Supervisor()
    # A threshold the history is under: the check that finds nothing to do,
    # as on most requests.
    quiet = Compactor(
        _NoModel(),
        supervisor,
        ContextWindow("bench", window),
        options=CompactionOptions(threshold=0.95),
    )
    sent = len(session.history)
    tokens = quiet.estimate(session)
    quiet.observe(session, sent, Usage(tokens, 0))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await quiet.before_request(session, system, specs, lambda u: None)
        quiet.answer_room(session)
        quiet.observe(session, sent, Usage(tokens, 0))
        times.append((time.perf_counter() - t0) * 1e6)
    c = Compactor(_NoModel(), supervisor, ContextWindow("bench", window))
    budget, cal = c.budget(), c.calibration
    history, notes = session.history, session.notes
    report = CompactionReport("done", "threshold")

    def clearing() -> None:
        cleared = plan_clearing(history, 3, budget // 2, cal)
        apply_compaction(history, notes, CompactionRecord(0, None, None, cleared, report))

    def swap() -> None:
        split = choose_split(history, int(0.3 * budget), cal)
        record = CompactionRecord(split, "summary text " * 200, {}, {}, report)
        apply_compaction(history, notes, record)

    await supervisor.aclose()
    return {
        "history_messages": len(history),
        "history_tokens": tokens,
        "check_per_request_us": summary(times, 1),
        "clearing_us": _timed(clearing, runs),
        "summary_swap_us": _timed(swap, runs),
        "runs": runs,
    }


def cell(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "none"
    return f"p50 {fmt(s['median'], ' ms')}, p99 {fmt(s['p99'], ' ms')} (n {s['n']})"


def build_table(r: dict[str, Any]) -> str:
    c, b, ip = r["compaction"], r["baseline"], r["inprocess"]
    window = c["window"]
    low, high = b["size_band_tokens"]
    band = f"{low / 1000:.1f}-{high / 1000:.1f}k tokens"
    same = cell(b["prompt_to_request_ms_same_size"])

    def us(s: dict[str, Any]) -> str:
        return f"p50 {fmt(s['median'], ' µs', 1)}, p99 {fmt(s['p99'], ' µs', 1)}"

    rows = [
        [
            "prompts not ending end_turn / requests refused as over the window",
            f"{c['not_end_turn']} / {c['overflows_refused']}",
            "0 / 0",
            "PASS" if not c["not_end_turn"] and not c["overflows_refused"] else "FAIL",
        ],
        [
            "peak main request: input tokens (+ max_tokens)",
            f"{c['peak_input_tokens']:,} ({c['peak_input_plus_max_tokens']:,})",
            f"< {window:,}",
            "PASS" if c["peak_input_plus_max_tokens"] <= window else "FAIL",
        ],
        [
            "compactions: with a summary / clearing tool output only",
            f"{c['compactions_with_summary']} / {c['compactions_clearing_only']} "
            f"({c['compact_requests']} summariser requests, {c['messages_summarised']} "
            f"messages summarised, {c['tool_outputs_cleared']} outputs cleared)",
            "-",
            "info",
        ],
        [
            "prompt -> first request, no compaction before it",
            cell(c["prompt_to_request_ms_by_compaction"]["none"]),
            f"baseline, same request sizes ({band}): {same}",
            "info",
        ],
        [
            "prompt -> first request, summary swapped in / output cleared first",
            cell(c["prompt_to_request_ms_by_compaction"]["swap"]),
            f"baseline, same request sizes: {same}",
            "info",
        ],
        [
            "first request: input tokens p50 / messages p50",
            f"{c['first_request_tokens']['median']:,} / {c['first_request_messages']['median']}",
            f"baseline {b['first_request_tokens']['median']:,} / "
            f"{b['first_request_messages']['median']}",
            "info",
        ],
        [
            "prompt -> first request, waited for a summary",
            cell(c["prompt_to_request_ms_by_compaction"]["wait"]),
            "-",
            "info",
        ],
        [
            f"constraint facts in the last request ({FACTS} stated)",
            f"{c['facts_in_last_request']}/{FACTS}",
            f"{FACTS}/{FACTS}",
            "PASS" if c["facts_in_last_request"] == FACTS else "FAIL",
        ],
        [
            f"facts stated in passing in the last request ({ASIDES} stated)",
            f"{c['asides_in_last_request']}/{ASIDES}",
            f"baseline (resets instead): {b['asides_in_last_request']}/{ASIDES}",
            "info",
        ],
        [
            "constraint facts in the last request, baseline (resets instead)",
            f"{b['facts_in_last_request']}/{FACTS}",
            "-",
            "info",
        ],
        [
            f"in process, {ip['history_tokens']:,}-token history: check per request",
            us(ip["check_per_request_us"]),
            "-",
            "info",
        ],
        [
            "in process: clearing old tool output / swapping a summary in",
            f"{us(ip['clearing_us'])} / {us(ip['summary_swap_us'])}",
            "-",
            "info",
        ],
    ]
    return markdown_table(["figure", "agentd", "goal / baseline", "verdict"], rows)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="agentd-compaction-bench-") as tmp_name:
        tmp = Path(tmp_name)
        files = write_workspace(tmp / "files", rng)
        script = Script(args.turns, rng, files)
        runners = [
            Runner("compaction", tmp / "c", script, args.window, None),
            Runner("baseline", tmp / "b", script, args.window, args.baseline_src),
        ]
        for r in runners:
            r.tmp.mkdir()
            await r.start(tmp / "files")
        started = time.time()
        try:
            for t in range(args.turns):
                for r in runners if t % 2 == 0 else reversed(runners):
                    await r.turn(t)
            results = {r.name: r.result() for r in runners}
            compacting, base = runners
            low, high = _band(compacting.sizes)
            results["baseline"]["size_band_tokens"] = [low, high]
            results["baseline"]["prompt_to_request_ms_same_size"] = summary(
                ms
                for ms, size in zip(base.latency_ms, base.sizes, strict=True)
                if low <= size <= high
            )
            transcript = next((compacting.tmp / "agentd-home").glob(f"**/{compacting.sid}.jsonl"))
        finally:
            for r in runners:
                await r.stop()
        costs = await inprocess_costs(transcript, args.window, args.runs)
        load = os.getloadavg()
        return {
            "benchmark": "compaction",
            "turns": args.turns,
            "window": args.window,
            "files": {
                "count": FILES,
                "bytes_min": min(s for _, s in files),
                "bytes_max": max(s for _, s in files),
            },
            "seconds": round(time.time() - started, 1),
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "loadavg_1m": round(load[0], 2),
                "loadavg_5m": round(load[1], 2),
            },
            **results,
            "inprocess": costs,
        }


def _band(sizes: list[int]) -> tuple[int, int]:
    ordered = sorted(sizes)
    return ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--window", type=int, default=32_768)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--runs", type=int, default=2000, help="in-process repetitions")
    parser.add_argument(
        "--baseline-src", type=Path, help="run the baseline daemon from this source tree"
    )
    add_output_args(parser)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    emit(args, result, build_table(result))


if __name__ == "__main__":
    main()
