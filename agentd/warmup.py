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
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentd.app import App

# What httpx imports on its first request.
_HTTP_BACKENDS = ("anyio._backends._asyncio", "h11", "httpcore")


def build_app_in_thread(
    loop: asyncio.AbstractEventLoop,
    options: dict[str, Any],
    on_built: Callable[[concurrent.futures.Future[App]], None],
    *,
    imports: tuple[str, ...] = (),
    create: Callable[[dict[str, Any]], App] | None = None,
) -> None:
    """Build the App in a thread; `on_built(future)` then runs on `loop`."""

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

    def run() -> None:
        fut: concurrent.futures.Future[App] = concurrent.futures.Future()
        try:
            fut.set_result(build())
        except BaseException as exc:
            fut.set_exception(exc)
        try:
            loop.call_soon_threadsafe(on_built, fut)
        except RuntimeError:
            pass  # the loop closed first (stdin ended during the warm-up)

    threading.Thread(target=run, name="agentd-warmup", daemon=True).start()
