"""The confined, ignore-aware walk of the Python engine (and of `list_dir`).

Which entries are skipped is decided as ripgrep's `ignore` crate decides it,
in the same order, so that the Python engine and the ripgrep engine list the
same files:

1. the version-control folders (`.git`, `.hg`, `.svn`, `.jj`) are always
   skipped (for ripgrep: `-g '!.git'`, ...);
2. ignore files, unless `no_ignore`: `.rgignore`, then `.ignore`, then
   `.gitignore`, then `.git/info/exclude`, the nearest folder first within
   each kind; then the ignore files of the folders between the workspace root
   and the search folder (rewritten relative to the root, see `ancestors`);
   a whitelisting `!` line also makes a hidden entry visible, as in ripgrep;
3. hidden entries (a name starting with `.`), unless `hidden`.

The ignore files honoured are those from the workspace root down: files
above the workspace and git's global excludes are not read (ripgrep runs
with `--no-ignore-parent --no-ignore-global`), and `.gitignore` applies in
any folder, a git repository or not (`--no-require-git`).

The `glob` and `type` filters only narrow what is left (`Rules.keep`): unlike
ripgrep's `-g`/`-t`, which also bring back ignored and hidden files that
match, a filter here never widens the search, so "honours .gitignore" holds
whatever the model asks. Both engines apply them the same way, in Python,
to the paths that remain.

Every folder is opened from its parent's descriptor with O_NOFOLLOW and
listed through that descriptor (`fs.py`), so a folder swapped for a symlink
is never followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentd.agent.tools.fence import Fence
from agentd.agent.tools.fs import FILE_FLAGS, Root, open_dir_at
from agentd.agent.tools.globs import GlobLine, GlobSet, compile_lines, parse_line
from agentd.agent.tools.worker import StopToken
from agentd.errors import ToolError
from agentd.files import read_fd

VCS_DIRS = (".git", ".hg", ".svn", ".jj")
# Ignore-file kinds, highest precedence first (ripgrep's order).
KINDS = (".rgignore", ".ignore", ".gitignore", "exclude")
IGNORE_FILE_MAX = 1 << 20


@dataclass(slots=True)
class Filters:
    """What to skip, as the model asked (globs relative to the workspace root)."""

    hidden: bool = False
    no_ignore: bool = False
    globs: list[str] = field(default_factory=list)
    type_globs: tuple[str, ...] = ()
    max_filesize: int | None = None


@dataclass(slots=True)
class Level:
    """The ignore rules of one folder, linked to its parent's."""

    rel: str
    sets: dict[str, GlobSet]
    parent: Level | None


@dataclass(slots=True)
class Entry:
    rel: str
    name: str
    dir_fd: int
    is_dir: bool
    is_file: bool
    is_symlink: bool
    entry: os.DirEntry[str]

    def lstat(self) -> os.stat_result:
        return self.entry.stat(follow_symlinks=False)


