"""Where a prompt's time goes, end to end: `_cold.py`'s warm and steady prompts
(ACP or LSP) with every process traced by `_trace_wrap.py`, split into the
segments between the client's write and the request's arrival at the model
server, agentd beside its bare baseline (and a baseline checkout's daemon).

    python bench/segments_bench.py [--mode acp|lsp] [--runs 6] [--baseline-src DIR]
                                   [--targets agentd,bare] [--marks SPEC,...]

Per prompt, from the marks of the daemon and of this process (the model
server runs here), all on `time.time()`:

| segment | from -> to |
| --- | --- |
| A | prompt written -> the daemon's `epoll` wait returns (wake-up) |
| B | that return -> stdin's read callback runs |
| C | the read callback -> the request's first socket write (the daemon's own path) |
| D | that write's call (the syscall, and whatever the kernel ran inside it) |
| E | the write began -> this process's `epoll` wait returns for the server's socket |
| F | that return -> the model server's `arrivedTs` (the benchmark's own handling) |

`C.<mark>`: when the marked functions (`--marks`, `module:Qualified.name`; see
`_trace_wrap.py`) and httpx's `send` were entered, ms after the read callback.
For `bare_pygls_server.py` (stdin read in pygls' thread pool) A ends when the
message's first header line was read in the thread and B when its body reached
the loop. Medians over the prompts (and how many). The marks cost about a
microsecond each: totals are a little higher than `core_bench.py`'s and
`acp_bench.py`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import _cold
from _common import BENCH_DIR

from agentd.testing.model_server import ModelServer

WRAPPER = str(BENCH_DIR / "_trace_wrap.py")
GC = "collections on the way (prompts)"
# agentd's prompt path, and what the bare baselines do in its place.
DEFAULT_MARKS = [
    "agentd.agent.core:AgentCore.prompt",
    "agentd.transcript:TranscriptWriter.append",
    "agentd.transcript:OpenFiles.create",
    "agentd.agent.turn:_system_prompt",
    "agentd.agent.turn:_stream_step",
    "agentd.providers.http:ModelHTTP._request",
    "agentd.providers.http:ModelHTTP._send",
    "agentd.providers.http:ModelHTTP._core_request",
    "agentd.providers.pool:ModelPool.handle_async_request",
    "_bare_model:BareModel.complete",
    "_bare_model:BareModel.body",
]
SEGMENTS = [
    "A write -> epoll returns",
    "B epoll -> read callback",
    "C read callback -> socket write",
    "D socket write call",
    "E write -> server's epoll",
    "F server's epoll -> arrivedTs",
    "total (write -> arrivedTs)",
]


def traced(target: str, mode: str, body: Path | None, base_url: str) -> list[str]:
    cmd = _untraced(target, mode, body, base_url)
    if target != "bare":  # [python, -P, -m, ...]: -P keeps the checkout first
        return [cmd[0], "-P", WRAPPER, *cmd[2:]]
    return [cmd[0], WRAPPER, *cmd[1:]]


_untraced = _cold.command
PROMPTS: list[dict[str, Any]] = []
_send_prompt = _cold._send_prompt


async def recorded_prompt(
    daemon: Any, model: ModelServer, mode: str, msg_id: int, sid: str
) -> dict[str, Any]:
    out = await _send_prompt(daemon, model, mode, msg_id, sid)
    # `_cold.cold_run`'s request ids: 2 the cold prompt, 4-8 the warm ones, 100+ steady.
    kind = "cold" if msg_id == 2 else "steady" if msg_id >= 100 else "warm"
    PROMPTS.append(
        {
            "pid": daemon.proc.pid,
            "kind": kind,
            "sent": out["sent_at"],
            "arrived": out["request"]["arrivedTs"],
        }
    )
    return out


class ServerWakes:
    """This process's wake-ups for a socket read (the model server's side)."""

    def __init__(self) -> None:
        self.wakes: list[tuple[float, float]] = []
        self.last = 0.0

    def install(self) -> None:
        import selectors
        import time
        from asyncio import selector_events

        select = selectors.EpollSelector.select
        read_ready = selector_events._SelectorSocketTransport._read_ready

        def timed_select(sel: Any, timeout: float | None = None) -> Any:
            ready = select(sel, timeout)
            self.last = time.time()
            return ready

        def timed_read(transport: Any) -> None:
            self.wakes.append((self.last, time.time()))
            read_ready(transport)

        selectors.EpollSelector.select = timed_select  # type: ignore[method-assign]
        selector_events._SelectorSocketTransport._read_ready = timed_read  # type: ignore[method-assign]


def segments(
    prompt: dict[str, Any], events: list[list[Any]], wakes: list[tuple[float, float]]
) -> dict[str, float] | None:
    sent = prompt["sent"]
    read = next((e for e in events if e[0] == "stdin" and e[3] >= sent), None)
    if read is None:
        return None
    write = next((e for e in events if e[0] == "sock" and e[1] >= read[3]), None)
    if write is None:
        return None
    out = {
        SEGMENTS[0]: read[2] - sent,
        SEGMENTS[1]: read[3] - read[2],
        SEGMENTS[2]: write[1] - read[3],
        SEGMENTS[3]: write[2] - write[1],
        SEGMENTS[6]: prompt["arrived"] - sent,
    }
    wake = next((w for w in wakes if w[1] >= write[1]), None)
    if wake is not None:
        out[SEGMENTS[4]] = wake[0] - write[1]
        out[SEGMENTS[5]] = prompt["arrived"] - wake[0]
    seen: set[str] = set()
    for e in events:
        if read[3] <= e[1] <= write[1] and isinstance(e[0], str) and e[0] not in seen:
            if e[0] in ("stdin", "sock", "sel", "gc"):
                continue
            seen.add(e[0])
            out["C." + e[0]] = e[1] - read[3]
    out[GC] = float(
        sum(1 for e in events if e[0] == "gc" and e[2] == "start" and read[3] <= e[1] <= write[1])
    )
    return out


def table(rows: dict[tuple[str, str], list[dict[str, float]]]) -> str:
    """Markdown: a row per segment and mark, a column per target and prompt kind."""
    keys = sorted(rows)
    marks: list[str] = []
    for samples in rows.values():
        for sample in samples:
            marks += [n for n in sample if n.startswith("C.") and n not in marks]

    def order(mark: str) -> tuple[int, int, float]:
        # A target's own marks first (in the order reached), the shared ones last.
        have = [i for i, k in enumerate(keys) if _median(rows[k], mark) is not None]
        return (len(have), have[0], _median(rows[keys[have[0]]], mark) or 0.0)

    marks.sort(key=order)
    names = [*SEGMENTS[:3], *marks, *SEGMENTS[3:]]
    lines = ["| | " + " | ".join(f"{t} {k}" for t, k in keys) + " |"]
    lines.append("| --- " * (len(keys) + 1) + "|")
    for name in names:
        cells = []
        for k in keys:
            m = _median(rows[k], name)
            n = sum(1 for s in rows[k] if name in s)
            cells.append("-" if m is None else f"{m * 1000:.3f} ({n})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    gcs = [f"{sum(s[GC] for s in rows[k]):.0f}/{len(rows[k])}" for k in keys]
    lines.append(f"| {GC} | " + " | ".join(gcs) + " |")
    return "\n".join(lines)


def _median(samples: list[dict[str, float]], name: str) -> float | None:
    values = [s[name] for s in samples if name in s]
    return statistics.median(values) if values else None


async def run(args: argparse.Namespace, out: Path) -> dict[tuple[str, str], list[dict[str, float]]]:
    wakes = ServerWakes()
    wakes.install()
    _cold.command = traced
    _cold._send_prompt = recorded_prompt
    os.environ["TRACE_DIR"] = str(out)
    os.environ["TRACE_MARKS"] = ",".join(args.marks)
    targets = args.targets.split(",")
    if args.baseline_src is not None and "baseline" not in targets:
        targets.append("baseline")
    mode = args.mode
    async with ModelServer() as model:
        ws = out / "ws"
        ws.mkdir()
        (ws / "README.md").write_text("# bench\n")
        first = await _cold.cold_run("agentd", mode, model, out / "calibrate", ws)
        body = out / "body.json"
        body.write_text(json.dumps(first["body"], ensure_ascii=False), encoding="utf-8")
        runs: dict[int, str] = {}
        for i in range(args.runs):
            for target in targets if i % 2 == 0 else targets[::-1]:
                n = len(PROMPTS)
                home = out / f"{target}-{i}"
                await _cold.cold_run(target, mode, model, home, ws, body, args.baseline_src)
                for p in PROMPTS[n:]:
                    runs[p["pid"]] = target
    rows: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for p in PROMPTS:
        target = runs.get(p["pid"])
        trace = out / f"{p['pid']}.json"
        if target is None or not trace.exists():
            continue
        events = json.loads(trace.read_text())["events"]
        sample = segments(p, events, wakes.wakes)
        if sample is not None:
            rows[(target, p["kind"])].append(sample)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["acp", "lsp"], default="acp")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--targets", default="agentd,bare")
    parser.add_argument("--marks", type=lambda s: s.split(","), default=DEFAULT_MARKS)
    parser.add_argument("--kinds", default="warm,steady", help="cold,warm,steady")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        before = " ".join(f.read().split()[:3])
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    with open("/proc/loadavg") as f:
        after = " ".join(f.read().split()[:3])
    kinds = args.kinds.split(",")
    rows = {k: v for k, v in rows.items() if k[1] in kinds}
    print(f"load average {before} -> {after}; ms, medians (prompts)")
    print(table(rows))


if __name__ == "__main__":
    sys.exit(main())
