"""Build the App off the event loop, right after `initialize` is answered.

Both front ends answer `initialize` with nothing but the stdlib (and, for LSP,
pygls) imported; this thread then imports pydantic, httpx and the core,
builds the App (settings, provider, memory) and the provider's HTTP client
with its TLS context (about 100 ms the first prompt would otherwise pay),
and hands the result back on the loop. This module stays light on purpose:
the heavy imports happen inside the thread.
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


def build_app_in_thread(
    loop: asyncio.AbstractEventLoop,
    options: dict[str, Any],
    result: asyncio.Future[App],
    attach: Callable[[App], None],
    *,
    imports: tuple[str, ...] = (),
    create: Callable[[dict[str, Any]], App] | None = None,
) -> None:
    """Build the App in a thread, then on `loop`: `attach(app)` (the front end
    wires its listeners) and resolve `result`; a failure is logged once and
    set on `result`, so every request that needs the App reports it."""

    def build() -> App:
        for module in imports:
            importlib.import_module(module)
        from agentd.app import App

        app = (create or App.create)(options)
        app.provider.warm()
        for module in _HTTP_BACKENDS:
            try:
                importlib.import_module(module)
            except ImportError:  # pragma: no cover - depends on httpx's backend
                pass
        return app

    def finish(fut: concurrent.futures.Future[App]) -> None:
        if result.done():
            return
        try:
            app = fut.result()
        except Exception as exc:
            log.exception("start-up failed")
            result.set_exception(exc)
            return
        attach(app)
        result.set_result(app)

    def run() -> None:
        fut: concurrent.futures.Future[App] = concurrent.futures.Future()
        try:
            fut.set_result(build())
        except BaseException as exc:
            fut.set_exception(exc)
        try:
            loop.call_soon_threadsafe(finish, fut)
        except RuntimeError:
            pass  # the loop closed first (stdin ended during the warm-up)

    threading.Thread(target=run, name="agentd-warmup", daemon=True).start()