class Rules:
    def __init__(
        self, filters: Filters, ancestors: list[GlobLine] | None = None, fence: Fence | None = None
    ) -> None:
        self.filters = filters
        # agentd's own folders in the root: left out of every walk and result.
        self.fence = fence if fence is not None else Fence(Path("/"), ())
        self.vcs = GlobSet([g for g in (parse_line("!" + n) for n in VCS_DIRS) if g is not None])
        self.explicit = GlobSet(ancestors or [])
        user = [parse_line(g, strict=True) for g in filters.globs]
        self.globs = GlobSet([g for g in user if g is not None])
        self.including = any(g is not None and not g.negated for g in user)
        self.types = GlobSet([g for g in map(parse_line, filters.type_globs) if g is not None])

    def keep(self, rel: str) -> bool:
        """The narrowing filters (`glob`, `type`) on a root-relative file path.

        Glob lines read as ripgrep's `-g`: the last matching line decides, a
        plain glob includes, `!glob` excludes, and with any including glob a
        file matching none is left out.
        """
        if self.globs:
            m = self.globs.match(rel, False)
            if m is not None and m.negated:
                return False
            if m is None and self.including:
                return False
        return not self.types or self.types.match(rel, False) is not None

    def keep_many(self, paths: list[str]) -> list[str]:
        """`keep` over many paths (ripgrep's), agentd's own files left out;
        plain `*.ext` filters are checked in one C-level pass."""
        out = self.fence.keep_files(paths)
        for gs, required in ((self.globs, self.including), (self.types, True)):
            if not gs:
                continue
            suffixes = _plain_suffixes(gs)
            if suffixes is None or not required:
                return [p for p in out if self.keep(p)]
            out = [p for p in out if p.endswith(suffixes)]
        return out

    def ignored(self, rel: str, name: str, is_dir: bool, level: Level | None) -> bool:
        if self.vcs.match(rel, is_dir) is not None:
            return True
        whitelisted = False
        if not self.filters.no_ignore:
            found = self._ignore_files(rel, is_dir, level)
            if found is None:
                found = self.explicit.match(rel, is_dir)
            if found is not None:
                if not found.negated:
                    return True
                whitelisted = True
        return not whitelisted and not self.filters.hidden and name.startswith(".")

    @staticmethod
    def _ignore_files(rel: str, is_dir: bool, level: Level | None) -> GlobLine | None:
        for kind in KINDS:
            lv = level
            while lv is not None:
                s = lv.sets.get(kind)
                if s is not None:
                    sub = rel[len(lv.rel) + 1 :] if lv.rel else rel
                    m = s.match(sub, is_dir)
                    if m is not None:
                        return m
                lv = lv.parent
        return None

    # --- reading ignore files ---------------------------------------------------

    def level(self, dir_fd: int, rel: str, names: set[str], parent: Level | None) -> Level:
        if self.filters.no_ignore:
            return Level(rel, {}, parent)
        sets: dict[str, GlobSet] = {}
        for kind in KINDS[:3]:
            if kind in names:
                text = _read_rules(dir_fd, kind)
                if text:
                    sets[kind] = GlobSet(compile_lines(text))
        if ".git" in names:
            text = _read_exclude(dir_fd)
            if text:
                sets["exclude"] = GlobSet(compile_lines(text))
        if not sets:
            return parent if parent is not None else Level(rel, {}, None)
        return Level(rel, sets, parent)


def _plain_suffixes(gs: GlobSet) -> tuple[str, ...] | None:
    """The suffixes of a set made only of including `**/*.ext` lines, else None."""
    if all(g.suffix is not None and not g.negated and not g.dir_only for g in gs.lines):
        return tuple(g.suffix or "" for g in gs.lines)
    return None


