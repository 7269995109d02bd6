"""Fixtures of the ACP tests: the editor's side and the real daemon (the model
server and the workspace are `tests/conftest.py`'s)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import EditorClient, connect_acp


@pytest.fixture
def editor() -> EditorClient:
    return EditorClient()


@pytest_asyncio.fixture
async def daemon(
    editor: EditorClient, model_server: ModelServer, tmp_path: Path
) -> AsyncIterator[Any]:
    """A connection to a fresh daemon, not yet initialized."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as conn:
        yield conn
    assert editor.schema_problems == []
