"""Cold start and first-request latency of agentd, ACP mode beside LSP mode.

For each run and each mode a fresh daemon is spawned over stdio and driven by
the raw client of `agentd.testing` (no client library on the measured path):

- spawn -> initialize reply      (`python -m agentd.acp` / `python -m agentd serve`)
- spawn -> session ready         (the newSession reply: the warm-up is over)
- prompt -> first model request  (the prompt is sent after the session exists;
                                  the end is the bundled model server's log `ts`)

Modes alternate within a run so that both see the same machine state. The
medians (and p90) over `--runs` runs (default 20) are printed as JSON, then
as a table.

    /work/venv/bin/python bench/acp_bench.py --runs 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentd.testing.daemon import daemon_env
from agentd.testing.framing import initialize_params
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

METRICS = ("spawn_to_initialize_ms", "spawn_to_session_ms", "prompt_to_model_request_ms")


async def reply(daemon: RawDaemon, msg_id: int) -> dict[str, Any]:
    message = await daemon.response(msg_id, timeout=60)
    if "error" in message:
        raise RuntimeError(f"{daemon.framing}: {message['error']}")
    return message


async def one_run(mode: str, model: ModelServer, workspace: Path, home: Path) -> dict[str, float]:
    # The daemon's default log level, as an editor would run it.
    env = daemon_env(model.openai_base_url, home, AGENTD_LOG_LEVEL="warning")
    start = time.perf_counter()
    daemon = await RawDaemon.spawn(env, acp=mode == "acp")
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
        assert daemon.proc.stdin is not None
        daemon.proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            await daemon.wait_exit(10)
        await daemon.close()
    return {
        "spawn_to_initialize_ms": (initialized - start) * 1000,
        "spawn_to_session_ms": (ready - start) * 1000,
        "prompt_to_model_request_ms": (request["ts"] - sent_at) * 1000,
    }


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


async def main(runs: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {"acp": [], "lsp": []}
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "README.md").write_text("# bench\n")
        async with ModelServer() as model:
            # One unmeasured run each: the first spawn pays for cold disk caches.
            for mode in ("acp", "lsp"):
                await one_run(mode, model, workspace, Path(tmp) / f"warm-{mode}")
            for i in range(runs):
                order = ("acp", "lsp") if i % 2 == 0 else ("lsp", "acp")
                for mode in order:
                    home = Path(tmp) / f"home-{mode}-{i}"
                    samples[mode].append(await one_run(mode, model, workspace, home))
    return {
        "runs": runs,
        "python": sys.version.split()[0],
        "acp": summarize(samples["acp"]),
        "lsp": summarize(samples["lsp"]),
    }


def table(result: dict[str, Any]) -> str:
    rows = [f"{'metric (ms, median / p90)':<32} {'ACP':>16} {'LSP':>16}"]
    for metric in METRICS:
        cells = [
            f"{result[m][metric]['median']:>7} / {result[m][metric]['p90']:<6}"
            for m in ("acp", "lsp")
        ]
        rows.append(f"{metric:<32} {cells[0]:>16} {cells[1]:>16}")
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(main(max(1, args.runs)))
    print(json.dumps(result, indent=2))
    print()
    print(table(result))
