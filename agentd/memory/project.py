"""One project's memory: its folders, its index, its watcher.

Shared by every session of the project in the daemon (the manager owns it).
Invariants:
- Only the event loop mutates the live index; full builds happen on a fresh
  index in a worker thread, then swapped in. No file is read on the loop:
  the team folder is the workspace's, and may hold a FIFO or a huge file.
- ``recall`` is a plain function over the live index: it never awaits.
- ``generation`` bumps on every change of the index; listeners hear about
  every change after the initial build, with the paths that changed.
- With an ``index_cache_home``, each memory folder's parsed notes are kept
  in its index cache (`agentd.memory.index_cache`): a scan takes the notes
  that did not change from there, and the whole index from the saved one
  (`agentd.memory.index_snapshot`) when it was built from the same notes
  (`_as_saved`, `_saved_index`). The cache is written in a worker thread,
  `SAVE_DELAY_S` after the last change of the index (never on a prompt's
  path), and once more at `aclose` when a change is still unsaved. Between
  writes only what changed is held (the notes a scan read, the watcher's
  changes), merged into the file at the next write: the daemon does not keep
  a second copy of every note's terms. A save after edits appends the
  changed entries to the saved index's delta (`agentd.memory.index_delta`);
  a whole save (after a build, or once the delta is past `FOLD_SHARE` of
  the saved index) writes the entries and the index: the live one when it
  is a whole build, else a fresh build from the entries (and the notes
  that have none, a symlinked one, read for it). The cache folder
  is swept once per process (`agentd.memory.cache_sweep`), sparing the
  files a running project holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import stat
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from watchfiles import Change

from agentd.layout import (
    INDEX_FILE,
    canonical_root,
    memory_dir,
    memory_index_cache_file,
    memory_index_snapshot_file,
    team_memory_dir,
)
from agentd.memory import cache_sweep, index_cache, index_delta, index_snapshot
from agentd.memory.index import Fields, IndexedDoc, InvertedIndex, field_terms
from agentd.memory.index_cache import RACY_NS, CacheEntry, entry_of, identity_of
from agentd.memory.recall import EMPTY, MAX_DOCS, RecallResult, budgeted, rank, recall_index
from agentd.memory.store import (
    HEAD_CHARS,
    MAX_TOPIC_BYTES,
    DocInfo,
    IndexFile,
    Skipped,
    TopicDoc,
    content_hash,
    index_file_of,
    is_topic_name,
    list_topics,
    parse_topic,
    read_index_file,
    read_topic_stat,
)
from agentd.memory.watcher import Changes, FolderWatcher, WatchState

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
Listener = Callable[[list[Path]], None]
_T = TypeVar("_T")
# Called as a project starts; what it returns is awaited before the watcher registers.
WatchGate = Callable[[], Awaitable[None]]

# The most docs ``candidates`` returns.
MAX_CANDIDATES = 200
# The index cache is written this long after the last change of the index:
# a build's own write waits until its first prompt's request is long out, and
# a burst of edits (a checkout) is written once.
SAVE_DELAY_S = 3.0
# ... or at the latest this long after the first unsaved change, however
# busy the folder stays.
MAX_SAVE_DELAY_S = 30.0
# A save after edits appends them to the saved index's delta
# (`index_delta`) until that file is past this share of the saved index
# (or `FOLD_MIN_BYTES`); the next save then writes both whole again.
FOLD_SHARE = 16
FOLD_MIN_BYTES = 512 * 1024

# Index cache entries of a memory folder by file name, keyed by team (True)
# or personal (False) folder.
Entries = dict[bool, dict[str, CacheEntry]]
# What identifies a note as a scan took it (`_identity_of_note`), by path;
# None: it is read again at the next look (changed within `RACY_NS` of the
# scan, or gone as it was looked at).
Seen = dict[str, tuple[int, ...] | None]


@dataclass
class _Unsaved:
    """What the next write of a folder's index cache holds: a scan's whole set
    of entries (or, None, the file's own), with the changes since applied."""

    whole: dict[str, CacheEntry] | None = None
    changes: dict[str, CacheEntry | None] = field(default_factory=dict)  # None: dropped

    def merged(self, cache_file: Path) -> dict[str, CacheEntry]:
        """The entries to write (blocking: the file may be read)."""
        entries = self.whole if self.whole is not None else index_cache.load(cache_file)
        for name, entry in self.changes.items():
            if entry is None:
                entries.pop(name, None)
            else:
                entries[name] = entry
        return entries


@dataclass
class _Snapshot:
    """The result of a full scan, built off the loop and swapped in whole."""

    index: InvertedIndex
    skipped: dict[str, str] = field(default_factory=dict)
    folder_problems: dict[str, str] = field(default_factory=dict)
    index_file: IndexFile = field(default_factory=lambda: IndexFile("", None))
    # What the index cache of each folder (team or not) needs written: the
    # notes this scan read, and those gone.
    cache_writes: dict[bool, _Unsaved] = field(default_factory=dict)
    # The saved index (`index_snapshot`) was not this build's: write it.
    index_unsaved: bool = False
    # The saved index this index is (with `delta` applied), its id and size;
    # None for a build.
    saved_id: str | None = None
    saved_bytes: int = 0
    # The edits saved after it (`index_delta`), and that file's size.
    delta: index_delta.Records = field(default_factory=dict)
    delta_bytes: int = 0
    # Each listed note's identity as this scan took it: what the look after
    # the watcher's late registration compares with (`_changed_since`);
    # None when not asked for (about 2 MiB at 10,000 notes, while scanning).
    seen: Seen | None = None


# Notes read by a scan's first attempt, by path: (what reading gave, its fstat).
_Reads = dict[str, tuple[TopicDoc | Skipped | None, os.stat_result | None]]


def _realpath(path: Path) -> Path:
    return Path(os.path.realpath(path))


class ProjectMemory:
    def __init__(
        self,
        workspace_root: Path,
        *,
        home: Path | None = None,
        directory: Path | None = None,
        team_directory: Path | None = None,
        watch: bool = True,
        watch_gate: WatchGate | None = None,
        index_cache_home: Path | None = None,
    ) -> None:
        """``index_cache_home``: the ``$AGENTD_HOME`` whose cache folder keeps
        the parsed notes across starts (`agentd.layout.memory_index_cache_file`);
        None keeps no cache."""
        self.workspace_root = canonical_root(workspace_root)
        self.directory = Path(os.path.abspath(directory or memory_dir(self.workspace_root, home)))
        self.team_directory = Path(
            os.path.abspath(team_directory or team_memory_dir(self.workspace_root))
        )
        self.generation = 0
        self._watch = watch
        self._watch_gate = watch_gate
        self._index = InvertedIndex()
        self._skipped: dict[str, str] = {}
        self._folder_problems: dict[str, str] = {}
        self._index_file = IndexFile("", None)
        self._indexed_at: float | None = None
        self._listeners: list[Listener] = []
        self._gen_event = asyncio.Event()
        self._ready = asyncio.Event()
        self._watcher: FolderWatcher | None = None
        self._started = False
        self._watched_once = False
        self._recreated = False
        self._cache_home = index_cache_home
        self._unsaved: dict[bool, _Unsaved] = {}
        # The saved index (`index_snapshot`) is not the live index's build.
        self._index_unsaved = False
        # The saved index on disk that the edits saved since follow (its id;
        # None: the next save writes it whole), its size, and those edits as
        # its delta file holds them (`index_delta`; folded into the next
        # whole save).
        self._base: str | None = None
        self._saved_bytes = 0
        self._delta: index_delta.Records = {}
        self._delta_bytes = 0
        # The shared locks held on this project's files of the cache folder
        # (`cache_sweep.hold`), by file; taken by scans in worker threads.
        self._held: dict[Path, int | None] = {}
        self._held_lock = threading.Lock()
        # The first index's scan, run ahead (`scan_ahead`) for `start`.
        self._ahead: _Snapshot | None = None
        # The notes as the first index took them, when its watcher registers
        # after it (a watch gate): the look that follows the registration
        # reads only those changed since (`_rescan`).
        self._first_seen: Seen | None = None
        # The cache folder's old files are to be swept (`cache_sweep`), with
        # the first save (`SAVE_DELAY_S` after the start at the earliest) or
        # as the project closes.
        self._sweep_pending = False
        self._save_wanted = asyncio.Event()
        self._saver: asyncio.Task[None] | None = None
        self._saving: asyncio.Future[Any] | None = None
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------

    async def start(self, progress: Progress | None = None) -> None:
        """Build the index, then keep it current with the watcher.

        The watcher registers first and the scan follows, so a file written
        while the scan runs is seen by one or the other (the watcher's batch
        waits for the scan to finish). With a `watch_gate`, the scan comes
        first and the watcher registers once the gate opens, then looks again
        (a file written in between is seen by that look, which reads only the
        notes whose identity changed since the scan: `_rescan`): a session's
        first prompt, which may wait for this index, does not also wait for
        the registration.
        """
        if self._started:
            return
        self._started = True
        if self._watch and self._watch_gate is not None:
            # Asked before the scan: a prompt that starts meanwhile can open it.
            gate = self._watch_gate()
            # A folder seen now and gone when the watcher registers was deleted
            # under us (`_watch_paths`), as one gone between registrations is.
            self._watched_once = self.directory.is_dir()
            try:
                snapshot = (
                    self._take_ahead(progress)
                    or self._nothing_to_scan(progress)
                    or await self._build_snapshot(progress, record_seen=True)
                )
            except BaseException:
                if isinstance(gate, Coroutine):
                    gate.close()
                raise
            self._install(snapshot, notify=False)
            self._first_seen = snapshot.seen
            self._ready.set()
            self._sweep_later()
            self._watcher = self._folder_watcher()
            await self._watcher.start(after=gate)
            return
        if self._watch:
            self._watcher = self._folder_watcher()
            await self._watcher.start()
        try:
            snapshot = await self._build_snapshot(progress)
        except BaseException:
            # The watcher's batches wait for the first index: stop it, do not strand it.
            await self.aclose()
            raise
        self._install(snapshot, notify=False)
        self._ready.set()
        self._sweep_later()

    def scan_ahead(self) -> None:
        """Blocking: the first index's scan, run in the caller's thread before
        `start`, which takes it (the daemon's warm-up runs it while the App is
        still being built: `agentd.warmup.Warmup.scan_memory_ahead`). Only
        with a watch gate is it used: the watcher then registers after the
        first index and looks again, so a change made since is still seen.
        Nothing when neither memory folder exists."""
        if self._started or not (self.directory.exists() or self.team_directory.exists()):
            return
        self._ahead = self._scan(None, record_seen=True)

    def use_watch_gate(self, gate: WatchGate | None) -> None:
        """The watch gate of a project made before its owner (`scan_ahead`)."""
        self._watch_gate = gate

    def _take_ahead(self, progress: Progress | None) -> _Snapshot | None:
        ahead, self._ahead = self._ahead, None
        report = _log_failures(progress)
        if ahead is not None and report is not None:
            # Begun and done: what the scan's own reports would have ended with.
            total = len(ahead.index)
            report(0, total)
            report(total, total)
        return ahead

    def release(self) -> None:
        """Let go of the cache files this project holds (`cache_sweep.hold`):
        `aclose` does it; so does the owner of a project never started."""
        with self._held_lock:
            held, self._held = self._held, {}
        for fd in held.values():
            if fd is not None:
                os.close(fd)

    def _folder_watcher(self) -> FolderWatcher:
        return FolderWatcher(
            self._watch_paths,
            self._on_changes,
            self._rescan,
            name=f"memory-watcher:{self.directory.parent.name}",
        )

    async def aclose(self) -> None:
        self._closed = True
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.aclose()
        saver, self._saver = self._saver, None
        if saver is not None:
            saver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await saver
        if self._saving is not None:
            # A write the cancel found under way finishes: its thread cannot stop.
            await asyncio.wait([self._saving])
        if self._unsaved or self._index_unsaved or self._sweep_pending:
            # What the next start would otherwise read again (a daemon that
            # exits within `SAVE_DELAY_S` of its first index, as a reload does).
            await self._save_cache()
        self.release()

    @property
    def watcher_state(self) -> WatchState:
        return self._watcher.state if self._watcher is not None else "stopped"

    # -- queries ------------------------------------------------------------------

    def recall(
        self, query: str, *, exclude: Collection[str] = (), limit: int = MAX_DOCS
    ) -> RecallResult:
        """The local tier: synchronous, about a millisecond; never awaits."""
        if not self._ready.is_set():
            return EMPTY
        return recall_index(self._index, query, exclude=exclude, limit=limit)

    def candidates(
        self, query: str, *, exclude: Collection[str] = (), limit: int = 60
    ) -> list[DocInfo]:
        """Docs with lexical evidence for ``query``, best first, without the 5-doc
        cap or the relative floor: the shortlist a model tier chooses from."""
        if not self._ready.is_set():
            return []
        hits = rank(self._index, query, exclude=exclude, limit=min(limit, MAX_CANDIDATES))
        return [h.doc.info for h in hits]

    def recalled(self, paths: Sequence[str], *, tier: str = "model") -> RecallResult:
        """The docs at ``paths`` (in that order; unknown paths skipped), with the
        same caps and budgets as ``recall``: how another tier delivers its picks."""
        picked: list[tuple[IndexedDoc, float]] = []
        for path in dict.fromkeys(paths):
            indexed = self._index.get(path)
            if indexed is not None:
                picked.append((indexed, 0.0))
        return budgeted(picked, tier=tier)

    def list_docs(self) -> list[DocInfo]:
        return sorted((d.info for d in self._index.docs()), key=lambda i: (i.team, str(i.path)))

    def index_text(self) -> str:
        """MEMORY.md within its budget (200 lines, 25,000 chars), for a system prompt."""
        return self._index_file.text

    def status(self) -> dict[str, Any]:
        problems: list[dict[str, str]] = []
        for info in self._index.docs():
            problems.extend({"path": str(info.info.path), "problem": p} for p in info.info.problems)
        for source in (self._skipped, self._folder_problems):
            problems.extend({"path": p, "problem": why} for p, why in source.items())
        if self._recreated and not any(not d.info.team for d in self._index.docs()):
            why = "the memory folder was deleted while agentd ran; its notes are gone (now empty)"
            problems.append({"path": str(self.directory), "problem": why})
        if self._index_file.problem:
            problems.append(
                {"path": str(self.directory / INDEX_FILE), "problem": self._index_file.problem}
            )
        if self._watcher is not None and self._watcher.error and self.watcher_state == "failed":
            problems.append(
                {"path": str(self.directory), "problem": f"watcher: {self._watcher.error}"}
            )
        problems.sort(key=lambda p: (p["path"], p["problem"]))
        indexed_at = (
            datetime.fromtimestamp(self._indexed_at, UTC).isoformat()
            if self._indexed_at is not None
            else None
        )
        team_count = sum(1 for d in self._index.docs() if d.info.team)
        return {
            "directory": str(self.directory),
            "teamDirectory": str(self.team_directory),
            "docCount": len(self._index),
            "teamDocCount": team_count,
            "watcher": self.watcher_state,
            "indexedAt": indexed_at,
            "generation": self.generation,
            "problems": problems,
        }

    # -- change notification ------------------------------------------------------

    def add_listener(self, fn: Listener) -> None:
        """``fn(paths)`` runs on the loop after each change of the index."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    async def wait_indexed_generation(self, gen: int) -> None:
        while self.generation < gen:
            await self._gen_event.wait()

    def _changed(self, paths: Sequence[Path], *, notify: bool = True) -> None:
        self.generation += 1
        self._indexed_at = time.time()
        event, self._gen_event = self._gen_event, asyncio.Event()
        event.set()
        if not notify or not paths:
            return
        for fn in list(self._listeners):
            try:
                fn(list(paths))
            except Exception:
                log.exception("memory listener failed")

    # -- own writes ---------------------------------------------------------------

    def note_own_write(self, path: Path, content: str) -> None:
        """The daemon wrote ``content`` to ``path``: index it now.

        Call after the write is durable. The watcher event that follows finds
        the same content hash and is skipped, so the write costs one parse.
        """
        path = Path(os.path.abspath(path))
        team = self._team_of(path)
        if team is None:
            return
        data = content.encode("utf-8")
        digest = content_hash(data[:MAX_TOPIC_BYTES])
        if path.name == INDEX_FILE:
            if not team:
                self._index_file = index_file_of(data, len(data))
            return
        if not is_topic_name(path.name):
            return
        current = self._index.get(str(path))
        if current is not None and current.content_hash == digest:
            return
        try:
            mtime = path.stat().st_mtime
        except OSError:
            mtime = time.time()
        doc = parse_topic(path, data, size=len(data), mtime=mtime, team=team)
        fields = field_terms(doc)
        self._index.upsert(doc, fields)
        self._skipped.pop(str(path), None)
        if self._cache_home is not None:
            # Just written, so not `verified`: the save reads it again first.
            with contextlib.suppress(OSError):
                lst = os.lstat(path)
                if stat.S_ISREG(lst.st_mode):
                    self._set_entry(team, path.name, entry_of(doc, fields, lst, time.time_ns()))
        self._changed([path])

    # -- scanning -----------------------------------------------------------------

    def _team_of(self, path: Path) -> bool | None:
        """True/False when ``path`` sits directly in the team/personal folder."""
        parent = path.parent
        if parent == self.directory:
            return False
        if parent == self.team_directory:
            return True
        return None

    def _team_allowed(self) -> str | None:
        """None when the team folder may be read, else the problem with it."""
        if not self.team_directory.is_dir():
            return None
        real = _realpath(self.team_directory)
        if not real.is_relative_to(_realpath(self.workspace_root)):
            return "team memory folder points outside the workspace; ignored"
        return None

    def _folders(self) -> list[tuple[Path, bool]]:
        folders = [(self.directory, False)]
        if self.team_directory != self.directory and self._team_allowed() is None:
            folders.append((self.team_directory, True))
        return folders

    def _cache_file(self, folder_real: Path) -> Path | None:
        if self._cache_home is None:
            return None
        return memory_index_cache_file(folder_real, self._cache_home)

    def _snapshot_file(self) -> Path | None:
        if self._cache_home is None:
            return None
        return memory_index_snapshot_file(
            _realpath(self.directory), _realpath(self.team_directory), self._cache_home
        )

    def _scan(self, progress: Progress | None, *, record_seen: bool = False) -> _Snapshot:
        """Read and tokenise every topic file (blocking; may run in a thread).

        A file whose identity is that of its entry in the index cache is not
        read: the entry holds what reading it gives. When the notes found are
        those of the saved index (`index_snapshot`), same keys in the same
        order, its postings are taken as they are; otherwise the index is
        built from the notes' terms.
        """
        snapshot = _Snapshot(InvertedIndex(), seen={} if record_seen else None)
        self._hold_cache_files()
        team_problem = self._team_allowed()
        if team_problem:
            snapshot.folder_problems[str(self.team_directory)] = team_problem
        work: list[tuple[Path, Path, bool]] = []
        for folder, team in self._folders():
            listing = list_topics(folder)
            for problem in listing.problems:
                snapshot.folder_problems[str(problem.path)] = problem.problem
            real = _realpath(folder)
            work.extend((p, real, team) for p in listing.paths)
        snapshot_file = self._snapshot_file() if work else None
        saved = index_snapshot.load(snapshot_file) if snapshot_file is not None else None
        delta = index_delta.Delta()
        if saved is not None and saved.id is not None and snapshot_file is not None:
            delta = index_delta.load(index_delta.delta_file(snapshot_file), saved.id)
        if progress is not None:
            progress(0, len(work))
        # Before any read: what an entry is trusted by (`index_cache.entry_of`).
        read_ns = time.time_ns()
        reads: _Reads = {}
        index = None
        if saved is not None:
            index = self._as_saved(saved, delta.records, work, snapshot, progress, reads, read_ns)
            if index is not None:
                snapshot.delta = delta.records
        if index is None:
            found = self._read_notes(work, snapshot, progress, reads, read_ns, delta.records)
            # Notes the delta changed make it another index than the saved one.
            index = self._saved_index(saved, found) if not delta.records else None
            if index is None:
                snapshot.index_unsaved = self._cache_home is not None
                pool: dict[str, str] = {}
                index = InvertedIndex.from_tokenised(
                    [
                        (doc, terms.fields(pool) if isinstance(terms, CacheEntry) else terms)
                        for doc, terms in found
                    ]
                )
        if saved is not None and not snapshot.index_unsaved:
            snapshot.saved_id, snapshot.saved_bytes = saved.id, saved.size
            snapshot.delta_bytes = delta.size
            # A delta cut short (a crash in an append) or of another saved
            # index: written whole at the next save, which removes it.
            snapshot.index_unsaved = not delta.clean
        snapshot.index = index
        snapshot.index_file = read_index_file(self.directory)
        return snapshot

    def _as_saved(
        self,
        saved: index_snapshot.Snapshot,
        delta: index_delta.Records,
        work: list[tuple[Path, Path, bool]],
        snapshot: _Snapshot,
        progress: Progress | None,
        reads: _Reads,
        read_ns: int,
    ) -> InvertedIndex | None:
        """The saved index with the edits of its ``delta`` applied, when each
        regular note of ``work`` is one of its docs or one of the delta's
        entries with its identity (same size, mtime, inode and device as when
        it was read) and the others (a symlink, a file skipped: none has an
        index cache entry), read, give the docs it has: the docs are taken
        from there, the index cache left unread. None when the index cache is
        needed: a note to read that would get an entry, or one that has an
        entry to drop; what was read is left in ``reads``. Each note looked
        at is in ``snapshot.seen`` (when it is asked for)."""
        seen = snapshot.seen
        places = saved.places()
        n_saved = len(saved.keys)
        docs: list[tuple[DocInfo, str, str] | None] = [None] * n_saved  # info, head, hash
        read: list[int] = []  # the places of the notes read
        edited: list[tuple[TopicDoc, CacheEntry]] = []  # the delta's, found as it has them
        skipped: dict[str, str] = {}
        total = len(work)
        step = max(1, total // 100)
        for n, (path, real, team) in enumerate(work, 1):
            place = places.get((team, path.name))
            try:
                lst = os.lstat(path)
            except OSError:
                lst = None
            regular = lst is not None and stat.S_ISREG(lst.st_mode)
            if (team, path.name) in delta:
                entry = delta[(team, path.name)]
                if entry is None or lst is None or not regular:
                    return None  # its entry dropped, or a note to read
                if identity_of(lst) != entry.identity:
                    return None  # changed since
                # A delta's entry is verified (`_append_delta`): not racy.
                if seen is not None:
                    seen[str(path)] = entry.identity
                edited.append((entry.doc(path, team=team, mtime=lst.st_mtime), entry))
                if place is not None:
                    docs[place] = saved.doc(place, path, lst.st_mtime)  # replaced below
            else:
                known = saved.identity(place) if place is not None else None
                if known is not None and lst is not None and regular:
                    if identity_of(lst) != known:
                        return None  # changed
                    assert place is not None
                    if seen is not None:
                        seen[str(path)] = known  # saved from verified entries
                    docs[place] = saved.doc(place, path, lst.st_mtime)
                else:
                    if known is not None:
                        return None  # its entry is to be dropped
                    if seen is not None:
                        seen[str(path)] = _seen_of(path, lst, read_ns)
                    outcome, st = reads[str(path)] = read_topic_stat(path, real, team=team)
                    if isinstance(outcome, Skipped):
                        skipped[str(path)] = outcome.problem
                    elif outcome is not None:
                        if st is not None or place is None:
                            # A regular note, to be kept in the index cache;
                            # or one the saved index does not have.
                            return None
                        read.append(place)
                        head = outcome.body[:HEAD_CHARS]
                        docs[place] = (outcome.info, head, outcome.content_hash)
            if progress is not None and (n % step == 0 or n == total):
                progress(n, total)
        found = {(topic.info.team, topic.info.path.name) for topic, _ in edited}
        if any(entry is not None and key not in found for key, entry in delta.items()):
            return None  # gone: its entry is to be dropped
        folder_of = {False: self.directory, True: self.team_directory}
        gone: list[str] = []  # the saved docs the delta dropped
        complete: list[tuple[DocInfo, str, str]] = []
        for place, doc in enumerate(docs):
            if doc is None:
                team, name = saved.keys[place][:2]
                if (team, name) not in delta:
                    return None  # gone (its entry to drop), or no longer a note
                doc = saved.doc(place, folder_of[team] / name, 0.0)
                gone.append(str(doc[0].path))
            complete.append(doc)
        # Those read must give the saved index's key where it has them.
        for i in read:
            if index_snapshot.key_of(complete[i][0], complete[i][2]) != saved.keys[i]:
                return None
        index = saved.index(complete)
        if index is None:
            return None
        for path_text in gone:
            index.remove(path_text)
        pool: dict[str, str] = {}
        for topic, entry in edited:
            # As the live index took the edit: weighed with the saved
            # index's average lengths.
            index.upsert(topic, entry.fields(pool))
        snapshot.skipped.update(skipped)
        n_read = len(reads)  # empty before: this is the scan's first look
        log.info(
            "memory index of %s: %d notes from the saved index, %d read; %d of them from its delta",
            self.workspace_root,
            total - n_read,
            n_read,
            len(edited),
        )
        return index

    def _read_notes(
        self,
        work: list[tuple[Path, Path, bool]],
        snapshot: _Snapshot,
        progress: Progress | None,
        reads: _Reads,
        read_ns: int,
        delta: index_delta.Records,
    ) -> list[tuple[TopicDoc, Fields | CacheEntry]]:
        """Each note of ``work``, with its terms or the index cache entry that
        holds them (split only if the index is built from them): taken from
        the index cache (with the saved index's ``delta`` over it) when its
        identity is the entry's, read otherwise (or taken from ``reads``,
        read since ``read_ns``)."""
        keep = self._cache_home is not None
        cached: Entries = {False: {}, True: {}}
        for team, real in {team: real for _, real, team in work}.items():
            cache_file = self._cache_file(real)
            if cache_file is not None:
                cached[team] = index_cache.load(cache_file)
        # The entries saved since the index cache files were written (their
        # next write holds them too: `_with_delta`).
        for (team, name), delta_entry in delta.items():
            if delta_entry is None:
                cached[team].pop(name, None)
            else:
                cached[team][name] = delta_entry
        total = len(work)
        step = max(1, total // 100)
        found: list[tuple[TopicDoc, Fields | CacheEntry]] = []
        fresh: Entries = {False: {}, True: {}}  # entries of the notes read
        stale: dict[bool, set[str]] = {False: set(), True: set()}  # read, left without one
        reused = 0
        cached_names = {team: set(entries) for team, entries in cached.items()}
        seen = snapshot.seen
        for n, (path, real, team) in enumerate(work, 1):
            name = path.name
            # Taken out: what a used entry does not share with its doc is freed now.
            entry = cached[team].pop(name, None)
            if entry is not None and entry.verified:
                try:
                    lst = os.lstat(path)
                except OSError:
                    lst = None
                if (
                    lst is not None
                    and stat.S_ISREG(lst.st_mode)
                    and identity_of(lst) == entry.identity
                ):
                    # Same size, mtime, inode and device as when it was read.
                    if seen is not None:
                        seen[str(path)] = entry.identity
                    found.append((entry.doc(path, team=team, mtime=lst.st_mtime), entry))
                    reused += 1
                    if progress is not None and (n % step == 0 or n == total):
                        progress(n, total)
                    continue
            already = reads.pop(str(path), None)
            if already is None and seen is not None:
                # Before the read: a change after it shows in the next look.
                seen[str(path)] = _seen_of(path, _lstat(path), read_ns)
            outcome, st = already or read_topic_stat(path, real, team=team)
            if isinstance(outcome, Skipped):
                snapshot.skipped[str(path)] = outcome.problem
            elif outcome is not None:  # None: vanished since the listing
                fields = field_terms(outcome)
                if keep and st is not None:
                    entry = fresh[team][name] = entry_of(outcome, fields, st, read_ns)
                    # Indexed with the entry's head: one string for both (the
                    # index's own cut would be a second copy of every head
                    # until the entry is written), and the body freed now.
                    outcome = TopicDoc(outcome.info, entry.head, outcome.content_hash)
                found.append((outcome, fields))
            if name not in fresh[team] and name in cached_names[team]:
                stale[team].add(name)
            if progress is not None and (n % step == 0 or n == total):
                progress(n, total)
        if keep:
            self._cache_writes(snapshot, work, cached_names, fresh, stale)
            _with_delta(snapshot.cache_writes, delta)
            log.info(
                "memory index of %s: %d notes from the index cache, %d read",
                self.workspace_root,
                reused,
                len(work) - reused,
            )
        return found

    @staticmethod
    def _saved_index(
        saved: index_snapshot.Snapshot | None, found: list[tuple[TopicDoc, Fields | CacheEntry]]
    ) -> InvertedIndex | None:
        """The saved index, when it was built from the notes ``found``."""
        if saved is None:
            return None
        keys = [index_snapshot.key_of(doc.info, doc.content_hash) for doc, _ in found]
        if keys != saved.keys:
            return None
        return saved.index([(d.info, d.body[:HEAD_CHARS], d.content_hash) for d, _ in found])

    @staticmethod
    def _cache_writes(
        snapshot: _Snapshot,
        work: list[tuple[Path, Path, bool]],
        cached: dict[bool, set[str]],
        fresh: Entries,
        stale: dict[bool, set[str]],
    ) -> None:
        """What the scan leaves to write: each folder's new entries, and the
        cached ones whose note is gone or was read again without giving one
        (now a symlink, a skipped file). A folder of which nothing was cached
        is written whole (its file may be damaged: not read again)."""
        listed: dict[bool, set[str]] = {False: set(), True: set()}
        for path, _, team in work:
            listed[team].add(path.name)
        for team in (False, True):
            before, new = cached[team], fresh[team]
            if not before:
                if new or listed[team]:
                    snapshot.cache_writes[team] = _Unsaved(whole=new)
                continue
            changes: dict[str, CacheEntry | None] = dict(new)
            for name in stale[team] | (before - listed[team]):
                changes[name] = None
            if changes:
                snapshot.cache_writes[team] = _Unsaved(changes=changes)

    def _nothing_to_scan(self, progress: Progress | None) -> _Snapshot | None:
        """The empty index, when neither memory folder exists (a project agentd
        has not written notes for yet): two `stat`s on the loop instead of a
        worker thread's round trip, which a first prompt may be waiting for.
        None when there is a folder to scan. A folder made just after this is
        seen by the rescan that follows the watcher's registration."""
        if self.directory.exists() or self.team_directory.exists():
            return None
        report = _log_failures(progress)
        if report is not None:
            report(0, 0)
        return _Snapshot(InvertedIndex(), seen={})

    async def _build_snapshot(
        self, progress: Progress | None, *, record_seen: bool = False
    ) -> _Snapshot:
        # Always in a worker thread: files are read, and a file of the
        # workspace's team folder may be anything (a FIFO, a huge file).
        report = _log_failures(progress)
        from_thread: Progress | None = None
        if report is not None:
            loop = asyncio.get_running_loop()
            on_loop = report

            def from_thread(done: int, total: int) -> None:
                # Progress goes to the wire layer, which lives on the loop.
                loop.call_soon_threadsafe(on_loop, done, total)

        return await asyncio.to_thread(
            functools.partial(self._scan, from_thread, record_seen=record_seen)
        )

    def _install(self, snapshot: _Snapshot, *, notify: bool) -> None:
        changed: list[str] = []
        if notify:
            # Not for the first index (no one is told): 10,000 paths compared
            # and made again cost the loop about 0.1 s.
            before = {str(d.info.path): d.content_hash for d in self._index.docs()}
            after = {str(d.info.path): d.content_hash for d in snapshot.index.docs()}
            changed = sorted(
                p for p in before.keys() | after.keys() if before.get(p) != after.get(p)
            )
        self._index = snapshot.index
        self._skipped = snapshot.skipped
        self._folder_problems = snapshot.folder_problems
        self._index_file = snapshot.index_file
        if self._cache_home is not None:
            # What the edits saved from now on follow.
            self._base, self._saved_bytes = snapshot.saved_id, snapshot.saved_bytes
            self._delta, self._delta_bytes = snapshot.delta, snapshot.delta_bytes
        if self._cache_home is not None and (snapshot.cache_writes or snapshot.index_unsaved):
            self._unsaved.update(snapshot.cache_writes)
            self._index_unsaved = self._index_unsaved or snapshot.index_unsaved
            self._want_save()
        self._changed([Path(p) for p in changed], notify=notify)

    async def _rescan(self) -> None:
        """After a watcher restart: events may have been missed, so look again.

        After the first registration of a watcher that registered once the
        first index was built (a watch gate), only the notes changed since
        that scan are read: the whole scan again cost about 0.5 s of CPU at
        10,000 notes, as a session's first prompt was being answered."""
        await self._ready.wait()
        first_seen, self._first_seen = self._first_seen, None
        if first_seen is not None:
            look = await asyncio.to_thread(
                self._changed_since, first_seen, dict(self._folder_problems)
            )
            if look is not None:
                changed, self._index_file = look
                if changed:
                    await self._apply_topic_changes(changed)
                log.info(
                    "memory of %s looked at again as its watcher registered: "
                    "%d notes new, changed or gone",
                    self.workspace_root,
                    len(changed),
                )
                return
        self._install(await self._build_snapshot(None), notify=True)

    def _changed_since(
        self, seen: Seen, folder_problems: dict[str, str]
    ) -> tuple[list[tuple[Path, bool]], IndexFile] | None:
        """Blocking: in a worker thread. The notes whose identity is not the
        one ``seen`` holds (new, changed, gone), each with its folder (team or
        not), and MEMORY.md read again; None when the folders changed shape
        (their problems are not ``folder_problems``): a whole scan is due."""
        problems: dict[str, str] = {}
        team_problem = self._team_allowed()
        if team_problem:
            problems[str(self.team_directory)] = team_problem
        changed: list[tuple[Path, bool]] = []
        listed: set[str] = set()
        for folder, team in self._folders():
            listing = list_topics(folder)
            for problem in listing.problems:
                problems[str(problem.path)] = problem.problem
            for path in listing.paths:
                key = str(path)
                listed.add(key)
                was = seen.get(key)
                lst = _lstat(path)
                if was is None or lst is None or _identity_of_note(path, lst) != was:
                    changed.append((path, team))
        if problems != folder_problems:
            return None
        for key in seen.keys() - listed:
            path = Path(key)
            folder_team = self._team_of(path)
            if folder_team is not None:
                changed.append((path, folder_team))  # gone: read, found missing, dropped
        return changed, read_index_file(self.directory)

    # -- the index cache ----------------------------------------------------------

    def _set_entry(self, team: bool, name: str, entry: CacheEntry | None) -> None:
        """Record (or, with None, drop) the cache entry of a file, on the loop."""
        if self._cache_home is None:
            return
        # The index changed too (or only an entry's identity did: saved again all the same).
        self._index_unsaved = True
        unsaved = self._unsaved.setdefault(team, _Unsaved())
        if unsaved.whole is not None:
            if entry is None:
                unsaved.whole.pop(name, None)
            else:
                unsaved.whole[name] = entry
        else:
            unsaved.changes[name] = entry
        self._want_save()

    def _want_save(self) -> None:
        if self._cache_home is None or self._closed:
            # Closed: no new owner-less task (`aclose` wrote what was unsaved).
            return
        self._save_wanted.set()
        if self._saver is None:
            self._saver = asyncio.create_task(
                self._save_after_changes(), name=f"memory-index-cache:{self.directory.parent.name}"
            )

    async def _save_after_changes(self) -> None:
        """Owned by this project (`aclose` cancels and awaits it).

        It also stops once the project is closed: Python 3.11's `wait_for`
        loses a cancel that arrives as the event it waits for is set (a
        change noted just before `aclose`), and this task would then wait
        for a next change forever."""
        while not self._closed:
            await self._save_wanted.wait()
            # Debounced: written once the index has not changed for SAVE_DELAY_S.
            loop = asyncio.get_running_loop()
            latest = loop.time() + MAX_SAVE_DELAY_S
            while self._save_wanted.is_set() and loop.time() < latest and not self._closed:
                self._save_wanted.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._save_wanted.wait(), SAVE_DELAY_S)
            if self._closed:
                return  # `aclose` writes what is unsaved
            await self._save_cache()

    def _hold_cache_files(self) -> None:
        """Hold this project's files of the cache folder (`cache_sweep.hold`):
        no sweep removes them while it runs. Blocking: in a worker thread."""
        if self._cache_home is None:
            return
        wanted = [self._snapshot_file()]
        wanted.extend(self._cache_file(_realpath(folder)) for folder, _ in self._folders())
        for target in wanted:
            if target is None or target in self._held:
                continue
            fd = cache_sweep.hold(target)
            with self._held_lock:
                if self._closed or target in self._held:
                    if fd is not None:
                        os.close(fd)
                    continue
                self._held[target] = fd

    def _sweep_later(self) -> None:
        if self._cache_home is not None:
            self._sweep_pending = True
            self._want_save()

    async def _save_cache(self) -> None:
        """Write what is unsaved; then, once, sweep the cache folder."""
        if self._unsaved or self._index_unsaved:
            await self._write_unsaved()
        if self._sweep_pending:
            self._sweep_pending = False
            await self._off_loop(self._sweep)

    def _sweep(self) -> None:
        """Blocking: in a worker thread."""
        target = self._snapshot_file()
        if target is not None:
            cache_sweep.sweep_once(target)

    async def _write_unsaved(self) -> None:
        # Handed over whole: changes from now on go to a new `_Unsaved`.
        jobs = {team: unsaved for team, unsaved in self._unsaved.items()}
        self._unsaved = {}
        write_index, self._index_unsaved = self._index_unsaved, False
        base = self._base
        if (
            jobs
            and base is not None
            and not any(unsaved.whole is not None for unsaved in jobs.values())
            and self._delta_bytes <= max(FOLD_MIN_BYTES, self._saved_bytes // FOLD_SHARE)
        ):
            # A few notes changed: appended to the saved index's delta.
            records = [
                (team, name, entry)
                for team, unsaved in jobs.items()
                for name, entry in unsaved.changes.items()
            ]
            for team, name, entry in records:
                self._delta[(team, name)] = entry
            size = await self._off_loop(self._append_delta, records, base, self._delta_bytes)
            if size is not None:
                self._delta_bytes = size
                return
            # Not the file this daemon appends to: everything written whole.
            jobs, write_index = {}, True
        handed, self._delta, self._delta_bytes = self._delta, {}, 0
        # Unknown until the write says: a save cut short here writes whole.
        self._base = None
        _with_delta(jobs, handed)
        write_index = write_index or bool(handed) or base is None
        saved = await self._off_loop(self._write_caches, jobs, write_index)
        if not write_index:
            self._base = base  # the saved index is as it was
        elif saved is not None:
            self._base, self._saved_bytes = saved
        else:
            self._delta = handed | self._delta  # still to be written

    async def _off_loop(self, write: Callable[..., _T], *args: Any) -> _T:
        """``write(*args)`` in a worker thread, owned by `_saving`: a cancel
        (`aclose`) lets it finish, awaited there."""
        saving: asyncio.Future[_T] = asyncio.ensure_future(asyncio.to_thread(write, *args))
        self._saving = saving
        try:
            return await asyncio.shield(saving)
        finally:
            if saving.done() and self._saving is saving:
                self._saving = None

    def _append_delta(
        self, records: list[tuple[bool, str, CacheEntry | None]], base: str, expected: int
    ) -> int | None:
        """Blocking: in a worker thread. Append ``records`` to the delta of
        saved index ``base``; its new size, or None (`index_delta.append`).
        An entry read too soon after its file's change (`index_cache`) is
        checked first, and saved as no entry unless it still holds."""
        snapshot_file = self._snapshot_file()
        if snapshot_file is None:
            return None
        now_ns = time.time_ns()
        folders = {False: _realpath(self.directory), True: _realpath(self.team_directory)}
        kept = [
            (team, name, entry)
            if entry is None
            or entry.verified
            or index_cache.still_verified(folders[team], name, entry, now_ns)
            else (team, name, None)
            for team, name, entry in records
        ]
        line = index_delta.encode(kept)
        if line is None:
            return expected
        return index_delta.append(index_delta.delta_file(snapshot_file), base, line, expected)

    def _write_caches(
        self, jobs: dict[bool, _Unsaved], write_index: bool
    ) -> tuple[str, int] | None:
        """Blocking: in a worker thread. Each folder's changed entries, then
        (``write_index``) the whole index (`index_snapshot`), its delta
        removed: the saved index's id and size, None when not written."""
        written: Entries = {}
        for team, unsaved in jobs.items():
            folder = self.team_directory if team else self.directory
            cache_file = self._cache_file(_realpath(folder))
            if cache_file is not None:
                written[team] = index_cache.save(cache_file, folder, unsaved.merged(cache_file))
        snapshot_file = self._snapshot_file()
        if not write_index or snapshot_file is None:
            return None
        folders = self._folders()
        for folder, team in folders:
            if team not in written:
                cache_file = self._cache_file(_realpath(folder))
                written[team] = index_cache.load(cache_file) if cache_file is not None else {}

        def identity(key: index_snapshot.DocKey) -> index_cache.Identity | None:
            entry = written.get(key[0], {}).get(key[1])
            return entry.identity if entry is not None and entry.content_hash == key[2] else None

        snapshot_id = index_snapshot.new_id()
        # The live index, when it is a whole build not changed since (read
        # here while the loop may change it: `encode` sees that and gives up).
        lines = index_snapshot.encode(self._index, identity, snapshot_id)
        if lines is None:
            # Changed since its build (watcher edits keep the old averages):
            # the build the next start would make from the entries just
            # written and the notes that have none.
            pool: dict[str, str] = {}
            tokenised: list[tuple[TopicDoc, Fields]] = []
            for folder, team in folders:
                entries = written[team]
                by_name = {
                    name: (entry.doc(folder / name, team=team, mtime=0.0), entry.fields(pool))
                    for name, entry in entries.items()
                }
                by_name.update(_notes_without_entries(folder, team, entries))
                tokenised.extend(by_name[name] for name in sorted(by_name))
            index = InvertedIndex.from_tokenised(tokenised)
            lines = index_snapshot.encode(index, identity, snapshot_id)
        if lines is None or not index_snapshot.save(snapshot_file, lines):
            return None
        # What it held is in the index cache files and the saved index now.
        index_delta.remove(index_delta.delta_file(snapshot_file))
        return snapshot_id, sum(map(len, lines))

    # -- watching -----------------------------------------------------------------

    def _team_watch_target(self) -> Path | None:
        """The team folder, or the nearest existing parent that will show it appear."""
        for candidate in (self.team_directory, self.team_directory.parent, self.workspace_root):
            if candidate.is_dir():
                if candidate == self.team_directory and self._team_allowed() is not None:
                    return None
                return candidate
            if candidate == self.workspace_root:
                break
        return None

    def _watch_paths(self) -> list[Path]:
        # Our own data folder: creating it is harmless and makes it watchable.
        existed = self.directory.is_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        if not existed and self._watched_once:
            # Gone since the last registration: deleted under us. Said in status
            # until notes are there again (the rescan that follows empties the index).
            self._recreated = True
        self._watched_once = True
        paths = [self.directory]
        team = self._team_watch_target()
        if team is not None and team != self.directory:
            paths.append(team)
        return paths

    async def _on_changes(self, changes: Changes) -> bool:
        """Apply a batch from the watcher; True asks it to re-register its paths."""
        await self._ready.wait()
        restart = False
        index_changed = False
        topics: dict[str, tuple[Path, bool]] = {}
        team_markers = {self.team_directory, self.team_directory.parent}
        for change, raw in changes:
            path = Path(raw)
            if path == self.directory and change == Change.deleted:
                restart = True
                continue
            if path in team_markers:
                restart = True
                continue
            team = self._team_of(path)
            if team is None:
                continue
            if path.name == INDEX_FILE:
                # Only the personal folder's MEMORY.md is used (the daemon keeps it).
                index_changed = index_changed or not team
            elif is_topic_name(path.name):
                topics[str(path)] = (path, team)
        if restart:
            # The folders changed shape; the rescan after re-registering covers all.
            return True
        if index_changed:
            self._index_file = await asyncio.to_thread(read_index_file, self.directory)
        if topics:
            await self._apply_topic_changes(list(topics.values()))
        return False

    def _read_many(self, items: list[tuple[Path, bool]], known: dict[str, str]) -> list[_Read]:
        """Read changed files and tokenise those whose content hash is new.

        Blocking; runs in a worker thread. ``known`` maps paths to the hashes
        indexed when the batch began.
        """
        reals = {False: _realpath(self.directory), True: _realpath(self.team_directory)}
        out: list[_Read] = []
        read_ns = time.time_ns()
        cache = self._cache_home is not None
        for path, team in items:
            outcome, st = read_topic_stat(path, reals[team], team=team)
            fields = None
            entry = None
            if isinstance(outcome, TopicDoc):
                new = known.get(str(path)) != outcome.content_hash
                if new or (cache and st is not None):
                    # Tokenised for the cache too when the index has it (a
                    # touch, our own write): the entry must say what it holds.
                    terms = field_terms(outcome)
                    fields = terms if new else None
                    if cache and st is not None:
                        entry = entry_of(outcome, terms, st, read_ns)
            out.append(_Read(path, outcome, fields, entry))
        return out

    async def _apply_topic_changes(self, items: list[tuple[Path, bool]]) -> None:
        # Reading and tokenising happen off the loop (a checkout may touch
        # thousands of files, a topic file may be 256 KiB); the index is then
        # updated on the loop, where recall reads it.
        known = {
            str(p): d.content_hash for p, _ in items if (d := self._index.get(str(p))) is not None
        }
        results = await asyncio.to_thread(self._read_many, items, known)
        team_of = {str(p): team for p, team in items}
        changed: list[Path] = []
        for read in results:
            path, outcome, fields = read.path, read.outcome, read.fields
            key = str(path)
            if isinstance(outcome, TopicDoc):
                current = self._index.get(key)
                if current is not None and current.content_hash == outcome.content_hash:
                    # Our own write (note_own_write indexed it already), or a touch.
                    self._index.set_mtime(key, outcome.info.mtime)
                    self._set_entry(outcome.info.team, path.name, read.entry)
                    continue
                self._index.upsert(outcome, fields)
                self._skipped.pop(key, None)
                self._set_entry(outcome.info.team, path.name, read.entry)
                changed.append(path)
                continue
            self._set_entry(team_of[key], path.name, None)
            removed = self._index.remove(key)
            had_problem = self._skipped.pop(key, None) is not None
            if isinstance(outcome, Skipped):
                self._skipped[key] = outcome.problem
            if removed or had_problem or isinstance(outcome, Skipped):
                changed.append(path)
        if changed:
            self._changed(changed)


def _notes_without_entries(
    folder: Path, team: bool, entries: Collection[str]
) -> dict[str, tuple[TopicDoc, Fields]]:
    """Blocking. The notes of ``folder`` that have no index cache entry among
    ``entries`` (a symlinked note, one changed just before the save), read,
    by file name: a saved index built from the entries alone would lack
    them, and each start would then find notes it does not have and build
    the index again instead of taking it (`ProjectMemory._as_saved`)."""
    real = _realpath(folder)
    out: dict[str, tuple[TopicDoc, Fields]] = {}
    for path in list_topics(folder).paths:
        if path.name in entries:
            continue
        outcome, _ = read_topic_stat(path, real, team=team)
        if isinstance(outcome, TopicDoc):
            # Indexed with its head only, as a scan indexes it.
            head = TopicDoc(outcome.info, outcome.body[:HEAD_CHARS], outcome.content_hash)
            out[path.name] = (head, field_terms(outcome))
    return out


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _identity_of_note(path: Path, lst: os.stat_result) -> tuple[int, ...]:
    """The identity (`index_cache.identity_of`) of the note at ``path`` whose
    `lstat` is ``lst``; a symlink's is its own and its target's."""
    identity = identity_of(lst)
    if not stat.S_ISLNK(lst.st_mode):
        return identity
    try:
        return identity + identity_of(os.stat(path))
    except OSError:
        return identity  # broken: one that works has a longer identity


def _seen_of(path: Path, lst: os.stat_result | None, read_ns: int) -> tuple[int, ...] | None:
    """What a scan begun at ``read_ns`` records of the note at ``path``
    (`Seen`): its identity, unless a change within the same timestamp tick
    could leave it as it is (git's "racy clean" files)."""
    if lst is None:
        return None
    identity = _identity_of_note(path, lst)
    # The modification times: the note's, and its target's.
    if any(mtime_ns >= read_ns - RACY_NS for mtime_ns in identity[1::4]):
        return None
    return identity


def _with_delta(writes: dict[bool, _Unsaved], delta: index_delta.Records) -> None:
    """Add to ``writes`` the entries of a saved index's ``delta``, older than
    the changes ``writes`` holds (a folder written whole has them all)."""
    for (team, name), entry in delta.items():
        unsaved = writes.setdefault(team, _Unsaved())
        if unsaved.whole is None:
            unsaved.changes.setdefault(name, entry)


@dataclass(frozen=True, slots=True)
class _Read:
    """One file of a watcher batch, as `ProjectMemory._read_many` read it."""

    path: Path
    outcome: TopicDoc | Skipped | None
    fields: Fields | None  # its terms, when its content is new to the index
    entry: CacheEntry | None  # its index cache entry (a regular file's, cache on)


def _log_failures(progress: Progress | None) -> Progress | None:
    """The callback, with its failures logged instead of raised into the scan."""
    if progress is None:
        return None

    def call(done: int, total: int) -> None:
        try:
            progress(done, total)
        except Exception:
            log.exception("memory progress callback failed")

    return call
