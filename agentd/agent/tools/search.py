"""`search`: which lines of which files match, on ripgrep or the Python walker.

Two engines choose the files; one renderer shows them. The ripgrep engine
runs `rg --count` (fast, parallel, honours ignore files); the Python engine
walks with `walk.py` and matches with RE2. Either way the files are sorted
by path and each shown file is read again through the confined descriptors
of `fs.py` and matched line by line with RE2, so both engines give the same
results, and no byte ripgrep read through a swapped symlink is ever shown.

User regexes only ever run on linear-time engines (ripgrep's, RE2): no
pattern can make the daemon backtrack without end (issue 14, item 3).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agentd.agent.tools import ripgrep, specs
from agentd.agent.tools.filetypes import type_globs
from agentd.agent.tools.fs import Root, kind_of, open_file_at
from agentd.agent.tools.globs import compile_lines
from agentd.agent.tools.output import ConfinedStats, ToolConfig, ToolOutput
from agentd.agent.tools.walk import Filters, Rules, ancestors, walk_files
from agentd.agent.tools.worker import StopToken
from agentd.errors import ToolError
from agentd.events import Location
from agentd.files import read_fd

# Matching-file records kept from ripgrep at most (a query matching nearly
# every file of a huge tree): beyond this the counts are "at least".
RG_MAX_FILES = 100_000


class Matcher:
    """A query compiled for RE2, matching per line as ripgrep does.

    Calls into the RE2 wrapper cost microseconds each, so lines are not tried
    one by one: the whole buffer is searched (multi-line mode, so `^` and `$`
    are line anchors), and only the line where a match starts is checked on
    its own, which drops the rare match that spans lines (`a\\sb` across a
    newline). A line that matches alone also matches within the buffer, so
    nothing is missed; patterns with `\\A` or `\\z`, whose meaning differs,
    are matched line by line.
    """

    def __init__(self, query: str, regex: bool, sensitive: bool) -> None:
        import re2

        opts = re2.Options()
        opts.case_sensitive = sensitive
        opts.max_mem = 64 << 20
        opts.log_errors = False
        pattern = query if regex else re2.escape(query)
        raw = pattern.encode("utf-8", "surrogatepass")
        try:
            self._line = re2.compile(raw, opts)
            self._buffer = re2.compile(b"(?m)" + raw, opts)
        except re2.error as exc:
            raise ToolError(f"invalid regex {query!r}: {exc}") from exc
        # A case-sensitive literal is found fastest by bytes.find.
        self._needle = raw if not regex and sensitive else None
        self._per_line = regex and ("\\A" in query or "\\z" in query)
        self._check_line = regex

    def may_match(self, data: bytes) -> bool:
        if self._needle is not None:
            return self._needle in data
        if self._per_line:
            return True
        return self._buffer.search(data) is not None

    def first(self, line: bytes) -> int | None:
        m = self._line.search(line)
        return None if m is None else int(m.start())

    def lines(self, data: bytes) -> Iterator[tuple[int, int]]:
        """(line number, byte offset of the first match in the line) of each matching line."""
        if self._per_line:
            lines = data.split(b"\n")
            if data.endswith(b"\n"):
                lines.pop()
            for no, line in enumerate(lines, 1):
                at = self.first(line)
                if at is not None:
                    yield no, at
            return
        pos = 0
        no = 1
        counted = 0  # newlines are counted up to here
        size = len(data)
        while pos < size:
            if self._needle is not None:
                hit = data.find(self._needle, pos)
                if hit < 0:
                    return
            else:
                m = self._buffer.search(data, pos)
                if m is None:
                    return
                hit = int(m.start())
            start = data.rfind(b"\n", 0, hit) + 1
            end = data.find(b"\n", hit)
            if end < 0:
                end = size
            no += data.count(b"\n", counted, start)
            counted = start
            if hit == size and start == size:
                return  # an empty match after the last newline is not a line
            if self._check_line:
                at = self.first(data[start:end])
                if at is not None:
                    yield no, at
            else:
                yield no, hit - start
            pos = end + 1


def smart_sensitive(query: str, regex: bool) -> bool:
    """ripgrep's smart case: sensitive only when the query has an uppercase literal."""
    if not regex:
        return any(c.isupper() for c in query)
    i = 0
    while i < len(query):
        c = query[i]
        if c == "\\" and i + 1 < len(query):
            nxt = query[i + 1]
            if nxt in "pPx" and i + 2 < len(query) and query[i + 2] == "{":
                end = query.find("}", i + 2)
                i = end + 1 if end > 0 else len(query)
            else:
                i += 2
            continue
        if c.isupper():
            return True
        i += 1
    return False


