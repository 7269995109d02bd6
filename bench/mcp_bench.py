"""MCP servers: what a tool call through the daemon costs, and what servers cost a prompt.

    python bench/mcp_bench.py [--calls 200] [--prompts 100] [--spawns 10]
                              [--first 3] [--acp-calls 100] [--baseline-src DIR]

Rows (the MCP server is tests/mcp/server.py over stdio, written with the SDK):

- MCP tool call, direct: the SDK's `Client` in this process calling the
  server's `add` tool: request -> result.
- MCP tool call through the daemon: the model server sends a tool call of
  `mcp__calc__add`; from the end of that response to the arrival of the
  next model request (which carries the result) at the model server. The
  same step with the daemon's own `read_file` is given beside it: what a
  tool step costs without MCP. Overhead = through the daemon - direct.
- MCP tool call over ACP: the same tool step through the ACP daemon, with
  the `add` tool of an MCP server the editor serves over the ACP connection
  (`type: "acp"`, `mcp/message`; the editor is this process, the server
  tests/mcp/server.py's on memory streams, bridged by
  tests/mcp/acp_bridge.py) and of the same server over stdio, both in one
  session, the calls alternating between the two.
- prompt -> first request at the model server, with 0 and with 5
  configured servers (5 different specs, all ready), prompts alternating
  between the two daemons; and a first prompt sent right after
  `agent/newSession`, when the 5 servers are still starting (it waits at
  most `mcp.startupWait`, 1 s by default, then goes without them).
- spawn -> `initialize` reply and RSS after the warm-up, with no server
  configured; with `--baseline-src DIR` (a checkout of another commit) the
  same daemon of that tree is measured side by side, alternating.

Prints JSON (stdout or --json FILE) and a markdown table (stderr, or stdout with --table).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.testing.daemon import daemon_command, rss_mib
from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import RpcError, StdioClient
from bench._common import (
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    fmt,
    markdown_table,
    start_agentd,
    summary,
)

SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp" / "server.py"


def server_spec(name: str) -> dict[str, Any]:
    # A distinct env per name: distinct specs, so each is its own process.
    return {"command": sys.executable, "args": [str(SERVER)], "env": {"MCP_TEST_NAME": name}}


async def wait_ready(client: StdioClient, count: int) -> None:
    while True:
        status = await client.request("mcp/status", {})
        if sum(s["state"] == "ready" for s in status["servers"]) >= count:
            return
        await asyncio.sleep(0.1)  # status has no event to wait for; this is set-up, not measured


# --- direct -----------------------------------------------------------------------------


async def bench_direct(calls: int) -> list[float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    out: list[float] = []
    async with Client(params, mode="legacy") as client:
        for i in range(calls + 10):
            t0 = time.perf_counter()
            await client.call_tool("add", {"a": i, "b": 1})
            if i >= 10:
                out.append((time.perf_counter() - t0) * 1000)
    return out


# --- through the daemon -----------------------------------------------------------------


async def tool_steps(
    client: StdioClient, server: ModelServer, sid: str, tool: str, args: dict[str, Any], n: int
) -> list[float]:
    out: list[float] = []
    for i in range(n + 5):
        server.enqueue({"toolCalls": [{"id": f"c{i}", "name": tool, "arguments": args}]})
        start = len(server.log)
        await client.request("agent/prompt", {"sessionId": sid, "prompt": f"call {i}"})
        entries = server.log[start:]
        first = next(e for e in entries if e["type"] == "request")
        done = next(e for e in entries if e["type"] == "complete" and e["id"] == first["id"])
        second = next(e for e in entries if e["type"] == "request" and e["id"] != first["id"])
        if i >= 5:
            out.append((second["ts"] - done["ts"]) * 1000)
    return out


async def bench_through_daemon(server: ModelServer, root: Path, calls: int) -> dict[str, Any]:
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("hello\n")
    env = bench_env(server.openai_base_url, root / "through")
    env["AGENTD_MEMORY"] = "off"
    options = {"mcpServers": {"calc": server_spec("calc")}, "mcp": {"startupWait": 60}}
    client = await start_agentd(env, options)
    try:
        # Servers start with the session that uses them.
        sid = (await client.request("agent/newSession", {"workspaceRoot": str(ws)}))["sessionId"]
        await wait_ready(client, 1)
        mcp = await tool_steps(client, server, sid, "mcp__calc__add", {"a": 1, "b": 2}, calls)
        own = await tool_steps(client, server, sid, "read_file", {"path": "a.txt"}, calls)
    finally:
        await client.shutdown()
    return {"mcp_step_ms": mcp, "read_file_step_ms": own}


# --- over ACP: the editor's own server vs a stdio server, one ACP daemon -------------------


class _QuietEditor:
    """An ACP client that only takes updates (the bench's tools ask no permission)."""

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        pass


async def bench_over_acp(server: ModelServer, root: Path, calls: int) -> dict[str, Any]:
    from acp.schema import EnvVariable, McpServerStdio

    from tests.mcp import server as test_server
    from tests.mcp.acp_bridge import EditorMcp

    ws = root / "ws-acp"
    ws.mkdir(exist_ok=True)
    env = bench_env(server.openai_base_url, root / "over-acp")
    env["AGENTD_MEMORY"] = "off"
    bridge = EditorMcp()
    bridge.servers["srv-ed"] = lambda: test_server.build("ed")
    stdio = McpServerStdio(
        name="calc",
        command=sys.executable,
        args=[str(SERVER)],
        env=[EnvVariable(name="MCP_TEST_NAME", value="calc")],
    )
    steps: dict[str, list[float]] = {"acp_step_ms": [], "stdio_step_ms": []}
    # The in-process server notes each call on stderr, where the table goes.
    with contextlib.redirect_stderr(io.StringIO()):
        await _acp_steps(bridge, env, ws, stdio, calls, server, steps)
    return steps


async def _acp_steps(
    bridge: Any,
    env: dict[str, str],
    ws: Path,
    stdio: Any,
    calls: int,
    server: ModelServer,
    steps: dict[str, list[float]],
) -> None:
    from acp import text_block
    from acp.schema import AcpMcpServer
    from acp.stdio import spawn_agent_process

    async with spawn_agent_process(_QuietEditor(), *daemon_command(acp=True), env=env) as (
        conn,
        _process,
    ):
        bridge.install(conn)
        await conn.initialize(protocol_version=1, agentd={"mcp": {"startupWait": 60}})
        servers = [AcpMcpServer(type="acp", name="ed", server_id="srv-ed"), stdio]
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=servers)).session_id
        for i in range(2 * (calls + 5)):
            key, tool = (
                ("acp_step_ms", "mcp__ed__add") if i % 2 else ("stdio_step_ms", "mcp__calc__add")
            )
            server.enqueue(
                {"toolCalls": [{"id": f"a{i}", "name": tool, "arguments": {"a": 1, "b": 2}}]}
            )
            start = len(server.log)
            await conn.prompt(session_id=sid, prompt=[text_block(f"call {i}")])
            entries = server.log[start:]
            first = next(e for e in entries if e["type"] == "request")
            done = next(e for e in entries if e["type"] == "complete" and e["id"] == first["id"])
            second = next(e for e in entries if e["type"] == "request" and e["id"] != first["id"])
            messages = server.requests("main")[-1]["body"]["messages"]
            answer = next(m for m in reversed(messages) if m["role"] == "tool")["content"]
            if answer != "3":  # a step that did not run the tool measures nothing
                raise RuntimeError(f"{tool} did not answer: {answer}")
            if i >= 10:
                steps[key].append((second["ts"] - done["ts"]) * 1000)
        await bridge.aclose()