def _read_rules(dir_fd: int, name: str) -> str:
    """An ignore file's text: a regular file only, bounded, never blocking."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return ""
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return read_fd(fd, IGNORE_FILE_MAX).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _read_exclude(dir_fd: int) -> str:
    """`.git/info/exclude`, also for a worktree or submodule (`.git` a file with `gitdir:`)."""
    try:
        st = os.stat(".git", dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return ""
    if stat.S_ISDIR(st.st_mode):
        try:
            git = open_dir_at(dir_fd, ".git", ".git")
        except (ToolError, OSError):
            return ""
        try:
            try:
                info = open_dir_at(git, "info", ".git/info")
            except (ToolError, OSError):
                return ""
            try:
                return _read_rules(info, "exclude")
            finally:
                os.close(info)
        finally:
            os.close(git)
    if not stat.S_ISREG(st.st_mode):
        return ""
    pointer = _read_rules(dir_fd, ".git").strip()
    if not pointer.startswith("gitdir:"):
        return ""
    # The git folder of a worktree or submodule lives elsewhere (that is git's
    # layout): its exclude rules are read by path, as ripgrep reads them.
    gitdir = pointer[len("gitdir:") :].strip()
    try:
        base = os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        return ""
    gitdir = os.path.normpath(os.path.join(base, gitdir))
    common = _read_path(os.path.join(gitdir, "commondir")).strip()
    root = os.path.normpath(os.path.join(gitdir, common)) if common else gitdir
    return _read_path(os.path.join(root, "info", "exclude"))


def _read_path(path: str) -> str:
    try:
        fd = os.open(path, FILE_FLAGS)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return read_fd(fd, IGNORE_FILE_MAX).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def ancestors(root: Root, parts: tuple[str, ...], no_ignore: bool) -> str:
    """The ignore rules of the folders above the search folder, relative to the root.

    Searching `src/lib`, the rules of the root and of `src` apply too.
    ripgrep would read them as parents only together with everything above
    the workspace; instead both engines get them as one rules text, each line
    re-anchored to the root (`globs.prefixed`), shallow folders first so that
    deeper rules win, as in a walk.
    """
    if no_ignore or not parts:
        return ""
    from agentd.agent.tools.globs import prefixed

    out: list[str] = []
    for depth in range(len(parts)):
        rel_parts = parts[:depth]
        prefix = "/".join(rel_parts)
        try:
            fd = root.open_dir(rel_parts)
        except (ToolError, OSError):
            continue
        try:
            try:
                names = set(os.listdir(fd))
            except OSError:
                continue
            texts: list[str] = []
            if ".git" in names:
                texts.append(_read_exclude(fd))
            for kind in reversed(KINDS[:3]):  # lowest precedence first
                if kind in names:
                    texts.append(_read_rules(fd, kind))
            for text in texts:
                out.extend(prefixed(line, prefix) for line in text.splitlines())
        finally:
            os.close(fd)
    return "\n".join(out) + ("\n" if out else "")


def scan(
    rules: Rules, dir_fd: int, rel: str, parent: Level | None
) -> tuple[Level, list[Entry], int]:
    """One folder's entries that are not skipped (sorted by name), and how many were."""
    try:
        with os.scandir(dir_fd) as it:
            raw = sorted(it, key=lambda e: e.name)
    except OSError:
        return (parent or Level(rel, {}, None)), [], 0
    level = rules.level(dir_fd, rel, {e.name for e in raw}, parent)
    fence = rules.fence if rules.fence else None  # asked once per folder, not per entry
    kept: list[Entry] = []
    skipped = 0
    for e in raw:
        try:
            is_dir = e.is_dir(follow_symlinks=False)
            is_file = e.is_file(follow_symlinks=False)
            is_link = e.is_symlink()
        except OSError:
            continue
        path = f"{rel}/{e.name}" if rel else e.name
        if rules.ignored(path, e.name, is_dir, level):
            skipped += 1
            continue
        if fence is not None and fence.hides(path, is_dir):
            continue  # agentd's own: not there for the tools (`Fence.note` says so)
        kept.append(Entry(path, e.name, dir_fd, is_dir, is_file, is_link, e))
    return level, kept, skipped


def walk_files(
    root: Root,
    start: tuple[str, ...],
    rules: Rules,
    token: StopToken,
) -> Iterator[Entry]:
    """Every regular file below `start` that the rules and filters keep (depth first).

    Open descriptors are bounded by the depth of the tree: a folder's
    descriptor stays open only while its subfolders are being walked.
    """
    rel0 = "/".join(start)
    max_size = rules.filters.max_filesize
    stack: list[tuple[int, str, Level | None, list[str]]] = []

    def enter(fd: int, rel: str, parent: Level | None) -> list[Entry]:
        # The descriptor is on the stack before anything can fail or stop.
        pending: list[str] = []
        stack.append((fd, rel, None, pending))
        level, entries, _ = scan(rules, fd, rel, parent)
        stack[-1] = (fd, rel, level, pending)
        files: list[Entry] = []
        for e in entries:
            if e.is_dir:
                pending.append(e.name)
            elif e.is_file and rules.keep(e.rel):
                if max_size is not None:
                    try:
                        if e.lstat().st_size > max_size:
                            continue
                    except OSError:
                        continue
                files.append(e)
        pending.reverse()
        return files

    try:
        yield from enter(root.open_dir(start), rel0, None)
        while stack:
            if token.should_stop():
                return
            fd, rel, level, pending = stack[-1]
            if not pending:
                os.close(fd)
                stack.pop()
                continue
            name = pending.pop()
            try:
                child = open_dir_at(fd, name, name)
            except (ToolError, OSError):
                continue  # gone, unreadable, or swapped for a symlink: never followed
            yield from enter(child, f"{rel}/{name}" if rel else name, level)
    finally:
        for fd, *_ in stack:
            os.close(fd)
        stack.clear()
