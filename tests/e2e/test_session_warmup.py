"""`agent/newSession` does not wait for the warm-up: the real daemon, its
warm-up held after the settings are loaded (`AGENTD_TEST_WARMUP_HOLD`, a FIFO
the test opens to let it go on), so the App provably does not exist yet when
the reply is read."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from agentd.agent.modes import DEFAULT_MODE
from agentd.testing.daemon import (
    TEST_MODEL,
    daemon_env,
    hold_warmup,
    memory_folder,
    release_warmup,
    release_warmup_nowait,
    spawn_process,
)
from agentd.testing.framing import frame, notification, request
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from tests.lsp_client import start_client

pytestmark = pytest.mark.e2e

# Not a speed bound: while the warm-up is held, a handler that waits for the
# App never answers; this only turns that hang into a failure.
NEVER = 60


async def test_new_session_is_answered_while_the_app_is_built_and_a_prompt_waits_for_it(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    hold = tmp_path / "warmup-hold"
    (memory_folder(workspace, tmp_path) / "deploy.md").write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases to production\n"
        "type: project\n---\n\ndeploy with make ship.\n"
    )
    env = daemon_env(model_server.openai_base_url, tmp_path, **hold_warmup(hold))
    c = await start_client(env, {"memory": {"modelTier": False, "firstIndexWait": 60}})
    try:
        setup = await asyncio.wait_for(
            c.request("agent/newSession", {"workspaceRoot": str(workspace)}), NEVER
        )
        # Answered from the settings while the App is not built: the reply is whole.
        assert setup["mode"] == DEFAULT_MODE and setup["model"] == TEST_MODEL
        assert [m["id"] for m in setup["models"]] == [TEST_MODEL]
        sid = setup["sessionId"]
        # Written the moment the reply is read; it waits for the App.
        prompt = asyncio.ensure_future(c.prompt(sid, "how do we deploy a release?"))
        # Parameter errors are answered as before, also during the warm-up.
        with pytest.raises(JsonRpcException) as bad:
            await c.request("agent/newSession", {"workspaceRoot": 7})
        assert bad.value.code == -32602 and isinstance(bad.value.data, dict)
        assert [f["field"] for f in bad.value.data["fields"]] == ["workspaceRoot"]
        assert model_server.requests() == [] and not prompt.done()
        await asyncio.to_thread(release_warmup, hold)
        result = await prompt
        assert result["stopReason"] == "end_turn"
        (first,) = model_server.requests("main")
        user = [m["content"] for m in first["body"]["messages"] if m["role"] == "user"][-1]
        assert user.startswith("<system-reminder>") and "make ship" in user
        assert c.text(sid)
    finally:
        release_warmup_nowait(hold)
        await c.lsp.shutdown_session()


async def test_prompts_cancelled_while_the_app_is_built_are_answered_cancelled(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Sessions exist before the App does, so a prompt and its cancel can come
    while the warm-up runs: both kinds of cancel still cancel it."""
    hold = tmp_path / "warmup-hold"
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    raw = await RawDaemon.spawn({**env, **hold_warmup(hold)})
    try:
        await raw.initialize()
        sids = []
        for n in ("a", "b"):
            raw.request(n, "agent/newSession", {"workspaceRoot": str(workspace)})
            sids.append((await raw.response(n, timeout=NEVER))["result"]["sessionId"])
        model_server.add_rule("long", {"chunks": ["x "] * 400, "chunkDelay": 0.05})
        raw.write_raw(
            frame(request("p", "agent/prompt", {"sessionId": sids[0], "prompt": "long"}))
            + frame(notification("$/cancelRequest", {"id": "p"}))
            + frame(request("q", "agent/prompt", {"sessionId": sids[1], "prompt": "long"}))
            + frame(notification("agent/cancel", {"sessionId": sids[1]}))
        )
        await asyncio.to_thread(release_warmup, hold)
        assert (await raw.response("p"))["error"]["code"] == -32800
        assert (await raw.response("q"))["error"]["code"] == -32800
        # The sessions take their next prompts.
        for i, sid in enumerate(sids):
            raw.request(i, "agent/prompt", {"sessionId": sid, "prompt": "next"})
            assert (await raw.response(i))["result"]["stopReason"] == "end_turn"
    finally:
        release_warmup_nowait(hold)
        await raw.close()


# The daemon, with a start-up step after the App is built (the collection of
# unused transcripts and orphaned images) made to fail once the FIFO named by the first argument is
# opened and closed: what an import or a collection that raises would do.
FAILING_STARTUP = """
import sys
import agentd.transcript

gate = sys.argv.pop(1)


def collect_at_start(home=None):
    with open(gate, "rb") as held:
        held.read()
    raise RuntimeError("injected start-up fault")


agentd.transcript.collect_at_start = collect_at_start
from agentd.cli import main

raise SystemExit(main())
"""


STARTUP_FAILED = (
    "agentd could not start: RuntimeError: injected start-up fault. "
    "The details are in agentd's log (its stderr, which the editor keeps)."
)


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_start_up_that_fails_after_the_app_is_built_closes_it_and_says_so(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """The warm-up opens the endpoint's connection as soon as the App's HTTP
    client exists; a later start-up step that fails must close that App (its
    pre-connect task, its client and their connection) rather than leave it
    with no owner until the process exits, and every request is answered with
    the start-up's error."""
    gate = tmp_path / "fault-gate"
    os.mkfifo(gate)
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    command = [sys.executable, "-c", FAILING_STARTUP, str(gate), "serve"]
    raw = RawDaemon(await spawn_process([*command, "--acp"] if acp else command, env))
    if acp:
        raw.framing = "acp"
    try:
        if acp:
            raw.request("init", "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            await raw.response("init")
            raw.request("s", "session/new", {"cwd": str(workspace), "mcpServers": []})
        else:
            await raw.initialize()
            raw.request("s", "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await raw.response("s", timeout=NEVER))["result"]["sessionId"]
        # The pre-connect's connection is open and idle in the client's pool.
        await model_server.wait_accepted(1, NEVER)
        await model_server.wait_answered(1, NEVER)
        await asyncio.to_thread(release_warmup, gate)
        if acp:
            prompt = [{"type": "text", "text": "hello"}]
            raw.request("p", "session/prompt", {"sessionId": sid, "prompt": prompt})
        else:
            raw.request("p", "agent/prompt", {"sessionId": sid, "prompt": "hello"})
        error = (await raw.response("p", timeout=NEVER))["error"]
        # Said in a user's words, with where to look, not as a handler's bug.
        assert error["code"] == -32603
        assert error["message"] == STARTUP_FAILED
        # Closed by the daemon while it runs on: the App was closed, not orphaned.
        await model_server.wait_closed(1, NEVER)
        assert raw.proc.returncode is None and model_server.requests() == []
        if acp:
            raw.request("again", "session/list", {"cwd": str(workspace)})
        else:
            raw.request("again", "agent/listSessions", {"workspaceRoot": str(workspace)})
        again = (await raw.response("again"))["error"]
        assert again["code"] == -32603 and again["message"] == STARTUP_FAILED
        if acp:
            assert raw.proc.stdin is not None
            raw.proc.stdin.close()  # ACP's end: stdin closed
        else:
            raw.request("bye", "shutdown")
            assert "result" in await raw.response("bye")
            raw.notify("exit")
        assert await raw.wait_exit() == 0
    finally:
        release_warmup_nowait(gate)
        await raw.close()
