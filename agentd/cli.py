"""`agentd` command line: argv -> logging to stderr -> a subcommand.

stdout belongs to the protocol in `agentd serve`; everything human goes to
stderr. Subcommand modules are imported only when chosen, so `agentd serve`
starts with nothing but what serving needs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from agentd import PROTOCOL_VERSION, __version__


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.WARNING),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def build_parser(with_memory: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentd",
        description="A coding-agent daemon that editors spawn over stdio, with memory.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"agentd {__version__} (protocol {PROTOCOL_VERSION})",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("AGENTD_LOG_LEVEL", "warning"),
        help="stderr log level (default: warning, or $AGENTD_LOG_LEVEL)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the agent protocol over stdio (editors run this)")
    serve.add_argument(
        "--stdio",
        action="store_true",
        help="LSP framing on stdio, without looking at the first byte (the default "
        "detects LSP or ACP from the client's first message)",
    )
    serve.add_argument(
        "--acp",
        action="store_true",
        help="speak the Agent Client Protocol (Zed, JetBrains, CodeCompanion, avante)",
    )
    serve.add_argument(
        "--tcp",
        action="store_true",
        help="listen on a loopback TCP port instead of stdio (token required)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="--tcp: loopback address to bind")
    serve.add_argument("--port", type=int, default=7654, help="--tcp: port (0: any free port)")
    serve.add_argument(
        "--token-file",
        help="--tcp: file holding the token (mode 0600; created if missing; "
        "default: <config dir>/tcp-token)",
    )

    demo = sub.add_parser("demo", help="run a whole agent session end to end, printed readably")
    demo.add_argument("--workspace", help="workspace to use (default: a new demo folder)")

    sub.add_parser(
        "model-server",
        help="run the bundled local model server (OpenAI and Anthropic APIs, scripted)",
        add_help=False,
    )
    if with_memory:
        # Only imported when it can be used: `agentd serve` must start fast.
        from agentd.mcp import cli as mcp_cli
        from agentd.memory import cli as memory_cli

        memory_cli.register(sub)
        mcp_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # model-server has its own parser; hand it everything after the subcommand.
    if argv[:1] == ["model-server"]:
        from agentd.testing.model_server import main as model_server_main

        return model_server_main(argv[1:])
    parser = build_parser(with_memory=argv[:1] != ["serve"])
    args = parser.parse_args(argv)
    _setup_logging(args.log_level)
    if args.command in (None, "serve"):
        if args.command is None and sys.stdin.isatty():
            parser.print_help(sys.stderr)
            return 2
        from agentd.stdio import exit_on_stop_signals

        exit_on_stop_signals()
        if getattr(args, "tcp", False):
            from agentd.lsp.tcp import run_tcp

            return run_tcp(args.host, args.port, args.token_file)
        if getattr(args, "acp", False):
            from agentd.acp.server import run_acp_stdio

            return run_acp_stdio()
        prefix = b""
        if not getattr(args, "stdio", False):
            # No framing named: tell LSP from ACP by the client's first byte.
            from agentd.stdio import sniff_framing

            kind, prefix = sniff_framing()
            if kind == "eof":
                return 1
            if kind == "acp":
                from agentd.acp.server import run_acp_stdio

                return run_acp_stdio(prefix)
        from agentd.lsp.server import run_stdio

        return run_stdio(prefix)
    if args.command == "demo":
        from agentd.demo import run_demo

        return run_demo(args.workspace)
    if args.command == "memory":
        from agentd.memory import cli as memory_cli

        return memory_cli.run(args)
    if args.command == "mcp":
        from agentd.mcp import cli as mcp_cli

        return mcp_cli.run(args)
    parser.print_help(sys.stderr)
    return 2