# --- prompt -> first request, 0 vs 5 servers --------------------------------------------


async def prompt_to_request(client: StdioClient, server: ModelServer, sid: str, text: str) -> float:
    start = len(server.log)
    t0 = time.time()
    await client.request("agent/prompt", {"sessionId": sid, "prompt": text})
    req = next(e for e in server.log[start:] if e["type"] == "request")
    return float((req["ts"] - t0) * 1000)


async def bench_servers(
    server: ModelServer, root: Path, prompts: int, first: int
) -> dict[str, Any]:
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    five = {f"s{i}": server_spec(f"s{i}") for i in range(5)}
    clients: dict[str, StdioClient] = {}
    out: dict[str, Any] = {"zero": [], "five": [], "first_zero": [], "first_five": []}
    try:
        for key, servers in (("zero", {}), ("five", five)):
            env = bench_env(server.openai_base_url, root / key)
            env["AGENTD_MEMORY"] = "off"
            clients[key] = await start_agentd(env, {"mcpServers": servers})
        sids = {}
        for key, client in clients.items():
            params = {"workspaceRoot": str(ws)}
            sids[key] = (await client.request("agent/newSession", params))["sessionId"]
        await wait_ready(clients["five"], 5)
        for i in range(prompts + 5):
            order = ["zero", "five"] if i % 2 == 0 else ["five", "zero"]
            for key in order:
                ms = await prompt_to_request(clients[key], server, sids[key], f"hello {i}")
                if i >= 5:
                    out[key].append(ms)
    finally:
        for client in clients.values():
            await client.shutdown()
    # A first prompt the instant a session exists (its servers still starting).
    for run in range(first):
        for key, servers in (("zero", {}), ("five", five)):
            env = bench_env(server.openai_base_url, root / f"first-{key}-{run}")
            env["AGENTD_MEMORY"] = "off"
            client = await start_agentd(env, {"mcpServers": servers})
            try:
                params = {"workspaceRoot": str(ws)}
                sid = (await client.request("agent/newSession", params))["sessionId"]
                out[f"first_{key}"].append(await prompt_to_request(client, server, sid, "now"))
            finally:
                await client.shutdown()
    return out


# --- start-up and RSS with none configured -----------------------------------------------


