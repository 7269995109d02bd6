"""Everything one daemon owns, wired together; shared by every front end.

`App.create` is the only place that builds the settings, the provider, the
supervisor and the core. Front ends (LSP, ACP) build one `App` after their
`initialize` and close it at shutdown. Importing this module pulls in
pydantic and the turn engine, which is why front ends import it lazily
(after answering `initialize`, in a warm-up thread).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import importlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.agent.core import AgentCore
from agentd.agent.elicitation import Elicitor
from agentd.agent.permission import PermissionAsker
from agentd.agent.prefetch import MemoryRecall
from agentd.agent.session import Session
from agentd.agent.tools import client_tool_specs
from agentd.config import McpServerSettings, Settings, load_settings
from agentd.errors import InvalidParams
from agentd.mcp.manager import McpManager
from agentd.memory import MemoryManager, ProjectMemory, agentd_home
from agentd.messages import ToolSpec
from agentd.providers import ProviderConfig, make_provider
from agentd.providers.base import Preconnects
from agentd.providers.routed import RoutedProvider
from agentd.tasks import Supervisor
from agentd.transcript import TranscriptInfo

if TYPE_CHECKING:
    from agentd.mcp.sampling import Sampler
    from agentd.memory.extraction import ExtractionService

log = logging.getLogger(__name__)

# Sessions per `session/list` page (ACP leaves the size to the agent).
SESSION_PAGE = 50
SNAPSHOT_SECONDS = 30.0


MemoryListener = Callable[[Path, list[Path]], None]
Progress = Callable[[int, int], None]
ProgressFactory = Callable[[str], Progress | None]


@dataclass
class App:
    settings: Settings
    supervisor: Supervisor
    # agentd's own provider, or the endpoint a client routed requests to (`route_model`).
    provider: RoutedProvider
    core: AgentCore
    memory: MemoryManager
    recall: MemoryRecall | None
    mcp: McpManager
    # Built at its first use (`_extraction_service`), not at start-up: it is
    # first needed after a reply, and resident from the warm-up it would cost
    # about a megabyte and tens of milliseconds of imports for nothing.
    extraction: ExtractionService | None = None
    # ExtractionService's arguments when extraction is on, else None.
    _extraction_args: dict[str, Any] | None = None
    _extraction_import: asyncio.Future[Any] | None = None
    # Projects whose leftover turns await the service's first use.
    _resume_pending: set[Path] = field(default_factory=set)
    client_specs: list[ToolSpec] = field(default_factory=list)
    # Front ends subscribe here to forward `memory/changed` to the editor.
    memory_listeners: list[MemoryListener] = field(default_factory=list)
    # Set by a front end that can show progress: title -> (done, total) callback.
    progress_factory: ProgressFactory | None = None
    _watched: set[Path] = field(default_factory=set)
    # The listing the last first page of `session/list` was cut from.
    _listing: tuple[Path | None, float, list[TranscriptInfo]] | None = None
    # The memory watchers' thread being started (`on_loop`).
    watch_thread: asyncio.Task[None] | None = None
    # The endpoint a client routed model requests to (`route_model`); None:
    # the settings'. Its headers are credentials: held here only, never written.
    routed_to: ProviderConfig | None = None
    _routing: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def create(
        cls, init_options: dict[str, Any] | None = None, settings: Settings | None = None
    ) -> App:
        """The App for the editor's options; `settings`: those options' settings
        if already loaded (the warm-up loads them first, for new sessions)."""
        options = dict(init_options or {})
        declared = options.pop("clientTools", None) or []
        if settings is None:
            settings = load_settings(options)
        for problem in settings.problems:
            log.warning("configuration: %s", problem)
        supervisor = Supervisor()
        provider = RoutedProvider(make_provider(settings.provider_config()))
        home = agentd_home()
        memory = MemoryManager(home)
        core = AgentCore(settings, provider, supervisor, home=home)
        specs = client_tool_specs(declared if isinstance(declared, list) else [])
        mcp = McpManager(settings.mcp_servers, settings.mcp)
        mcp.make_sampler = functools.partial(_make_sampler, settings, provider, core)
        app = cls(
            settings, supervisor, provider, core, memory, recall=None, mcp=mcp, client_specs=specs
        )
        if settings.memory.enabled and settings.memory.extraction:
            core.extracts = True
            core.extraction_cursor = functools.partial(_extraction_cursor, memory.home)
            app._extraction_args = {
                "manager": memory,
                "provider": provider,
                "supervisor": supervisor,
                "fast_model": settings.provider_config().fast_model,
                "transcripts": core.finished_extent,
                "on_extracted": core.extracted,
                "home": home,
                "grace": settings.memory.shutdown_grace,
                "progress": app._extraction_progress,
            }
        if settings.memory.enabled:
            app.recall = MemoryRecall(
                memory,
                provider,
                supervisor,
                fast_model=settings.provider_config().fast_model,
                model_tier=settings.memory.model_tier,
                recall_timeout=settings.memory.recall_timeout,
                first_index_wait=settings.memory.first_index_wait,
                on_project=app._watch_project,
                after_reply_hook=app._after_reply,
            )
            core.memory = app.recall
            memory.watch_gate = app.recall.watch_gate
        return app

    def on_loop(self) -> None:
        """Once built, on the loop (the warm-up calls it before handing the App
        over): with memory on, the memory watchers' thread is started now
        rather than on the loop as a session's first prompt arrives
        (`watch_thread`: that start, done once the thread waits idle)."""
        if self.recall is not None and self.watch_thread is None:
            from agentd.memory.watcher import start_wait_thread

            self.watch_thread = self.supervisor.spawn(
                start_wait_thread(), name="memory-watch-thread"
            )

    async def project_memory(
        self,
        root: Path,
        progress: Callable[[int, int], None] | None = None,
        ahead: Awaitable[ProjectMemory | None] | None = None,
    ) -> ProjectMemory:
        """The project's memory, started on first use (from ``ahead``, its
        scan run ahead by the warm-up, when given), its changes forwarded."""
        pm = await self.memory.get(root, progress, ahead)
        self._watch_project(pm)
        return pm

    def start_memory(
        self, root: Path, ahead: Awaitable[ProjectMemory | None] | None = None
    ) -> None:
        """Index the project's memory in the background, so that it is ready by
        the first prompt: called as soon as a workspace root is known (a new
        session, or an LSP `initialize` that names its roots); its instruction
        files are read ahead too. ``ahead``: the project as the warm-up
        scanned it before the App existed (`Warmup.scan_memory_ahead`).
        Never waits."""
        if self.recall is None:
            return
        self.recall.prepare(root)
        if self.memory.get_nowait(root) is not None:
            if ahead is not None:
                self.supervisor.spawn(self.project_memory(root, None, ahead), name="memory-ahead")
            return
        title = "agentd: indexing memory"
        progress = self.progress_factory(title) if self.progress_factory is not None else None
        self.supervisor.spawn(
            self.project_memory(root, progress, ahead), name=f"memory-start:{root.name}"
        )

    def start_known_roots(
        self,
        roots: list[str],
        ahead: Callable[[Path], Awaitable[ProjectMemory | None] | None] | None = None,
    ) -> None:
        """`start_memory` for the workspace roots an editor named before any
        session (LSP `initialize`), those that have notes to index: a project
        agentd never saw is not given a memory folder just for being open.
        ``ahead``: a root -> its project scanned ahead by the warm-up, if any
        (a session opened on it while the App was built)."""
        from agentd.errors import InvalidParams
        from agentd.layout import memory_dir, team_memory_dir
        from agentd.params import workspace_path

        for raw in roots:
            try:
                root = workspace_path(raw)
            except InvalidParams:
                continue
            if memory_dir(root, self.memory.home).is_dir() or team_memory_dir(root).is_dir():
                self.start_memory(root, ahead(root) if ahead is not None else None)

    def attach_tools(
        self,
        session: Session,
        permissions: PermissionAsker | None,
        mcp_servers: dict[str, McpServerSettings] | None = None,
        elicitor: Elicitor | None = None,
    ) -> None:
        """A new or loaded session gets its MCP servers (the configured ones
        and `mcp_servers`, the editor's for this session; started now, never
        awaited) and the front end's ways of asking the user (permission,
        and the servers' own questions: `elicitor`); the model
        endpoint's connection is opened for its first prompt (`preconnect`)."""
        session.permissions = permissions
        session.elicitor = elicitor
        self.mcp.attach(session, mcp_servers)
        self.preconnect()

    def preconnect(self) -> None:
        """Open the provider's connection in the background (never awaited), so
        that a session's first prompt does not wait for TCP and TLS (50-200 ms
        to a provider over the internet): as soon as the warm-up has built
        the client, and when a session starts, unless the client was used in
        the last few seconds (`ModelHTTP.preconnect`). Off with `preconnect = false`
        (`AGENTD_PRECONNECT=0`)."""
        if not self.settings.preconnect or not isinstance(self.provider, Preconnects):
            return
        connect = self.provider.preconnect()
        if connect is None:
            return
        try:
            self.supervisor.spawn(connect, name="model-preconnect")
        except RuntimeError:
            pass  # shutting down: no prompt will need it

    async def route_model(self, config: ProviderConfig | None) -> None:
        """Send the next model request of every session (a running prompt's
        next step included) to `config`'s endpoint, a client's (ACP
        `providers/set`), or back to the settings' (None). A stream already
        running finishes where it started (`RoutedProvider`). Routes are
        applied in the order they were asked for."""
        async with self._routing:
            provider = None
            if config is not None:
                provider = make_provider(config)
                # Its client and TLS context built off the loop, where prompts may stream.
                await asyncio.to_thread(provider.warm)
            self.provider.route(provider)
            self.routed_to = config
            kind = (config or self.settings.provider_config()).kind
            self.core.compactor.endpoint_changed(kind)
        self.preconnect()

    # --- results shared by every front end ----------------------------------------------

    async def list_sessions(self, root: Path) -> dict[str, Any]:
        """`agent/listSessions`: every saved session of the workspace."""
        infos = await self._list(root)
        return {"sessions": [_listed(i) for i in infos]}

    async def _list(self, root: Path | None) -> list[TranscriptInfo]:
        # A listing may read transcripts that have no meta file: in a worker thread.
        return await asyncio.to_thread(self.core.list_sessions, root)

    async def session_page(
        self, root: Path | None, cursor: str | None, limit: int = SESSION_PAGE
    ) -> dict[str, Any]:
        """ACP `session/list`: one page, newest first, of a workspace's saved
        sessions (or of all of them), and the cursor of the next page if any.
        The cursor is the last listed session's (time, id). The pages after
        the first are cut from the listing the first one was (for up to
        `SNAPSHOT_SECONDS`): a paging pass sees one list, in which a session
        updated meanwhile is neither skipped nor shown twice, and the
        folder is read once per pass."""
        after = _cursor_key(cursor) if cursor is not None else None
        snapshot = self._listing
        now = time.monotonic()
        if after is not None and snapshot is not None and snapshot[0] == root:
            if now - snapshot[1] < SNAPSHOT_SECONDS:
                infos = snapshot[2]
            else:
                infos = await self._list(root)
        else:
            infos = await self._list(root)
            self._listing = (root, now, infos)
        if after is not None:
            infos = [i for i in infos if (i.updated_at, i.session_id) < after]
        page = infos[:limit]
        result: dict[str, Any] = {
            "sessions": [
                {
                    "sessionId": i.session_id,
                    "cwd": str(i.workspace_root),
                    **_roots_of(i),
                    "title": i.title,
                    "updatedAt": _iso(i.updated_at),
                }
                for i in page
            ]
        }
        if len(infos) > limit:
            last = page[-1]
            key = json.dumps([last.updated_at, last.session_id]).encode()
            result["nextCursor"] = base64.urlsafe_b64encode(key).decode("ascii")
        return result

    async def delete_session(self, session_id: str) -> bool:
        """`session/delete`, `agent/deleteSession` (`AgentCore.delete_session`);
        the session leaves the listing the next pages of `session/list` are
        cut from too."""
        deleted = await self.core.delete_session(session_id)
        if deleted:
            await self._forget_cursor(session_id)
        if self._listing is not None:
            root, taken, infos = self._listing
            self._listing = (root, taken, [i for i in infos if i.session_id != session_id])
        return deleted

    async def _forget_cursor(self, session_id: str) -> None:
        """A deleted session's extraction cursor goes too, from the cursor
        file of every project (`cursor.forget_session_everywhere`, in a
        worker thread with its import: extraction may never have run in
        this daemon), and from the extraction service's state."""
        if self.extraction is not None:
            self.extraction.forget(session_id)
        home = self.core.home or agentd_home()

        def forget() -> None:
            from agentd.memory.extraction.cursor import forget_session_everywhere

            forget_session_everywhere(home, session_id)

        await asyncio.to_thread(forget)

    async def memory_list(self, root: Path) -> dict[str, Any]:
        pm = await self.project_memory(root)
        docs = [
            {
                "path": str(d.path),
                "name": d.name,
                "description": d.description,
                "type": d.type,
                "mtime": d.mtime,
                "team": d.team,
            }
            for d in pm.list_docs()
        ]
        return {"directory": str(pm.directory), "docs": docs}

    async def memory_recall(self, root: Path, query: str, limit: int) -> dict[str, Any]:
        pm = await self.project_memory(root)
        result = pm.recall(query, limit=limit)
        docs = [
            {"path": str(d.path), "name": d.name, "score": round(d.score, 4)} for d in result.docs
        ]
        return {"docs": docs, "tier": "local"}

    async def memory_status(self, root: Path) -> dict[str, Any]:
        pm = await self.project_memory(root)
        status = pm.status()
        return {
            "directory": status["directory"],
            "docCount": status["docCount"],
            "watcher": status["watcher"],
            "problems": status["problems"],
            "extraction": await self.extraction_status(pm.workspace_root),
            "deliveries": self.recall.stats.to_json() if self.recall is not None else {},
            "prefetch": [
                {"sessionId": s.id, "tier": h.tier, "settled": h.settled, "consumed": h.consumed}
                for s in self.core.sessions.values()
                if s.workspace_root == pm.workspace_root and self.recall is not None
                for h in self.recall.handles(s.id)
            ],
        }

    async def extraction_status(self, root: Path) -> dict[str, Any]:
        extraction = await self._extraction_service()
        if extraction is None:
            return {"state": "idle", "trailingPending": False, "cursors": []}
        return await extraction.status_async(root)

    async def _extraction_service(self) -> ExtractionService | None:
        """The extraction service (None when extraction is off), built at its
        first use: the first reply, or the first status asked. Its import runs
        in a worker thread, off the event loop; the projects seen before then
        have their leftover turns resumed now."""
        if self.extraction is not None or self._extraction_args is None:
            return self.extraction
        if self._extraction_import is None:
            self._extraction_import = asyncio.ensure_future(
                asyncio.to_thread(importlib.import_module, "agentd.memory.extraction")
            )
        module = await asyncio.shield(self._extraction_import)
        if self.extraction is None:
            self.extraction = module.ExtractionService(**self._extraction_args)
            for root in sorted(self._resume_pending):
                self._resume(self.extraction, root)
            self._resume_pending.clear()
        return self.extraction

    def _resume(self, extraction: ExtractionService, root: Path) -> None:
        # Turns a previous run left unprocessed (its cursor is behind its
        # transcript) are extracted now; live sessions' running turns are
        # not (they are extracted whole, after their reply).
        self.supervisor.spawn(extraction.resume(root), name="extraction-resume")

    def _extraction_progress(self, root: Path) -> Progress | None:
        if self.progress_factory is None:
            return None
        return self.progress_factory(f"agentd: extracting memory of {root.name}")

    def _after_reply(self, session: Session) -> None:
        # The prompt's reply is already written: extraction never delays it.
        if self.extraction is not None:
            self.extraction.schedule(session.workspace_root, session.id)
        elif self._extraction_args is not None:
            self.supervisor.spawn(self._schedule(session), name="extraction-start")

    async def _schedule(self, session: Session) -> None:
        extraction = await self._extraction_service()
        if extraction is not None:
            extraction.schedule(session.workspace_root, session.id)

    def _watch_project(self, pm: ProjectMemory) -> None:
        if pm.workspace_root in self._watched:
            return
        self._watched.add(pm.workspace_root)
        if self.extraction is not None:
            self._resume(self.extraction, pm.workspace_root)
        elif self._extraction_args is not None:
            # Not now: a project is first seen as its first session starts, and
            # the leftovers' scan and imports would compete with its first prompt.
            self._resume_pending.add(pm.workspace_root)
        root = pm.workspace_root

        def changed(paths: list[Path]) -> None:
            for listener in self.memory_listeners:
                listener(root, paths)

        pm.add_listener(changed)

    async def aclose(self) -> None:
        for session in list(self.core.sessions.values()):
            session.cancel_running()
        grace = self.settings.memory.shutdown_grace
        # MCP servers stop while extraction drains: both within the shutdown grace.
        stopping = asyncio.ensure_future(self.mcp.aclose(grace))
        if self._extraction_import is not None and not self._extraction_import.done():
            # No import thread left running at exit; the service may appear with it.
            await asyncio.wait([self._extraction_import], timeout=grace)
        if self.extraction is not None:
            # A running or pending extraction gets a bounded grace period; the
            # cursor guarantees the rest is done on the next start.
            await self.extraction.drain(grace)
            await self.extraction.aclose()
        await stopping
        await self.supervisor.aclose()
        for writer in self.core.writers.values():
            writer.close()
        self.core.live.close()  # the other daemons may delete its sessions now
        await self.memory.aclose()
        await self.provider.aclose()


