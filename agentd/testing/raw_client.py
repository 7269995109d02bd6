"""A raw peer of a spawned daemon: for what a well-behaved client library
refuses to send (garbage frames, wrong lengths, requests before initialize,
exit codes), and for measuring with nothing else on the path.

Messages are read in order, one at a time; notifications met while waiting
for a reply are kept aside in `notifications`. LSP framing by default, ACP
lines with `framing="acp"`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from agentd.testing.daemon import spawn_agentd
from agentd.testing.framing import (
    frame,
    initialize_params,
    line,
    notification,
    read_frame,
    read_line,
    request,
)

Framing = Literal["lsp", "acp"]


class RawDaemon:
    def __init__(self, proc: asyncio.subprocess.Process, framing: Framing = "lsp") -> None:
        self.proc = proc
        self.framing: Framing = framing
        self.notifications: list[dict[str, Any]] = []

    @classmethod
    async def spawn(
        cls,
        env: dict[str, str],
        *args: str,
        acp: bool = False,
        framing: Framing | None = None,
        stderr: Any = asyncio.subprocess.DEVNULL,
    ) -> RawDaemon:
        """`agentd serve ARGS` (`acp`: the ACP entry point); `framing` defaults to
        the entry point's."""
        proc = await spawn_agentd(env, *args, acp=acp, stderr=stderr)
        return cls(proc, framing or ("acp" if acp else "lsp"))

    def write_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    def send(self, message: dict[str, Any]) -> None:
        self.write_raw(line(message) if self.framing == "acp" else frame(message))

    def request(self, msg_id: Any, method: str, params: Any = None) -> None:
        self.send(request(msg_id, method, params))

    def notify(self, method: str, params: Any = None) -> None:
        self.send(notification(method, params))

    async def read_message(self, timeout: float = 20.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        read = read_line if self.framing == "acp" else read_frame
        return await asyncio.wait_for(read(self.proc.stdout), timeout)

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
        """LSP's `initialize` and `initialized`."""
        self.request("init", "initialize", initialize_params(options, pid))
        reply = await self.response("init")
        self.notify("initialized", {})
        return reply

    async def open_session(self, workspace: Any) -> str:
        """The handshake of this daemon's framing (ACP `initialize`; LSP
        `initialize` + `initialized`), then a new session in `workspace`
        (ids 0 and 1 over ACP): its id."""
        if self.framing == "acp":
            self.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await self.response(0)
            self.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        else:
            await self.initialize()
            self.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid: str = (await self.response(1))["result"]["sessionId"]
        return sid

    async def wait_exit(self, timeout: float = 20.0) -> int:
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
