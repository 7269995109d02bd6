"""`ModelServerThread`: the model server for synchronous callers (its own loop, its own thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from agentd.testing.model_server.server import ModelServer

_T = TypeVar("_T")


# --- a server on its own thread, for synchronous callers ----------------------------------


class ModelServerThread:
    """A ModelServer on its own event loop in a background thread.

    Every method hands its work to the server's loop and waits for it, so the
    server is only ever touched from its own thread.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | Path | None = None,
        *,
        hold_headers: bool = False,
        context_window: int | None = None,
    ) -> None:
        self.server = ModelServer(
            host, port, log_path, hold_headers=hold_headers, context_window=context_window
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name="agentd-model-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as exc:  # handed to the thread that called start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self.server.stop()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stopping is not None and thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        thread.join()

    def __enter__(self) -> ModelServerThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, fn: Callable[[], _T]) -> _T:
        loop = self._loop
        if loop is None or self._thread is None:
            raise RuntimeError("the model server thread is not running")

        async def run() -> _T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result()

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def openai_base_url(self) -> str:
        return self.server.openai_base_url

    @property
    def log(self) -> list[dict[str, Any]]:
        """A snapshot of the log."""
        return self._call(lambda: list(self.server.log))

    def requests(self, purpose: str | None = None) -> list[dict[str, Any]]:
        return self._call(lambda: self.server.requests(purpose))

    def enqueue(self, reply: dict[str, Any], purpose: str = "main") -> None:
        self._call(lambda: self.server.enqueue(reply, purpose))

    def add_rule(
        self, match: str, reply: dict[str, Any], purpose: str = "main", times: int | None = None
    ) -> None:
        self._call(lambda: self.server.add_rule(match, reply, purpose, times))

    def set_latency(self, purpose: str, seconds: float) -> None:
        self._call(lambda: self.server.set_latency(purpose, seconds))

    def set_default_arguments(self, tool_name: str, arguments: dict[str, Any]) -> None:
        self._call(lambda: self.server.set_default_arguments(tool_name, arguments))

    def set_model(
        self, name: str, *, reasoning: bool | None = None, replay_reasoning: bool | None = None
    ) -> None:
        self._call(
            lambda: self.server.set_model(
                name, reasoning=reasoning, replay_reasoning=replay_reasoning
            )
        )

    def configure_cache(
        self,
        *,
        enabled: bool | None = None,
        min_tokens: int | None = None,
        ttl: float | None = None,
    ) -> None:
        self._call(
            lambda: self.server.configure_cache(enabled=enabled, min_tokens=min_tokens, ttl=ttl)
        )

    def set_hold_headers(self, hold: bool) -> None:
        self._call(lambda: self.server.set_hold_headers(hold))

    def set_context_window(self, tokens: int | None) -> None:
        self._call(lambda: self.server.set_context_window(tokens))

    def reset(self) -> None:
        self._call(self.server.reset)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        """Blocking wait_for; `predicate` runs on the server's thread."""
        loop = self._loop
        if loop is None or self._thread is None:
            raise RuntimeError("the model server thread is not running")
        future = asyncio.run_coroutine_threadsafe(self.server.wait_for(predicate, timeout), loop)
        return future.result()
