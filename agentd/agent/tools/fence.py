"""agentd's own folders, fenced off from the tools even inside a root.

A root may hold `$AGENTD_HOME` or agentd's config folder (a home folder
opened as the workspace): `additionalDirectories` refuse those folders as
roots, but a root around them would still hand the model the daemon's
session transcripts (every conversation of every project), caches, locks,
cursors, the settings and the TCP token. The tools treat them as not there:
`read_file`, and `search` or `list_dir` or `glob` started in them, are refused
naming the reason; walks and ripgrep's results leave them out and say how
many entries were held back.

One exception, by decision: the memory notes. `projects/<slug>/memory/`
holds plain markdown the user can open and edit (the brief's memory store),
recalled into prompts anyway; its notes (`*.md`, not hidden: the topic files
and `MEMORY.md`) stay readable, listable and searchable, and the folders on
the way to them listable. Everything else there (its dot files: lock,
cursors, ledger, consolidation state; a sessions folder; the cache) is not.
The config folder has no exception. Writes (ACP `write_file`/`edit_file`, an
LSP editor's write tools) are refused in all of agentd's folders, notes
included (`agentd.paths.refuse_agentd_state`): the notes are the user's and
the extractor's to write.

Paths are compared as real paths, component by component; the walks never
follow a symlink, so a link inside the root that points into these folders
leads nowhere, and `read_file` resolves a path before this check. `list_dir`
shows such a link without its target (`Fence.link_fenced`). An editor's
`run_command` is refused a `cwd` in any of these folders, the notes' too, as
a write is (a command may write where it runs: `path_refusal`). The
editor's tools are judged on the path as the editor may read it too (`..`
taken away before symlinks are followed), and refused a path with a lone
surrogate.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentd.errors import PathOutsideWorkspace
from agentd.layout import MEMORY_FOLDER, PROJECTS_FOLDER, TOPIC_SUFFIX, agentd_folders
from agentd.messages import clean_text
from agentd.paths import is_within, refuse_agentd_state

# `agentd_folders()`'s name of the folder whose memory notes stay readable.
DATA_FOLDER_PREFIX = "data folder"


@dataclass(frozen=True, slots=True)
class _Fenced:
    folder: Path  # its real path
    name: str  # what it is called (`agentd.layout.agentd_folders`)
    # Its components below the root (() when the root is inside it).
    below_root: tuple[str, ...]
    # The root's components below it (() when it is inside the root).
    above_root: tuple[str, ...]

    @property
    def has_notes(self) -> bool:
        return self.name.startswith(DATA_FOLDER_PREFIX)


def _open_in_data(parts: tuple[str, ...], is_dir: bool | None) -> bool:
    """Whether `parts` (below the data folder) is a memory note or a folder on
    the way to one; `is_dir` None: either, as far as the shape says."""
    n = len(parts)
    if n == 0:
        return is_dir is not False
    if parts[0] != PROJECTS_FOLDER:
        return False
    if n <= 2 or (n == 3 and parts[2] == MEMORY_FOLDER):
        return is_dir is not False
    if n == 4 and parts[2] == MEMORY_FOLDER:
        name = parts[3]
        return (
            is_dir is not True
            and name.endswith(TOPIC_SUFFIX)
            and not name.startswith(".")
            and len(name) > len(TOPIC_SUFFIX)
        )
    return False


def _refusal(fenced: _Fenced, shown: str) -> str:
    text = f"{shown} is in agentd's own {fenced.name} ({fenced.folder}): not read by the tools"
    if fenced.has_notes:
        return (
            f"{text} (session transcripts, caches, locks); only its memory notes "
            f"({PROJECTS_FOLDER}/<project>/{MEMORY_FOLDER}/*{TOPIC_SUFFIX}) are readable"
        )
    return f"{text} (settings, tokens)"


class Fence:
    """agentd's folders that lie inside, or around, one root."""

    __slots__ = ("_fenced", "_hit", "_own", "held_back")

    def __init__(self, root_real: Path, own: Sequence[tuple[Path, str]] | None = None) -> None:
        # All of agentd's folders, wherever they are: a symlink in the root
        # may point into one outside it (`link_fenced`).
        self._own = tuple(agentd_folders() if own is None else own)
        fenced: list[_Fenced] = []
        for folder, name in self._own:
            if is_within(folder, root_real):
                fenced.append(_Fenced(folder, name, folder.relative_to(root_real).parts, ()))
            elif is_within(root_real, folder):
                fenced.append(_Fenced(folder, name, (), root_real.relative_to(folder).parts))
        self._fenced = tuple(fenced)
        # The folders that held an entry back (named by `note`).
        self._hit: set[int] = set()
        # Entries a walk or ripgrep's results left out here (the output says
        # that some were, not how many: the engines count differently).
        self.held_back = 0

    def __bool__(self) -> bool:
        return bool(self._fenced)

    def refusal(self, parts: Sequence[str], is_dir: bool | None, shown: str = "") -> str | None:
        """Why the root-relative `parts` is not for the tools; None when it is
        (`is_dir` None: a path named by the model, judged by its shape)."""
        i = self._fenced_at(parts, is_dir)
        return None if i < 0 else _refusal(self._fenced[i], shown or "/".join(parts) or ".")

    def _fenced_at(self, parts: Sequence[str], is_dir: bool | None) -> int:
        """The index of the folder that holds `parts` back; -1: none does."""
        for i, fenced in enumerate(self._fenced):
            depth = len(fenced.below_root)
            if tuple(parts[:depth]) != fenced.below_root:
                continue
            inside = fenced.above_root + tuple(parts[depth:])
            if fenced.has_notes and _open_in_data(inside, is_dir):
                continue
            return i
        return -1

    def hides(self, rel: str, is_dir: bool) -> bool:
        """`refusal` for a root-relative path a walk or ripgrep found,
        counted in `held_back` when it is left out."""
        if not self._fenced:
            return False
        i = self._fenced_at(rel.split("/"), is_dir)
        if i < 0:
            return False
        self.held_back += 1
        self._hit.add(i)
        return True

    def keep_files(self, paths: list[str]) -> list[str]:
        """The files of `paths` (root-relative, from ripgrep) that are not fenced off."""
        if not self._fenced:
            return paths
        return [p for p in paths if not self.hides(p, False)]

    def link_fenced(self, link: Path) -> str | None:
        """The name of agentd's folder the symlink `link` (an absolute path)
        leads into, None when it leads elsewhere (or to a memory note): a
        listing shows such a link without its target, as walks leave the
        folders' entries out (the target would name a transcript, a cache)."""
        if not self._own:
            return None
        try:
            real = Path(os.path.realpath(link))
        except (OSError, ValueError):
            return None
        i = _owner(real, self._own)
        return None if i is None else self._own[i][1]

    def note(self) -> str:
        """What the output says of entries left out ("" when none were)."""
        if not self.held_back:
            return ""
        names = " and ".join(
            f"{f.name} ({f.folder})" for i, f in enumerate(self._fenced) if i in self._hit
        )
        return f"[entries in agentd's own {names} not shown: the tools do not read them]"


