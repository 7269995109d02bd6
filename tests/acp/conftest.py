"""Fixtures of the ACP tests: the local model server, a workspace, the real daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentd.testing.model_server import ModelServer
from tests.acp.harness import EditorClient, daemon_env, spawn_daemon


@pytest_asyncio.fixture
async def model_server(tmp_path: Path) -> AsyncIterator[ModelServer]:
    async with ModelServer(log_path=tmp_path / "model-server.jsonl") as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "README.md").write_text("# Demo\nThe answer is 42.\n")
    (root / "app.py").write_text("def main():\n    return 42\n")
    return root


@pytest.fixture
def editor() -> EditorClient:
    return EditorClient()


@pytest_asyncio.fixture
async def daemon(
    editor: EditorClient, model_server: ModelServer, tmp_path: Path
) -> AsyncIterator[Any]:
    """A connection to a fresh daemon, not yet initialized."""
    async with spawn_daemon(
        editor, daemon_env(model_server, tmp_path), tmp_path / "agentd-stderr.log"
    ) as conn:
        yield conn
    assert editor.schema_problems == []
