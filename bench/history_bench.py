"""Prompt -> first model request against the length of the history (issue 20).

    python bench/history_bench.py [--runs 20] [--repeat 3] [--sizes 10,100,1000]
                                  [--apis openai,anthropic] [--windows default,2000000]
                                  [--baseline-src DIR] [--json FILE] [--table]

For each size N a transcript of N history messages is written (tool-using
steps: an assistant message with text and a read_file call, then a user
message with a 2 KB tool result; about 1 KB of text per message on average),
the daemon (LSP, memory off) restores it with `agent/loadSession`, and
`--runs` prompts are timed from writing `agent/prompt` to the first bytes of
the main request at the bundled model server (the `arrivedTs` of its
`request` log entry: before the server reads and parses a body that grows
with the history; one clock, time.time(), in this process), and to the
whole body in the server's hands (`completeTs`: a model can start on its
answer only then, so a client that sends its head early and its body late
gains nothing), after one warm-up prompt. Each prompt adds two messages, so
the size grows by 2 x runs over a row. Goal: the median at 1,000 messages
within 10 % of the median at 10, on both times.

The effects looked for are a few tenths of a millisecond, less than what
a busy moment of the machine adds to a whole row, so the rows of one wire
and window are measured together: every size's daemon (and the
baseline's) is started and warmed, then they take one prompt each in
turn, the order rotated every round, so a slow period hits all of them
alike. Each cell reports its median and a trimmed mean (of the middle
half, `trimmed`); `--repeat` runs the whole set again with new daemons,
and the goal counts as met only when every repeat's growth of the median
is within it (`growth_by_repeat`, `met_in_every_repeat`; `growth` and the
sizes' figures pool all repeats' samples).

Rows for each wire (`--apis`: the OpenAI one, and Anthropic's, which the
model server also speaks) and each context window (`--windows`): `default`
sets none, so the daemon guesses 32k tokens for the model server's
`test-model`; a 1,000-message history (about 280k tokens) is then over the
threshold: the warm-up prompt clears its old tool output (to about 170 KB)
and every request after it runs compaction's checks (nothing left to clear,
one long turn that no summary could split). A number (2,000,000) is a
window in which no row compacts: the whole history is sent.

With `--baseline-src DIR` (another commit's `agentd/`, e.g. `git archive main
agentd | tar -x -C DIR`) the same rows are run against that code's daemon,
interleaved with this one's so that machine noise hits them alike.

The `raw client` rows are the floor of the set-up: agentd's last request of
each cell posted again, the same bytes, by a minimal client
(`_raw_post.py`: one socket, the head and the body each one `sendall`).
Its whole-body time grows with the body too: that is the bytes crossing
loopback and the model server reading them (Python), which any client pays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    AGENTD_ARGS,
    Updates,
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    markdown_table,
    start_agentd,
    summary,
)

from agentd.messages import Message, TextPart, ToolCall, ToolCallPart, ToolResultPart, user_text
from agentd.testing.daemon import agentd_home
from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import StdioClient
from agentd.transcript import TranscriptWriter, sessions_dir

GOAL_GROWTH = 0.10
REPLY = {"chunks": ["Done."]}
# Room for the largest history without compaction (`bench/compaction_bench.py`
# measures compaction itself); "default" sets no window.
WINDOWS = "default,2000000"
APIS = ("openai", "anthropic")


def history(n: int) -> list[Message]:
    out: list[Message] = [user_text("Walk through the project and summarise each module.")]
    step = 0
    while len(out) < n:
        step += 1
        call = ToolCall(f"call_{step}", "read_file", {"path": f"src/module_{step}.py"})
        out.append(Message("assistant", [TextPart(f"Reading module {step}."), ToolCallPart(call)]))
        body = f"def handler_{step}(request):\n    return request.payload  # line\n" * 30
        out.append(Message("user", [ToolResultPart(call.id, body[:2048])]))
    out = out[:n]
    if out[-1].tool_calls:
        # A call without its result is refused by the APIs (and the model
        # server): the history ends with the step's text alone.
        out[-1] = Message("assistant", [TextPart(f"Reading module {step}.")])
    return out


def write_transcript(ws: Path, home: Path, n: int) -> str:
    sid = uuid.uuid4().hex
    path = sessions_dir(ws, agentd_home(home)) / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = TranscriptWriter(path, sid, ws)
    for msg in history(n):
        writer.append(msg)
    writer.close()
    return sid


def _main_request_after(after: int) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > after


class Cell:
    """One daemon restored with an N-message history: its prompts' times."""

    def __init__(self, n: int, src: Path | None) -> None:
        self.n = n
        self.src = src
        self.key = "baseline" if src else "agentd"
        self.client: StdioClient | None = None
        self.sid = ""
        self.first: list[float] = []
        self.whole: list[float] = []
        self.req: dict[str, Any] = {}
        self.prompts = 0

    async def start(self, server: ModelServer, tmp: Path, api: str, window: str) -> None:
        home = tmp / f"{self.key}-{api}-{window}-{self.n}"
        ws = home / "ws"
        ws.mkdir(parents=True)
        self.sid = write_transcript(ws, home, self.n)
        env = bench_env(server.openai_base_url, home)
        if api == "anthropic":
            env.update(AGENTD_PROVIDER="anthropic", AGENTD_BASE_URL=server.base_url)
        args = AGENTD_ARGS
        if self.src is not None:
            args, env = baseline_daemon(env, self.src)
        options: dict[str, Any] = {"memory": {"enabled": False}}
        if window != "default":
            options["contextWindow"] = int(window)
        self.client = await start_agentd(env, options, Updates(), args=args)
        await self.client.request(
            "agent/loadSession", {"sessionId": self.sid, "workspaceRoot": str(ws)}
        )

    async def prompt(self, server: ModelServer, timed: bool = True) -> None:
        """One prompt: -> first request bytes and -> whole body, in ms."""
        assert self.client is not None
        server.enqueue(REPLY)
        after = max((e["id"] for e in server.log if "id" in e), default=0)
        t0 = time.time()
        _, fut = self.client.send_request(
            "agent/prompt", {"sessionId": self.sid, "prompt": f"And module {self.prompts}?"}
        )
        self.prompts += 1
        self.req = await server.wait_for(_main_request_after(after))
        result = await asyncio.wait_for(fut, 30)
        assert result["stopReason"] == "end_turn", result
        if timed:
            self.first.append((self.req["arrivedTs"] - t0) * 1000)
            self.whole.append((self.req["completeTs"] - t0) * 1000)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.shutdown()


