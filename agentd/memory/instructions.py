"""Instruction files: AGENTS.md (and AGENTD.md) always in the system prompt.

Read, most general first: the user's ``AGENTS.md`` in the agentd config dir,
then each directory from the repository root (the nearest ancestor holding
``.git``; the workspace root when there is none) down to the workspace root.
``@path`` imports pull in other files, at most three levels deep; loops are
refused, and so is any file whose real path leaves the project tree or the
config dir. The whole text stays within a budget: when it is over, each
top-level file (with its imports) gets a fair share, so one huge file cannot
push out the others. Every ``render`` call stats the files involved and
re-reads only when one changed; ``cached`` only stats, so the event loop can
tell whether a read (in a worker thread) is needed at all. Only regular
files are read (a FIFO named AGENTS.md is reported, never waited on).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agentd.files import read_regular
from agentd.layout import canonical_root
from agentd.memory.store import BINARY_SNIFF_BYTES, decode

INSTRUCTION_NAMES = ("AGENTS.md", "AGENTD.md")
USER_FILE = "AGENTS.md"
MAX_TOTAL_CHARS = 20_000
MAX_IMPORT_DEPTH = 3
MAX_FILE_BYTES = 256 * 1024
TRUNCATION_MARK = "\n[... truncated: instruction files are limited to {n} characters]"
PREAMBLE = (
    "Instructions from the user's and the project's AGENTS.md files. "
    "Follow them; more specific (deeper) files take precedence."
)

_IMPORT = re.compile(r"(?:(?<=\s)|^)@((?:~|\.{1,2})?/?[^\s`'\"<>()\[\]]+)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")

Signature = tuple[tuple[str, int, int], ...]


@dataclass
class _Section:
    path: Path
    label: str
    text: str


@dataclass
class _Group:
    """A top-level file and everything it imports, budgeted together."""

    sections: list[_Section] = field(default_factory=list)

    def render(self) -> str:
        return "\n\n".join(f"Contents of {s.path} ({s.label}):\n\n{s.text}" for s in self.sections)


def find_repo_root(workspace_root: Path) -> Path:
    for directory in (workspace_root, *workspace_root.parents):
        if (directory / ".git").exists():
            return directory
    return workspace_root


def _imports(text: str) -> list[str]:
    found: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        code_free = _INLINE_CODE.sub("", line)
        found.extend(m.group(1).rstrip(".,;:!?") for m in _IMPORT.finditer(code_free))
    return found


def _stat_key(path: Path) -> tuple[str, int, int]:
    """(path, mtime, size), as `_stat_of` gives the last two."""
    name = str(path)
    return (name, *_stat_of(name))


def _stat_of(path: str) -> tuple[int, int]:
    """(mtime, size); -1s when nothing is there, -2s when the stat failed
    otherwise (a read then says why)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return (-1, -1)
    except OSError:
        return (-2, -2)
    return (st.st_mtime_ns, st.st_size)


def _fair_shares(sizes: list[int], budget: int) -> list[int]:
    """Water-filling: small items keep all they have, big ones split what remains."""
    shares = [0] * len(sizes)
    pending = sorted(range(len(sizes)), key=lambda i: sizes[i])
    remaining = budget
    while pending:
        fair = remaining // len(pending)
        i = pending.pop(0)
        shares[i] = min(sizes[i], fair)
        remaining -= shares[i]
    return shares


