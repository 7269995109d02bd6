"""The owner of every background task.

Nothing in agentd calls `asyncio.create_task` and walks away: background work
(recall side queries, extraction, watchers, the editor-process watchdog) is
started through a `Supervisor`, which keeps a strong reference, logs failures
once, and at shutdown cancels what is left and awaits it for a bounded time.
A task that ignores cancellation cannot hold shutdown forever
(clangd's abort-after-timeout).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Supervisor:
    def __init__(self, name: str = "agentd") -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        if self._closed:
            coro.close()
            raise RuntimeError(f"supervisor {self.name} is closed")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_done)
        return task

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("background task %s failed: %r", task.get_name(), exc, exc_info=exc)

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        return frozenset(self._tasks)

    async def aclose(self, timeout: float = 3.0) -> None:
        """Cancel every task and wait for them, at most `timeout` seconds."""
        self._closed = True
        pending = [t for t in self._tasks if not t.done()]
        for task in pending:
            task.cancel()
        if not pending:
            return
        _, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            log.warning("task %s ignored cancellation; abandoning it", task.get_name())