async def interleaved(
    server: ModelServer, tmp: Path, cells: list[Cell], runs: int, api: str, window: str
) -> None:
    """All `cells` alive at once, one prompt each in turn, the order rotated
    each round: a slow period of the machine hits every size and daemon
    alike, instead of the one row that happened to run then."""
    try:
        for cell in cells:
            await cell.start(server, tmp, api, window)
        for cell in cells:
            await cell.prompt(server, timed=False)  # the warm-up (and clearing)
            server.reset()
        for i in range(runs):
            k = i % len(cells)
            for cell in cells[k:] + cells[:k]:
                await cell.prompt(server)
                # The log holds each request's body parsed (megabytes at
                # 1,000 messages): kept, they would slow this process's
                # garbage collector, which the server shares.
                server.reset()
    finally:
        for cell in cells:
            await cell.close()


async def floor_row(
    server: ModelServer, tmp: Path, api: str, body: dict[str, Any], runs: int
) -> tuple[list[float], list[float]]:
    """The same body posted by a minimal client (`_raw_post.py`): what the
    transfer and the server's reading cost any client, in ms."""
    path = tmp / "floor-body.json"
    # The bytes agentd sent (`tests/unit/test_wire_cache.py` holds them to this).
    path.write_bytes(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    for _ in range(runs + 1):
        server.enqueue(REPLY)
    after = max((e["id"] for e in server.log if "id" in e), default=0)
    url = "/v1/chat/completions" if api == "openai" else "/v1/messages"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).resolve().parent / "_raw_post.py"),
        str(server.port),
        url,
        str(path),
        str(runs + 1),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    starts = json.loads(out)[1:]  # the first is the warm-up
    reqs = [e for e in server.log if e["type"] == "request" and e["id"] > after][1:]
    first = [(r["arrivedTs"] - t0) * 1000 for r, t0 in zip(reqs, starts, strict=True)]
    whole = [(r["completeTs"] - t0) * 1000 for r, t0 in zip(reqs, starts, strict=True)]
    return first, whole


