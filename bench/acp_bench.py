"""Cold start and first-request latency of agentd, ACP mode beside LSP mode,
and `session/list` with many saved sessions.

For each run and each mode a fresh daemon is spawned over stdio and driven by
the raw client of `agentd.testing` (no client library on the measured path):

- spawn -> initialize reply      (`python -P -m agentd.acp` / `... agentd serve`,
                                  PYTHONPATH naming the checkout, this tree's too)
- spawn -> session ready         (the newSession reply)
- initialize -> session ready    (newSession sent the moment the initialize
                                  reply is read, as editors do: what it waits
                                  for of the warm-up)
- prompt -> first model request  (the prompt is sent after the session exists;
                                  the end is the bundled model server's log `ts`;
                                  it waits for what is left of the warm-up)
- spawn -> first model request   (the sum of the above, on the model server's clock)
- session/new after the warm-up  (another daemon: initialize, a request that
                                  needs the App (the session list), then the
                                  first newSession, timed)

Modes alternate within a run so that both see the same machine state. The
medians (and p90) over `--runs` runs (default 20) are printed as JSON, then
as a table. With `--baseline-src DIR` (a checkout of another commit, e.g.
`git worktree add /tmp/base main`) the same runs are made against daemons of
that code too, interleaved with this tree's.

With `--config-file` each start-up run's daemon finds a user config file
(which the handshake reads to advertise images).

`session/list` (`--sessions N`, default 1000; 0 skips): N sessions as an
editor leaves them (8 messages each, tool output of 2 KB) are written under
one workspace, an ACP daemon is started on them, and `--list-requests`
(default 200) requests are timed from writing the request to reading its
reply: the first page (`session/list {cwd}`, 50 sessions), every page
followed to the end, and the whole list at once (`_agentd/session/list`,
what the baseline also has: without `session/list`, its figure is that one).
The first request of each is reported apart (nothing cached yet).

Cold, warm and steady prompt -> first request bytes (`--cold-runs N`, default
`--runs`; 0 skips): the ACP rows of `_cold.py`: a fresh `python -P -m agentd.acp`
per run against `bare_acp_agent.py` (a minimal agent on the ACP Python SDK that
sends agentd's own request with httpx), and the baseline checkout's daemon,
measured to the model server's `arrivedTs` (goals: cold within 2x the bare
agent, warm and steady <= 2 ms).

    /work/venv/bin/python bench/acp_bench.py --runs 20 [--baseline-src DIR] [--sessions 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cold import bench_cold, cold_rows
from _common import checkout_launch, markdown_table

from agentd.messages import Message, TextPart, ToolCall, ToolCallPart, ToolResultPart
from agentd.testing.daemon import agentd_home, daemon_command, daemon_env
from agentd.testing.framing import initialize_params
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import TranscriptWriter, sessions_dir

# `--config-file`: the config.toml each daemon of the start-up runs finds.
CONFIG_FILE = ""
METRICS = (
    "spawn_to_initialize_ms",
    "spawn_to_session_ms",
    "initialize_to_session_ms",
    "prompt_to_model_request_ms",
    "spawn_to_model_request_ms",
    "session_new_after_warmup_ms",
)
LIST_METRICS = ("first_page_ms", "all_pages_ms", "whole_list_ms")


async def spawn(env: dict[str, str], acp: bool, baseline: Path | None) -> RawDaemon:
    """This tree's daemon, or (`baseline`) the one of another checkout, both
    launched alike (`-P`, PYTHONPATH naming the checkout: `checkout_launch`).
    Lines up to 64 MiB (a whole list of a thousand sessions is one line)."""
    command, env = checkout_launch(daemon_command(acp=acp), env, baseline)
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        limit=64 * 1024 * 1024,
    )
    return RawDaemon(proc, "acp" if acp else "lsp")


async def reply(daemon: RawDaemon, msg_id: int) -> dict[str, Any]:
    message = await daemon.response(msg_id, timeout=60)
    if "error" in message:
        raise RuntimeError(f"{daemon.framing}: {message['error']}")
    return message


async def one_run(
    mode: str, model: ModelServer, workspace: Path, home: Path, baseline: Path | None = None
) -> dict[str, float]:
    # The daemon's default log level, as an editor would run it.
    env = daemon_env(model.openai_base_url, home, AGENTD_LOG_LEVEL="warning")
    if CONFIG_FILE:
        # A user's config file (the handshake reads it to advertise images).
        folder = Path(env["AGENTD_CONFIG_DIR"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.toml").write_text(CONFIG_FILE)
    start = time.perf_counter()
    spawned_at = time.time()  # the model server's clock, for spawn -> first request
    daemon = await spawn(env, mode == "acp", baseline)
    try:
        if mode == "acp":
            daemon.request(0, "initialize", {"protocolVersion": 1})
        else:
            daemon.request(0, "initialize", initialize_params())
        await reply(daemon, 0)
        initialized = time.perf_counter()
        if mode == "acp":
            daemon.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        else:
            daemon.notify("initialized", {})
            daemon.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await reply(daemon, 1))["result"]["sessionId"]
        ready = time.perf_counter()
        last = max((e["id"] for e in model.requests()), default=-1)
        sent_at = time.time()  # the model server's log uses wall-clock time
        if mode == "acp":
            prompt = [{"type": "text", "text": "hello"}]
            daemon.request(2, "session/prompt", {"sessionId": sid, "prompt": prompt})
        else:
            daemon.request(2, "agent/prompt", {"sessionId": sid, "prompt": "hello"})
        request = await model.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > last
        )
        await reply(daemon, 2)
        if mode == "lsp":
            daemon.request(3, "shutdown")
            await reply(daemon, 3)
            daemon.notify("exit")
    finally:
        await stop(daemon)
    return {
        "spawn_to_initialize_ms": (initialized - start) * 1000,
        "spawn_to_session_ms": (ready - start) * 1000,
        "initialize_to_session_ms": (ready - initialized) * 1000,
        "prompt_to_model_request_ms": (request["ts"] - sent_at) * 1000,
        "spawn_to_model_request_ms": (request["ts"] - spawned_at) * 1000,
    }


async def settled_run(
    mode: str, model: ModelServer, workspace: Path, home: Path, baseline: Path | None = None
) -> float:
    """The first newSession of a daemon whose warm-up has finished (a request
    that needs the App was answered first), in ms."""
    env = daemon_env(model.openai_base_url, home, AGENTD_LOG_LEVEL="warning")
    daemon = await spawn(env, mode == "acp", baseline)
    try:
        if mode == "acp":
            daemon.request(0, "initialize", {"protocolVersion": 1})
            await reply(daemon, 0)
            daemon.request(1, "session/list", {"cwd": str(workspace)})
        else:
            daemon.request(0, "initialize", initialize_params())
            await reply(daemon, 0)
            daemon.notify("initialized", {})
            daemon.request(1, "agent/listSessions", {"workspaceRoot": str(workspace)})
        await reply(daemon, 1)
        start = time.perf_counter()
        if mode == "acp":
            daemon.request(2, "session/new", {"cwd": str(workspace), "mcpServers": []})
        else:
            daemon.request(2, "agent/newSession", {"workspaceRoot": str(workspace)})
        await reply(daemon, 2)
        elapsed = (time.perf_counter() - start) * 1000
        if mode == "lsp":
            daemon.request(3, "shutdown")
            await reply(daemon, 3)
            daemon.notify("exit")
    finally:
        await stop(daemon)
    return elapsed


async def stop(daemon: RawDaemon) -> None:
    assert daemon.proc.stdin is not None
    daemon.proc.stdin.close()
    with contextlib.suppress(TimeoutError):
        await daemon.wait_exit(10)
    await daemon.close()


# --- session/list with many saved sessions ---------------------------------------------


def write_sessions(home: Path, workspace: Path, count: int) -> int:
    """`count` sessions as an editor leaves them; returns their bytes on disk."""
    folder = sessions_dir(workspace, agentd_home(home))
    output = "\n".join(f"{i:>4}  line {i} of a file the model read" for i in range(60))
    for n in range(count):
        sid = f"bench{n:05d}"
        writer = TranscriptWriter(folder / f"{sid}.jsonl", sid, workspace)
        for turn in range(2):
            call = ToolCall(f"c{turn}", "read_file", {"path": f"src/mod{turn}.py"})
            writer.append(Message("user", [TextPart(f"question {n}.{turn}: why does it fail?")]))
            writer.append(Message("assistant", [ToolCallPart(call)]))
            writer.append(Message("user", [ToolResultPart(call.id, output)]))
            writer.append(Message("assistant", [TextPart(f"Because of line {turn}.")]))
        writer.close()
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


async def timed(daemon: RawDaemon, msg_id: int, method: str, params: dict[str, Any]) -> Any:
    start = time.perf_counter()
    daemon.request(msg_id, method, params)
    result = (await reply(daemon, msg_id))["result"]
    return (time.perf_counter() - start) * 1000, result


async def list_run(
    model: ModelServer, home: Path, workspace: Path, requests: int, baseline: Path | None
) -> dict[str, Any]:
    env = daemon_env(model.openai_base_url, home, AGENTD_LOG_LEVEL="warning")
    daemon = await spawn(env, True, baseline)
    samples: dict[str, list[float]] = {m: [] for m in LIST_METRICS}
    first: dict[str, float] = {}
    msg_id = 0
    try:
        daemon.request(0, "initialize", {"protocolVersion": 1})
        init = (await reply(daemon, 0))["result"]
        has_list = "list" in init["agentCapabilities"].get("sessionCapabilities", {})
        daemon.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        await reply(daemon, 1)  # the warm-up is over
        msg_id = 1
        for i in range(requests + 1):
            ms: dict[str, float] = {}
            if has_list:
                msg_id += 1
                ms["first_page_ms"], page = await timed(
                    daemon, msg_id, "session/list", {"cwd": str(workspace)}
                )
                total, listed = ms["first_page_ms"], len(page["sessions"])
                while "nextCursor" in page:
                    msg_id += 1
                    elapsed, page = await timed(
                        daemon,
                        msg_id,
                        "session/list",
                        {"cwd": str(workspace), "cursor": page["nextCursor"]},
                    )
                    total += elapsed
                    listed += len(page["sessions"])
                ms["all_pages_ms"] = total
            msg_id += 1
            ms["whole_list_ms"], whole = await timed(
                daemon, msg_id, "_agentd/session/list", {"workspaceRoot": str(workspace)}
            )
            assert not has_list or listed == len(whole["sessions"])
            for metric, value in ms.items():
                if i == 0:
                    first[metric] = round(value, 2)
                else:
                    samples[metric].append(value)
    finally:
        await stop(daemon)
    return {
        "sessions_listed": len(whole["sessions"]),
        "first_request_ms": first,
        **{m: percentiles(v) for m, v in samples.items() if v},
    }


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))], 2)

    return {"n": len(ordered), "p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1], 2)}


# --- the runs --------------------------------------------------------------------------


def summarize(samples: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for metric in METRICS:
        values = sorted(s[metric] for s in samples)
        out[metric] = {
            "median": round(statistics.median(values), 1),
            "p90": round(values[min(len(values) - 1, int(len(values) * 0.9))], 1),
            "min": round(values[0], 1),
        }
    return out


async def main(
    runs: int, baseline: Path | None, sessions: int, list_requests: int, cold_runs: int = 0
) -> dict[str, Any]:
    configs = [("acp", None), ("lsp", None)]
    if baseline is not None:
        configs += [("acp", baseline), ("lsp", baseline)]
    names = [f"{m}{'-baseline' if b else ''}" for m, b in configs]
    samples: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    result: dict[str, Any] = {
        "runs": runs,
        "python": sys.version.split()[0],
        "baseline_src": str(baseline) if baseline else None,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "README.md").write_text("# bench\n")
        async with ModelServer() as model:
            # One unmeasured run each: the first spawn pays for cold disk caches.
            for (mode, base), name in zip(configs, names, strict=True):
                await one_run(mode, model, workspace, Path(tmp) / f"warm-{name}", base)
            for i in range(runs):
                order = list(zip(configs, names, strict=True))
                if i % 2:
                    order.reverse()
                for (mode, base), name in order:
                    home = Path(tmp) / f"home-{name}-{i}"
                    sample = await one_run(mode, model, workspace, home, base)
                    sample["session_new_after_warmup_ms"] = await settled_run(
                        mode, model, workspace, Path(tmp) / f"settled-{name}-{i}", base
                    )
                    samples[name].append(sample)
            for name in names:
                result[name] = summarize(samples[name])
            if cold_runs:
                result["cold"] = await bench_cold("acp", model, Path(tmp), cold_runs, baseline)
            if sessions:
                home = Path(tmp) / "sessions-home"
                size = write_sessions(home, workspace, sessions)
                result["session_list"] = {"sessions": sessions, "bytes_on_disk": size}
                for base in [None, baseline] if baseline else [None]:
                    key = "baseline" if base else "agentd"
                    result["session_list"][key] = await list_run(
                        model, home, workspace, list_requests, base
                    )
    return result


def table(result: dict[str, Any]) -> str:
    names = [n for n in ("acp", "lsp", "acp-baseline", "lsp-baseline") if n in result]
    rows = [f"{'metric (ms, median / p90)':<32} " + " ".join(f"{n:>16}" for n in names)]
    for metric in METRICS:
        cells = [f"{result[n][metric]['median']:>7} / {result[n][metric]['p90']:<6}" for n in names]
        rows.append(f"{metric:<32} " + " ".join(f"{c:>16}" for c in cells))
    if "cold" in result:
        rows.append("")
        rows.append(
            markdown_table(
                ["metric", "agentd", "baseline checkout", "bare ACP SDK agent + httpx", "verdict"],
                cold_rows(result["cold"], "ACP"),
            )
        )
    listing = result.get("session_list")
    if listing:
        rows.append("")
        rows.append(
            f"session/list, {listing['sessions']} saved sessions "
            f"({listing['bytes_on_disk'] / 1e6:.1f} MB): ms p50 / p99 (first request)"
        )
        for key in ("agentd", "baseline"):
            run = listing.get(key)
            if run is None:
                continue
            for metric in LIST_METRICS:
                if metric in run:
                    first = run["first_request_ms"][metric]
                    cell = f"{run[metric]['p50']} / {run[metric]['p99']} ({first})"
                    rows.append(f"  {key:<9} {metric:<16} {cell}")
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--list-requests", type=int, default=200)
    parser.add_argument(
        "--cold-runs",
        type=int,
        default=None,
        help="cold/warm prompt rows (default --runs; 0 skips)",
    )
    parser.add_argument(
        "--config-file",
        action="store_true",
        help="give each start-up run's daemon a config.toml with a model list",
    )
    args = parser.parse_args()
    if args.config_file:
        CONFIG_FILE = (
            'model = "gpt-4o"\n'
            'models = ["gpt-4o-mini", { id = "local", supports_images = false }]\n'
            "[limits]\nmax_steps_per_prompt = 30\n"
        )
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    result = asyncio.run(
        main(
            max(1, args.runs),
            args.baseline_src,
            max(0, args.sessions),
            args.list_requests,
            max(0, args.runs if args.cold_runs is None else args.cold_runs),
        )
    )
    print(json.dumps(result, indent=2))
    print()
    print(table(result))
