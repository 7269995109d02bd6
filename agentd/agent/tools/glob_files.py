"""`glob`: workspace files whose path matches a pattern, newest first or by path.

The pattern is a ripgrep `-g` glob relative to the search folder. The
ripgrep engine lists with `rg --files` and each path it reports is
re-checked through confined descriptors (that `stat` also gives the time
used to sort); the Python engine walks with `walk.py`. Both skip the same
files.
"""

from __future__ import annotations

import stat
from typing import Any

from agentd.agent.tools import ripgrep, specs
from agentd.agent.tools.fs import Root
from agentd.agent.tools.globs import compile_lines
from agentd.agent.tools.output import ConfinedStats, ToolConfig, ToolOutput
from agentd.agent.tools.search import make_filters
from agentd.agent.tools.walk import Rules, ancestors, walk_files
from agentd.agent.tools.worker import StopToken
from agentd.errors import ToolError
from agentd.events import Location

# Paths kept from `rg --files` at most; beyond, the count is "at least".
RG_MAX_PATHS = 1_000_000


def run(root: Root, args: dict[str, Any], config: ToolConfig, token: StopToken) -> ToolOutput:
    pattern = str(args["pattern"]).strip()
    if not pattern:
        raise ToolError("pattern must not be empty")
    if pattern.startswith("!"):
        raise ToolError("pattern must include files; a '!' pattern only excludes")
    shown_path = args.get("path") or "."
    parts = root.parts(shown_path)
    if not stat.S_ISDIR(root.lstat(parts).st_mode):
        raise ToolError(f"{shown_path} is not a folder")
    by_path = args.get("sort", "modified") == "path"
    max_results = int(args.get("max_results", specs.GLOB_DEFAULT_RESULTS))
    filters = make_filters(root, parts, {**args, "glob": [pattern]}, max_filesize=None)
    rules_text = ancestors(root, parts, filters.no_ignore)
    rules = Rules(filters, compile_lines(rules_text), root.fence)
    engine = config.engine()
    found: list[tuple[str, float]] = []  # (path, mtime; 0 until known)
    complete = True
    if engine is not None:
        # Newest first, ripgrep reads the times itself (`--sortr modified`,
        # much cheaper than a stat per path from Python).
        mode = ["--files"] if by_path else ["--files", "--sortr", "modified"]
        got = ripgrep.run(
            engine, mode, filters, root.path, "/".join(parts), rules_text, token,
            max_items=RG_MAX_PATHS,
        )  # fmt: skip
        if got.error:
            raise ToolError(f"glob failed: {got.error}")
        complete = got.complete
        found = [(p, 0.0) for p in rules.keep_many([p for p, _ in got.items])]
        found = _checked(root, found, by_path, max_results, token)
    else:
        for entry in walk_files(root, parts, rules, token):
            try:
                mtime = 0.0 if by_path else entry.lstat().st_mtime
            except OSError:
                continue
            found.append((entry.rel, mtime))
        complete = not token.should_stop()
    if token.cancelled:
        raise ToolError("glob cancelled")
    if by_path:
        found.sort()
    else:
        found.sort(key=lambda item: (-item[1], item[0]))
    shown = found[:max_results]
    text = "\n".join(p for p, _ in shown) if shown else f"No files match {pattern!r}."
    if len(found) > len(shown):
        more = len(found) - len(shown)
        text += (
            f"\n\n[{more:,} more file{'s' if more != 1 else ''} not shown: narrow the "
            f"pattern or path, or raise max_results (up to {specs.GLOB_MAX_RESULTS})]"
        )
    if token.expired:
        text += f"\n[glob stopped at its {config.search_timeout:g} s time limit: partial]"
    elif not complete:
        text += "\n[glob stopped early: results are partial]"
    if root.fence.note():
        text += "\n" + root.fence.note()
    return ToolOutput(text, [Location(str(root.path / p)) for p, _ in shown])


def _checked(
    root: Root, found: list[tuple[str, float]], by_path: bool, keep: int, token: StopToken
) -> list[tuple[str, float]]:
    """Paths ripgrep reported, the ones to show re-checked inside the workspace.

    The order is ripgrep's (newest first) or sorted here (by path); the first
    paths are `stat`-ed through confined descriptors until `keep` of them are
    real regular files inside (newest first, also those tied in time with the
    last one, so that ties are broken by path as the Python engine does);
    the rest are counted as "more".
    """
    if by_path:
        found.sort()
    out: list[tuple[str, float]] = []
    with ConfinedStats(root) as stat_of:
        for i, (path, _) in enumerate(found):
            if not i & 1023 and token.should_stop():
                break
            if len(out) >= keep and (by_path or _past_ties(out, keep)):
                out.extend(found[i:])  # counted as "more", not shown
                break
            st = stat_of(path)
            if st is not None:
                out.append((path, st.st_mtime))
    return out


def _past_ties(out: list[tuple[str, float]], keep: int) -> bool:
    """Newest first: the last checked path is older than the `keep`-th one."""
    return out[-1][1] < out[keep - 1][1]
