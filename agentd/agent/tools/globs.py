"""Globs as ripgrep reads them (gitignore syntax), compiled for RE2.

One translation serves `.gitignore`/`.ignore`/`.rgignore` lines, the `glob`
filters of `search` and the `glob` tool, so the Python walker decides exactly
as ripgrep's `ignore` crate does:

- `*` and `?` never match `/`; `[abc]`, `[!a-z]`, `{a,b}` and `\\x` work;
- `**` as a whole component matches any number of folders (`**/x`, `a/**/b`,
  `a/**`); elsewhere it is a plain `*`;
- a line without a `/` (other than a trailing one) matches at any depth, a
  line with one is anchored to the folder of the file (or the search root);
  a trailing `/` matches folders only; `!` negates; `#` starts a comment.

The regexes are compiled with RE2 (linear time): a hostile `.gitignore` in a
repository cannot make the walker backtrack without end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agentd.errors import ToolError


class GlobError(ToolError):
    pass


@dataclass(frozen=True, slots=True)
class GlobLine:
    """One parsed gitignore-syntax line."""

    regex: str
    negated: bool
    dir_only: bool
    # For `**/*.ext`-like lines: the literal end of the file name, which is
    # all there is to check (a fast path for the most common globs).
    suffix: str | None = None


def _escape(c: str) -> str:
    return "\\" + c if not (c.isalnum() or c == "_" or ord(c) > 127) else c


def _class(glob: str, i: int) -> tuple[str, int] | None:
    """A `[...]` class starting at glob[i] == '[': (regex, index after), or None if unclosed."""
    j = i + 1
    negated = j < len(glob) and glob[j] in "!^"
    if negated:
        j += 1
    body: list[str] = []
    first = True
    while j < len(glob):
        c = glob[j]
        if c == "]" and not first:
            inner = "".join(body)
            return ("[^/" + inner + "]" if negated else "[" + inner + "]"), j + 1
        if c == "\\" and j + 1 < len(glob):
            body.append("\\" + glob[j + 1] if not glob[j + 1].isalnum() else glob[j + 1])
            j += 2
            first = False
            continue
        if c == "-" and body and j + 1 < len(glob) and glob[j + 1] != "]":
            body.append("-")
        elif c in "[]^\\-&~|":
            body.append("\\" + c)
        else:
            body.append(c)
        first = False
        j += 1
    return None


def _component(glob: str, strict: bool) -> str:
    """Regex of a glob piece with no recursive `**` component in it."""
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            while i < n and glob[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            cls = _class(glob, i)
            if cls is None:
                if strict:
                    raise GlobError(f"unclosed character class in glob {glob!r}")
                out.append("\\[")
            else:
                out.append(cls[0])
                i = cls[1]
                continue
        elif c == "{":
            end = glob.find("}", i)
            if end < 0:
                if strict:
                    raise GlobError(f"unclosed alternation {{...}} in glob {glob!r}")
                out.append("\\{")
            else:
                inner = glob[i + 1 : end]
                if "{" in inner:
                    raise GlobError(f"nested alternations are not supported in {glob!r}")
                alts = [_component(a, strict) for a in inner.split(",")]
                out.append("(?:" + "|".join(alts) + ")")
                i = end + 1
                continue
        elif c == "\\" and i + 1 < n:
            out.append(_escape(glob[i + 1]))
            i += 2
            continue
        else:
            out.append(_escape(c))
        i += 1
    return "".join(out)


def _split(glob: str) -> list[str]:
    """Split at `/` outside `[...]` and `{...}`."""
    parts: list[str] = []
    depth_brace = 0
    in_class = False
    cur: list[str] = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if c == "\\" and i + 1 < len(glob):
            cur.append(glob[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
        elif c == "{":
            depth_brace += 1
        elif c == "}" and depth_brace:
            depth_brace -= 1
        elif c == "/" and depth_brace == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def glob_regex(glob: str, strict: bool = False) -> str:
    """The regex (to be matched whole) of a glob over `/`-separated paths."""
    comps = _split(glob)
    out: list[str] = []
    need_sep = False
    last = len(comps) - 1
    for idx, comp in enumerate(comps):
        if comp == "**":
            sep = "/" if need_sep else ""
            if idx == last:
                out.append(sep + ".*")
                need_sep = True
            else:
                # Any number of folders, the separators included.
                out.append(f"{sep}(?:.*/)?")
                need_sep = False
            continue
        if need_sep:
            out.append("/")
        out.append(_component(comp, strict))
        need_sep = True
    return "".join(out)


def parse_line(line: str, strict: bool = False) -> GlobLine | None:
    """One line of an ignore file (or one `glob` filter), as ripgrep parses it."""
    if line.startswith("#"):
        return None
    if not line.endswith("\\ "):
        line = line.rstrip()
    if not line:
        return None
    negated = False
    anchored = False
    if line.startswith(("\\!", "\\#")):
        line = line[1:]
        anchored = line.startswith("/")
    else:
        if line.startswith("!"):
            negated = True
            line = line[1:]
        if line.startswith("/"):
            line = line[1:]
            anchored = True
    dir_only = False
    if line.endswith("/"):
        dir_only = True
        line = line[:-1]
        if line.endswith("\\"):
            line = line[:-1]
    if not line:
        return None
    if not anchored and "/" not in line and line != "**" and not line.startswith("**/"):
        line = "**/" + line
    if line.endswith("/**"):
        line += "/*"
    tail = line[len("**/*") :] if line.startswith("**/*") else None
    plain = tail is not None and tail != "" and not any(c in tail for c in "*?[]{}\\/")
    return GlobLine(glob_regex(line, strict), negated, dir_only, tail if plain else None)


def prefixed(line: str, prefix: str) -> str:
    """Re-anchor an ignore line written in folder `prefix` to the folder above it all.

    ripgrep reads ancestors' ignore files for us through `--ignore-file`,
    whose lines are matched relative to its working directory (the
    workspace root); the Python walker reads the same rewritten lines.
    """
    if not prefix or line.startswith("#") or not line.strip():
        return line
    bang = ""
    body = line
    if body.startswith("!"):
        bang, body = "!", body[1:]
    trailing = body.endswith("/") and not body.endswith("\\/")
    core = body[:-1] if trailing else body
    if core.startswith("/"):
        core = core[1:]
    elif "/" not in core and core != "**" and not core.startswith("**/"):
        core = "**/" + core
    return f"{bang}{prefix}/{core}{'/' if trailing else ''}"


class GlobSet:
    """Ordered gitignore-syntax lines matched in one RE2 pass; the last match wins."""

    def __init__(self, lines: list[GlobLine]) -> None:
        import re2

        self.lines = lines
        self._set: Any = None
        self._suffixes: list[tuple[str, GlobLine]] | None = None
        if lines and all(line.suffix is not None for line in lines):
            self._suffixes = [(line.suffix or "", line) for line in reversed(lines)]
        elif lines:
            # Bytes, as ripgrep's globs match them: paths need not be UTF-8.
            opts = re2.Options()
            opts.encoding = re2.Options.Encoding.LATIN1
            opts.max_mem = 64 << 20
            s = re2.Set.FullMatchSet(opts)
            for line in lines:
                s.Add(line.regex.encode())
            s.Compile()
            self._set = s

    def __bool__(self) -> bool:
        return bool(self.lines)

    def match(self, path: str, is_dir: bool) -> GlobLine | None:
        """The deciding line for `path` (relative to this set's folder), if any."""
        if self._suffixes is not None:
            name = path.rpartition("/")[2]
            for suffix, candidate in self._suffixes:
                if name.endswith(suffix) and (not candidate.dir_only or is_dir):
                    return candidate
            return None
        if self._set is None:
            return None
        hits = self._set.Match(os.fsencode(path))
        if not hits:
            return None
        for i in sorted(hits, reverse=True):
            line: GlobLine = self.lines[int(i)]
            if not line.dir_only or is_dir:
                return line
        return None


def compile_lines(text: str, prefix: str = "", strict: bool = False) -> list[GlobLine]:
    out: list[GlobLine] = []
    for raw in text.splitlines():
        try:
            parsed = parse_line(prefixed(raw, prefix) if prefix else raw, strict)
        except GlobError:
            if strict:
                raise
            continue  # ripgrep skips a bad line of an ignore file too
        if parsed is not None:
            out.append(parsed)
    return out
