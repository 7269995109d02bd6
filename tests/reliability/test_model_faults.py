"""Model API faults end to end, within the bounds set in initializationOptions:
a connect timeout and a stream that stalls after its headers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.lsp_client import start_client

pytestmark = pytest.mark.e2e

BOUNDS = {"readIdleTimeout": 1, "connectTimeout": 1, "maxRetries": 0}
KEY = "sk-test-key-123456"


async def test_connect_timeout_is_a_clear_error(
    model_server: ModelServer, tmp_path: Path, workspace: Path, black_hole: str
) -> None:
    env = daemon_env(
        model_server.openai_base_url, tmp_path, AGENTD_BASE_URL=black_hole, AGENTD_MEMORY="off"
    )
    client = await start_client(env, BOUNDS)
    try:
        sid = await client.new_session(workspace)
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["stopReason"] == "error"
        assert result["error"]["kind"] == "timeout"
        assert result["error"]["message"] == (
            f"connecting to {black_hole.split('//')[1].split('/')[0]} timed out after 1 s"
        )
        assert KEY not in str(result)
        # The session keeps taking prompts (each fails the same clear way).
        assert (await client.prompt(sid, "again"))["stopReason"] == "error"
    finally:
        await client.lsp.shutdown_session()


@pytest.mark.parametrize(
    ("stall_after", "kind", "partial"),
    [(0, "timeout", ""), (2, "stream_interrupted", "ab")],
)
async def test_a_stream_stalling_after_headers_is_a_clear_error(
    model_server: ModelServer,
    tmp_path: Path,
    workspace: Path,
    stall_after: int,
    kind: str,
    partial: str,
) -> None:
    client = await start_client(
        daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off"), BOUNDS
    )
    try:
        sid = await client.new_session(workspace)
        model_server.enqueue({"chunks": ["a", "b", "c", "d"], "stallAfter": stall_after})
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["stopReason"] == "error"
        assert result["error"]["kind"] == kind
        host = model_server.base_url.split("//")[1]
        assert result["error"]["message"] == f"{host} sent nothing for 1 s"
        assert client.text(sid) == partial
        # Not retried once the response started; the session takes the next prompt.
        assert len(model_server.requests("main")) == 1
        assert (await client.prompt(sid, "next"))["stopReason"] == "end_turn"
        history = model_server.requests("main")[-1]["body"]["messages"]
        if partial:
            assert history[2]["role"] == "assistant"
            assert history[2]["content"].startswith(partial)
    finally:
        await client.lsp.shutdown_session()