def encoding_ms(sizes: list[int], rounds: int = 20) -> dict[str, dict[str, dict[str, float]]]:
    """In process, for each wire: building a step's request as sent, from the
    per-message caches and the kept chunks (`request_parts`, after one build
    filled them), against encoding the whole body afresh (`request_body` +
    `json.dumps`, as before issue 20)."""
    from agentd.providers import ModelRequest, ProviderConfig
    from agentd.providers import anthropic as anthropic_wire
    from agentd.providers import openai as openai_wire

    out: dict[str, dict[str, dict[str, float]]] = {}
    for api, wire in (("openai", openai_wire), ("anthropic", anthropic_wire)):
        config = ProviderConfig(kind=api, model="m")  # type: ignore[arg-type]
        for n in sizes:
            req = ModelRequest(
                model="m", system="You are a coding agent.", messages=history(n), cache=True
            )
            parts = getattr(wire, "request_parts", wire.request_content)  # a baseline's
            parts(req, "m", config)
            t0 = time.perf_counter()
            for _ in range(rounds):
                parts(req, "m", config)
            cached = (time.perf_counter() - t0) / rounds * 1000
            t0 = time.perf_counter()
            for _ in range(rounds):
                body = wire.request_body(req, "m", config)
                json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            fresh = (time.perf_counter() - t0) / rounds * 1000
            out.setdefault(api, {})[str(n)] = {
                "cached_ms": round(cached, 3),
                "fresh_ms": round(fresh, 3),
            }
    return out


def trimmed(values: list[float]) -> float:
    """The mean of the middle half (the interquartile mean): steadier than
    the median with few samples, and blind to the slowest quarter, where a
    garbage collection or a busy neighbour lands."""
    ordered = sorted(values)
    q = len(ordered) // 4
    middle = ordered[q : len(ordered) - q] or ordered
    return sum(middle) / len(middle)


def stats(values: list[float]) -> dict[str, Any]:
    out = summary(values)
    if values:
        out["trimmed"] = round(trimmed(values), 3)
    return out


def _growth(lo: float | None, hi: float | None) -> float | None:
    return round(hi / lo - 1, 3) if lo and hi is not None else None


