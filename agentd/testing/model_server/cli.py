"""`agentd model-server` (and `python -m agentd.testing.model_server`): the
model server on loopback until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

from agentd.testing.model_server.server import ModelServer

# --- the command line ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentd model-server",
        description="Serve the OpenAI and Anthropic APIs with scripted replies on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--log", type=Path, help="append log entries as JSON lines")
    parser.add_argument(
        "--latency",
        action="append",
        default=[],
        metavar="PURPOSE=SECONDS",
        help="extra time to first chunk for a purpose (repeatable)",
    )
    parser.add_argument(
        "--script", type=Path, help="a JSON list of {purpose?, reply} to enqueue at start"
    )
    parser.add_argument(
        "--context-window",
        type=int,
        metavar="TOKENS",
        help="refuse requests over this many input tokens, as the real APIs do",
    )
    parser.add_argument(
        "--hold-headers",
        action="store_true",
        help="send a stream's headers only with its first chunk, as some servers do",
    )
    return parser


def _configure(server: ModelServer, latencies: list[str], script: Path | None) -> None:
    """Apply --latency and --script; ValueError/OSError describe what is wrong."""
    for item in latencies:
        purpose, sep, seconds = item.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if not sep or not purpose or not value >= 0:
            raise ValueError(f"--latency expects PURPOSE=SECONDS, got {item!r}")
        server.set_latency(purpose, value)
    if script is not None:
        entries = json.loads(script.read_text(encoding="utf-8"))
        if not isinstance(entries, list):
            raise ValueError(f"{script}: expected a JSON list of {{purpose?, reply}}")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("reply"), dict):
                raise ValueError(f"{script}: item {i} needs a reply object")
            purpose = entry.get("purpose", "main")
            if not isinstance(purpose, str):
                raise ValueError(f"{script}: item {i}: purpose must be a string")
            try:
                server.enqueue(entry["reply"], purpose)
            except ValueError as exc:
                raise ValueError(f"{script}: item {i}: {exc}") from None


async def _serve_until_signalled(server: ModelServer) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        try:
            await server.start()
        except OSError as exc:
            print(f"agentd model-server: cannot listen: {exc}", file=sys.stderr)
            return 1
        # The one line a parent process reads to find the port.
        sys.stdout.write(json.dumps({"url": server.base_url, "port": server.port}) + "\n")
        sys.stdout.flush()
        await stopping.wait()
    finally:
        await server.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`agentd model-server`: print {"url", "port"} on one line, serve until SIGINT/SIGTERM."""
    args = _parser().parse_args(argv)
    try:
        server = ModelServer(
            args.host,
            args.port,
            args.log,
            hold_headers=args.hold_headers,
            context_window=args.context_window,
        )
        _configure(server, args.latency, args.script)
    except (ValueError, OSError) as exc:
        print(f"agentd model-server: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_serve_until_signalled(server))
    return 0