@dataclass(slots=True)
class FileHits:
    path: str  # root-relative
    count: int  # matching lines
    # Found by the confined Python walk (else reported by ripgrep, to re-check).
    confined: bool = False


def match_lines(data: bytes, matcher: Matcher, keep: int) -> tuple[list[tuple[int, int]], int]:
    """Matching lines of `data` (1-based number, byte offset of the first match),
    the first `keep` of them, and how many there are. Lines end at `\\n`, as
    for ripgrep (a `\\r` before it stays part of the line)."""
    kept: list[tuple[int, int]] = []
    total = 0
    for hit in matcher.lines(data):
        total += 1
        if len(kept) < keep:
            kept.append(hit)
    return kept, total


def _clip(line: bytes, at: int) -> str:
    text = line.rstrip(b"\r").decode("utf-8", "replace")
    width = specs.SEARCH_LINE_CHARS
    if len(text) <= width:
        return text
    start_char = len(line[:at].decode("utf-8", "replace"))
    begin = max(0, min(start_char - width // 3, len(text) - width))
    piece = text[begin : begin + width]
    return ("…" if begin > 0 else "") + piece + ("…" if begin + width < len(text) else "")


def run(root: Root, args: dict[str, Any], config: ToolConfig, token: StopToken) -> ToolOutput:
    query: str = args["query"]
    if not query:
        raise ToolError("query must not be empty")
    if "\n" in query or "\r" in query:
        raise ToolError("query must be a single line (matching is per line)")
    regex = bool(args.get("regex", False))
    case = args.get("case", "smart")
    sensitive = smart_sensitive(query, regex) if case == "smart" else case == "sensitive"
    matcher = Matcher(query, regex, sensitive)
    max_results = int(args.get("max_results", specs.SEARCH_DEFAULT_RESULTS))
    context = int(args.get("context", 0))
    files_only = bool(args.get("files_only", False))

    shown_path = args.get("path") or "."
    parts = root.parts(shown_path)
    st = root.lstat(parts)
    if stat.S_ISREG(st.st_mode):
        return _one_file(root, parts, matcher, max_results, context, files_only, token)
    if not stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown_path} is a {kind_of(st.st_mode)}, not a folder or a regular file")
    filters = make_filters(root, parts, args, max_filesize=specs.SEARCH_MAX_FILE_BYTES)
    rules_text = ancestors(root, parts, filters.no_ignore)
    rules = Rules(filters, compile_lines(rules_text), root.fence)
    engine = config.engine()
    note = ""
    if engine is not None:
        hits, complete, note = _rg_files(
            engine, root, parts, filters, rules_text, query, regex, sensitive, token
        )
        kept = set(rules.keep_many([h.path for h in hits]))
        hits = [h for h in hits if h.path in kept]
    else:
        hits, complete = _py_files(root, parts, rules, matcher, token)
    if token.cancelled:
        raise ToolError("search cancelled")
    if token.expired:
        limit = config.search_timeout
        note = f"[search stopped at its {limit:g} s time limit: results are partial]"
    elif not complete and not note:
        note = "[search stopped early: results are partial]"
    if root.fence.note():
        note = f"{note}\n{root.fence.note()}" if note else root.fence.note()
    hits.sort(key=lambda h: h.path)
    return _render(root, hits, matcher, max_results, context, files_only, note, token, query)


def make_filters(
    root: Root, parts: tuple[str, ...], args: dict[str, Any], max_filesize: int | None
) -> Filters:
    prefix = "/".join(parts)
    globs = [anchor(g, prefix) for g in args.get("glob", []) if g.strip()]
    tglobs: tuple[str, ...] = ()
    if args.get("type"):
        names = [t for t in str(args["type"]).split(",") if t.strip()]
        collected: list[str] = []
        for name in names:
            found = type_globs(name)
            if found is None:
                raise ToolError(
                    f"unknown file type {name.strip()!r}; use glob instead (e.g. '*.ext')"
                )
            collected.extend(found)
        tglobs = tuple(collected)
    return Filters(
        hidden=bool(args.get("hidden", False)),
        no_ignore=bool(args.get("no_ignore", False)),
        globs=globs,
        type_globs=tglobs,
        max_filesize=max_filesize,
    )


def anchor(glob: str, prefix: str) -> str:
    """A glob relative to the search folder, made relative to the workspace root.

    Globs without a `/` match names at any depth and need nothing; anchored
    ones get the folder in front (ripgrep matches `-g` from its working
    directory, which is the root).
    """
    glob = glob.strip()
    if not prefix:
        return glob
    bang = ""
    if glob.startswith("!"):
        bang, glob = "!", glob[1:]
    body = glob[:-1] if glob.endswith("/") else glob
    if "/" not in body:
        return bang + glob
    return f"{bang}{prefix}/{glob.lstrip('/')}"


def _rg_files(
    rg: str,
    root: Root,
    parts: tuple[str, ...],
    filters: Filters,
    rules_text: str,
    query: str,
    regex: bool,
    sensitive: bool,
    token: StopToken,
) -> tuple[list[FileHits], bool, str]:
    mode = ["--count", "-s" if sensitive else "-i"]
    if not regex:
        mode.append("-F")
    mode += ["-e", query]
    got = ripgrep.run(
        rg, mode, filters, root.path, "/".join(parts), rules_text, token, max_items=RG_MAX_FILES
    )
    if got.error:
        raise ToolError(f"search failed: {got.error}")
    note = ""
    if len(got.items) >= RG_MAX_FILES:
        note = f"[more than {RG_MAX_FILES:,} files match: results are partial]"
    return [FileHits(p, n) for p, n in got.items], got.complete, note


def _py_files(
    root: Root,
    parts: tuple[str, ...],
    rules: Rules,
    matcher: Matcher,
    token: StopToken,
) -> tuple[list[FileHits], bool]:
    hits: list[FileHits] = []
    for entry in walk_files(root, parts, rules, token):
        if token.should_stop():
            return hits, False
        data = _read_text(entry.dir_fd, entry.name, entry.rel)
        if data is None or not matcher.may_match(data):
            continue
        _, total = match_lines(data, matcher, 0)
        if total:
            # Only the count is kept: shown files are read again when rendered,
            # as the ripgrep engine's are, so that both render the same way.
            hits.append(FileHits(entry.rel, total, confined=True))
    return hits, not token.should_stop()


def _read_text(dir_fd: int, name: str, shown: str) -> bytes | None:
    """A file's bytes if it is a regular text file within the size limit, else None."""
    try:
        fd, st = open_file_at(dir_fd, name, shown)
    except (ToolError, OSError):
        return None
    try:
        if st.st_size > specs.SEARCH_MAX_FILE_BYTES:
            return None
        data = read_fd(fd, specs.SEARCH_MAX_FILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if b"\0" in data else data


def _one_file(
    root: Root,
    parts: tuple[str, ...],
    matcher: Matcher,
    max_results: int,
    context: int,
    files_only: bool,
    token: StopToken,
) -> ToolOutput:
    rel = "/".join(parts)
    with root.dir(parts[:-1], rel) as parent:
        fd, _ = open_file_at(parent, parts[-1], rel)
    try:
        data = read_fd(fd, specs.SEARCH_MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if b"\0" in data:
        raise ToolError(f"{rel} looks like a binary file; not searched")
    note = ""
    if len(data) > specs.SEARCH_MAX_FILE_BYTES:
        data = data[: specs.SEARCH_MAX_FILE_BYTES]
        note = f"[only the first {specs.SEARCH_MAX_FILE_BYTES // (1024 * 1024)} MiB were searched]"
    _, total = match_lines(data, matcher, 0)
    hits = [FileHits(rel, total, confined=True)] if total else []
    return _render(root, hits, matcher, max_results, context, files_only, note, token, "")


def _render(
    root: Root,
    hits: list[FileHits],
    matcher: Matcher,
    max_results: int,
    context: int,
    files_only: bool,
    note: str,
    token: StopToken,
    query: str,
) -> ToolOutput:
    out: list[str] = []
    size = shown = left_lines = left_files = 0
    locations: list[Location] = []
    with ConfinedStats(root) as stat_of:

        def inside(hit: FileHits) -> bool:
            # ripgrep opens paths by name: a path it reported is re-checked
            # inside the workspace (no symlink on the way) before it counts.
            return hit.confined or stat_of(hit.path) is not None

        for hit in hits:
            if shown >= max_results or size >= specs.OUTPUT_MAX_CHARS or token.cancelled:
                if inside(hit):
                    left_lines += hit.count
                    left_files += 1
                continue
            if files_only:
                if inside(hit):
                    s = "s" if hit.count != 1 else ""
                    out.append(f"{hit.path} ({hit.count} matching line{s})")
                    size += len(out[-1]) + 1
                    locations.append(Location(str(root.path / hit.path)))
                    shown += 1
                continue
            data = _reread(root, hit.path)
            if data is None:
                continue
            lines, total = match_lines(data, matcher, max_results - shown)
            if not total:
                continue  # gone or changed since ripgrep saw it
            out.append(_file_block(hit.path, data, lines, context))
            size += len(out[-1]) + 1
            shown += len(lines)
            locations.extend(Location(str(root.path / hit.path), no) for no, _ in lines)
            if total > len(lines):
                left_lines += total - len(lines)
                left_files += 1
    text = "\n".join(out) if out else _nothing(query)
    if left_files:
        what, more = ("files", left_files) if files_only else ("matching lines", left_lines)
        s = "s" if left_files != 1 else ""
        text += (
            f"\n\n[{more:,} more {what} in {left_files:,} file{s} not shown: narrow the "
            "search (path, glob, type, a more precise query) or raise max_results "
            f"(up to {specs.SEARCH_MAX_RESULTS})]"
        )
    if note:
        text += "\n" + note
    return ToolOutput(text, locations)


def _nothing(query: str) -> str:
    return (
        "No matches. (Files that .gitignore excludes, hidden files and binary files "
        "were not searched: no_ignore and hidden include the first two.)"
        if query
        else "No matches."
    )


def _reread(root: Root, rel: str) -> bytes | None:
    parts = tuple(rel.split("/"))
    try:
        with root.dir(parts[:-1], rel) as parent:
            return _read_text(parent, parts[-1], rel)
    except (ToolError, OSError):
        return None


def _file_block(path: str, data: bytes, lines: list[tuple[int, int]], context: int) -> str:
    """One file's matches (`N:text`) and context (`N-text`), ripgrep's heading style."""
    all_lines = data.split(b"\n")
    if data.endswith(b"\n"):
        all_lines.pop()
    at = dict(lines)
    wanted: set[int] = set()
    for no in at:
        wanted.update(range(max(1, no - context), min(len(all_lines), no + context) + 1))
    out = [path]
    previous = 0
    for no in sorted(wanted):
        if previous and no > previous + 1:
            out.append("--")
        if no in at:
            out.append(f"{no}:{_clip(all_lines[no - 1], at[no])}")
        else:
            out.append(f"{no}-{_clip(all_lines[no - 1], 0)}")
        previous = no
    return "\n".join(out) + "\n"
