"""Memory extraction benchmark: does extraction delay replies, and does it keep up?

Two daemons on one local model server, the fast model's extractor answering
after `--latency` seconds (default 2 s):

1. Reply latency with extraction off vs on: `--prompts` prompts, interleaved
   between the two daemons so drift hits both alike.
2. A burst of `--burst` prompts (several sessions at once) on the daemon with
   extraction on: extraction requests issued, coverage of the burst's user
   messages in extraction request bodies (goal 100%), and the time from the
   last reply until every cursor reaches the end of its transcript.

Prints the JSON result and a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def run(args: argparse.Namespace) -> dict[str, Any]:
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
            "extractorLatencyS": args.latency,
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
    off, on = r["replyLatencyMs"]["off"], r["replyLatencyMs"]["on"]
    b = r["burst"]
    rows = [
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
    return markdown_table(["measure", "value"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=2.0, help="extractor latency (s)")
    parser.add_argument("--prompts", type=int, default=40, help="prompts per daemon for latency")
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--sessions", type=int, default=5)
    add_output_args(parser)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    emit(args, result, build_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
