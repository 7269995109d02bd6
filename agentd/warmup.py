"""The App, built off the event loop right after `initialize` is answered.

Both front ends answer `initialize` with nothing but the stdlib (and, for LSP,
pygls) imported; `Warmup.start` then runs a thread that imports pydantic,
httpx and the core, builds the App (settings, provider, memory) and the
provider's HTTP client with its TLS context (about 100 ms the first prompt
would otherwise pay), and hands the result back on the loop. This module
stays light on purpose: the heavy imports happen inside the thread.

One `Warmup` per front-end connection:

    options          the editor's settings (set when `initialize` arrives)
    start()          begin building from them (once; later calls do nothing)
    get()            the App if it is built, else None (never waits)
    wait()           the App, once built (starts the build if needed); raises
                     what the build raised, so every request reports a failed start
    listeners        called on the loop with the new App before any `wait()`
                     returns: where a front end wires its notifications
    aclose()         at shutdown: let the thread finish, then close the App
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentd.app import App

log = logging.getLogger(__name__)

# What httpx imports on its first request.
_HTTP_BACKENDS = ("anyio._backends._asyncio", "h11", "httpcore")
# A daemon thread still importing when the interpreter exits aborts the
# process: shutdown waits this long for it.
BUILD_WAIT = 15.0
CLOSE_TIMEOUT = 10.0


class Warmup:
    def __init__(self, imports: tuple[str, ...] = ()) -> None:
        # The front end's own modules that need pydantic (its params models).
        self._imports = imports
        self.options: dict[str, Any] = {}
        self.listeners: list[Callable[[App], None]] = []
        self._app: App | None = None
        self._result: asyncio.Future[App] | None = None

    def start(self) -> None:
        """Build the App from `options` in a thread (once)."""
        if self._result is not None:
            return
        loop = asyncio.get_running_loop()
        self._result = loop.create_future()
        imports, options = self._imports, dict(self.options)

        def build() -> App:
            for module in imports:
                importlib.import_module(module)
            from agentd.app import App

            app = App.create(options)
            app.provider.warm()
            # Start-up garbage collection, here in the warm-up thread: one
            # listing per project, no prompt can be answered before it is done.
            from agentd.transcript import collect_orphan_images

            collect_orphan_images()
            for module in _HTTP_BACKENDS:
                try:
                    importlib.import_module(module)
                except ImportError:  # pragma: no cover - depends on httpx's backend
                    pass
            return app

        def run() -> None:
            fut: concurrent.futures.Future[App] = concurrent.futures.Future()
            try:
                fut.set_result(build())
            except BaseException as exc:
                fut.set_exception(exc)
            try:
                loop.call_soon_threadsafe(self._finish, fut)
            except RuntimeError:
                pass  # the loop closed first (stdin ended during the warm-up)

        threading.Thread(target=run, name="agentd-warmup", daemon=True).start()

    def _finish(self, fut: concurrent.futures.Future[App]) -> None:
        result = self._result
        if result is None or result.done():
            return
        try:
            app = fut.result()
        except Exception as exc:
            log.exception("start-up failed")
            result.set_exception(exc)
            return
        for listener in self.listeners:
            listener(app)
        self._app = app
        result.set_result(app)

    def get(self) -> App | None:
        return self._app

    async def wait(self) -> App:
        if self._app is not None:
            return self._app
        self.start()
        assert self._result is not None
        return await asyncio.shield(self._result)

    async def aclose(self) -> None:
        if self._result is not None and not self._result.done():
            await asyncio.wait([self._result], timeout=BUILD_WAIT)
        if self._app is not None:
            try:
                await asyncio.wait_for(self._app.aclose(), timeout=CLOSE_TIMEOUT)
            except TimeoutError:
                log.warning("shutdown did not finish within %s s", CLOSE_TIMEOUT)
