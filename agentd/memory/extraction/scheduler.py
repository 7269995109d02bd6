"""Single-flight with one coalesced trailing run.

`request()` never blocks: it starts a run when none is in flight, else marks
one trailing run as pending. However many requests arrive during a run, they
become exactly one more run, which starts after the current one and reads
whatever is newest then. Nothing is queued per request, so nothing is ever
rejected or dropped: the work itself lives in the cursor, not in the queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


class SingleFlight:
    def __init__(self, run: Callable[[], Awaitable[None]], spawn: Spawn) -> None:
        self._run = run
        self._spawn = spawn
        self._task: asyncio.Task[None] | None = None
        self.pending = False
        self.runs = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task if self.running else None

    def request(self) -> None:
        if self.running:
            self.pending = True  # coalesced: one trailing run covers them all
            return
        self.pending = False
        self._task = self._spawn(self._loop())

    async def _loop(self) -> None:
        while True:
            self.pending = False
            self.runs += 1
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                # The run records its own errors; a bug must not stop later runs.
                log.exception("extraction run failed")
            if not self.pending:
                return
