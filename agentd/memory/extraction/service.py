"""ExtractionService: memory extraction after each turn, per project, in the background.

`schedule(root, session)` is called after a prompt's reply is sent and never
blocks. Per project one run is in flight at a time (`SingleFlight`); across
daemons sharing the memory folder, a lock file does the same. A run reads,
per session, exactly the transcript slice after that session's cursor
(starting at the cursor's byte offset, so a run costs what its slice costs),
asks the extractor chunk by chunk, writes through the safe write path and
only then advances the cursor. Failures leave the cursor where it was and
show in `status`; the session stays dirty, so the next trigger retries the
slice.

A session that is live in this daemon is read only up to the end of its
last finished prompt (`transcripts(sid)` says where that is): a prompt that
is running has half a turn in the transcript, and extracting it would split
the turn in two. `resume`, at a project's first use, therefore picks up
the transcripts that earlier runs left behind (no live session owns them)
and, of a live session restored from disk, the part before it was restored.

Disk work (reads, fsyncs) runs in worker threads so that a slow disk never
stalls the event loop that is streaming someone's reply.

Consolidation ("dream") runs inside the same single flight and lock, after
the extraction of a run: when asked (`consolidate(root)`), or on its slow
schedule; both the schedule and its state are `consolidate.Consolidation`'s,
one per project.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from agentd.errors import AgentdError
from agentd.layout import canonical_root
from agentd.memory.extraction import extractor
from agentd.memory.extraction.apply import (
    FileVersion,
    FolderSnapshot,
    apply_ops,
    snapshot_folder,
    sync_index,
)
from agentd.memory.extraction.consolidate import Consolidation, load_state
from agentd.memory.extraction.cursor import (
    Cursor,
    clean_temps_locked,
    forget_sessions,
    load_cursors,
    save_cursors,
)
from agentd.memory.extraction.lock import FolderLock
from agentd.memory.extraction.scheduler import SingleFlight
from agentd.memory.extraction.writer import (
    RefusedPath,
    check_root,
    describe_failure,
)
from agentd.memory.manager import MemoryManager
from agentd.memory.project import ProjectMemory
from agentd.providers.base import ModelProvider
from agentd.tasks import Supervisor
from agentd.transcript import TranscriptSlice, read_from, sessions_dir

log = logging.getLogger(__name__)

T = TypeVar("T")
# A live session's transcript and the offset its extraction may read up to (the
# end of its last finished prompt); None for a session no live session owns.
TranscriptLookup = Callable[[str], tuple[Path, int] | None]
Progress = Callable[[int, int], None]
ProgressFactory = Callable[[Path], Progress | None]

LOCK_POLL = 0.2
MAX_NOTES = 20


@dataclass
class _Project:
    root: Path
    consolidation: Consolidation
    flight: SingleFlight | None = None
    dirty: set[str] = field(default_factory=set)
    ends: dict[str, int] = field(default_factory=dict)
    cursors: dict[str, Cursor] | None = None
    last_error: str | None = None
    last_run_at: float | None = None
    # Operations skipped (conflicts, refusals), newest last: for logs and tests.
    notes: list[str] = field(default_factory=list)
    # Callers of `consolidate()` waiting for the next run; whether this run
    # extracted anything (it counts towards the consolidation schedule).
    waiters: list[asyncio.Future[dict[str, Any]]] = field(default_factory=list)
    extracted: bool = False

    def note(self, text: str) -> None:
        self.notes = [*self.notes, text][-MAX_NOTES:]


class _RunError(Exception):
    """A failure already described in one line for status (no file contents)."""


def _valid_session_id(sid: str) -> bool:
    return bool(sid) and all(c.isalnum() or c in "-_" for c in sid)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking disk work off the loop; a cancel waits for it to finish.

    A write sequence is never abandoned half-way while the lock is held: the
    cancel is honoured right after the thread returns.
    """
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(None, functools.partial(fn, *args))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait([fut])
        raise


