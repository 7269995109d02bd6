"""Load, cancel storm and soak on one daemon (issue 9), loopback only.

    python bench/load.py [--sessions 32] [--chunks 100] [--chunk-delay 0.02]
                         [--storm 2000] [--parallel 20] [--turns 3000]
                         [--json FILE] [--skip load,storm,soak]

1. load: `--sessions` sessions prompt at once on one daemon; the model server
   streams `--chunks` chunks `--chunk-delay` s apart to each. Checked: every
   prompt ends `end_turn`, every session receives exactly its own chunks, in
   order. Event-loop lag is measured from the client side: for each session,
   the gap between consecutive chunk arrivals minus the server's schedule
   (`--chunk-delay`), floored at 0; p50/p99/max over all gaps. (It includes
   this process's own scheduling, so it is an upper bound of the daemon's.)
2. storm: `--storm` prompts, `--parallel` at a time (one session per slot),
   each cancelled at a random moment in [0, 1.5 x its stream time] by
   `$/cancelRequest` or `agent/cancel` (some after they finished), plus a
   cancel for an unknown id after each prompt. Checked: exactly one reply
   per request. Reported: the daemon's fds, sockets and child processes
   before and after (after: once the model server saw every stream closed).
3. soak: `--turns` short prompts over 4 sessions with memory on (recall and
   extraction running) while a topic file is edited on disk every 10 turns.
   RSS sampled every 250 turns; the slope after warm-up (the first third) is
   reported as MB per 1,000 turns.

Prints JSON (stdout, or --json FILE) and a markdown table (stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.testing.daemon import memory_folder, rss_mib
from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import RpcError, StdioClient
from bench._common import Updates, bench_env, pct


def resources(pid: int) -> dict[str, int]:
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    children = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            children += len(Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            pass
    threads = len(os.listdir(f"/proc/{pid}/task"))
    return {"fds": len(fds), "sockets": sockets, "children": children, "threads": threads}


async def session(client: StdioClient, root: Path) -> str:
    return str(
        (await client.request("agent/newSession", {"workspaceRoot": str(root)}))["sessionId"]
    )


# --- 1. load ------------------------------------------------------------------------------


async def run_load(args: argparse.Namespace, model: ModelServer, tmp: Path) -> dict[str, Any]:
    updates = Updates()
    env = bench_env(model.openai_base_url, tmp) | {"AGENTD_MEMORY": "off"}
    client = await StdioClient.spawn(env, updates)
    await client.initialize()
    root = tmp / "ws"
    root.mkdir(exist_ok=True)
    sids = [await session(client, root) for _ in range(args.sessions)]
    for i in range(args.sessions):
        chunks = [f"s{i}-{k} " for k in range(args.chunks)]
        model.add_rule(f"load-{i}!", {"chunks": chunks, "chunkDelay": args.chunk_delay})
    rss_before = rss_mib(client.proc.pid)
    t0 = time.time()
    futs = [
        client.send_request("agent/prompt", {"sessionId": sid, "prompt": f"load-{i}!"})[1]
        for i, sid in enumerate(sids)
    ]
    peak = rss_before
    done = asyncio.ensure_future(asyncio.gather(*futs, return_exceptions=True))
    while not done.done():
        peak = max(peak, rss_mib(client.proc.pid))
        await asyncio.sleep(0.05)
    replies = done.result()
    wall = time.time() - t0
    complete = sum(isinstance(r, dict) and r.get("stopReason") == "end_turn" for r in replies)
    crossed = 0
    lags: list[float] = []
    for i, sid in enumerate(sids):
        got = [
            (ts, u["text"])
            for ts, u in updates.by_session.get(sid, [])
            if u["kind"] == "message_chunk"
        ]
        if [t for _, t in got] != [f"s{i}-{k} " for k in range(args.chunks)]:
            crossed += 1
        times = [ts for ts, _ in got]
        lags.extend(max(0.0, b - a - args.chunk_delay) * 1000 for a, b in itertools.pairwise(times))
    rss_after = rss_mib(client.proc.pid)
    code = await client.shutdown()
    return {
        "sessions": args.sessions,
        "chunksPerSession": args.chunks,
        "chunkDelayMs": args.chunk_delay * 1000,
        "completed": complete,
        "sessionsWithForeignOrMissingChunks": crossed,
        "lagMs": {
            "n": len(lags),
            "p50": round(pct(lags, 0.5), 2),
            "p99": round(pct(lags, 0.99), 2),
            "max": round(max(lags), 2) if lags else None,
        },
        "wallSeconds": round(wall, 2),
        "rssMiB": {
            "before": round(rss_before, 1),
            "peak": round(peak, 1),
            "after": round(rss_after, 1),
        },
        "exitCode": code,
    }


# --- 2. cancel storm ------------------------------------------------------------------------


async def run_storm(args: argparse.Namespace, model: ModelServer, tmp: Path) -> dict[str, Any]:
    client = await StdioClient.spawn(
        bench_env(model.openai_base_url, tmp) | {"AGENTD_MEMORY": "off"}
    )
    await client.initialize()
    root = tmp / "ws"
    root.mkdir(exist_ok=True)
    rng = random.Random(9)
    stream_time = 30 * 0.01
    model.add_rule("storm", {"chunks": ["x "] * 30, "chunkDelay": 0.01})
    sids = [await session(client, root) for _ in range(args.parallel)]
    # Warm-up: one prompt per slot, so the HTTP pool is as it will be.
    await asyncio.gather(
        *(client.request("agent/prompt", {"sessionId": s, "prompt": "hi"}) for s in sids)
    )
    await asyncio.sleep(0.5)
    before = resources(client.proc.pid)
    sent: list[Any] = []
    unknown: list[Any] = []
    outcomes: dict[str, int] = {}
    counter = itertools.count()
    t0 = time.time()

    async def slot(sid: str) -> None:
        while (n := next(counter)) < args.storm:
            # Both id types; integers far from the ids of the set-up requests.
            msg_id: Any = 10_000_000 + n if n % 2 else f"storm-{n}"
            _, fut = client.send_request(
                "agent/prompt", {"sessionId": sid, "prompt": "storm"}, msg_id
            )
            sent.append(msg_id)
            await asyncio.sleep(rng.uniform(0, 1.5 * stream_time))
            if rng.random() < 0.5:
                client.notify("$/cancelRequest", {"id": msg_id})
            else:
                client.notify("agent/cancel", {"sessionId": sid})
            bogus = f"unknown-{n}"
            unknown.append(bogus)
            client.notify("$/cancelRequest", {"id": bogus})
            try:
                key = (await asyncio.wait_for(fut, 60))["stopReason"]
            except RpcError as exc:
                key = exc.code
            outcomes[str(key)] = outcomes.get(str(key), 0) + 1

    await asyncio.gather(*(slot(s) for s in sids))
    wall = time.time() - t0
    # Barrier: any late duplicate would arrive before this reply.
    await client.request("agent/listSessions", {"workspaceRoot": str(root)})
    # Every stream the daemon opened has been closed (or finished) on the server's side.
    ids = {e["id"] for e in model.requests("main")}
    ended = {e["id"] for e in model.log if e["type"] in ("complete", "disconnect")}
    deadline = time.time() + 10
    while ids - ended and time.time() < deadline:
        await asyncio.sleep(0.05)
        ended = {e["id"] for e in model.log if e["type"] in ("complete", "disconnect")}
    await asyncio.sleep(0.5)
    after = resources(client.proc.pid)
    counts = [client.replies[i] for i in sent]
    result = {
        "prompts": len(sent),
        "parallel": args.parallel,
        "unknownIdCancels": len(unknown),
        "requestsWithExactlyOneReply": sum(c == 1 for c in counts),
        "requestsWithoutReply": sum(c == 0 for c in counts),
        "requestsWithSeveralReplies": sum(c > 1 for c in counts),
        "repliesToUnknownIds": sum(client.replies[u] for u in unknown),
        "outcomes": outcomes,
        "modelStreamsOpened": len(ids),
        "modelStreamsNotClosed": len(ids - ended),
        "wallSeconds": round(wall, 2),
        "before": before,
        "after": after,
        "rssMiB": round(rss_mib(client.proc.pid), 1),
    }
    result["exitCode"] = await client.shutdown()
    return result


# --- 3. soak -----------------------------------------------------------------------------


async def run_soak(args: argparse.Namespace, model: ModelServer, tmp: Path) -> dict[str, Any]:
    env = bench_env(model.openai_base_url, tmp)
    client = await StdioClient.spawn(env)
    await client.initialize()
    root = tmp / "soak-ws"
    root.mkdir(exist_ok=True)
    (root / "README.md").write_text("# soak\n")
    folder = memory_folder(root.resolve(), tmp)
    topic = folder / "deploy.md"
    sids = [await session(client, root) for _ in range(4)]
    samples: list[tuple[int, float]] = []
    t0 = time.time()
    errors = 0
    for turn in range(args.turns):
        if turn % 10 == 0:
            topic.write_text(
                "---\nname: Deploy checklist\ndescription: How we deploy\ntype: project\n---\n\n"
                f"Edit {turn}: run the smoke tests, then make ship.\n"
            )
        sid = sids[turn % len(sids)]
        try:
            await client.request(
                "agent/prompt", {"sessionId": sid, "prompt": f"deploy turn {turn}"}
            )
        except RpcError:
            errors += 1
        if turn % 100 == 99:
            # Long sessions hit maxSessionTurns (500); reset them, as a user would.
            for s in sids:
                await client.request("agent/resetSession", {"sessionId": s})
        if turn % 250 == 0 or turn == args.turns - 1:
            samples.append((turn + 1, rss_mib(client.proc.pid)))
    wall = time.time() - t0
    warm = [s for s in samples if s[0] >= args.turns // 3]
    slope = 0.0
    if len(warm) >= 2:
        xs, ys = [s[0] for s in warm], [s[1] for s in warm]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 1000
    status = await client.request("memory/status", {"workspaceRoot": str(root)})
    code = await client.shutdown()
    return {
        "turns": args.turns,
        "errors": errors,
        "topicEdits": (args.turns + 9) // 10,
        "extractionRequests": len(model.requests("extract")),
        "recallRequests": len(model.requests("recall")),
        "memoryDeliveries": status.get("deliveries"),
        "rssSamplesMiB": [(n, round(r, 1)) for n, r in samples],
        "rssSlopeMiBPer1000TurnsAfterWarmup": round(slope, 2),
        "wallSeconds": round(wall, 2),
        "exitCode": code,
    }


def table(out: dict[str, Any]) -> str:
    rows = ["| part | metric | value | goal |", "| --- | --- | --- | --- |"]
    if "load" in out:
        r = out["load"]
        rows += [
            f"| load | prompts completed | {r['completed']}/{r['sessions']} | all |",
            f"| load | sessions with a foreign or missing chunk | "
            f"{r['sessionsWithForeignOrMissingChunks']} | 0 |",
            f"| load | chunk-gap lag p50 / p99 / max (ms) | {r['lagMs']['p50']} / "
            f"{r['lagMs']['p99']} / {r['lagMs']['max']} | p99 < 100 |",
            f"| load | RSS before / peak / after (MiB) | {r['rssMiB']['before']} / "
            f"{r['rssMiB']['peak']} / {r['rssMiB']['after']} | info |",
        ]
    if "storm" in out:
        r = out["storm"]
        b, a = r["before"], r["after"]
        rows += [
            f"| storm | requests with exactly one reply | {r['requestsWithExactlyOneReply']}/"
            f"{r['prompts']} | all |",
            f"| storm | replies to {r['unknownIdCancels']} unknown-id cancels | "
            f"{r['repliesToUnknownIds']} | 0 |",
            f"| storm | outcomes | {json.dumps(r['outcomes'])} | info |",
            f"| storm | model streams left open | {r['modelStreamsNotClosed']}/"
            f"{r['modelStreamsOpened']} | 0 |",
            f"| storm | fds / sockets / children / threads before -> after | "
            f"{b['fds']}/{b['sockets']}/{b['children']}/{b['threads']} -> "
            f"{a['fds']}/{a['sockets']}/{a['children']}/{a['threads']} | equal |",
            f"| storm | wall (s) | {r['wallSeconds']} | info |",
        ]
    if "soak" in out:
        r = out["soak"]
        first, last = r["rssSamplesMiB"][0][1], r["rssSamplesMiB"][-1][1]
        rows += [
            f"| soak | turns (errors) | {r['turns']} ({r['errors']}) | 0 errors |",
            f"| soak | topic edits / extraction / recall requests | {r['topicEdits']} / "
            f"{r['extractionRequests']} / {r['recallRequests']} | info |",
            f"| soak | RSS first / last sample (MiB) | {first} / {last} | info |",
            f"| soak | RSS slope after warm-up (MiB per 1,000 turns) | "
            f"{r['rssSlopeMiBPer1000TurnsAfterWarmup']} | ~0 |",
            f"| soak | wall (s) | {r['wallSeconds']} | info |",
        ]
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    skip = set(filter(None, args.skip.split(",")))
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="agentd-load-") as d:
        tmp = Path(d)
        for name, fn in (("load", run_load), ("storm", run_storm), ("soak", run_soak)):
            if name in skip:
                continue
            part = tmp / name
            part.mkdir()
            async with ModelServer() as model:
                out[name] = await fn(args, model, part)
            print(f"{name} done", file=sys.stderr, flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--chunk-delay", type=float, default=0.02)
    parser.add_argument("--storm", type=int, default=2000)
    parser.add_argument("--parallel", type=int, default=20)
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--skip", default="", help="comma-separated parts to skip")
    parser.add_argument("--json", help="write the JSON here instead of stdout")
    args = parser.parse_args()
    out = asyncio.run(main_async(args))
    text = json.dumps(out, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    print(table(out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