def path_refusal(path: str, root: Path, *, write: bool) -> str | None:
    """Why an editor-run tool must not touch `path` (relative to `root`, or
    absolute): inside agentd's own folders (`write`: anywhere there; a read:
    what `Fence` refuses), or not valid Unicode; None when it may, or when
    the path is no usable path (the tool's own checks say so).

    The editor resolves the path itself, and not as the kernel does: VS
    Code's client (Node's `path.resolve`) takes `..` away before it follows
    symlinks, so `link/../x` is `x` beside the link to it, while the real
    path is `x` beside the link's target. Both readings are judged: the
    lexical one used to pass here and lead the editor into a transcript.
    A lone surrogate is refused outright (the model's arguments are cleaned
    of them before they get here; this holds whatever the caller): the
    editor would decode it into another name (U+FFFD) than the file
    checked, and `\\ud83d/..` would fold away in its hands."""
    if not path or "\x00" in path:
        return None
    if clean_text(path) != path:
        return f"{path!r} is not valid Unicode (a lone surrogate): not passed to the editor"
    joined = os.path.join(root, path)
    own = agentd_folders()
    for named in (joined, os.path.normpath(joined)):
        try:
            real = Path(os.path.realpath(named))
        except (OSError, ValueError):
            continue
        if write:
            try:
                refuse_agentd_state(real, own)
            except PathOutsideWorkspace as exc:
                return str(exc)  # word for word as ACP's own check says it
        i = _owner(real, own)
        if i is not None:
            return _refusal(_Fenced(*own[i], (), ()), str(real))
    return None


def _owner(real: Path, own: Sequence[tuple[Path, str]]) -> int | None:
    """The index in `own` of agentd's folder that holds the real path `real`
    back from a read (its memory notes, and the way to them, excepted)."""
    for i, (folder, name) in enumerate(own):
        if not is_within(real, folder):
            continue
        fenced = _Fenced(folder, name, (), ())
        if not (fenced.has_notes and _open_in_data(real.relative_to(folder).parts, None)):
            return i
    return None
