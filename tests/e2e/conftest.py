"""End-to-end fixtures: a daemon with client tools, driven by pytest-lsp."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient, start_client


@pytest_asyncio.fixture
async def client(model_server: ModelServer, tmp_path: Path) -> AsyncIterator[AgentdClient]:
    c = await start_client(
        daemon_env(model_server.openai_base_url, tmp_path),
        {"clientTools": ["edit_file", "run_command"]},
    )
    yield c
    await c.lsp.shutdown_session()
