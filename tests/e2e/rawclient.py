"""A raw stdio client: for what a well-behaved client library refuses to send
(garbage frames, wrong lengths, requests before initialize, exit codes)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


class RawDaemon:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.notifications: list[dict[str, Any]] = []
        self._buf = b""

    @classmethod
    async def spawn(cls, env: dict[str, str], *args: str) -> RawDaemon:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentd",
            "serve",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        return cls(proc)

    def write_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.write_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, msg_id: Any, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    async def read_message(self, timeout: float = 20.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        stdout = self.proc.stdout

        async def read() -> dict[str, Any]:
            header = await stdout.readuntil(b"\r\n\r\n")
            length = int(header.split(b":")[1].split(b"\r\n")[0])
            return dict(json.loads(await stdout.readexactly(length)))

        return await asyncio.wait_for(read(), timeout)

    async def response(self, msg_id: Any, timeout: float = 20.0) -> dict[str, Any]:
        """Read until the reply to `msg_id` (keeping notifications aside)."""
        while True:
            msg = await self.read_message(timeout)
            if "method" in msg and "id" not in msg:
                self.notifications.append(msg)
                continue
            if msg.get("id") == msg_id and ("result" in msg or "error" in msg):
                return msg

    async def initialize(
        self, options: dict[str, Any] | None = None, pid: int | None = None
    ) -> dict[str, Any]:
        self.request(
            "init",
            "initialize",
            {"processId": pid, "capabilities": {}, "initializationOptions": options or {}},
        )
        reply = await self.response("init")
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return reply

    async def wait_exit(self, timeout: float = 20.0) -> int:
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
