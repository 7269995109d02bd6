"""The App, built off the event loop right after `initialize` is answered.

Both front ends answer `initialize` with nothing but the stdlib (and, for LSP,
pygls) imported; `Warmup.start` then runs a thread that builds, in two
stages, what requests need:

1. the settings: the front end's params models module imported (pydantic)
   with the validators of the requests answered before the App exists, and
   the configuration loaded. A new session needs no more: its reply (the
   session's id, modes and models) comes from the settings, and the session
   itself is created in the core once the App exists (`when_built`), before
   any request that could name it runs.
2. the App: the other validators built, the core imported and built
   (provider, memory, supervisor), the provider's HTTP client with its TLS
   context (about 100 ms the first prompt would otherwise pay) and, on the
   loop while the rest is built, its connection to the endpoint, start-up
   garbage collection, the threads of the loop's default executor
   (`to_thread`), which a session's start-up would otherwise start on the
   loop as its first prompt arrives, then the imports' leftovers released
   (`release`, `agentd.heap.trim`): about 5 MB of RSS in LSP mode.

Each stage is handed back on the loop. This module stays light on purpose:
the heavy imports happen inside the thread.

One `Warmup` per front-end connection:

    options          the editor's settings (set when `initialize` arrives)
    start()          begin building from them (once; later calls do nothing)
    get()            the App if it is built, else None (never waits)
    wait_settings()  the settings, once loaded (stage 1; starts the build)
    wait(waiter)     the App, once built (starts the build if needed); raises
                     `StartupFailed` (from what the build raised), so every
                     request reports a failed start in a user's words. A wait
                     is logged with its length and `waiter`.
    when_built(f)    f(App) now if built, else as soon as it is, before any
                     `wait()` returns
    scan_memory_ahead(root)  a new session's project memory scanned in a
                     thread of its own while the App is built (its first
                     prompt's recall needs that index; started only with the
                     App it would wait for the build); `take_memory_ahead`
                     hands it to `App.start_memory`
    listeners        called on the loop with the new App before any `wait()`
                     returns: where a front end wires its notifications
    aclose()         at shutdown: let the thread finish, then close the App
                     (a build that fails after making the App closes it at once)

`AGENTD_TEST_WARMUP_HOLD=<fifo>` (tests only) holds the thread between the
stages until a writer opens and closes that FIFO: how the e2e tests prove
that a session is answered while the App is still being built.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agentd.errors import StartupFailed
from agentd.files import bind_fallocate
from agentd.heap import drop_generated_source, trim

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from agentd.app import App
    from agentd.config import Settings
    from agentd.memory.project import ProjectMemory

log = logging.getLogger(__name__)

T = TypeVar("T")

# What httpx imports on its first request.
_HTTP_BACKENDS = ("anyio._backends._asyncio", "h11", "httpcore")
# A daemon thread still importing when the interpreter exits aborts the
# process: shutdown waits this long for it.
BUILD_WAIT = 15.0
CLOSE_TIMEOUT = 10.0
HOLD_ENV = "AGENTD_TEST_WARMUP_HOLD"
# Threads of the loop's default executor started by the warm-up: a new
# session's instruction read, its project's first scan and the listing or
# recall that may come with them run at once.
WORKERS = 3
WORKER_START_WAIT = 5.0


class Warmup:
    def __init__(
        self,
        imports: tuple[str, ...] = (),
        first: tuple[str, ...] = (),
        later: tuple[str, ...] = (),
        release: Callable[[], object] | None = None,
    ) -> None:
        # The front end's params models modules (`imports`), the names of the
        # models built in the settings stage (`first`: those of the requests
        # answered before the App exists; the others are built with the App),
        # modules only the App's users need (`later`), and what frees the
        # front end's import-time leftovers once the App is built (`release`).
        self._imports = imports
        self._first = first
        self._later = later
        self._release = release
        self.options: dict[str, Any] = {}
        self.listeners: list[Callable[[App], None]] = []
        self._app: App | None = None
        # The App as soon as the thread has made it: if a later step of the
        # build fails, what it started (the pre-connect on its supervisor, the
        # HTTP client) is closed by `_discard` instead of left without an owner.
        self._made: App | None = None
        self._discarding: asyncio.Future[None] | None = None
        self._settings: asyncio.Future[Settings] | None = None
        self._result: asyncio.Future[App] | None = None
        self._started_at = 0.0
        # Projects being scanned ahead (`scan_memory_ahead`), by root.
        self._ahead: dict[Path, asyncio.Future[ProjectMemory | None]] = {}

    def start(self) -> None:
        """Build the settings, then the App, from `options` in a thread (once)."""
        if self._result is not None:
            return
        loop = asyncio.get_running_loop()
        self._settings = loop.create_future()
        self._result = loop.create_future()
        self._started_at = time.perf_counter()
        imports, first, later, release = self._imports, self._first, self._later, self._release
        options = dict(self.options)
        hold = os.environ.get(HOLD_ENV)
        # Before the thread starts: `linecache` is read on the loop thread.
        drop_generated_source()
        executor = _default_executor(loop)

        def configure() -> Settings:
            from agentd.params import build_models

            for module in imports:
                build_models(importlib.import_module(module), first)
            from agentd.config import load_settings

            return load_settings({k: v for k, v in options.items() if k != "clientTools"})

        def build(settings: Settings) -> App:
            if hold:
                # Until the test opens and closes the FIFO's other end.
                with open(hold, "rb") as gate:
                    gate.read()
            from agentd.params import build_models

            for module in imports:
                build_models(importlib.import_module(module))
            for module in later:
                importlib.import_module(module)
            from agentd.app import App

            app = App.create(options, settings)
            self._made = app  # read on the loop by `_finish`, which this thread schedules
            app.provider.warm()
            # The endpoint's connection is opened on the loop now, while this
            # thread finishes: the loop is idle then, and the first prompt's
            # request finds the connection in the pool (`App.preconnect`).
            with contextlib.suppress(RuntimeError):  # the loop closed first
                loop.call_soon_threadsafe(app.preconnect)
            # Start-up garbage collection, here in the warm-up thread: one
            # listing per project, no prompt can be answered before it is done.
            from agentd.transcript import collect_at_start

            collect_at_start()
            for module in _HTTP_BACKENDS:
                try:
                    importlib.import_module(module)
                except ImportError:  # pragma: no cover - depends on httpx's backend
                    pass
            if executor is not None:
                _start_workers(executor, WORKERS)
            # New sessions' transcripts made ahead get their first block.
            bind_fallocate()
            # Last: what the imports left behind, freed, then the C heap's free
            # pages (most of them freed by the loop thread, so never reused by
            # this one) given back.
            if release is not None:
                release()
            trim()
            return app

        def send(
            callback: Callable[[concurrent.futures.Future[T]], None], step: Callable[[], T]
        ) -> None:
            try:
                loop.call_soon_threadsafe(callback, _outcome(step))
            except RuntimeError:
                pass  # the loop closed first (stdin ended during the warm-up)

        def run() -> None:
            settings = _outcome(configure)
            send(self._configured, settings.result)
            # A failed stage 1 fails the App's future too: that is what requests report.
            send(self._finish, lambda: build(settings.result()))

        threading.Thread(target=run, name="agentd-warmup", daemon=True).start()

    def _configured(self, fut: concurrent.futures.Future[Settings]) -> None:
        result = self._settings
        if result is None or result.done():
            return
        try:
            settings = fut.result()
        except Exception as exc:
            result.set_exception(exc)
            # Reported (and logged) by the App's future; this one may never be awaited.
            result.exception()
            return
        log.info("warm-up: settings loaded after %.1f ms", self._elapsed_ms())
        result.set_result(settings)

    def _finish(self, fut: concurrent.futures.Future[App]) -> None:
        result = self._result
        if result is None or result.done():
            return
        try:
            app = fut.result()
        except Exception as exc:
            log.exception("start-up failed")
            result.set_exception(exc)
            self._discard()
            return
        log.info("warm-up: App built after %.1f ms", self._elapsed_ms())
        try:
            app.on_loop()
        except Exception:
            # A head start only: the App works without it.
            log.exception("warm-up: the App's start on the loop failed")
        listeners, self.listeners = self.listeners, []
        for listener in listeners:
            try:
                listener(app)
            except Exception:
                # One bad listener must not keep every request waiting.
                log.exception("warm-up listener failed")
        self._app, self._made = app, None
        result.set_result(app)

    def _discard(self) -> None:
        """Close the App a failed build made, if it got that far: nothing else
        ever will (no request gets it). Awaited by `aclose`."""
        app, self._made = self._made, None
        if app is not None:
            self._discarding = asyncio.ensure_future(_close_quietly(app))

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self._started_at) * 1000

    def get(self) -> App | None:
        return self._app

    def when_built(self, callback: Callable[[App], None]) -> None:
        """`callback(app)` now if the App is built, else on the loop as soon as
        it is, after the front end's listeners and before any `wait()` returns:
        a session answered before the App existed is created before a request
        can name it. Never called if the build fails (every request reports that)."""
        if self._app is not None:
            callback(self._app)
        else:
            self.listeners.append(callback)

    def scan_memory_ahead(self, root: Path) -> None:
        """Scan the memory of ``root`` (a new session's workspace) in a thread
        of its own now, when the App is not built yet: the scan used to start
        once the App existed, and a project of 10,000 notes then missed its
        first prompt's recall (`memory.firstIndexWait`) in most runs. The
        project is made as the App's `MemoryManager` makes it; nothing is
        scanned when the project has no memory folder (`scan_ahead`)."""
        if self._app is not None or root in self._ahead:
            return
        loop = asyncio.get_running_loop()
        found: asyncio.Future[ProjectMemory | None] = loop.create_future()
        self._ahead[root] = found

        def deliver(project: ProjectMemory | None) -> None:
            if found.done():  # cancelled: no one will start it
                if project is not None:
                    project.release()
            else:
                found.set_result(project)

        def run() -> None:
            project = None
            try:
                from agentd.layout import agentd_home, canonical_root
                from agentd.memory.project import ProjectMemory

                home = agentd_home()
                project = ProjectMemory(
                    canonical_root(root), home=home, watch=True, index_cache_home=home
                )
                project.scan_ahead()
            except Exception:
                # A head start only: the App's own start scans it.
                log.exception("warm-up: the memory scan ahead of %s failed", root)
                if project is not None:
                    project.release()
                project = None
            try:
                loop.call_soon_threadsafe(deliver, project)
            except RuntimeError:  # the loop closed first
                if project is not None:
                    project.release()

        threading.Thread(target=run, name="agentd-memory-ahead", daemon=True).start()

    def take_memory_ahead(self, root: Path) -> asyncio.Future[ProjectMemory | None] | None:
        """The project of ``root`` being scanned ahead, now the caller's to
        start (or None)."""
        return self._ahead.pop(root, None)

    async def wait_settings(self) -> Settings:
        """The settings (the params models imported with them), once loaded."""
        if self._app is not None:
            return self._app.settings
        self.start()
        assert self._settings is not None
        try:
            return await asyncio.shield(self._settings)
        except Exception as exc:
            raise StartupFailed(exc) from exc

    async def wait(self, waiter: str = "a request") -> App:
        if self._app is not None:
            return self._app
        self.start()
        assert self._result is not None
        began = time.perf_counter()
        try:
            return await asyncio.shield(self._result)
        except Exception as exc:
            raise StartupFailed(exc) from exc
        finally:
            # What the warm-up costs the requests that come early (first prompts among them).
            log.info(
                "%s waited %.1f ms for the warm-up", waiter, (time.perf_counter() - began) * 1000
            )

    async def aclose(self) -> None:
        ahead, self._ahead = list(self._ahead.values()), {}
        if ahead:
            # Scans no App took: their projects let go of their files.
            await asyncio.wait(ahead, timeout=BUILD_WAIT)
            for found in ahead:
                project = found.result() if found.done() else None
                if project is not None:
                    project.release()
                found.cancel()
        if self._result is not None and not self._result.done():
            await asyncio.wait([self._result], timeout=BUILD_WAIT)
        if self._discarding is not None:
            await self._discarding
        if self._app is not None:
            await _close(self._app)


async def _close(app: App) -> None:
    try:
        await asyncio.wait_for(app.aclose(), timeout=CLOSE_TIMEOUT)
    except TimeoutError:
        log.warning("shutdown did not finish within %s s", CLOSE_TIMEOUT)


async def _close_quietly(app: App) -> None:
    # The start-up failure is what requests report; this one is only logged.
    try:
        await _close(app)
    except Exception:
        log.exception("closing the App of a failed start-up failed")


def _default_executor(loop: asyncio.AbstractEventLoop) -> ThreadPoolExecutor | None:
    """The loop's default executor (what `asyncio.to_thread` uses), made now
    so that the warm-up can start its threads; None if the loop has one already
    (its threads are not ours to start)."""
    if getattr(loop, "_default_executor", None) is not None:
        return None
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(thread_name_prefix="asyncio")
    loop.set_default_executor(executor)
    return executor


def _start_workers(executor: ThreadPoolExecutor, count: int) -> None:
    """Make `executor` start `count` threads now (each job holds its thread
    until all have one), so that a session's first `to_thread` calls find one
    idle instead of starting it on the loop (`Thread.start` waits, under the
    GIL and the machine's load, for the new thread to run: up to milliseconds)."""
    barrier = threading.Barrier(count)

    def hold() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(WORKER_START_WAIT)

    for _ in range(count):
        try:
            executor.submit(hold)
        except RuntimeError:
            barrier.abort()  # shut down already (the daemon stops): release those started
            return


def _outcome(step: Callable[[], T]) -> concurrent.futures.Future[T]:
    """`step()`'s result or exception, to be handed over to the loop."""
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()
    try:
        fut.set_result(step())
    except BaseException as exc:
        fut.set_exception(exc)
    return fut
