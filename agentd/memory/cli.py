"""``agentd memory ...``: look at a project's memory from a shell.

The main CLI calls ``register(subparsers)`` and, for the ``memory`` command,
``run(args)``. Nothing here watches files: each command indexes once and
exits, through the same ``ProjectMemory`` code a daemon uses, with the same
memory index cache (`agentd.memory.index_cache`, under ``$AGENTD_HOME``):
the notes that did not change since a daemon (or an earlier command) read
them are taken from it, not read and tokenised again.

The CLI writes the cache too, as a daemon does at exit, and only when its
scan read notes the cache did not have (a note edited, added or removed
since): the next command, or the next daemon start, then finds them there.
Left to the daemon alone, a folder edited while no daemon runs (a `git
pull` of a team folder, notes written by hand) would be read whole by every
command until a daemon started. The write is the daemon's (a temporary file
renamed over the old one, entries checked against their files), so a
daemon and a command writing at once leave one whole file, either's; a home
that cannot be written costs one warning line and a cold read next time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from agentd.layout import agentd_home, memory_dir
from agentd.memory.project import ProjectMemory
from agentd.memory.recall import MAX_DOCS, RecallResult
from agentd.memory.render import render_recall
from agentd.memory.store import DocInfo


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``memory`` and its subcommands to the main CLI's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "memory", help="inspect a project's memory", description="Inspect a project's memory."
    )
    sub = parser.add_subparsers(dest="memory_command", metavar="COMMAND", required=True)

    def workspace(p: argparse.ArgumentParser) -> None:
        p.add_argument("workspace", metavar="WORKSPACE", type=Path, help="workspace root")

    p = sub.add_parser("dir", help="print the project's memory folder")
    workspace(p)
    p = sub.add_parser("list", help="list the memory docs")
    workspace(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("recall", help="run the local recall tier for a query")
    workspace(p)
    p.add_argument("query", help="the query, as a user prompt would be")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--limit", type=int, default=MAX_DOCS, help=f"at most N docs (max {MAX_DOCS})")
    p.add_argument("--render", action="store_true", help="print what the model would see")
    p = sub.add_parser("status", help="index size, watcher state and problems")
    workspace(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser(
        "consolidate", help="merge duplicate notes and retire stale ones now (asks the model)"
    )
    workspace(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)
    return parser


def _doc_json(info: DocInfo) -> dict[str, Any]:
    return {
        "path": str(info.path),
        "name": info.name,
        "description": info.description,
        "type": info.type,
        "mtime": info.mtime,
        "team": info.team,
        "problems": list(info.problems),
    }


def recall_json(result: RecallResult) -> dict[str, Any]:
    docs = []
    for doc in result.docs:
        item = asdict(doc)
        item["path"] = str(doc.path)
        item["ageText"] = item.pop("age_text")
        docs.append(item)
    return {"docs": docs, "tier": result.tier}


async def _with_memory(workspace: Path, use: Callable[[ProjectMemory], int]) -> int:
    home = agentd_home()
    memory = ProjectMemory(workspace, home=home, watch=False, index_cache_home=home)
    await memory.start()
    try:
        return use(memory)
    finally:
        await memory.aclose()


def _list(args: argparse.Namespace, out: TextIO) -> Callable[[ProjectMemory], int]:
    def use(memory: ProjectMemory) -> int:
        docs = memory.list_docs()
        if args.json:
            payload = {"directory": str(memory.directory), "docs": [_doc_json(d) for d in docs]}
            print(json.dumps(payload, ensure_ascii=False, indent=2), file=out)
            return 0
        print(f"{memory.directory}  ({len(docs)} docs)", file=out)
        for d in docs:
            flag = " [team]" if d.team else ""
            warn = "  (!)" if d.problems else ""
            print(f"  {d.type or '?':<9} {d.path.name:<32} {d.name}{flag}{warn}", file=out)
        return 0

    return use


def _recall(args: argparse.Namespace, out: TextIO) -> Callable[[ProjectMemory], int]:
    def use(memory: ProjectMemory) -> int:
        result = memory.recall(args.query, limit=args.limit)
        if args.json:
            print(json.dumps(recall_json(result), ensure_ascii=False, indent=2), file=out)
        elif args.render:
            print(render_recall(result), file=out)
        elif not result.docs:
            print("no memory matches", file=out)
        else:
            for d in result.docs:
                print(f"{d.score:8.3f}  {d.path}  {d.name} ({d.age_text})", file=out)
        return 0

    return use


def _status(args: argparse.Namespace, out: TextIO) -> Callable[[ProjectMemory], int]:
    def use(memory: ProjectMemory) -> int:
        status = memory.status()
        if args.json:
            print(json.dumps(status, ensure_ascii=False, indent=2), file=out)
            return 0
        print(f"directory:      {status['directory']}", file=out)
        print(f"team directory: {status['teamDirectory']}", file=out)
        print(f"docs:           {status['docCount']} ({status['teamDocCount']} team)", file=out)
        print(f"indexed at:     {status['indexedAt']}", file=out)
        problems = status["problems"]
        print(f"problems:       {len(problems) or 'none'}", file=out)
        for p in problems:
            print(f"  {p['path']}: {p['problem']}", file=out)
        return 0

    return use


async def _consolidate(workspace: Path, as_json: bool, out: TextIO) -> int:
    """One consolidation pass, under the folder lock, with the daemon's provider settings."""
    # Heavy imports (pydantic, httpx) only for the one command that asks a model.
    from agentd.config import load_settings
    from agentd.memory.extraction import ExtractionService
    from agentd.memory.manager import MemoryManager
    from agentd.providers import make_provider
    from agentd.tasks import Supervisor

    home = agentd_home()
    if not memory_dir(workspace, home).is_dir():
        result: dict[str, Any] = {"merged": [], "retired": [], "skipped": []}
    else:
        settings = load_settings()
        for problem in settings.problems:
            print(f"configuration: {problem}", file=sys.stderr)
        config = settings.provider_config()
        provider = make_provider(config)
        manager = MemoryManager(home, watch=False)
        supervisor = Supervisor()
        service = ExtractionService(
            manager,
            provider,
            supervisor,
            fast_model=config.fast_model,
            transcripts=lambda sid: None,
            home=home,
        )
        try:
            result = await service.consolidate(workspace)
        finally:
            await service.aclose()
            await supervisor.aclose()
            await manager.aclose()
            await provider.aclose()
    if as_json:
        print(json.dumps(result, ensure_ascii=False, indent=2), file=out)
    else:
        for m in result.get("merged", []):
            print(f"merged   {', '.join(m['from'])} -> {m['into']}", file=out)
        for name in result.get("retired", []):
            print(f"retired  {name}", file=out)
        for note in result.get("skipped", []):
            print(f"skipped  {note}", file=out)
        if not any(result.get(k) for k in ("merged", "retired", "skipped", "error")):
            print("nothing to consolidate", file=out)
    if "error" in result:
        print(f"consolidation failed: {result['error']}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run a ``memory`` subcommand; returns the exit code."""
    out = out if out is not None else sys.stdout
    command = args.memory_command
    workspace = Path(args.workspace).expanduser().resolve()
    if command == "dir":
        print(memory_dir(workspace), file=out)
        return 0
    if command == "consolidate":
        return asyncio.run(_consolidate(workspace, args.json, out))
    if command == "recall" and args.limit < 0:
        print("--limit must be 0 or more", file=sys.stderr)
        return 2
    handlers = {"list": _list, "recall": _recall, "status": _status}
    handler = handlers.get(command)
    if handler is None:
        print(f"unknown memory command: {command}", file=sys.stderr)
        return 2
    return asyncio.run(_with_memory(workspace, handler(args, out)))
