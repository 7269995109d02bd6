"""Where daemon tools run: one daemon thread per call, stopped by a token.

Tool work blocks (directory walks, file reads, a ripgrep subprocess), so it
runs off the event loop. Not in asyncio's default executor: `asyncio.run`
waits for that executor's threads at exit, and `threading` joins non-daemon
threads, so one worker stuck in a read would hold the process forever
(issue 14, item 8). A tool thread here is a daemon thread that nothing waits
for: the caller awaits a future, and a cancel or the hard time limit stops
the wait at once.

The `StopToken` is how the caller stops the work itself: the walkers check
`should_stop()` between files, and a subprocess started through `popen` is
killed the moment the token is cancelled or its soft deadline passes (the
results found so far are returned then).
"""

from __future__ import annotations

import asyncio
import atexit
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from agentd.errors import ToolError

T = TypeVar("T")

# Every live subprocess a tool started; killed at interpreter exit whatever happens.
_LIVE: weakref.WeakSet[subprocess.Popen[bytes]] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()


class Stopped(Exception):
    """Raised inside a tool when its token was cancelled."""


class StopToken:
    def __init__(self, soft_timeout: float | None = None) -> None:
        self._cancelled = threading.Event()
        self._expired = threading.Event()
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self.deadline = time.monotonic() + soft_timeout if soft_timeout else None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def expired(self) -> bool:
        if self._expired.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self._expired.set()
            return True
        return False

    def should_stop(self) -> bool:
        return self._cancelled.is_set() or self.expired

    def check(self) -> None:
        if self._cancelled.is_set():
            raise Stopped

    def cancel(self) -> None:
        self._cancelled.set()
        self._kill_all()

    def expire(self) -> None:
        """The soft deadline: stop subprocesses, keep what was found."""
        self._expired.set()
        self._kill_all()

    def _kill_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a subprocess that this token kills when stopped."""
        with self._lock:
            if self._cancelled.is_set():
                raise Stopped
            proc: subprocess.Popen[bytes] = subprocess.Popen(argv, **kwargs)
            self._procs.add(proc)
            _LIVE.add(proc)
        return proc

    def release(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)


async def run_in_worker(
    fn: Callable[[StopToken], T],
    *,
    name: str,
    soft_timeout: float | None,
    hard_timeout: float,
) -> T:
    """Run `fn(token)` in a daemon thread; cancel stops it, the hard limit gives up on it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    token = StopToken(soft_timeout)

    def settle(result: T | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = fn(token)
        except BaseException as exc:  # handed to the awaiting task, which decides
            outcome: tuple[T | None, BaseException | None] = (None, exc)
        else:
            outcome = (result, None)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=target, name=f"agentd-tool-{name}", daemon=True).start()
    soft = loop.call_later(soft_timeout, token.expire) if soft_timeout else None
    try:
        done, _ = await asyncio.wait({future}, timeout=hard_timeout)
        if not done:
            token.cancel()
            raise ToolError(
                f"{name} did not finish within {hard_timeout:.0f} s and was abandoned "
                "(a slow or stuck file system?)"
            )
        return future.result()
    finally:
        if soft is not None:
            soft.cancel()
        if not future.done():
            # Cancelled (or abandoned): stop the work; its thread ends on its own.
            token.cancel()
            future.cancel()
