"""The facade every front end (LSP, ACP) drives: sessions and their prompts.

Front ends translate their wire messages into calls on `AgentCore` and its
results and `Update`s back into wire messages. Nothing here knows JSON-RPC.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentd.agent import commands
from agentd.agent.compaction import CompactionOptions, Compactor, compaction_line, kept_memory
from agentd.agent.context import ContextWindow
from agentd.agent.hooks import MemoryHooks, NoMemory
from agentd.agent.modes import DEFAULT_MODE, MODES
from agentd.agent.plan import UPDATE_PLAN
from agentd.agent.session import ClientToolRunner, Session, beside
from agentd.agent.tools import ToolConfig, call_locations
from agentd.agent.turn import (
    CANCELLED_RESULT,
    PromptOutcome,
    TurnContext,
    TurnLimits,
    UserInput,
    run_prompt,
)
from agentd.config import Settings
from agentd.errors import (
    InvalidParams,
    ProtocolError,
    SessionBusy,
    SessionInUse,
    SessionNotFound,
    describe_os_error,
)
from agentd.events import (
    CompactionReport,
    Emit,
    MemoryDelivered,
    MessageChunk,
    Note,
    PlanUpdated,
    PromptEnded,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdate,
    Update,
    UsageReport,
    UserImage,
    UserMessage,
)
from agentd.heap import YoungHold, collect_young
from agentd.layout import agentd_folders, agentd_home, canonical_root
from agentd.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    clean_text,
)
from agentd.paths import stored_roots
from agentd.providers.base import ModelProvider, Usage
from agentd.providers.models import main_output_cap
from agentd.session_files import LiveSessions, delete_session_files, write_fork
from agentd.tasks import Supervisor
from agentd.transcript import (
    CONFIG_ROOTS,
    EMPTY_TITLE,
    CompactionRecord,
    ForkBase,
    LoadedTranscript,
    OpenFiles,
    SessionCatalog,
    TranscriptInfo,
    TranscriptWriter,
    fork_lines,
    load,
    meta_bytes,
    sessions_dir,
    valid_session_id,
)
from agentd.turn_ends import closing

log = logging.getLogger(__name__)

# Transcripts kept open at once (the least recently written is closed first).
OPEN_TRANSCRIPTS = 32


class AgentCore:
    def __init__(
        self,
        settings: Settings,
        provider: ModelProvider,
        supervisor: Supervisor,
        memory: MemoryHooks | None = None,
        home: Path | None = None,
        persist: bool = True,
    ) -> None:
        self.settings = settings
        self.provider = provider
        self.supervisor = supervisor
        self.memory: MemoryHooks = memory or NoMemory()
        self.home = home
        self.persist = persist
        self.sessions: dict[str, Session] = {}
        self.writers: dict[str, TranscriptWriter] = {}
        # Transcript offset at which each running prompt began.
        self._prompt_starts: dict[str, int] = {}
        # The transcripts open at once, whatever the number of sessions.
        self.files = OpenFiles(OPEN_TRANSCRIPTS)
        self.catalog = SessionCatalog(home)
        # Which sessions are open here, for the other daemons on this home.
        self.live = LiveSessions(home)
        if persist:
            self.live.prepare()
        # Memory extraction reads the transcripts (set by the app before any
        # session): each writer keeps the lines not extracted yet, for a file
        # taken away and written again (`TranscriptWriter._unextracted`).
        self.extracts = False
        # Where memory extraction's cursor of a session stands (its workspace
        # root, its id -> an offset; blocking): a restored session's writer
        # keeps the lines from there on, as a live one keeps its own.
        self.extraction_cursor: Callable[[Path, str], int] | None = None
        # The turn contexts by model (`_turn_context`); settings never change in place.
        self._contexts: dict[str, TurnContext] = {}
        model = settings.effective_model()
        pc = settings.provider_config()
        self.window = ContextWindow(model, settings.context_window_for(model))
        c = settings.compaction
        self.compactor = Compactor(
            provider,
            supervisor,
            self.window,
            options=CompactionOptions(
                c.enabled, c.threshold, c.keep_recent, c.keep_tool_results, c.summary_max_tokens
            ),
            fast_model=pc.fast_model,
            max_output=main_output_cap(
                pc.kind,
                model,
                max_output_tokens=pc.max_output_tokens,
                thinking_budget=pc.thinking_budget,
                reasoning_model=pc.reasoning_model,
            ),
            commit=self._commit_compaction,
            provider_kind=pc.kind,
        )

    # --- sessions ------------------------------------------------------------

    def new_session(
        self,
        workspace_root: Path,
        client_tools: ClientToolRunner,
        session_id: str | None = None,
        additional_roots: Sequence[Path] = (),
    ) -> Session:
        """A session in `workspace_root`, its tools also reaching into
        `additional_roots` (checked by the caller: absolute, resolved, none of
        them the root or repeated)."""
        sid = session_id or uuid.uuid4().hex
        extra = list(additional_roots)
        session = Session(sid, workspace_root, client_tools, additional_roots=extra)
        # An id made by the front end just now: no transcript has it yet.
        self._track(session, offset=0, fresh=True)
        if additional_roots:
            self._record_roots(session)
        return session

    def _record_roots(self, session: Session) -> None:
        """The session's additional roots into its transcript, if they changed."""
        writer = self.writers.get(session.id)
        if writer is not None:
            roots = [str(r) for r in session.additional_roots]
            _write(writer, lambda: writer.set_additional_roots(roots))

    def set_additional_roots(self, session: Session, roots: Sequence[Path]) -> None:
        """Replace a session's additional roots (a load or resume that names
        them), kept with the session."""
        session.set_additional_roots(list(roots))
        self._record_roots(session)

    def _track(
        self, session: Session, offset: int, *, fresh: bool = False, torn: bool = False
    ) -> None:
        self.sessions[session.id] = session
        if not self.persist:
            return
        self.live.hold(session.id)
        path = sessions_dir(session.workspace_root, self.home) / f"{session.id}.jsonl"
        writer = TranscriptWriter(
            path,
            session.id,
            session.workspace_root,
            offset,
            session.title,
            self.files,
            fresh=fresh,
            torn=torn,
            # What the transcript says already (a restored session's).
            additional_roots=[] if fresh else [str(r) for r in session.additional_roots],
            snapshot=lambda: self._snapshot(session),
            keep_unextracted=self.extracts,
        )
        self.writers[session.id] = writer

        def persist(_: Session, message: Message) -> None:
            # The writer keeps a line it could not write and writes it before
            # the next: the transcript lags while the disk refuses, never skips.
            _write(writer, lambda: writer.append(message))

        session.listeners.append(persist)
        # The meta file (the listing's cache) once the request is out, not before it.
        session.sent_listeners.append(lambda _: _write(writer, writer.write_due_meta))

    def _snapshot(self, session: Session) -> tuple[ForkBase, dict[str, Any]]:
        """The session as it is now, for its transcript written again whole
        (`TranscriptWriter._rebuild`): its state as a fork copies it, and its
        settings as a config line's values."""
        config: dict[str, Any] = {"mode": session.mode}
        if session.model is not None:
            config["model"] = session.model
        if session.additional_roots:
            config[CONFIG_ROOTS] = [str(r) for r in session.additional_roots]
        base = ForkBase(
            session.id,
            list(session.history),
            list(session.notes),
            list(session.plan),
            self.compactor.summary_json(session),
            session.turns,
            session.tokens_used,
            session.title or EMPTY_TITLE,
        )
        return base, config

    def prepare_session(self, session_id: str) -> None:
        """What a new session's first prompt would otherwise set up on its way
        to the model request, done ahead: its transcript's file and header,
        the file empty until that prompt's line (`TranscriptWriter.prepare`:
        no session to a listing until then, and removed if never prompted),
        its context count, and an empty young generation for the collector
        (`heap.collect_young`). For the front ends, once the new session's
        reply is written; a prompt that comes first does the first two itself."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        writer = self.writers.get(session_id)
        if writer is not None:
            writer.prepare()
        self.compactor.state(session)
        collect_young()

    def transcript_path(self, session_id: str) -> Path | None:
        writer = self.writers.get(session_id)
        return writer.path if writer is not None else None

    def finished_extent(self, session_id: str) -> tuple[Path, int] | None:
        """A live session's transcript, and the offset where its finished
        prompts end: a running prompt's messages (half a turn) come after it."""
        writer = self.writers.get(session_id)
        if writer is None:
            return None
        return writer.path, self._prompt_starts.get(session_id, writer.offset)

    def extracted(self, session_id: str, offset: int) -> None:
        """Memory extraction's cursor of a session is at `offset` (its
        transcript's messages before it are in memory): a live session's
        writer no longer keeps their lines for a rebuild."""
        writer = self.writers.get(session_id)
        if writer is not None:
            writer.extracted(offset)

    def list_sessions(self, workspace_root: Path | None) -> list[TranscriptInfo]:
        """Saved sessions, newest first: of one workspace, or of all (None)."""
        return self.catalog.list(workspace_root)

    async def load_session(
        self,
        session_id: str,
        client_tools: ClientToolRunner,
        emit: Emit,
        workspace_root: Path | None = None,
        *,
        root_field: str = "workspaceRoot",
        additional_roots: Sequence[Path] | None = None,
    ) -> Session:
        """Restore a persisted session and replay its history through `emit`.

        The transcript is found and read in a worker thread. A live session
        asked for with another workspace root is refused (`InvalidParams`
        naming `root_field`): it stays bound to its own, and its tools, memory
        and transcript with it. `additional_roots` replaces the session's
        (None: it keeps those it had), before the replay.
        """
        loaded = None
        if session_id not in self.sessions:
            _check_id(session_id)
            # Shown open before it is read: a deletion in another daemon
            # either sees it open, or has it and is refused here.
            if self.persist and not self.live.hold(session_id):
                raise SessionNotFound(f"session {session_id!r} is being deleted")
            try:
                loaded = await asyncio.to_thread(self._read_stored, session_id, workspace_root)
            finally:
                if loaded is None and session_id not in self.sessions:
                    self.live.release(session_id)
        if session_id in self.sessions:  # live, or loaded by another request meanwhile
            session = self.sessions[session_id]
            if workspace_root is not None and canonical_root(workspace_root) != canonical_root(
                session.workspace_root
            ):
                why = f"session {session_id} belongs to the workspace {session.workspace_root}"
                raise InvalidParams.of(root_field, why)
        else:
            if loaded is None:
                raise SessionNotFound(f"no stored session with id {session_id!r}")
            session = self._restore(loaded, client_tools)
        if additional_roots is not None:
            self.set_additional_roots(session, additional_roots)
        client_names = {s.name for s in client_tools.specs}
        for update in replay(session.history, client_names, session.notes, session.workspace_root):
            emit(update)
        return session

    def _restore(self, loaded: LoadedTranscript, client_tools: ClientToolRunner) -> Session:
        """A live session of a transcript read back (a load, a fork), tracked."""
        session = Session(
            loaded.session_id,
            loaded.workspace_root,
            client_tools,
            additional_roots=stored_roots(loaded.additional_roots, agentd_folders()),
        )
        # The compacted state, when the session was compacted: the
        # summary, then the verbatim tail.
        session.history = loaded.history
        session.notes = loaded.notes
        session.plan = loaded.plan
        if loaded.mode in MODES:
            session.mode = loaded.mode
        if loaded.model is not None and self.knows_model(loaded.model):
            session.model = loaded.model
        # Both count the summarised turns too (the compacted history no
        # longer holds them).
        session.turns = loaded.turns
        # The session's token count goes on where it was (the limit too).
        session.tokens_used = loaded.tokens_used
        session.title = "" if loaded.title == EMPTY_TITLE else loaded.title
        self._track(session, offset=loaded.total, torn=loaded.torn)
        writer = self.writers.get(session.id)
        if writer is not None and loaded.unextracted:
            writer.keep_unextracted(loaded.unextracted)
        closed = closing(session.history, session.notes)
        if closed is not None:
            # A prompt a crash cut short, closed so that the session goes on:
            # its calls answered as interrupted (every request would be refused
            # without), the model and a replay told (`agentd.turn_ends`).
            message, ended = closed
            session.history.append(message)
            session.notes.append((len(session.history), ended))
            writer = self.writers.get(session.id)
            if writer is not None:
                writer.close_cut_turn(message, ended)
        self.compactor.restore(session, loaded.summary)
        return session

    async def fork_session(
        self,
        source_id: str,
        workspace_root: Path | None,
        client_tools: ClientToolRunner,
        *,
        mode: str | None = None,
        model: str | None = None,
        additional_roots: Sequence[Path] | None = None,
    ) -> Session:
        """A new session whose history is a copy of `source_id`'s completed turns.

        The source may be live (idle, or running a prompt: its transcript is
        read up to where that prompt began, so half a turn is never copied,
        and the prompt goes on undisturbed) or only on disk. The fork runs in
        `workspace_root` (None: the source's), in the source's mode and on
        its model unless `mode` / `model` (validated by the caller) say
        otherwise, reaching into `additional_roots` (None: the source's), with
        its own id and transcript (`transcript.ForkBase`),
        durable before this returns. Its summary, notes, plan and counters
        are the source's. Unknown source: `SessionNotFound`, as for a load.
        """
        if not self.persist:
            raise ProtocolError("this daemon keeps no transcripts: nothing to fork from")
        source = self.sessions.get(source_id)
        if source is None:
            _check_id(source_id)
        path: Path | None = None
        end: int | None = None
        writer = self.writers.get(source_id) if source is not None else None
        if source is not None and writer is not None:
            path = writer.path
            if source_id not in self._prompt_starts and writer.pending:
                _write(writer, writer.flush)  # lines a refused write left behind
            # Where its finished turns end: a prompt running, or one that
            # starts while the file is read, is past it.
            end = self._prompt_starts.get(source_id, writer.offset)
        elif valid_session_id(source_id):
            path = await asyncio.to_thread(self._find_transcript, source_id, workspace_root)
            if path is None and workspace_root is not None:
                # Forked into another workspace: the source lives in its own.
                path = await asyncio.to_thread(self._find_transcript, source_id, None)
        if path is None:
            raise SessionNotFound(f"no stored session with id {source_id!r}")
        stored = await asyncio.to_thread(load, path, False, end)
        if source is not None and source.closed:
            raise SessionNotFound(f"no session with id {source_id!r}")  # closed meanwhile
        if stored is None:
            if source is None:
                raise SessionNotFound(f"no stored session with id {source_id!r}")
            # A live session that has written nothing yet: an empty history.
            stored = LoadedTranscript(source_id, source.workspace_root, [], 0, 0)
        root = workspace_root or (source.workspace_root if source else stored.workspace_root)
        if mode is None:
            mode = source.mode if source is not None else stored.mode
        if model is None:
            model = source.model if source is not None else stored.model
        elif model == self.settings.effective_model():
            model = None
        config: dict[str, str | list[str]] = {"mode": mode if mode in MODES else DEFAULT_MODE}
        if model is not None and self.knows_model(model):
            config["model"] = model
        if additional_roots is not None:
            extra = [str(r) for r in beside(root, list(additional_roots))]
        elif source is not None:
            extra = [str(r) for r in source.additional_roots]
        else:
            extra = [str(r) for r in stored_roots(stored.additional_roots, agentd_folders())]
        if extra:
            config["additionalDirectories"] = extra
        base = ForkBase.of(source_id, stored)
        fork_id = uuid.uuid4().hex
        target = sessions_dir(root, self.home) / f"{fork_id}.jsonl"
        hashes = [p.sha256 for m in base.history for p in m.images if p.sha256 and not p.data]

        def create() -> LoadedTranscript | None:
            data = fork_lines(base, fork_id, root, config)
            write_fork(target, data, meta_bytes(fork_id, root, base.title, extra), hashes, path)
            # The live fork is what a reload gives (its images read back too).
            return load(target)

        try:
            loaded = await asyncio.to_thread(create)
        except OSError as exc:
            raise ProtocolError(
                f"cannot write the fork of session {source_id}: {describe_os_error(exc)}"
            ) from None
        if loaded is None:
            raise ProtocolError(f"the fork of session {source_id} cannot be read back")
        return self._restore(loaded, client_tools)

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: a live one is closed first (a running prompt is
        cancelled, its tools and side queries stopped, as `close`), then its
        transcript, meta file and images go from every sessions folder
        (`agentd.session_files`). True when there was something to delete;
        an id that names nothing is not an error (ACP's `session/delete` is
        idempotent). An id that could not be one agentd gave out is
        refused (`InvalidParams` on `sessionId`) before anything is touched,
        and so is a session another daemon on this home has open
        (`SessionInUse`, `session_files.LiveSessions`): it would write the
        transcript back."""
        _check_id(session_id)
        if self.persist and not self.live.claim(session_id):
            # Its transcript is still being written there: removed now, it
            # would come back (headless) with that daemon's next line.
            raise SessionInUse(
                f"session {session_id} is open in another agentd process (another editor "
                "window): close it there, or delete it from there",
                {"sessionId": session_id, "reason": "openElsewhere"},
            )
        try:
            session = self.sessions.get(session_id)
            if session is not None:
                writer = self.writers.get(session_id)
                if writer is not None:
                    # First: the cancelled prompt's last lines would bring the file back.
                    writer.discard()
                await self.close(session_id)
            try:
                removed = await asyncio.to_thread(delete_session_files, session_id, self.home)
            except OSError as exc:
                raise ProtocolError(
                    f"cannot delete session {session_id}: {describe_os_error(exc)}"
                ) from None
        finally:
            self.live.unclaim(session_id)
        self.catalog.forget(session_id)
        return removed > 0 or session is not None

    def _keep_note(self, session: Session, note: Note, *, flush: bool = True) -> None:
        """Keep a note for replays; without ``flush`` its transcript line waits
        for the next write, or `_flush_notes`."""
        session.notes.append((len(session.history), note))
        writer = self.writers.get(session.id)
        if writer is not None:
            # A writer the disk refused is retried at once, as before: holding
            # a line would not tell whether the disk takes lines again.
            held = not flush and not writer.failed
            _write(writer, lambda: writer.note(note, flush=not held))

    def _flush_notes(self, session: Session) -> None:
        writer = self.writers.get(session.id)
        if writer is not None and writer.pending:
            _write(writer, writer.flush)

    def _read_stored(self, session_id: str, root: Path | None) -> LoadedTranscript | None:
        """The stored session (blocking: reads its transcript)."""
        path = self._find_transcript(session_id, root)
        if path is None:
            return None
        cursor = self.extraction_cursor
        if cursor is None or not self.extracts:
            return load(path)
        return load(path, unextracted_from=lambda workspace: cursor(workspace, session_id))

    def _find_transcript(self, session_id: str, root: Path | None) -> Path | None:
        if not valid_session_id(session_id):
            return None  # an id is never a path
        if root is not None:
            path = sessions_dir(root, self.home) / f"{session_id}.jsonl"
            return path if path.exists() else None
        base = (self.home or agentd_home()) / "projects"
        for path in base.glob(f"*/sessions/{session_id}.jsonl"):
            return path
        return None

    # --- what a session runs with: mode, model --------------------------------

    def set_mode(self, session_id: str, mode: str) -> Session:
        """Switch the session's mode (validated by the caller against `MODES`);
        kept in the transcript, so that a loaded session has it again."""
        session = self.get(session_id)
        session.mode = mode
        writer = self.writers.get(session_id)
        if writer is not None:
            _write(writer, lambda: writer.config(mode=mode))
        return session

    def set_model(self, session_id: str, model: str) -> Session:
        """Switch the session's model (one of `model_choices`), from its next request."""
        session = self.get(session_id)
        session.model = None if model == self.settings.effective_model() else model
        writer = self.writers.get(session_id)
        if writer is not None:
            _write(writer, lambda: writer.config(model=model))
        return session

    def knows_model(self, model: str) -> bool:
        return any(m == model for m, _ in self.settings.model_choices())

    def model_of(self, session: Session) -> str:
        return session.model or self.settings.effective_model()

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            raise SessionNotFound(f"no session with id {session_id!r}")
        return session

    async def reset(self, session_id: str) -> None:
        session = self.get(session_id)
        await self._stop_running(session)
        self.memory.session_reset(session)
        self.compactor.forget(session)
        session.history.clear()
        session.notes.clear()
        session.plan = []
        session.turns = 0
        session.tokens_used = 0
        session.title = ""
        # After the session changed, as every line: a transcript rebuilt on
        # the way (`TranscriptWriter._rebuild`) holds the cleared session.
        writer = self.writers.get(session_id)
        if writer is not None:
            _write(writer, writer.reset)

    async def close(self, session_id: str) -> None:
        session = self.get(session_id)
        await self._stop_running(session)
        self.memory.session_closed(session)
        if session.extra_tools is not None:
            session.extra_tools.close(session)
        self.compactor.forget(session, closed=True)
        session.closed = True
        del self.sessions[session_id]
        writer = self.writers.pop(session_id, None)
        if writer is not None:
            writer.close()
        self.live.release(session_id)

    async def _stop_running(self, session: Session) -> None:
        task = session.running
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait([task], timeout=5)

    # --- prompts -------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: UserInput, emit: Emit) -> PromptOutcome:
        """Run a prompt in the calling task (so that cancelling it cancels the turn).

        A second prompt while one runs is refused with `SessionBusy`: queueing
        would hide from the user that their first prompt is still working. A
        prompt starting with a slash command's name runs the command
        (`agentd.agent.commands`). Images reach only a model that takes them:
        for another one the prompt is refused (`InvalidParams` on `prompt`),
        never sent as text.
        """
        session = self.get(session_id)
        if session.running is not None and not session.running.done():
            raise SessionBusy(f"session {session_id} is already running a prompt")
        # The editor's words enter the history here: valid Unicode only.
        prompt = _clean_input(prompt)
        self._check_images(session, prompt)
        command = commands.parse_command(prompt)
        if command is not None and command.name == commands.INIT:
            prompt, command = commands.init_prompt(command.args), None
        session.running = asyncio.current_task()
        closed = False
        spoke = False  # a message chunk was shown in this prompt
        writer = self.writers.get(session_id)

        def tell_unsaved() -> None:
            # When the failure is found (or at the start, for one found
            # between prompts), in the chat: an ACP client shows nothing of
            # the daemon's log, and the user would learn only at a load that
            # the session was never saved. Once per session, and only into
            # a prompt still open (else the next prompt says it).
            if writer is None or closed or writer.told:
                return
            if writer.failed or writer.rebuild_failed:
                writer.told = True
                guarded(MessageChunk(unsaved_text(writer.path, writer.failure, after=spoke)))

        session.prompt_usage = Usage()
        messages_before = len(session.history)
        ended: PromptEnded | None = None
        # No young collection before the request's bytes are out (`YoungHold`).
        young = YoungHold()

        # A memory delivery is reported once the request carrying it is out:
        # encoding and writing the notification (about 0.1 ms, and a wake-up
        # of the editor's process) came before the request's bytes. Its note
        # is kept at once (compaction counts the docs shown from the notes);
        # its transcript line, what the editor was shown, is written when it
        # is shown (it waits in the writer, in order, so any line written
        # before then takes it along). Any other update shows the held ones
        # first, so the editor sees updates in the order they happened.
        held: list[Update] = []

        def show_held() -> None:
            if held:
                self._flush_notes(session)
            while held:
                emit(held.pop(0))

        def after_send(_: Session) -> None:
            young.release()
            # Runs inside the request's send: a failure here must not fail it.
            try:
                show_held()
            except Exception:
                log.exception("cannot report a memory delivery")

        def guarded(update: Update) -> None:
            nonlocal spoke
            # Nothing is reported for a prompt after it has ended.
            if closed:
                return
            if isinstance(update, MessageChunk):
                spoke = True
            if isinstance(update, MemoryDelivered):
                self._keep_note(session, update, flush=False)
                held.append(update)
                return
            if isinstance(update, UsageReport | PlanUpdated):
                self._keep_note(session, update)
            show_held()
            emit(update)

        # First: the other listeners' work (the meta file) need not come before it.
        session.sent_listeners.insert(0, after_send)
        try:
            if writer is not None:
                writer.on_failure = tell_unsaved
                # A file taken away behind the daemon is written again now,
                # before this prompt's lines, which follow as message lines.
                _check_file(writer)
                tell_unsaved()
                self._prompt_starts[session_id] = writer.offset
            if command is not None:
                outcome = await self._run_command(session, command, guarded)
            else:
                outcome = await run_prompt(self._turn_context(session), session, prompt, guarded)
                ended = PromptEnded(outcome.stop_reason, outcome.error)
            return outcome
        except asyncio.CancelledError:
            ended = PromptEnded("cancelled")
            raise
        finally:
            young.release()
            # A request that never went out (an error, a cancel) still shows them.
            session.sent_listeners.remove(after_send)
            show_held()
            if writer is not None:
                writer.on_failure = None
            closed = True
            session.running = None
            self._prompt_starts.pop(session_id, None)
            # Only a prompt that reached the history has a turn to end in a
            # replay (an early limit stop appends nothing).
            if ended is not None and len(session.history) > messages_before:
                self._keep_note(session, ended)

    def _check_images(self, session: Session, prompt: UserInput) -> None:
        if isinstance(prompt, str) or not any(isinstance(p, ImagePart) for p in prompt):
            return
        model = self.model_of(session)
        if not self.settings.takes_images(model):
            raise InvalidParams(
                f"The model {model} cannot take images (supportsImages is off for it), so "
                "the image was not sent. Pick a model that can, or set supportsImages = true "
                "for this one in the config if it does take them.",
                {"fields": [{"field": "prompt", "message": f"{model} cannot take images"}]},
            )

    async def _run_command(
        self, session: Session, command: commands.CommandCall, emit: Emit
    ) -> PromptOutcome:
        """A slash command that is not a model prompt; its words go to the chat
        only (they are not the conversation's, so not in the history)."""
        if command.name == commands.RESET:
            await self.reset(session.id)
            emit(MessageChunk("The conversation was cleared; the next prompt starts fresh."))
        elif command.name == commands.MEMORY:
            emit(MessageChunk(await self.memory.describe(session)))
        elif command.name == commands.COMPACT:
            # The same compaction as `agent/compact` (`compact`), in this
            # prompt's task: cancelling the prompt cancels the summariser.
            report = await self._compact_now(session, command.args or None, emit)
            emit(MessageChunk(compaction_line(report)))
        return PromptOutcome("end_turn")

    def commands(self) -> list[commands.CommandInfo]:
        return list(commands.COMMANDS.values())

    async def compact(
        self, session_id: str, instructions: str | None, emit: Emit
    ) -> CompactionReport:
        """Compact the session's history now (`agent/compact`, ACP `/compact`).

        Runs in the calling task like a prompt, so that cancelling it (or
        `agent/cancel`) cancels the summariser; refused with `SessionBusy`
        while a prompt runs. A failure or a cancel leaves the history as it
        was; the report says what happened.
        """
        session = self.get(session_id)
        if session.running is not None and not session.running.done():
            raise SessionBusy(f"session {session_id} is already running a prompt")
        session.running = asyncio.current_task()
        closed = False

        def guarded(update: Update) -> None:
            if not closed:
                emit(update)

        try:
            return await self._compact_now(session, instructions, guarded)
        finally:
            closed = True
            session.running = None

    async def _compact_now(
        self, session: Session, instructions: str | None, emit: Emit
    ) -> CompactionReport:
        """Compaction in the calling task, which owns the session (a prompt's
        or `compact`'s); the transcript is made durable after it."""
        try:
            return await self.compactor.compact(session, instructions, emit)
        finally:
            writer = self.writers.get(session.id)
            if writer is not None:
                self.supervisor.spawn(_sync(writer), name=f"transcript-sync-{session.id[:8]}")

    def _commit_compaction(
        self,
        session: Session,
        record: CompactionRecord,
        history: list[Message],
        notes: list[tuple[int, Note]],
    ) -> None:
        """A compaction changes the model's view: in place (a request being
        built holds the list), in the transcript, and in memory's record of
        what the model has seen."""
        session.history[:] = history
        session.notes[:] = notes
        writer = self.writers.get(session.id)
        if writer is not None:
            try:
                writer.compaction(record)
            except OSError as exc:
                log.warning("cannot write a compaction to the transcript %s: %s", writer.path, exc)
        if record.summary_text is not None:
            self.memory.history_compacted(session, kept_memory(notes))

    def cancel(self, session_id: str) -> bool:
        return self.get(session_id).cancel_running()

    def tool_result(self, session_id: str, tool_call_id: str, content: str, is_error: bool) -> bool:
        session = self.get(session_id)
        return session.resolve_tool_result(tool_call_id, clean_text(content), is_error)

    def after_reply(self, session_id: str) -> None:
        """The prompt's reply is written: make its transcript durable (an fsync
        costs milliseconds, so it runs in a thread, after the reply) and let
        memory schedule its background work."""
        writer = self.writers.get(session_id)
        if writer is not None:
            if writer.pending:
                _write(writer, writer.flush)  # lines a refused write left behind
            _write(writer, writer.write_due_meta)  # a prompt that sent no request
            self.supervisor.spawn(_sync(writer), name=f"transcript-sync-{session_id[:8]}")
        session = self.sessions.get(session_id)
        if session is not None:
            self.memory.after_reply(session)
            # Past the threshold, the summary starts now, between turns.
            self.compactor.after_reply(session)

    def _turn_context(self, session: Session) -> TurnContext:
        """What a prompt of `session` runs with: one per model, kept while the
        core's parts are the same objects (memory is set after construction).
        Built per prompt, its objects and the settings' reads took 0.03-0.04
        ms of the prompt's path once the process had idled."""
        model = self.model_of(session)
        ctx = self._contexts.get(model)
        if ctx is not None and ctx.memory is self.memory and ctx.provider is self.provider:
            return ctx
        lim = self.settings.limits
        ctx = TurnContext(
            provider=self.provider,
            model=model,
            limits=TurnLimits(
                max_steps_per_prompt=lim.max_steps_per_prompt,
                max_session_turns=lim.max_session_turns,
                session_token_limit=lim.session_token_limit,
                tool_result_max_chars=lim.tool_result_max_chars,
            ),
            memory=self.memory,
            tools=ToolConfig(
                search_engine=self.settings.tools.search_engine,
                search_timeout=self.settings.tools.search_timeout,
            ),
            compactor=self.compactor,
        )
        self._contexts[model] = ctx
        return ctx


