"""`additionalDirectories` over the LSP-framed protocol: folders beside the
workspace root a session's tools may use, on `agent/newSession`,
`agent/loadSession`, `agent/forkSession` and in `agent/listSessions`. The
real daemon driven by pytest-lsp, tool calls scripted through the bundled
model server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.e2e.test_session_features import tool_prompt
from tests.e2e.test_session_fork_delete import bad_field
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A second folder, outside the workspace, as an editor's other root."""
    root = tmp_path / "shared"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "util.py").write_text("SHARED_ANSWER = 7\n")
    return root


def last_tool_result(model_server: ModelServer) -> str:
    """The newest tool result the model was sent."""
    messages = model_server.requests("main")[-1]["body"]["messages"]
    return str([m for m in messages if m["role"] == "tool"][-1]["content"])


async def new_session(c: AgentdClient, workspace: Path, extra: list[str]) -> str:
    params = {"workspaceRoot": str(workspace), "additionalDirectories": extra}
    return str((await c.request("agent/newSession", params))["sessionId"])


async def listed(c: AgentdClient, workspace: Path) -> dict[str, Any]:
    found = await c.request("agent/listSessions", {"workspaceRoot": str(workspace)})
    return {s["sessionId"]: s for s in found["sessions"]}


async def test_a_file_in_an_additional_root_is_read_and_a_symlink_out_refused(
    client: AgentdClient, workspace: Path, shared: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    (shared / "leak.txt").symlink_to(secret)
    assert client.init_result is not None
    experimental = client.init_result.capabilities.experimental
    assert isinstance(experimental, dict) and experimental["agentd"]["additionalDirectories"]
    sid = await new_session(client, workspace, [shared.as_uri()])  # a file:// URI too

    await client.prompt(sid, tool_prompt("read_file", path=str(shared / "lib" / "util.py")))
    assert last_tool_result(model_server) == "1  SHARED_ANSWER = 7"
    system = model_server.requests("main")[0]["body"]["messages"][0]["content"]
    assert f"- {shared}\n" in system

    await client.prompt(sid, tool_prompt("glob", pattern="*.py", path=str(shared)))
    assert last_tool_result(model_server) == f"(paths relative to {shared})\nlib/util.py"

    await client.prompt(sid, tool_prompt("read_file", path=str(shared / "leak.txt")))
    refused = last_tool_result(model_server)
    assert "TOP SECRET" not in refused
    assert "outside the workspace roots" in refused


async def test_the_list_is_kept_across_daemons_and_load_and_fork_replace_it(
    model_server: ModelServer, tmp_path: Path, workspace: Path, shared: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    util = str(shared / "lib" / "util.py")
    c = await start_client(env)
    try:
        sid = await new_session(c, workspace, [str(shared), str(workspace)])
        await c.prompt(sid, "hello")
        assert (await listed(c, workspace))[sid]["additionalDirectories"] == [str(shared)]
    finally:
        await c.lsp.shutdown_session()

    c = await start_client(env)
    try:
        assert (await listed(c, workspace))[sid]["additionalDirectories"] == [str(shared)]
        # Loaded without the field, the session keeps its list, and says so.
        loaded = await c.request("agent/loadSession", {"sessionId": sid})
        assert (loaded["workspaceRoot"], loaded["additionalDirectories"]) == (
            str(workspace),
            [str(shared)],
        )
        await c.prompt(sid, tool_prompt("read_file", path=util))
        assert last_tool_result(model_server) == "1  SHARED_ANSWER = 7"

        # A fork without the field has the source's list; with it, its own.
        forked = await c.request("agent/forkSession", {"sessionId": sid})
        assert forked["additionalDirectories"] == [str(shared)]
        same = forked["sessionId"]
        forked = await c.request(
            "agent/forkSession", {"sessionId": sid, "additionalDirectories": []}
        )
        assert (forked["workspaceRoot"], forked["additionalDirectories"]) == (str(workspace), [])
        none = forked["sessionId"]
        await c.prompt(same, tool_prompt("read_file", path=util))
        assert last_tool_result(model_server) == "1  SHARED_ANSWER = 7"
        await c.prompt(none, tool_prompt("read_file", path=util))
        assert "outside the workspace" in last_tool_result(model_server)
        sessions = await listed(c, workspace)
        assert sessions[same]["additionalDirectories"] == [str(shared)]
        assert "additionalDirectories" not in sessions[none]

        # Given, the list replaces the session's: [] clears it.
        await c.request("agent/loadSession", {"sessionId": sid, "additionalDirectories": []})
        await c.prompt(sid, tool_prompt("read_file", path=util))
        assert "outside the workspace" in last_tool_result(model_server)
        assert "additionalDirectories" not in (await listed(c, workspace))[sid]
    finally:
        await c.lsp.shutdown_session()


async def test_hostile_entries_are_refused_naming_the_entry(
    client: AgentdClient, workspace: Path, shared: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "plain.txt").write_text("x")
    sid = await new_session(client, workspace, [])
    await client.prompt(sid, "hello")  # a stored session to load and fork
    hostile: list[Any] = [
        "shared",
        str(tmp_path / "nowhere"),
        str(tmp_path / "plain.txt"),
        str(fifo),
        "/dev/null",
        str(tmp_path) + "/\ud800",
        str(tmp_path) + "/a\x00b",
        "/" + "a" * 100_000,
        7,
    ]
    for bad in hostile:
        for method, params in (
            ("agent/newSession", {"workspaceRoot": str(workspace)}),
            ("agent/loadSession", {"sessionId": sid}),
            ("agent/forkSession", {"sessionId": sid}),
        ):
            with pytest.raises(JsonRpcException) as info:
                await client.request(
                    method, {**params, "additionalDirectories": [str(shared), bad]}
                )
            assert bad_field(info.value) == "additionalDirectories.1", (method, repr(bad)[:40])
    with pytest.raises(JsonRpcException) as info:
        await client.request(
            "agent/newSession",
            {"workspaceRoot": str(workspace), "additionalDirectories": [str(shared)] * 65},
        )
    assert bad_field(info.value) == "additionalDirectories"
    # The session was left as it was, and the daemon still serves.
    assert "additionalDirectories" not in (await listed(client, workspace))[sid]
    await client.prompt(sid, "still here")
