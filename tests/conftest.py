"""Fixtures of every test that drives a daemon: the bundled model server and a workspace.

The daemon's environment, its command line, the raw and the stdio clients are
in `agentd.testing` (shared with the benchmarks and the demo); the LSP-mode
tests' pytest-lsp client is `tests/lsp_client.py`, the ACP tests' client
`tests/acp/harness.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agentd.testing.model_server import ModelServer


@pytest_asyncio.fixture
async def model_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ModelServer]:
    """The bundled model server, logging to the test's folder. Parametrized
    indirectly with True, it holds a stream's headers until the first token."""
    hold = bool(getattr(request, "param", False))
    log = tmp_path / "model-server.jsonl"
    async with ModelServer(log_path=log, hold_headers=hold) as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "README.md").write_text("# Demo\nThe answer is 42.\n")
    (root / "app.py").write_text("def main():\n    return 42\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return 42\n")
    return root
