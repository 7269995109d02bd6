"""The daemon's MCP servers: which exist, who uses them, their status, shutdown.

`McpManager.attach` gives a session its servers (the configured ones plus
any the editor passed for that session) as the session's `extra_tools`.
Servers start then, in parallel and off the critical path: `attach` never
awaits (each connection's own task loads the SDK in a thread, then
connects). Identical server specs (same command, arguments, environment and
folder, or same URL and headers) share one connection between sessions; a
connection no session uses any more is stopped.

The SDK is imported only by a connection's task, so a daemon with no server
configured never imports it (`sdk_loaded` says whether it has).

Trust: servers come from the user's config file and from the editor
(`initializationOptions.mcpServers`, ACP `mcpServers`), never from a
workspace's files: opening a cloned repository must not run its commands.
An ACP editor's own servers (`type: "acp"`) are reached through `tunnels`,
which the ACP front end sets (`agentd.mcp.tunnel`).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentd.agent.session import Session
from agentd.config import McpServerSettings, McpSettings
from agentd.mcp.connection import McpConnection
from agentd.mcp.session_tools import Attached, SessionMcpTools
from agentd.mcp.tunnel import TunnelPeer
from agentd.tasks import Supervisor

if TYPE_CHECKING:
    from agentd.mcp.sampling import Sampler

log = logging.getLogger("agentd.mcp")

SDK = "mcp"


def connection_key(config: McpServerSettings) -> str:
    """What makes two servers the same connection (not their names or policies)."""
    return json.dumps(
        {
            "transport": config.transport,
            "command": config.command,
            "args": config.args,
            "env": config.env,
            "cwd": config.cwd,
            "url": config.url,
            "headers": config.headers,
            "serverId": config.server_id,
            # The tool filter shapes what the connection lists.
            "include": config.include_tools,
            "exclude": config.exclude_tools,
        },
        sort_keys=True,
    )


def _import_sdk() -> None:
    importlib.import_module(SDK)


def sdk_loaded() -> bool:
    return SDK in sys.modules


class McpManager:
    def __init__(
        self,
        configured: Mapping[str, McpServerSettings],
        settings: McpSettings,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.configured = {n: c for n, c in configured.items() if c.enabled}
        self.settings = settings
        # Its own supervisor: shutdown stops servers gracefully first, within its grace.
        self._supervisor = supervisor or Supervisor("mcp")
        self._connections: dict[str, McpConnection] = {}
        self._names: dict[str, set[str]] = {}
        self._sdk: asyncio.Future[None] | None = None
        # Set by a front end whose editor can provide MCP servers itself (ACP's
        # `type: "acp"`): what reaches them.
        self.tunnels: TunnelPeer | None = None
        # Set by the App: builds what serves the servers' sampling requests
        # with its model, at the first connection (not at start-up: a daemon
        # without MCP servers never imports it). None: sampling is refused.
        self.make_sampler: Callable[[], Sampler] | None = None
        self._sampler: Sampler | None = None

    def attach(
        self, session: Session, extra: Mapping[str, McpServerSettings] | None = None
    ) -> SessionMcpTools | None:
        """Give `session` its servers (started now if new); None when it has none."""
        servers = dict(self.configured)
        servers.update({n: c for n, c in (extra or {}).items() if c.enabled})
        if not servers or session.extra_tools is not None:
            return None
        attached = [Attached(n, cfg, self._connection(n, cfg)) for n, cfg in servers.items()]
        tools = SessionMcpTools(self, attached, self.settings)
        session.extra_tools = tools
        return tools

    def _connection(self, name: str, config: McpServerSettings) -> McpConnection:
        key = connection_key(config)
        connection = self._connections.get(key)
        if connection is None:
            peer = self.tunnels if config.transport == "acp" else None
            if self._sampler is None and self.make_sampler is not None:
                self._sampler = self.make_sampler()
            connection = McpConnection(
                name, config, self._load_sdk, self.settings.startup_timeout, peer, self._sampler
            )
            self._connections[key] = connection
            self._supervisor.spawn(connection.run(), name=f"mcp-{name}")
        connection.users += 1
        self._names.setdefault(key, set()).add(name)
        return connection

    def release(self, tools: SessionMcpTools) -> None:
        """A session is gone: stop the connections nobody uses any more."""
        for attached in tools.servers:
            connection = attached.connection
            connection.users -= 1
            if connection.users <= 0:
                key = connection_key(connection.config)
                self._connections.pop(key, None)
                self._names.pop(key, None)
                connection.stop()
        tools.servers = []

    async def _load_sdk(self) -> None:
        # Importing the SDK takes about a second of CPU: in a thread, once.
        if self._sdk is None:
            self._sdk = asyncio.ensure_future(asyncio.to_thread(_import_sdk))
        await asyncio.shield(self._sdk)

    # --- status and shutdown ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        servers: list[dict[str, Any]] = []
        seen: set[str] = set()
        for key, connection in self._connections.items():
            for name in sorted(self._names.get(key, {connection.name})):
                seen.add(name)
                servers.append({"name": name, "sessions": connection.users, **connection.status()})
        for name, config in self.configured.items():
            if name not in seen:
                # Configured, but no session has used it yet: not started.
                servers.append(
                    {
                        "name": name,
                        "state": "idle",
                        "transport": config.transport,
                        "toolCount": 0,
                        "tools": [],
                        "restarts": 0,
                        "sessions": 0,
                    }
                )
        servers.sort(key=lambda s: str(s["name"]))
        return {"servers": servers, "sdkLoaded": sdk_loaded()}

    async def aclose(self, grace: float) -> None:
        """Stop every server: each is asked to exit, then killed by the SDK when it does not."""
        for connection in self._connections.values():
            connection.stop()
        tasks = [t for t in self._supervisor.tasks if not t.done()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            if late:
                log.warning("%d MCP server(s) did not stop within %.0f s", len(late), grace)
        await self._supervisor.aclose(timeout=1.0)
