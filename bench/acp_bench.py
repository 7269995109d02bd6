"""Cold start and first-request latency of agentd, ACP mode beside LSP mode.

For each run and each mode a fresh daemon is spawned over stdio and driven by
a minimal client written here (no client library on the measured path):

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
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentd.testing.model_server import ModelServer

METRICS = ("spawn_to_initialize_ms", "spawn_to_session_ms", "prompt_to_model_request_ms")


class Daemon:
    """One daemon process and its framing (newline JSON for ACP, Content-Length for LSP)."""

    def __init__(self, mode: str, process: asyncio.subprocess.Process) -> None:
        self.mode = mode
        self.process = process
        assert process.stdin is not None and process.stdout is not None
        self.stdin = process.stdin
        self.stdout = process.stdout

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        if self.mode == "acp":
            self.stdin.write(body + b"\n")
        else:
            self.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def receive(self) -> dict[str, Any]:
        if self.mode == "acp":
            return dict(json.loads(await self.stdout.readline()))
        length = 0
        while (line := await self.stdout.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return dict(json.loads(await self.stdout.readexactly(length)))

    async def reply(self, msg_id: int) -> dict[str, Any]:
        while True:
            message = await self.receive()
            if message.get("id") == msg_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{self.mode}: {message['error']}")
                return message

    async def close(self) -> None:
        self.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


async def one_run(mode: str, model: ModelServer, workspace: Path, home: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(
        AGENTD_BASE_URL=model.openai_base_url,
        AGENTD_API_KEY="test",
        AGENTD_MODEL="test",
        AGENTD_HOME=str(home),
        AGENTD_CONFIG_DIR=str(home / "config"),
    )
    command = ["-m", "agentd.acp"] if mode == "acp" else ["-m", "agentd", "serve"]
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    daemon = Daemon(mode, process)
    try:
        if mode == "acp":
            daemon.send({"id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        else:
            init = {"processId": None, "capabilities": {}, "initializationOptions": {}}
            daemon.send({"id": 0, "method": "initialize", "params": init})
        await daemon.reply(0)
        initialized = time.perf_counter()
        if mode == "acp":
            daemon.send(
                {
                    "id": 1,
                    "method": "session/new",
                    "params": {"cwd": str(workspace), "mcpServers": []},
                }
            )
        else:
            daemon.send({"method": "initialized", "params": {}})
            daemon.send(
                {"id": 1, "method": "agent/newSession", "params": {"workspaceRoot": str(workspace)}}
            )
        sid = (await daemon.reply(1))["result"]["sessionId"]
        ready = time.perf_counter()
        last = max((e["id"] for e in model.requests()), default=-1)
        sent_at = time.time()  # the model server's log uses wall-clock time
        if mode == "acp":
            prompt = [{"type": "text", "text": "hello"}]
            daemon.send(
                {
                    "id": 2,
                    "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": prompt},
                }
            )
        else:
            daemon.send(
                {"id": 2, "method": "agent/prompt", "params": {"sessionId": sid, "prompt": "hello"}}
            )
        request = await model.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > last
        )
        await daemon.reply(2)
        if mode == "lsp":
            daemon.send({"id": 3, "method": "shutdown"})
            await daemon.reply(3)
            daemon.send({"method": "exit"})
    finally:
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