class InstructionFiles:
    def __init__(self, workspace_root: Path, config_dir: Path) -> None:
        self.workspace_root = canonical_root(workspace_root)
        self.config_dir = Path(os.path.abspath(config_dir))
        self.repo_root = find_repo_root(self.workspace_root)
        self.budget = MAX_TOTAL_CHARS
        self.problems: list[str] = []
        self._signature: Signature | None = None
        self._watched: list[Path] = []
        self._text = ""
        self._candidates: list[tuple[Path, str]] | None = None
        # Prompts of several sessions may render at once, each in a thread.
        self._lock = threading.Lock()

    def candidates(self) -> list[tuple[Path, str]]:
        """Top-level files that may exist, most general first, with their label."""
        if self._candidates is None:
            # Fixed by the roots; built once (pathlib's walk up the parents took
            # 0.1-0.2 ms of every prompt's `cached`).
            out = [(self.config_dir / USER_FILE, "user instructions, for all projects")]
            parents = self.workspace_root.parents
            between = [p for p in parents if p.is_relative_to(self.repo_root)]
            for directory in [*reversed(between), self.workspace_root]:
                out.extend((directory / name, "project instructions") for name in INSTRUCTION_NAMES)
            self._candidates = out
        return list(self._candidates)

    def cached(self) -> str | None:
        """The text of the last `render` if no file changed since (stats only, no
        read: cheap enough for the event loop); None when `render` is needed.

        The files of the kept signature (the candidates, then the imports that
        render found) are stat'ed by the names it holds, in its order, until
        one differs: the same check as `render`'s, without making its paths,
        keys and tuple again (0.05-0.07 ms of every prompt's path once the
        process had idled). A file that was not there (most candidates) is
        asked for with `access`, which answers without the exception a `stat`
        of a missing file raises (0.9 against 2.2 us each, warm): anything
        there now, a link included, is a change."""
        signature = self._signature
        if signature is None:
            return None
        for path, mtime, size in signature:
            if mtime == -1:
                if os.access(path, os.F_OK):
                    return None
            elif _stat_of(path) != (mtime, size):
                return None
        return self._text

    def render(self) -> str:
        """The text to append to the system prompt ("" when there are no files).

        Reads files when one changed: call it in a worker thread.
        """
        with self._lock:
            candidates = [p for p, _ in self.candidates()]
            signature = tuple(_stat_key(p) for p in candidates + self._watched)
            if signature == self._signature:
                return self._text
            # Only the files the stats found are read: a missing one (most of
            # them) costs no `realpath` walk and no failed open. A file that
            # appears or changes after these stats differs from the signature
            # kept below, so the next call reads again.
            found = {key[0] for key in signature[: len(candidates)] if key[1] != -1}
            self._text, self._watched = self._load(found)
            # The signature covers the imports found by this load too.
            self._signature = signature[: len(candidates)] + tuple(
                _stat_key(p) for p in self._watched
            )
            return self._text

    # -- loading ------------------------------------------------------------------

    def _roots(self) -> list[Path]:
        return [Path(os.path.realpath(self.repo_root)), Path(os.path.realpath(self.config_dir))]

    def _read(self, path: Path) -> str | None:
        real = Path(os.path.realpath(path))
        if not any(real.is_relative_to(root) for root in self._roots()):
            self.problems.append(f"{path}: outside the project and the config dir; not read")
            return None
        try:
            # The real path, not following links: one swapped in since is refused.
            # A FIFO or a device is refused at once instead of blocking the read.
            data = read_regular(real, MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.problems.append(f"{path}: cannot read ({exc.strerror or exc})")
            return None
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            self.problems.append(f"{path}: binary file; not read")
            return None
        text, _ = decode(data[:MAX_FILE_BYTES], truncated=len(data) > MAX_FILE_BYTES)
        return text.strip()

    def _expand(
        self,
        path: Path,
        label: str,
        stack: list[Path],
        seen: set[Path],
        group: _Group,
        watched: list[Path],
    ) -> None:
        """Add ``path`` and, depth first, what it imports; ``stack`` holds its importers."""
        real = Path(os.path.realpath(path))
        if real in seen:
            return  # already included once; one copy is enough
        text = self._read(path)
        if text is None:
            return
        seen.add(real)
        group.sections.append(_Section(path, label, text))
        chain = [*stack, real]
        for target in _imports(text):
            resolved = Path(os.path.expanduser(target))
            if not resolved.is_absolute():
                resolved = path.parent / resolved
            resolved = Path(os.path.abspath(resolved))
            watched.append(resolved)
            if Path(os.path.realpath(resolved)) in chain:
                shown = " -> ".join(str(p) for p in [*chain, resolved])
                self.problems.append(f"import loop refused: {shown}")
            elif len(chain) > MAX_IMPORT_DEPTH:
                self.problems.append(
                    f"{path}: import of {target} refused (more than {MAX_IMPORT_DEPTH} levels)"
                )
            elif not resolved.exists():
                self.problems.append(f"{path}: imported file {target} not found")
            else:
                self._expand(resolved, f"imported by {path.name}", chain, seen, group, watched)

    def _load(self, found: set[str]) -> tuple[str, list[Path]]:
        """The text and the imported files to watch; `found`: the candidates
        that exist (as `str`), the only ones read."""
        self.problems = []
        groups: list[_Group] = []
        watched: list[Path] = []
        seen: set[Path] = set()
        for path, label in self.candidates():
            if str(path) not in found:
                continue
            group = _Group()
            self._expand(path, label, [], seen, group, watched)
            if group.sections:
                groups.append(group)
        if not groups:
            return "", watched
        texts = [g.render() for g in groups]
        room = self.budget - len(PREAMBLE) - 2 * len(texts)
        if sum(len(t) for t in texts) > room:
            mark = TRUNCATION_MARK.format(n=self.budget)
            shares = _fair_shares([len(t) for t in texts], room)
            texts = [
                t if len(t) <= share else t[: max(0, share - len(mark))] + mark
                for t, share in zip(texts, shares, strict=True)
            ]
        return "\n\n".join([PREAMBLE, *texts]), watched