def _make_sampler(settings: Settings, provider: RoutedProvider, core: AgentCore) -> Sampler:
    """What serves MCP servers' sampling requests: the App's provider (so a
    route the editor chose is followed), each session's model, capped at the
    output limit agentd sets its own requests (`maxOutputTokens`, else the
    model family's; no thinking budget: a sampling request has none)."""
    from agentd.mcp.sampling import Sampler
    from agentd.providers.models import main_output_cap

    pc = settings.provider_config()

    def output_cap(model: str) -> int:
        reasoning = pc.reasoning_model if model == pc.model else None
        return main_output_cap(
            pc.kind, model, max_output_tokens=pc.max_output_tokens, reasoning_model=reasoning
        )

    return Sampler(
        provider,
        model_of=core.model_of,
        output_cap=output_cap,
        takes_images=settings.takes_images,
        max_image_bytes=settings.limits.max_image_bytes,
        token_limit=settings.limits.session_token_limit,
    )


def _listed(info: TranscriptInfo) -> dict[str, Any]:
    """A session as `agent/listSessions` shows it."""
    return {
        "sessionId": info.session_id,
        "title": info.title,
        "updatedAt": _iso(info.updated_at),
        **_roots_of(info),
    }


def _roots_of(info: TranscriptInfo) -> dict[str, Any]:
    # Absent when there are none (ACP: omitted and empty mean the same).
    return {"additionalDirectories": list(info.additional_roots)} if info.additional_roots else {}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _cursor_key(cursor: str) -> tuple[float, str]:
    try:
        t, sid = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        if isinstance(t, int | float) and isinstance(sid, str):
            return float(t), sid
    except (ValueError, TypeError, binascii.Error, UnicodeError):
        pass
    raise InvalidParams.of("cursor", "not a cursor this agent gave out")


def _extraction_cursor(home: Path, workspace_root: Path, session_id: str) -> int:
    """Where memory extraction's cursor of a session stands (0: none yet).
    Blocking: a restored session's transcript is read in a worker thread."""
    from agentd.layout import canonical_root, memory_dir
    from agentd.memory.extraction.cursor import load_cursors

    found = load_cursors(memory_dir(canonical_root(workspace_root), home)).get(session_id)
    return found.offset if found is not None else 0