def _write(writer: TranscriptWriter, write: Callable[[], object]) -> None:
    """A transcript write that never breaks the conversation; a failure is
    logged once, with its cause by name (EMFILE is not "cannot connect")."""
    try:
        write()
    except OSError as exc:
        if not writer.failed:
            writer.failed = True
            writer.failure = describe_os_error(exc)
            log.error(
                "cannot write the transcript %s: %s; %d line(s) kept to write later",
                writer.path,
                describe_os_error(exc),
                writer.pending,
            )
            if writer.on_failure is not None:
                writer.on_failure()
        return
    # Mended only once every kept line is written: a write that wrote none of
    # them (a meta file, a line held for later) proves nothing.
    if writer.failed and not writer.pending:
        writer.failed = False
        log.warning("the transcript %s is written again, nothing skipped", writer.path)


def unsaved_text(path: Path, failure: str, *, after: bool = True) -> str:
    """What the chat says, once, of a session whose transcript cannot be
    written: set apart from the text shown before it (`after`), else from
    the answer that follows."""
    text = (
        f"agentd cannot save this session: writing {path} failed ({failure}). "
        "The conversation goes on, and agentd writes what it kept as soon as the "
        "folder can be written; until then this session's history is lost if agentd "
        "stops, and it cannot be loaded again."
    )
    return f"\n\n{text}" if after else f"{text}\n\n"


