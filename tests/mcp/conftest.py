"""Fixtures of the MCP tests: the real daemon with real MCP servers (tests/mcp/server.py)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient, start_client

SERVER = Path(__file__).with_name("server.py")

StartClient = Callable[..., Awaitable[AgentdClient]]


def stdio_server(**env: str) -> dict[str, Any]:
    """An `mcpServers` entry running tests/mcp/server.py over stdio."""
    spec: dict[str, Any] = {"command": sys.executable, "args": [str(SERVER)]}
    if env:
        spec["env"] = env
    return spec


@pytest_asyncio.fixture
async def mcp_client(model_server: ModelServer, tmp_path: Path) -> AsyncIterator[StartClient]:
    """Start the daemon with `servers` as `initializationOptions.mcpServers`
    (and more options); the servers' tools join the first request."""
    clients: list[AgentdClient] = []

    async def start(
        servers: dict[str, Any],
        *,
        permission: bool = False,
        startup_wait: float = 60.0,
        env: dict[str, str] | None = None,
        **options: Any,
    ) -> AgentdClient:
        init: dict[str, Any] = {
            "mcpServers": servers,
            "mcp": {"startupWait": startup_wait},
            "logLevel": "info",
            **options,
        }
        if permission:
            init["requestPermission"] = True
        client = await start_client(
            daemon_env(model_server.openai_base_url, tmp_path, **(env or {})), init
        )
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.lsp.shutdown_session()
