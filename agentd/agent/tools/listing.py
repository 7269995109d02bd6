"""`list_dir`: a folder as a tree, with sizes, ignore files honoured, capped per folder."""

from __future__ import annotations

import os
import stat
from typing import Any

from agentd.agent.tools import specs
from agentd.agent.tools.fs import Root, kind_of, open_dir_at
from agentd.agent.tools.globs import compile_lines
from agentd.agent.tools.output import ToolConfig, ToolOutput
from agentd.agent.tools.walk import Entry, Filters, Level, Rules, ancestors, scan
from agentd.agent.tools.worker import StopToken
from agentd.errors import ToolError
from agentd.events import Location


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB", "TB"):
        n_f = n / 1024
        if n_f < 1024 or unit == "TB":
            return f"{n_f:.1f} {unit}"
        n = int(n_f)
    return f"{n} B"  # pragma: no cover


def run(root: Root, args: dict[str, Any], config: ToolConfig, token: StopToken) -> ToolOutput:
    shown_path = args.get("path") or "."
    parts = root.parts(shown_path)
    st = root.lstat(parts)
    if stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown_path} is a file, not a folder; use read_file to read it")
    if not stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown_path} is a {kind_of(st.st_mode)}, not a folder")
    depth = int(args.get("depth", 1))
    # Hidden entries are listed (a listing is about what the folder holds);
    # ignore files and version-control folders still apply.
    filters = Filters(hidden=True, no_ignore=bool(args.get("no_ignore", False)))
    rules = Rules(filters, compile_lines(ancestors(root, parts, filters.no_ignore)), root.fence)
    lines: list[str] = []
    state = {"skipped": 0, "total": 0, "cut": False}
    with root.dir(parts, shown_path) as fd:
        _list(root, rules, fd, "/".join(parts), None, depth, 0, lines, state, token)
    text = "\n".join(lines) if lines else "(empty folder)"
    notes = []
    if state["cut"]:
        notes.append(
            f"[listing stopped at {specs.LIST_MAX_ENTRIES} entries: list a subfolder, or "
            "use a lower depth, glob or search]"
        )
    if state["skipped"]:
        n = state["skipped"]
        notes.append(
            f"[{n} entr{'ies' if n != 1 else 'y'} not shown: ignored by .gitignore/.ignore "
            "or version-control folders; no_ignore: true lists the ignored ones]"
        )
    if root.fence.note():
        notes.append(root.fence.note())
    if notes:
        text += "\n\n" + "\n".join(notes)
    if token.cancelled:
        raise ToolError("list_dir cancelled")
    return ToolOutput(text, [Location(str(root.path.joinpath(*parts)))])


def _list(
    root: Root,
    rules: Rules,
    fd: int,
    rel: str,
    parent: Level | None,
    depth: int,
    indent: int,
    lines: list[str],
    state: dict[str, Any],
    token: StopToken,
) -> None:
    level, entries, skipped = scan(rules, fd, rel, parent)
    state["skipped"] += skipped
    # Folders first, then files, each by name: the shape before the details.
    ordered = [e for e in entries if e.is_dir] + [e for e in entries if not e.is_dir]
    pad = "  " * indent
    for i, e in enumerate(ordered):
        if token.should_stop() or state["cut"]:
            return
        if i >= specs.LIST_PER_DIR:
            left = len(ordered) - i
            lines.append(f"{pad}… {left} more entr{'ies' if left != 1 else 'y'} in this folder")
            return
        if state["total"] >= specs.LIST_MAX_ENTRIES:
            state["cut"] = True
            return
        state["total"] += 1
        lines.append(pad + _describe(root, e))
        if e.is_dir and depth > 1:
            try:
                child = open_dir_at(fd, e.name, e.rel)
            except (ToolError, OSError):
                continue  # gone, unreadable, or swapped for a symlink: not followed
            try:
                _list(root, rules, child, e.rel, level, depth - 1, indent + 1, lines, state, token)
            finally:
                os.close(child)


def _describe(root: Root, e: Entry) -> str:
    if e.is_dir:
        return e.name + "/"
    try:
        st = e.lstat()
    except OSError:
        return e.name
    if e.is_symlink:
        fenced = root.fence.link_fenced(root.path / e.rel)
        if fenced is not None:
            return f"{e.name} -> [in agentd's own {fenced}: not shown]"
        try:
            target = os.readlink(e.name, dir_fd=e.dir_fd)
        except OSError:
            target = "?"
        return f"{e.name} -> {target}"
    if stat.S_ISREG(st.st_mode):
        return f"{e.name}  ({human_size(st.st_size)})"
    return f"{e.name}  [{kind_of(st.st_mode)}]"
