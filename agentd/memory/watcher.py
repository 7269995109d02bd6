"""One file watcher (watchfiles' ``awatch``) over a project's memory folders.

The watcher registers its OS watches, tells its owner (who scans, so nothing
written in between is missed), then hands each debounced batch of changes to
the owner. An owner that has scanned already may start it later
(`start(after=...)`): the first registration then waits for that signal and
is followed by the owner's rescan too, so a change made before the watches
existed is still seen. It restarts when the owner asks (a watched folder
appeared or vanished) and after a failure, with backoff; every restart is
followed by the owner's rescan because events may have been lost meanwhile.
``aclose`` stops it through watchfiles' ``stop_event`` and awaits the task:
nothing is left running in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Literal

from watchfiles import Change, awatch

log = logging.getLogger(__name__)

DEBOUNCE_MS = 50
# watchfiles' worker thread wakes every step, takes the GIL and asks the
# stop signal, whether anything changed or not: an idle daemon's wake-ups
# (10 ms: 99 a second, 25 ms: 42; bench/idle_bench.py). An edit reaches
# recall in about two steps (25 ms: 54 ms median; bench/memory_bench.py).
STEP_MS = 25
MAX_BACKOFF_S = 30.0
CLOSE_TIMEOUT_S = 5.0

WatchState = Literal["starting", "running", "stopped", "failed"]
Changes = set[tuple[Change, str]]


async def start_wait_thread() -> None:
    """Start the thread a watcher's waits run in now: awatch blocks in one of
    anyio's worker threads (a set per event loop), and the first watcher of a
    loop would otherwise start it on the loop (`Thread.start` waits there for
    the new thread to run) as its session's first prompt arrives. Idle, the
    thread waits for the first watcher."""
    import anyio.to_thread

    await anyio.to_thread.run_sync(_nothing)


def _nothing() -> None:
    pass


class _StopSignal:
    """What awatch polls (from its worker thread) to know when to return."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self._restart = False

    def is_set(self) -> bool:
        return self._restart or self._stop.is_set()

    def set(self) -> None:
        # awatch calls this when it is cancelled; it ends this instance only.
        self._restart = True


class FolderWatcher:
    def __init__(
        self,
        paths: Callable[[], Sequence[Path]],
        on_changes: Callable[[Changes], Awaitable[bool]],
        on_restarted: Callable[[], Awaitable[None]],
        *,
        name: str = "memory-watcher",
    ) -> None:
        """``on_changes`` returns True when the watched paths must be recomputed."""
        self._paths = paths
        self._on_changes = on_changes
        self._on_restarted = on_restarted
        self._name = name
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.state: WatchState = "stopped"
        self.error: str | None = None

    async def start(self, after: Awaitable[None] | None = None) -> None:
        """Start watching; returns once the first registration is done (or failed).

        With `after`, returns at once: the first registration waits for `after`
        (or for `aclose`), and the owner's rescan follows it. RustNotify's
        constructor creates the OS watches holding the GIL (0.1-5 ms measured),
        so a thread would not take it off the event loop; `after` moves it to
        a moment when the loop has nothing urgent (`MemoryRecall.watch_gate`).
        """
        if self._task is not None:
            return
        registered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if after is not None:
            self.state = "starting"
        self._task = asyncio.create_task(self._run(registered, after), name=self._name)
        if after is None:
            await registered

    async def aclose(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_S)
        except TimeoutError:
            # A handler that ignores the stop: cancel it rather than hang shutdown.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.state = "stopped"

    async def _run(self, registered: asyncio.Future[None], after: Awaitable[None] | None) -> None:
        failures = 0
        # Registered after the owner's scan: the owner looks again once the
        # watches exist, so nothing written in between is missed.
        rescan = after is not None
        try:
            if after is not None and not await self._wait_for(after):
                return
            while not self._stop.is_set():
                try:
                    await self._watch_once(registered, rescan)
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failures += 1
                    self.state = "failed"
                    self.error = f"{type(exc).__name__}: {exc}"
                    log.warning("memory watcher failed (%s); retrying", self.error)
                    if not registered.done():
                        registered.set_result(None)
                    with contextlib.suppress(TimeoutError):
                        delay = min(MAX_BACKOFF_S, 0.25 * 2**failures)
                        await asyncio.wait_for(self._stop.wait(), delay)
                # Whatever ended that round (a restart request, a failure), events
                # may have been missed: the next registration is followed by a rescan.
                rescan = True
        finally:
            if not registered.done():
                registered.set_result(None)
            if self.state != "failed":
                self.state = "stopped"

    async def _wait_for(self, after: Awaitable[None]) -> bool:
        """Wait for `after` or for the stop; True to go on (its failure counts as go)."""
        go = asyncio.ensure_future(after)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([go, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (go, stop):
                fut.cancel()
            await asyncio.wait([go, stop])
        if not go.cancelled() and go.exception() is not None:
            log.debug("memory watcher: start signal failed: %r", go.exception())
        return not self._stop.is_set()

    async def _watch_once(self, registered: asyncio.Future[None], rescan: bool) -> None:
        signal = _StopSignal(self._stop)
        paths = [str(p) for p in self._paths()]
        changes_iter = awatch(
            *paths,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=signal,
            recursive=False,
        )
        pending: asyncio.Future[Changes] = asyncio.ensure_future(anext(changes_iter))
        try:
            # One turn of the loop runs the first step of `pending`, which
            # creates the OS watches synchronously (RustNotify's constructor)
            # before its first await: after this, no write can be missed.
            await asyncio.sleep(0)
            if pending.done() and pending.exception() is not None:
                pending.result()  # raises the registration error
            self.error = None
            if not registered.done():
                registered.set_result(None)
            if rescan:
                # Registered again before looking: nothing falls in between.
                await self._on_restarted()
            # Said once the owner looked again: a client that sees it knows
            # every change from now on comes through the watcher.
            self.state = "running"
            while True:
                try:
                    changes = await pending
                except StopAsyncIteration:
                    return
                if await self._on_changes(changes):
                    return
                if self._stop.is_set():
                    return
                pending = asyncio.ensure_future(anext(changes_iter))
        finally:
            if not pending.done():
                # Told to stop, awatch returns within one step (10 ms).
                signal.set()
                await asyncio.wait([pending])
            if not pending.cancelled():
                pending.exception()  # retrieved: its outcome no longer matters
            await changes_iter.aclose()