class ExtractionService:
    def __init__(
        self,
        manager: MemoryManager,
        provider: ModelProvider,
        supervisor: Supervisor,
        *,
        fast_model: str,
        transcripts: TranscriptLookup,
        home: Path,
        on_extracted: Callable[[str, int], None] | None = None,
        grace: float = 5.0,
        progress: ProgressFactory | None = None,
        consolidate_after_runs: int = 5,
        consolidate_every_hours: float = 24.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.manager = manager
        self.provider = provider
        self.supervisor = supervisor
        self.fast_model = fast_model
        self.transcripts = transcripts
        # Told each session's cursor as a run finds it and once it is saved
        # further (the core lets go of the lines a rebuild no longer needs).
        self.on_extracted = on_extracted
        self.home = home
        self.grace = grace
        self.progress = progress
        self.consolidate_after_runs = consolidate_after_runs
        self.consolidate_every_hours = consolidate_every_hours
        self.clock = clock
        self._projects: dict[Path, _Project] = {}
        self._closed = False

    # --- the public seam ---------------------------------------------------------

    def schedule(self, workspace_root: Path, session_id: str) -> None:
        """Extract the session's new messages soon; returns at once."""
        if self._closed or not _valid_session_id(session_id):
            return
        project = self._project(workspace_root)
        project.dirty.add(session_id)
        self._request(project)

    def status(self, workspace_root: Path) -> dict[str, Any]:
        project = self._project(workspace_root)
        if project.cursors is None:
            pm = self.manager.get_nowait(project.root)
            if pm is not None:
                project.cursors = load_cursors(pm.directory)
        cursors = project.cursors or {}
        rows = []
        for sid in sorted(set(cursors) | project.dirty | set(project.ends)):
            processed = cursors[sid].offset if sid in cursors else 0
            live = self.transcripts(sid)
            # Unknown (None) until a run or `resume` has read the transcript:
            # reporting the cursor as the end would claim work is done that is not.
            end = live[1] if live is not None else project.ends.get(sid)
            rows.append({"sessionId": sid, "processedOffset": processed, "transcriptEnd": end})
        flight = project.flight
        out: dict[str, Any] = {
            "state": "running" if flight is not None and flight.running else "idle",
            "trailingPending": bool(flight is not None and flight.pending),
            "cursors": rows,
        }
        if project.last_error:
            out["lastError"] = project.last_error
        if project.last_run_at is not None:
            out["lastRunAt"] = datetime.fromtimestamp(project.last_run_at, UTC).isoformat()
        if project.notes:
            out["skipped"] = list(project.notes)
        pm = self.manager.get_nowait(project.root)
        out["consolidation"] = project.consolidation.status(pm.directory if pm else None)
        return out

    async def status_async(self, workspace_root: Path) -> dict[str, Any]:
        """`status`, with what it needs from disk read in a worker thread first."""
        project = self._project(workspace_root)
        pm = self.manager.get_nowait(project.root)
        if pm is not None:
            if project.cursors is None:
                project.cursors = await _in_thread(load_cursors, pm.directory)
            if project.consolidation.state is None:
                project.consolidation.state = await _in_thread(load_state, pm.directory)
        return self.status(workspace_root)

    async def consolidate(self, workspace_root: Path) -> dict[str, Any]:
        """Run one consolidation pass now (after any extraction in flight).

        Returns `{merged: [{into, from}], retired, skipped}`, or `{error}`.
        """
        if self._closed:
            return {"error": "the extraction service is shutting down"}
        project = self._project(workspace_root)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        project.waiters.append(waiter)
        self._request(project)
        assert project.flight is not None
        task = project.flight.task
        if task is not None:
            # The flight's loop serves the waiter (its current run or the trailing one);
            # a task cancelled before its run started never would: don't wait forever.
            either: list[asyncio.Future[Any]] = [waiter, task]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            return waiter.result()
        if waiter in project.waiters:
            project.waiters.remove(waiter)
        return {"error": "the extraction service is shutting down"}

    async def resume(self, workspace_root: Path) -> None:
        """Queue the work earlier runs left: transcripts past their cursors.

        A transcript that a live session of this daemon writes counts only up
        to the end of that session's last finished prompt (for a new session,
        nothing): its running turn is extracted after its reply, whole.
        """
        if self._closed:
            return
        project = self._project(workspace_root)
        pm = await self.manager.get(project.root)
        folder = sessions_dir(project.root, self.home)

        def scan() -> tuple[dict[str, Cursor], dict[str, tuple[int, int]]]:
            cursors = load_cursors(pm.directory)
            if cursors:
                # The daemon's first look at the project: the entries of
                # sessions whose transcript went behind its back go now.
                try:
                    for sid in forget_sessions(pm.directory, (), folder):
                        cursors.pop(sid, None)
                except (OSError, RefusedPath) as exc:
                    log.warning("cannot tidy %s: %s", pm.directory, exc)
            found: dict[str, tuple[int, int]] = {}
            for path in sorted(folder.glob("*.jsonl")):
                sid = path.stem
                if not _valid_session_id(sid):
                    continue
                cursor = cursors.get(sid, Cursor(0))
                piece = read_from(path, cursor.offset, cursor.position)
                if piece.messages:
                    found[sid] = (piece.messages[0][0], piece.messages[-1][0] + 1)
            return cursors, found

        cursors, found = await _in_thread(scan)
        project.cursors = cursors
        behind: set[str] = set()
        # Back on the loop, where sessions live: whether a session is live is
        # decided now, after the scan, so one created meanwhile is bounded too.
        for sid, (first, end) in found.items():
            live = self.transcripts(sid)
            if live is not None:
                end = min(end, live[1])
                if first >= end:
                    continue
            behind.add(sid)
            project.ends[sid] = max(end, project.ends.get(sid, 0))
        if behind and not self._closed:
            project.dirty.update(behind)
            self._request(project)
        # The secret rules are not imported here: a few hundred ms of a thread
        # holding the GIL beside whatever prompt runs now. The first run that
        # redacts imports them (in its worker thread), after a reply.

    def forget(self, session_id: str) -> None:
        """A deleted session: no run extracts it any more, and `status` no
        longer lists it. Its cursor file entry is `cursor.forget_sessions`'."""
        for project in self._projects.values():
            self._drop(project, {session_id})

    @staticmethod
    def _drop(project: _Project, session_ids: set[str]) -> None:
        for sid in session_ids:
            project.dirty.discard(sid)
            project.ends.pop(sid, None)
            if project.cursors is not None:
                project.cursors.pop(sid, None)

    async def drain(self, timeout: float) -> None:
        """Give running and pending runs `timeout` seconds, then cancel them."""
        self._closed = True
        tasks = [t for p in self._projects.values() if p.flight and (t := p.flight.task)]
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=max(0.0, timeout))
        for task in late:
            log.info("extraction still running after %gs; cancelled (resumes next start)", timeout)
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=5.0)

    async def aclose(self) -> None:
        await self.drain(0.0)

    # --- runs --------------------------------------------------------------------

    def _project(self, workspace_root: Path) -> _Project:
        key = canonical_root(workspace_root)
        project = self._projects.get(key)
        if project is None:
            schedule = Consolidation(self.consolidate_after_runs, self.consolidate_every_hours)
            project = _Project(key, schedule)
            bound = project

            def spawn(coro: Any) -> asyncio.Task[None]:
                return self.supervisor.spawn(coro, name=f"extraction:{key.name}")

            project.flight = SingleFlight(lambda: self._run(bound), spawn)
            self._projects[key] = project
        return project

    def _request(self, project: _Project) -> None:
        assert project.flight is not None
        try:
            project.flight.request()
        except RuntimeError:
            pass  # the supervisor is closed: shutting down, the cursor resumes later

    async def _run(self, project: _Project) -> None:
        sessions, project.dirty = project.dirty, set()
        waiters, project.waiters = project.waiters, []
        errors: list[str] = []
        try:
            await self._run_guarded(project, sessions, waiters, errors)
        finally:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result({"error": errors[0] if errors else "cancelled"})

    async def _run_guarded(
        self,
        project: _Project,
        sessions: set[str],
        waiters: list[asyncio.Future[dict[str, Any]]],
        errors: list[str],
    ) -> None:
        try:
            pm = await self.manager.get(project.root)
            directory = pm.directory
            try:
                await _in_thread(directory.mkdir, 0o700, True, True)
                check_root(directory)
            except (OSError, RefusedPath) as exc:
                raise _RunError(describe_failure(exc, "the memory folder")) from exc
            lock = FolderLock(directory)
            while True:
                try:
                    if await _in_thread(lock.try_acquire):
                        break
                except OSError as exc:
                    raise _RunError(describe_failure(exc, "the extraction lock")) from exc
                await asyncio.sleep(LOCK_POLL)  # another daemon extracts this folder
            try:
                sessions = await self._run_locked(project, pm, sessions, errors)
                result = await project.consolidation.after_run(
                    self.provider,
                    self.fast_model,
                    pm.directory,
                    project.root,
                    extracted=project.extracted,
                    forced=bool(waiters),
                    now=self.clock(),
                    in_thread=_in_thread,
                    on_write=pm.note_own_write,
                )
                for waiter in waiters:
                    if result is not None and not waiter.done():
                        waiter.set_result(result)
            finally:
                await _in_thread(lock.release)
        except _RunError as exc:
            errors.append(str(exc))
        except asyncio.CancelledError:
            project.dirty |= sessions
            raise
        except Exception as exc:
            log.exception("extraction run failed")
            errors.append(f"extraction failed: {exc!r}"[:300])
        project.dirty |= sessions  # failed sessions: the next trigger retries them
        project.last_run_at = time.time()
        project.last_error = errors[0] if errors else None
        for error in errors:
            log.warning("memory extraction for %s: %s", project.root, error)

    async def _run_locked(
        self, project: _Project, pm: ProjectMemory, sessions: set[str], errors: list[str]
    ) -> set[str]:
        """Extract every session's slice; returns the sessions that failed."""
        directory = pm.directory
        try:
            await _in_thread(clean_temps_locked, directory)
        except OSError as exc:
            # `.cursors.lock` replaced by a FIFO, a folder, a symlink: said
            # naming it (status, log), not as a failure of ours.
            raise _RunError(describe_failure(exc, "the cursor lock")) from exc
        cursors = await _in_thread(load_cursors, directory)
        project.cursors = cursors
        slices: list[tuple[str, TranscriptSlice]] = []
        for sid in sorted(sessions):
            path, bound = self._transcript_extent(project.root, sid)
            cursor = cursors.get(sid, Cursor(0))
            if self.on_extracted is not None and cursor.offset:
                # Another daemon's run may have moved it.
                self.on_extracted(sid, cursor.offset)
            piece = await _in_thread(read_from, path, cursor.offset, cursor.position, bound)
            if piece.messages:
                end = piece.messages[-1][0] + 1
                project.ends[sid] = max(project.ends.get(sid, 0), end)
                slices.append((sid, piece))
        project.extracted = False
        report = self.progress(project.root) if self.progress is not None else None
        total = sum(len(p.messages) for _, p in slices)
        if report is not None and total:
            report(0, total)
        pending = {sid for sid, _ in slices}
        try:
            await self._extract(project, pm, slices, cursors, pending, report, total)
            project.extracted = bool(slices)
        except asyncio.CancelledError:
            raise
        except (OSError, RefusedPath) as exc:
            errors.append(describe_failure(exc, "memory files"))
        except (AgentdError, TimeoutError) as exc:
            detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            errors.append(f"extraction request failed: {detail}"[:300])
        # Heal the index even when nothing was extracted (a crash may have left it stale).
        try:
            written = await _in_thread(sync_index, directory)
        except (OSError, RefusedPath) as exc:
            errors.append(describe_failure(exc, "MEMORY.md"))
        else:
            if written is not None:
                pm.note_own_write(*written)
        return pending

    def _transcript_extent(self, root: Path, sid: str) -> tuple[Path, int | None]:
        """The session's transcript, and the offset to read up to (None: its end)."""
        live = self.transcripts(sid)
        if live is not None:
            return live
        return sessions_dir(root, self.home) / f"{sid}.jsonl", None

    async def _extract(
        self,
        project: _Project,
        pm: ProjectMemory,
        slices: list[tuple[str, TranscriptSlice]],
        cursors: dict[str, Cursor],
        pending: set[str],
        report: Progress | None,
        total: int,
    ) -> None:
        """Extract the slices chunk by chunk; `pending` keeps the sessions not finished."""
        directory = pm.directory
        prepared: list[extractor.SessionSlice] = []
        # Per session, message offset -> the byte position after its line.
        positions: dict[str, dict[int, int]] = {}
        for sid, piece in slices:
            turns = extractor.split_turns(piece.messages)
            # A turn in which the agent wrote memory itself is not extracted twice.
            keep = [not extractor.wrote_memory(t, directory, project.root) for t in turns]
            prepared.append((sid, turns, keep))
            positions[sid] = {
                o: p for (o, _), p in zip(piece.messages, piece.positions, strict=True)
            }
        last = {sid: piece.messages[-1][0] + 1 for sid, piece in slices}
        budget = [extractor.MAX_OPS]
        done = 0
        for chunk in extractor.make_chunks(prepared):
            written: list[tuple[Path, str]] = []
            if chunk.text.strip() and budget[0] > 0:
                written = await self._chunk(project, directory, chunk, budget)
            # Durable writes first, then the cursor that vouches for them.
            for sid, end in chunk.ends.items():
                cursors[sid] = Cursor(end, positions[sid][end - 1])
            folder = sessions_dir(project.root, self.home)
            gone = await _in_thread(save_cursors, directory, dict(cursors), folder)
            self._drop(project, gone)  # deleted meanwhile: nothing to retry
            pending -= gone
            if self.on_extracted is not None:
                for sid, end in chunk.ends.items():
                    self.on_extracted(sid, end)
            for sid, end in chunk.ends.items():
                if end >= last[sid]:
                    pending.discard(sid)
            for path, content in written:
                pm.note_own_write(path, content)
            done += chunk.count
            if report is not None:
                report(done, total)

    async def _chunk(
        self, project: _Project, directory: Path, chunk: extractor.Chunk, budget: list[int]
    ) -> list[tuple[Path, str]]:
        snapshot: FolderSnapshot = await _in_thread(snapshot_folder, directory)
        # Redaction (the secret rules, imported on first use) runs off the loop.
        request = await _in_thread(
            extractor.build_request, self.fast_model, snapshot.headers, chunk.text
        )
        raw = await extractor.ask(self.provider, request)
        ops, notes = await _in_thread(extractor.validate, raw, chunk.tool_outputs, budget[0])
        budget[0] -= len(ops)
        for note in notes:
            project.note(note)
        applied = await _in_thread(
            functools.partial(apply_ops, directory, ops, snapshot.files, ownership=True)
        )
        written = list(applied.written)
        for refusal in applied.refused:
            project.note(refusal)
        for op, now in applied.conflicts:
            written.extend(await self._replan(project, directory, chunk, op, now))
        written.extend(w for w in [await _in_thread(sync_index, directory)] if w is not None)
        if ops or notes:
            log.info(
                "memory extraction for %s: %d operation(s), %d note(s)",
                project.root,
                len(ops),
                len(notes),
            )
        return written

    async def _replan(
        self,
        project: _Project,
        directory: Path,
        chunk: extractor.Chunk,
        op: extractor.Op,
        now: FileVersion | None,
    ) -> list[tuple[Path, str]]:
        """The user saved `op.file` after planning: ask once more from their content."""
        request = await _in_thread(
            extractor.build_replan_request, self.fast_model, op, now.text if now else ""
        )
        raw = await extractor.ask(self.provider, request)
        ops, _ = await _in_thread(extractor.validate, raw, chunk.tool_outputs, 1)
        ops = [o for o in ops if o.file == op.file]
        files = {op.file: now} if now is not None else {}
        applied = await _in_thread(
            functools.partial(apply_ops, directory, ops, files, ownership=True)
        )
        if not ops or applied.conflicts:
            project.note(f"{op.file}: changed by the user during extraction; change skipped")
            log.info("memory extraction: %s changed by the user; change skipped", op.file)
        return applied.written