def _check_file(writer: TranscriptWriter) -> None:
    """`TranscriptWriter.check_file`, whose failure (the file cannot be written
    again now) is logged; its next line tries again. Not through `_write`,
    which would take a check that wrote nothing for lines written again."""
    try:
        writer.check_file()
    except OSError as exc:
        if not writer.rebuild_failed:
            # Said once, as a refused line is: each prompt tries again.
            writer.rebuild_failed = True
            writer.failure = describe_os_error(exc)
            log.error(
                "the transcript %s was taken away and cannot be written again: %s",
                writer.path,
                writer.failure,
            )
            if writer.on_failure is not None:
                writer.on_failure()
        return
    writer.rebuild_failed = False


async def _sync(writer: TranscriptWriter) -> None:
    try:
        await asyncio.to_thread(writer.sync)
    except OSError as exc:
        if writer.failed:
            # Lines the disk refused, not written, so not synced either: said
            # once already (`_write`), not again after every prompt.
            return
        log.error("cannot sync the transcript %s: %s", writer.path, describe_os_error(exc))


def replay(
    history: list[Message],
    client_names: set[str],
    notes: Sequence[tuple[int, Note]] = (),
    root: Path | None = None,
) -> Iterator[Update]:
    """A stored history as the updates a client would have seen live: each
    note comes right after the messages that preceded it. With the workspace
    `root`, tool calls carry the locations of the files they name. The plan
    tool's calls are not shown (its plan notes are, as live)."""
    pending = iter(notes)
    note = next(pending, None)
    plan_calls: set[str] = set()
    for index, msg in enumerate(history):
        while note is not None and note[0] <= index:
            yield note[1]
            note = next(pending, None)
        for part in msg.parts:
            if isinstance(part, TextPart) and part.text:
                yield UserMessage(part.text) if msg.role == "user" else MessageChunk(part.text)
            elif isinstance(part, ImagePart) and part.data:
                yield UserImage(part.mime_type, part.data)
            elif isinstance(part, ThinkingPart) and part.text:  # redacted: nothing to show
                yield ThoughtChunk(part.text)
            elif isinstance(part, ToolCallPart):
                c = part.call
                if c.name == UPDATE_PLAN:
                    plan_calls.add(c.id)
                    continue
                yield ToolCallStarted(
                    c.id,
                    c.name,
                    c.arguments,
                    "client" if c.name in client_names else "daemon",
                    call_locations(c.name, c.arguments, root) if root is not None else [],
                )
            elif isinstance(part, ToolResultPart):
                if part.tool_call_id in plan_calls:
                    continue
                # A call the cancel cut short was shown "cancelled", not "failed".
                if part.is_error and part.content == CANCELLED_RESULT:
                    yield ToolCallUpdate(part.tool_call_id, "cancelled")
                    continue
                yield ToolCallUpdate(
                    part.tool_call_id, "failed" if part.is_error else "completed", part.content
                )
    while note is not None:
        yield note[1]
        note = next(pending, None)


def _clean_input(prompt: UserInput) -> UserInput:
    """The prompt with lone surrogates in its text replaced (images are base64: ASCII)."""
    if isinstance(prompt, str):
        return clean_text(prompt)
    return [TextPart(clean_text(p.text)) if isinstance(p, TextPart) else p for p in prompt]


def _check_id(session_id: str) -> None:
    """An id that could not be one agentd gave out (a path, a NUL, 10 KB) is
    refused naming `sessionId`, before anything is looked up or touched."""
    if not valid_session_id(session_id):
        why = "not a session id (letters, digits, - and _ only, at most 128)"
        raise InvalidParams.of("sessionId", why)
