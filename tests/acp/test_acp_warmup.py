"""ACP `session/new` does not wait for the warm-up: the real daemon, its
warm-up held after the settings are loaded (`AGENTD_TEST_WARMUP_HOLD`, a FIFO
the test opens to let it go on), so the App provably does not exist yet when
the reply is read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from agentd.agent.modes import DEFAULT_MODE
from agentd.testing.daemon import (
    TEST_MODEL,
    daemon_env,
    hold_warmup,
    memory_folder,
    release_warmup,
    release_warmup_nowait,
)
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, capabilities, connect_acp

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

# Not a speed bound: while the warm-up is held, a handler that waits for the
# App never answers; this only turns that hang into a failure.
NEVER = 60


async def test_session_new_is_answered_while_the_app_is_built_and_a_prompt_waits_for_it(
    editor: EditorClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    hold = tmp_path / "warmup-hold"
    (memory_folder(workspace, tmp_path) / "deploy.md").write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases to production\n"
        "type: project\n---\n\ndeploy with make ship.\n"
    )
    env = daemon_env(model_server.openai_base_url, tmp_path, **hold_warmup(hold))
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        try:
            await conn.initialize(
                protocol_version=1,
                client_capabilities=capabilities(),
                client_info=CLIENT_INFO,
                agentd={"memory": {"modelTier": False, "firstIndexWait": 60}},
            )
            setup: Any = await asyncio.wait_for(
                conn.new_session(cwd=str(workspace), mcp_servers=[]), NEVER
            )
            # Answered from the settings while the App is not built: the reply is whole.
            assert setup.modes.current_mode_id == DEFAULT_MODE
            (_, model) = setup.config_options
            assert model.current_value == TEST_MODEL
            sid = setup.session_id
            # Parameter errors are answered as before, also during the warm-up.
            with pytest.raises(RequestError) as bad:
                await conn.new_session(cwd="relative/path", mcp_servers=[])
            assert bad.value.code == -32602
            data: Any = bad.value.data
            assert [f["field"] for f in data["fields"]] == ["cwd"]
            # Written the moment the reply is read; it waits for the App.
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[text_block("how do we deploy a release?")])
            )
            await editor.wait_sent("session/prompt")
            assert model_server.requests() == [] and not prompt.done()
            await asyncio.to_thread(release_warmup, hold)
            result = await prompt
            assert result.stop_reason == "end_turn"
            (first,) = model_server.requests("main")
            user = first["body"]["messages"][-1]["content"]
            assert user.startswith("<system-reminder>") and "make ship" in user
            assert editor.text(sid)
        finally:
            release_warmup_nowait(hold)
    assert editor.schema_problems == []


async def test_a_prompt_cancelled_while_the_app_is_built_ends_cancelled(
    editor: EditorClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    hold = tmp_path / "warmup-hold"
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    async with connect_acp(editor, {**env, **hold_warmup(hold)}, tmp_path / "e.log") as conn:
        try:
            await conn.initialize(
                protocol_version=1, client_capabilities=capabilities(), client_info=CLIENT_INFO
            )
            setup: Any = await asyncio.wait_for(
                conn.new_session(cwd=str(workspace), mcp_servers=[]), NEVER
            )
            sid = setup.session_id
            model_server.add_rule("long", {"chunks": ["x "] * 400, "chunkDelay": 0.05})
            prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("long")]))
            await editor.wait_sent("session/prompt")
            await conn.cancel(session_id=sid)
            await asyncio.to_thread(release_warmup, hold)
            assert (await prompt).stop_reason == "cancelled"
            # The session takes the next prompt.
            after = await conn.prompt(session_id=sid, prompt=[text_block("next")])
            assert after.stop_reason == "end_turn"
        finally:
            release_warmup_nowait(hold)
    assert editor.schema_problems == []


async def test_the_first_prompts_request_goes_over_the_connection_the_warm_up_opened(
    editor: EditorClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    """The warm-up opens the endpoint's connection once it has built the HTTP
    client (`App.preconnect`): the model server accepts it before any prompt,
    and the first prompt's request goes over it (no TCP handshake of its
    own). The pre-connect is no model request: the log has none but the
    prompt's. The prompt goes once the pre-connect's answer is written: a
    request sent while the pre-connect is still in flight gets a connection
    of its own, by design."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await conn.initialize(
            protocol_version=1, client_capabilities=capabilities(), client_info=CLIENT_INFO
        )
        await model_server.wait_accepted(1, NEVER)
        await model_server.wait_answered(1, NEVER)
        assert model_server.requests() == []
        setup: Any = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        result = await conn.prompt(session_id=setup.session_id, prompt=[text_block("hello")])
        assert result.stop_reason == "end_turn"
        (main,) = model_server.requests()
        assert main["purpose"] == "main" and main["connection"] == 1
        assert model_server.accepted == 1
    assert editor.schema_problems == []
