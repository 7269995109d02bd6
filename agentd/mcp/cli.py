"""``agentd mcp list|status``: the MCP servers of the user's configuration, from a shell.

``list`` prints what is configured without starting anything. ``status``
starts each enabled server the way a daemon does (same code, same
environment rules), waits until it is up or has failed, prints its state
and tools, and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from agentd.config import McpServerSettings, Settings

# The settings (pydantic) and the MCP manager are imported by the commands
# that use them: the main CLI registers this module for every command, and
# they took 0.19 s of each `agentd memory ...` run.


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mcp",
        help="the MCP servers of your configuration",
        description="The MCP servers of your configuration (config file and environment).",
    )
    sub = parser.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", help="list the configured servers (nothing is started)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("status", help="start each server, list its tools, stop it")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser


def describe(name: str, config: McpServerSettings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "transport": config.transport,
        "enabled": config.enabled,
        "trust": config.trust,
    }
    if config.command is not None:
        out["command"] = [config.command, *config.args]
        if config.cwd:
            out["cwd"] = config.cwd
        # Names only: values may be secrets.
        out["env"] = sorted(config.env)
    else:
        out["url"] = config.url
        out["headers"] = sorted(config.headers)
    return out


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from agentd.config import load_settings

    out = out if out is not None else sys.stdout
    settings = load_settings()
    for problem in settings.problems:
        print(f"configuration: {problem}", file=sys.stderr)
    if args.mcp_command == "list":
        servers = [describe(n, c) for n, c in sorted(settings.mcp_servers.items())]
        if args.json:
            print(json.dumps({"servers": servers}, indent=2), file=out)
        elif not servers:
            print("no MCP servers configured", file=out)
        for s in [] if args.json else servers:
            where = " ".join(s["command"]) if "command" in s else s["url"]
            flags = "" if s["enabled"] else " (disabled)"
            print(f"{s['name']:<20} {s['transport']:<6} {where}{flags}", file=out)
        return 0
    status = asyncio.run(_status(settings))
    if args.json:
        print(json.dumps(status, indent=2), file=out)
    elif not status["servers"]:
        print("no MCP servers configured", file=out)
    for s in [] if args.json else status["servers"]:
        line = f"{s['name']:<20} {s['state']:<10} {s['transport']:<6} {s['toolCount']} tools"
        print(line, file=out)
        if s["tools"]:
            print(f"    {', '.join(s['tools'])}", file=out)
        if s.get("lastError"):
            print(f"    error: {s['lastError']}", file=out)
    return 0 if all(s["state"] == "ready" for s in status["servers"]) else 1


async def _status(settings: Settings) -> dict[str, Any]:
    from agentd.agent.session import AwaitClientResult, Session
    from agentd.mcp.manager import McpManager

    manager = McpManager(settings.mcp_servers, settings.mcp)
    timeout = settings.mcp.startup_timeout
    session = Session("agentd-mcp-status", Path.cwd(), AwaitClientResult([]))
    tools = manager.attach(session)
    try:
        if tools is not None:
            until = time.monotonic() + timeout
            await asyncio.gather(*(a.connection.wait_started(until) for a in tools.servers))
        return manager.status()
    finally:
        await manager.aclose(settings.memory.shutdown_grace)