async def run(
    runs: int,
    sizes: list[int],
    src: Path | None,
    apis: list[str],
    windows: list[str],
    repeats: int = 1,
) -> dict[str, Any]:
    started = time.perf_counter()
    load0 = [round(x, 2) for x in os.getloadavg()]
    daemons: list[Path | None] = [None] if src is None else [None, src]
    # samples[f"{api} {window} {measure}"][daemon][size][repeat]: ms
    samples: dict[str, dict[str, dict[int, list[list[float]]]]] = {}
    loads: list[list[float]] = []
    with tempfile.TemporaryDirectory(prefix="agentd-history-bench-") as tmp_s:
        async with ModelServer() as server:
            for rep in range(repeats):
                loads.append([round(x, 2) for x in os.getloadavg()])
                for api in apis:
                    for window in windows:
                        cells = [Cell(n, d) for n in sizes for d in daemons]
                        tmp = Path(tmp_s) / f"r{rep}"
                        tmp.mkdir(exist_ok=True)
                        await interleaved(server, tmp, cells, runs, api, window)
                        for cell in cells:
                            for measure, values in (
                                ("first bytes", cell.first),
                                ("whole body", cell.whole),
                            ):
                                row = samples.setdefault(f"{api} {window} {measure}", {})
                                row.setdefault(cell.key, {}).setdefault(cell.n, []).append(values)
                            if cell.src is None:
                                first, whole = await floor_row(
                                    server, tmp, api, cell.req["body"], runs
                                )
                                server.reset()
                                for measure, values in (
                                    ("first bytes", first),
                                    ("whole body", whole),
                                ):
                                    raw = samples[f"{api} {window} {measure}"].setdefault(
                                        "raw client", {}
                                    )
                                    raw.setdefault(cell.n, []).append(values)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    lo_n, hi_n = sizes[0], sizes[-1]
    for label, by_daemon in samples.items():
        for key, by_size in by_daemon.items():
            # The keys of old: each size's figures over all samples (every
            # repeat), and the growth of their medians.
            r: dict[str, Any] = {
                str(n): stats([v for rep in by_size[n] for v in rep]) for n in sizes
            }
            r["growth"] = _growth(r[str(lo_n)].get("median"), r[str(hi_n)].get("median"))
            r["growth_trimmed"] = _growth(r[str(lo_n)].get("trimmed"), r[str(hi_n)].get("trimmed"))
            # Each repeat on its own: the goal is met when every one meets it.
            each = [(stats(by_size[lo_n][i]), stats(by_size[hi_n][i])) for i in range(repeats)]
            r["growth_by_repeat"] = [_growth(a.get("median"), b.get("median")) for a, b in each]
            r["growth_trimmed_by_repeat"] = [
                _growth(a.get("trimmed"), b.get("trimmed")) for a, b in each
            ]
            r["met_in_every_repeat"] = all(
                g is not None and g <= GOAL_GROWTH for g in r["growth_by_repeat"]
            )
            rows.setdefault(label, {})[key] = r
    return {
        "runs": runs,
        "repeats": repeats,
        "sizes": sizes,
        "apis": apis,
        "windows": windows,
        "baseline_src": str(src) if src else None,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": load0,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "loadavg_by_repeat": loads,
        },
        "goal_growth": GOAL_GROWTH,
        "rows": rows,
        "encoding_in_process": encoding_ms(sizes),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def build_table(r: dict[str, Any]) -> str:
    head = [
        "wire, window, request at the server",
        "daemon",
        *(f"{n} msgs median / trimmed ms" for n in r["sizes"]),
        "growth median / trimmed",
        "growth of the median, each repeat",
    ]
    rows = []
    for label, by_daemon in r["rows"].items():
        for key, row in by_daemon.items():
            cells = [
                f"{row[str(n)]['median']:.2f} / {row[str(n)]['trimmed']:.2f}" for n in r["sizes"]
            ]
            growth, growth_t = row["growth"], row["growth_trimmed"]
            cells.append(
                f"{growth:+.0%} / {growth_t:+.0%}"
                if growth is not None and growth_t is not None
                else "-"
            )
            each = " / ".join(
                f"{g:+.0%}" if g is not None else "-" for g in row["growth_by_repeat"]
            )
            cells.append(f"{each} {'ok' if row['met_in_every_repeat'] else 'MISSED'}")
            rows.append([label, key, *cells])
    for api, enc in r["encoding_in_process"].items():
        cached = [f"{enc[str(n)]['cached_ms']:.2f}" for n in r["sizes"]]
        fresh = [f"{enc[str(n)]['fresh_ms']:.2f}" for n in r["sizes"]]
        rows.append([f"{api}, in process", "request bytes, cached ms", *cached, "-", "-"])
        rows.append([f"{api}, in process", "request bytes, whole body ms", *fresh, "-", "-"])
    note = (
        f"\n{r['runs']} prompts per cell and repeat, {r['repeats']} repeats (each a new "
        f"set of daemons); load average at start {r['machine']['loadavg_start']}, at "
        f"each repeat {r['machine']['loadavg_by_repeat']}, at end "
        f"{r['machine']['loadavg_end']}; {r['elapsed_s']} s."
    )
    return markdown_table(head, rows) + note


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs", type=int, default=20, help="prompts per cell and repeat (default 20)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of the whole set, each with new daemons"
    )
    parser.add_argument("--sizes", default="10,100,1000", help="history sizes")
    parser.add_argument("--apis", default=",".join(APIS), help="wires: openai, anthropic")
    parser.add_argument(
        "--windows", default=WINDOWS, help="context windows: default (none set) or tokens"
    )
    parser.add_argument("--baseline-src", type=Path, metavar="DIR")
    add_output_args(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.runs < 1 or args.repeat < 1 or not sizes:
        parser.error("--runs and --repeat must be >= 1 and --sizes name one size at least")
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    apis = [a.strip() for a in args.apis.split(",") if a.strip()]
    windows = [w.strip() for w in args.windows.split(",") if w.strip()]
    if not apis or set(apis) - set(APIS):
        parser.error(f"--apis names some of {', '.join(APIS)}")
    if not windows or not all(w == "default" or w.isdigit() for w in windows):
        parser.error("--windows lists `default` or numbers of tokens")
    result = asyncio.run(run(args.runs, sizes, args.baseline_src, apis, windows, args.repeat))
    emit(args, result, build_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
