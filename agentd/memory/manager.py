"""The daemon's single owner of project memories (and of their watchers).

``get`` starts a project on first use; callers that arrive while it starts
share that one start (a cancelled caller does not cancel it for the others).
A project whose first scan was run ahead (`ProjectMemory.scan_ahead`, by the
daemon's warm-up) is handed to ``get`` and started from that scan.
``aclose`` is what the daemon's supervisor calls at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentd.layout import agentd_home, canonical_root
from agentd.memory.project import ProjectMemory, WatchGate


class MemoryManager:
    def __init__(self, home: Path | None = None, watch: bool = True) -> None:
        self._home = home
        self._watch = watch
        # Set by the daemon with memory recall on: when a starting project's
        # watcher may register (after its first index; see `ProjectMemory.start`).
        self.watch_gate: WatchGate | None = None
        self._projects: dict[Path, ProjectMemory] = {}
        self._starting: dict[Path, asyncio.Task[ProjectMemory]] = {}
        # Projects scanned ahead that another start made useless, being closed.
        self._dropping: set[asyncio.Task[None]] = set()
        self._closed = False
        # A workspace root as given -> its canonical form, found by `get` (a
        # symlink-resolving walk, a `stat` per component): `get_nowait` runs
        # on every prompt's path to its model request.
        self._keys: dict[Path, Path] = {}

    @property
    def home(self) -> Path:
        return self._home if self._home is not None else agentd_home()

    async def get(
        self,
        workspace_root: Path,
        progress: Callable[[int, int], None] | None = None,
        ahead: Awaitable[ProjectMemory | None] | None = None,
    ) -> ProjectMemory:
        """The project's memory, indexed and watched; started on first use,
        from ``ahead`` when given (the project scanned ahead, or None)."""
        if self._closed:
            self._drop(ahead)
            raise RuntimeError("memory manager is closed")
        key = self._keys.get(workspace_root) or canonical_root(workspace_root)
        if len(self._keys) < 1024:
            self._keys[workspace_root] = key
        ready = self._projects.get(key)
        if ready is not None:
            self._drop(ahead)
            return ready
        task = self._starting.get(key)
        if task is None:
            task = asyncio.create_task(
                self._start(key, progress, ahead), name=f"memory-start:{key}"
            )
            self._starting[key] = task
        else:
            self._drop(ahead)
        return await asyncio.shield(task)

    def _drop(self, ahead: Awaitable[ProjectMemory | None] | None) -> None:
        """Close a project scanned ahead that will not be used."""
        if ahead is None:
            return

        async def close() -> None:
            with contextlib.suppress(Exception):
                found = await ahead
                if found is not None:
                    found.release()

        task = asyncio.ensure_future(close())
        self._dropping.add(task)
        task.add_done_callback(self._dropping.discard)

    async def _start(
        self,
        key: Path,
        progress: Callable[[int, int], None] | None,
        ahead: Awaitable[ProjectMemory | None] | None = None,
    ) -> ProjectMemory:
        project = None
        if ahead is not None:
            found = await ahead
            if found is not None and found.workspace_root == key and self._watch:
                project = found
                project.use_watch_gate(self.watch_gate)
            elif found is not None:
                found.release()
        if project is None:
            project = ProjectMemory(
                key,
                home=self.home,
                watch=self._watch,
                watch_gate=self.watch_gate,
                index_cache_home=self.home,
            )
        try:
            await project.start(progress)
        except BaseException:
            await project.aclose()
            raise
        finally:
            self._starting.pop(key, None)
        if self._closed:
            await project.aclose()
            raise RuntimeError("memory manager closed while the project was starting")
        self._projects[key] = project
        return project

    def get_nowait(self, workspace_root: Path) -> ProjectMemory | None:
        """The project's memory if it is already started, else None (never blocks)."""
        key = self._keys.get(workspace_root) or canonical_root(workspace_root)
        return self._projects.get(key)

    def projects(self) -> list[ProjectMemory]:
        return list(self._projects.values())

    async def aclose(self) -> None:
        self._closed = True
        starting = list(self._starting.values())
        for task in starting:
            task.cancel()
        # Their outcomes (cancelled, failed) are of no interest any more.
        await asyncio.gather(*starting, return_exceptions=True)
        projects, self._projects = list(self._projects.values()), {}
        await asyncio.gather(*(p.aclose() for p in projects))
        await asyncio.gather(*self._dropping, return_exceptions=True)