async def spawn_once(args: list[str], env: dict[str, str]) -> dict[str, float]:
    t0 = time.perf_counter()
    client = await StdioClient.spawn(env, None, args=args)
    try:
        await client.request(
            "initialize",
            {"processId": os.getpid(), "capabilities": {}, "initializationOptions": {}},
        )
        init_ms = (time.perf_counter() - t0) * 1000
        client.notify("initialized", {})
        try:  # needs the warmed-up App; changes nothing
            await client.request("agent/resetSession", {"sessionId": "no-such-session"})
        except RpcError:
            pass
        return {"init_ms": init_ms, "rss_warm_mb": rss_mib(client.proc.pid)}
    finally:
        await client.shutdown()


async def bench_spawn(server: ModelServer, root: Path, runs: int, base: Path | None) -> Any:
    env = bench_env(server.openai_base_url, root / "spawn")
    variants = {"this": (daemon_command(), env)}
    if base is not None:
        variants["baseline"] = baseline_daemon(env, base)
    for args, e in variants.values():
        await spawn_once(args, e)  # untimed: the file cache, .pyc files
    out: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for i in range(runs):
        keys = list(variants) if i % 2 == 0 else list(variants)[::-1]
        for key in keys:
            out[key].append(await spawn_once(*variants[key]))
    return {
        key: {
            "init_ms": summary(r["init_ms"] for r in rows),
            "rss_after_warmup_mb": summary((r["rss_warm_mb"] for r in rows), 1),
        }
        for key, rows in out.items()
    }


# --- main -----------------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    d, t = result["direct_call_ms"], result["through_daemon"]
    mcp, own = t["mcp_step_ms"], t["read_file_step_ms"]
    p = result["prompt_to_request_ms"]
    rows = [
        [
            "MCP tool call p50 / p99",
            f"through the daemon {fmt(mcp['median'], ' ms')} / {fmt(mcp['p99'], ' ms')}",
            f"direct (SDK) {fmt(d['median'], ' ms')} / {fmt(d['p99'], ' ms')}",
            f"overhead {fmt(mcp['median'] - d['median'], ' ms')} p50; "
            f"read_file step {fmt(own['median'], ' ms')}",
        ],
        [
            "prompt -> first request, p50 / p99",
            f"5 servers {fmt(p['five']['median'], ' ms')} / {fmt(p['five']['p99'], ' ms')}",
            f"0 servers {fmt(p['zero']['median'], ' ms')} / {fmt(p['zero']['p99'], ' ms')}",
            f"first prompt at once: 5 {fmt(p['first_five']['median'], ' ms')}, "
            f"0 {fmt(p['first_zero']['median'], ' ms')}",
        ],
    ]
    acp = result.get("over_acp")
    if acp:
        a, st = acp["acp_step_ms"], acp["stdio_step_ms"]
        rows.append(
            [
                "MCP tool call step through the ACP daemon p50 / p99",
                f"the editor's own server (MCP over ACP) {fmt(a['median'], ' ms')} / "
                f"{fmt(a['p99'], ' ms')}",
                f"the same server over stdio {fmt(st['median'], ' ms')} / {fmt(st['p99'], ' ms')}",
                "one session, calls alternating",
            ]
        )
    for key, row in result["spawn_none_configured"].items():
        rows.append(
            [
                f"spawn -> initialize / RSS after warm-up ({key})",
                f"{fmt(row['init_ms']['median'], ' ms', 0)} / "
                f"{fmt(row['rss_after_warmup_mb']['median'], ' MB', 1)}",
                "no server configured",
                "",
            ]
        )
    return markdown_table(["metric", "agentd", "comparison", "note"], rows)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
        root = Path(tmp)
        async with ModelServer(log_path=root / "model.jsonl") as server:
            spawn = await bench_spawn(server, root, args.spawns, args.baseline_src)
            direct = await bench_direct(args.calls)
            through = await bench_through_daemon(server, root, args.calls)
            over_acp = (
                await bench_over_acp(server, root, args.acp_calls) if args.acp_calls else None
            )
            servers = await bench_servers(server, root, args.prompts, args.first)
    return {
        "machine": {"loadavg_1m": os.getloadavg()[0], "cpus": os.cpu_count()},
        "direct_call_ms": summary(direct),
        "through_daemon": {k: summary(v) for k, v in through.items()},
        "prompt_to_request_ms": {k: summary(v) for k, v in servers.items()},
        "over_acp": {k: summary(v) for k, v in over_acp.items()} if over_acp else None,
        "spawn_none_configured": spawn,
        "baseline_src": str(args.baseline_src) if args.baseline_src else None,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--spawns", type=int, default=10)
    parser.add_argument("--first", type=int, default=3)
    parser.add_argument("--acp-calls", type=int, default=100)
    parser.add_argument("--baseline-src", type=Path, default=None)
    add_output_args(parser)
    args = parser.parse_args()
    result = asyncio.run(main(args))
    emit(args, result, table(result))
