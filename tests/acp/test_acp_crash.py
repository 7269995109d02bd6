"""A session whose daemon was killed mid-turn loads, resumes and goes on (ACP):
the real daemon killed with SIGKILL while it waits on the editor's permission
answer for an edit, then `session/load` and `session/resume` in new daemons,
against the bundled model server, which refuses tool calls without results
as the real APIs do."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from acp import text_block
from acp.stdio import spawn_agent_process

from agentd.testing.daemon import agentd_home, daemon_command, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.transcript import sessions_dir
from tests.acp.harness import EditorClient, connect_acp
from tests.acp.test_acp_e2e import main_requests, new_session, start, tool

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

INTERRUPTED = "This tool call was interrupted"


async def killed_while_asking(env: dict[str, str], workspace: Path, stderr: Path) -> str:
    """A session whose daemon is killed (SIGKILL) while the editor has not
    answered the permission request of an edit; the session's id."""
    editor = EditorClient()
    never = asyncio.Event()

    async def hold(request: dict[str, Any]) -> str:
        await never.wait()
        return "cancelled"

    editor.decide = hold
    with stderr.open("ab") as err:
        async with spawn_agent_process(
            editor,
            *daemon_command(acp=True),
            env=env,
            transport_kwargs={"stderr": err.fileno()},
            observers=[editor.observe],
        ) as (conn, process):
            await start(conn)
            sid = await new_session(conn, workspace)
            edit = tool("edit_file", path="app.py", old_text="42", new_text="43")
            turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=edit))
            await editor.wait_for(lambda m: m.get("method") == "session/request_permission")
            process.kill()
            await process.wait()
            turn.cancel()
            with contextlib.suppress(BaseException):
                await turn
    return sid


async def test_a_session_killed_while_asking_permission_loads_resumes_and_goes_on(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    stderr = tmp_path / "agentd-stderr.log"
    sid = await killed_while_asking(env, workspace, stderr)
    path = sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl"
    written = path.read_bytes()

    loaded = EditorClient()
    async with connect_acp(loaded, env, stderr) as conn:
        await start(conn)
        await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        kinds = [u["sessionUpdate"] for u in loaded.updates(sid)]
        assert kinds[:3] == ["user_message_chunk", "tool_call", "tool_call_update"]
        shown = loaded.updates(sid, "tool_call_update")[0]
        assert shown["status"] == "failed"
        assert INTERRUPTED in shown["content"][0]["content"]["text"]
    assert loaded.schema_problems == []
    # A load alone writes nothing: the session may be running in another daemon.
    assert path.read_bytes() == written

    resumed = EditorClient()
    async with connect_acp(resumed, env, stderr) as conn:
        await start(conn)
        await conn.resume_session(cwd=str(workspace), session_id=sid)
        assert resumed.updates(sid, "tool_call_update") == []  # no replay
        result = await conn.prompt(session_id=sid, prompt=[text_block("what happened?")])
        assert result.stop_reason == "end_turn"
        assert resumed.text(sid) == "Echo: what happened?"
    assert resumed.schema_problems == []
    messages = main_requests(model_server)[-1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user", "user"]
    call_id = messages[2]["tool_calls"][0]["id"]
    assert messages[3]["tool_call_id"] == call_id and INTERRUPTED in messages[3]["content"]
    assert "<system-reminder>" in messages[4]["content"]
    # The edit was never answered, so never made.
    assert (workspace / "app.py").read_text() == "def main():\n    return 42\n"
    assert path.read_bytes().startswith(written)
