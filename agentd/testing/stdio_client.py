"""A small asyncio client for `agentd serve` over stdio.

Used by `agentd demo` and the benchmarks: it spawns the daemon as an editor
does, frames JSON-RPC messages, matches replies to requests, and hands
notifications to a callback. Every reply is counted by id (`replies`), late
or duplicate ones included, so a benchmark can check "exactly one reply per
request". (Tests use pytest-lsp, a client we did not write, and
`raw_client.RawDaemon` for what no client library would send.)
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from agentd.testing.daemon import daemon_command, spawn_process
from agentd.testing.framing import frame, initialize_params, notification, read_frame, request

Notification = Callable[[str, Any], None]


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = int(error.get("code", 0))
        self.message = str(error.get("message", ""))
        self.data = error.get("data")


class StdioClient:
    def __init__(
        self, proc: asyncio.subprocess.Process, on_notification: Notification | None
    ) -> None:
        self.proc = proc
        self.on_notification = on_notification
        self._ids = itertools.count(1)
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        self.replies: Counter[Any] = Counter()
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def spawn(
        cls,
        env: dict[str, str] | None = None,
        on_notification: Notification | None = None,
        args: list[str] | None = None,
        stderr: int | None = asyncio.subprocess.DEVNULL,
    ) -> StdioClient:
        """`agentd serve`, or the server `args` names (a command line)."""
        proc = await spawn_process(
            args or daemon_command(),
            env if env is not None else dict(os.environ),
            stderr=stderr,
        )
        return cls(proc, on_notification)

    async def _read_loop(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while True:
                msg = await read_frame(stdout)
                if "method" in msg and "id" in msg:
                    # A request from the daemon (e.g. progress create): accept it.
                    self._write({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                elif "method" in msg:
                    if self.on_notification is not None:
                        self.on_notification(msg["method"], msg.get("params"))
                else:
                    self.replies[msg.get("id")] += 1
                    fut = self._pending.pop(msg.get("id"), None)
                    if fut is not None and not fut.done():
                        if "error" in msg:
                            fut.set_exception(RpcError(msg["error"]))
                        else:
                            fut.set_result(msg.get("result"))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("agentd exited"))

    def _write(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame(msg))

    def send_request(
        self, method: str, params: Any = None, msg_id: Any = None
    ) -> tuple[Any, asyncio.Future[Any]]:
        """Send without waiting; the future gets the result or an `RpcError`."""
        msg_id = next(self._ids) if msg_id is None else msg_id
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        self._write(request(msg_id, method, params))
        return msg_id, fut

    async def request(self, method: str, params: Any = None) -> Any:
        _, fut = self.send_request(method, params)
        return await fut

    def notify(self, method: str, params: Any = None) -> None:
        self._write(notification(method, params))

    async def initialize(self, options: dict[str, Any] | None = None) -> Any:
        result = await self.request("initialize", initialize_params(options, os.getpid()))
        self.notify("initialized", {})
        return result

    async def shutdown(self) -> int:
        try:
            await asyncio.wait_for(self.request("shutdown"), 10)
            self.notify("exit")
            return await asyncio.wait_for(self.proc.wait(), 10)
        except (TimeoutError, ConnectionError):
            self.proc.kill()
            return await self.proc.wait()
        finally:
            self._reader.cancel()
