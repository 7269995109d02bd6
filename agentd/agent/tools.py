"""Tools: the read-only ones the daemon runs itself, and the specs of the ones
editors run.

Daemon tools are confined to the session's workspace (see `paths.py`) and
never write. Client tools (`edit_file`, `write_file`, `run_command`, and a
client's own `read_file` that sees unsaved buffers) are only offered to the
model when the editor declared them in `initialize`.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentd.errors import ToolError
from agentd.messages import ToolSpec
from agentd.paths import open_inside, resolve_inside

READ_LIMIT_BYTES = 512 * 1024
SEARCH_MAX_HITS = 200
SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache"})

_PATH = {"type": "string", "description": "Path relative to the workspace root."}

DAEMON_TOOL_SPECS: dict[str, ToolSpec] = {
    "read_file": ToolSpec(
        "read_file",
        "Read a text file of the workspace. Returns numbered lines.",
        {
            "type": "object",
            "properties": {
                "path": _PATH,
                "offset": {"type": "integer", "description": "First line (1-based)."},
                "limit": {"type": "integer", "description": "Number of lines."},
            },
            "required": ["path"],
        },
    ),
    "list_dir": ToolSpec(
        "list_dir",
        "List a folder of the workspace (directories end with '/').",
        {"type": "object", "properties": {"path": _PATH}, "required": []},
    ),
    "search": ToolSpec(
        "search",
        "Search the workspace's text files for a string (or a regex). Returns path:line: text.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "path": _PATH,
                "regex": {"type": "boolean", "description": "Treat query as a regex."},
            },
            "required": ["query"],
        },
    ),
}

CLIENT_TOOL_SPECS: dict[str, ToolSpec] = {
    "edit_file": ToolSpec(
        "edit_file",
        "Replace an exact piece of text in a workspace file (the editor applies it, undoable).",
        {
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_text": {"type": "string", "description": "Exact text to replace."},
                "new_text": {"type": "string"},
            },
            "required": ["path", "old_text", "new_text"],
        },
    ),
    "write_file": ToolSpec(
        "write_file",
        "Create or overwrite a workspace file with the given content.",
        {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    "run_command": ToolSpec(
        "run_command",
        "Run a shell command in the workspace (the user approves it). "
        "Returns its output and exit code.",
        {
            "type": "object",
            "properties": {"command": {"type": "string"}, "cwd": _PATH},
            "required": ["command"],
        },
    ),
    "read_file": DAEMON_TOOL_SPECS["read_file"],
}


def client_tool_specs(declared: list[Any]) -> list[ToolSpec]:
    """Turn an editor's `clientTools` declaration into specs.

    Each entry is a known tool name or a full `{name, description, parameters}`.
    Unknown names without a description are skipped (and reported by the caller).
    """
    specs: list[ToolSpec] = []
    for entry in declared:
        if isinstance(entry, str) and entry in CLIENT_TOOL_SPECS:
            specs.append(CLIENT_TOOL_SPECS[entry])
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str):
            known = CLIENT_TOOL_SPECS.get(entry["name"])
            specs.append(
                ToolSpec(
                    entry["name"],
                    str(entry.get("description") or (known.description if known else "")),
                    dict(entry.get("parameters") or (known.parameters if known else {})),
                )
            )
    return specs


@dataclass(slots=True)
class DaemonTools:
    """The daemon's own read-only tools, bound to one workspace root."""

    root: Path

    async def run(self, name: str, args: dict[str, Any]) -> str:
        cancel = threading.Event()
        try:
            if name == "read_file":
                return await asyncio.to_thread(
                    self.read_file, **_args(args, "path", "offset", "limit")
                )
            if name == "list_dir":
                return await asyncio.to_thread(self.list_dir, **_args(args, "path"))
            if name == "search":
                kw = _args(args, "query", "path", "regex")
                return await asyncio.to_thread(self.search, cancel=cancel, **kw)
        except asyncio.CancelledError:
            # The worker thread cannot be interrupted; tell it to stop at its next check.
            cancel.set()
            raise
        raise ToolError(f"unknown daemon tool {name!r}")

    def read_file(self, path: str, offset: int | None = None, limit: int | None = None) -> str:
        fd, _ = open_inside(self.root, path)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ToolError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb") as f:
            data = f.read(READ_LIMIT_BYTES + 1)
        if b"\x00" in data[:8192]:
            raise ToolError(f"{path} looks like a binary file")
        truncated = len(data) > READ_LIMIT_BYTES
        lines = data[:READ_LIMIT_BYTES].decode("utf-8", "replace").splitlines()
        start = max(1, int(offset or 1))
        end = len(lines) if limit is None else min(len(lines), start - 1 + max(0, int(limit)))
        width = len(str(end)) if end else 1
        body = "\n".join(f"{i:>{width}}  {lines[i - 1]}" for i in range(start, end + 1))
        if truncated:
            body += f"\n[file truncated at {READ_LIMIT_BYTES} bytes]"
        return body or "(empty file)"

    def list_dir(self, path: str = ".") -> str:
        resolved = resolve_inside(self.root, path or ".")
        if not resolved.is_dir():
            raise ToolError(f"{path} is not a directory")
        entries = sorted(
            (e.name + ("/" if e.is_dir(follow_symlinks=False) else ""))
            for e in os.scandir(resolved)
        )
        return "\n".join(entries) if entries else "(empty directory)"

    def search(
        self,
        query: str,
        path: str = ".",
        regex: bool = False,
        cancel: threading.Event | None = None,
    ) -> str:
        if not query:
            raise ToolError("query must not be empty")
        base = resolve_inside(self.root, path or ".")
        try:
            pattern = re.compile(query if regex else re.escape(query), re.IGNORECASE)
        except re.error as exc:
            raise ToolError(f"invalid regex: {exc}") from exc
        hits: list[str] = []
        real_root = Path(os.path.realpath(self.root))
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for fname in sorted(filenames):
                if cancel is not None and cancel.is_set():
                    return "\n".join(hits) + "\n[search cancelled]"
                full = Path(dirpath) / fname
                if full.is_symlink():
                    continue  # never follow links out of the workspace
                try:
                    if full.stat().st_size > SEARCH_MAX_FILE_BYTES:
                        continue
                    data = full.read_bytes()
                except OSError:
                    continue
                if b"\x00" in data[:8192]:
                    continue
                rel = full.relative_to(real_root) if full.is_relative_to(real_root) else full
                for no, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                    if pattern.search(line):
                        hits.append(f"{rel}:{no}: {line.strip()[:300]}")
                        if len(hits) >= SEARCH_MAX_HITS:
                            return "\n".join(hits) + f"\n[stopped at {SEARCH_MAX_HITS} matches]"
        return "\n".join(hits) if hits else "no matches"


def _args(args: dict[str, Any], *names: str) -> dict[str, Any]:
    """Keep only known argument names: models invent extra keys."""
    return {k: args[k] for k in names if k in args and args[k] is not None}


def truncate_result(text: str, limit: int) -> str:
    """Cut huge tool output, saying so: never drop it silently."""
    if len(text) <= limit:
        return text
    return (
        text[:limit]
        + f"\n[output truncated: {len(text):,} characters, showing the first {limit:,}]"
    )
