"""Prompts end to end: streaming, tools, cancel, limits, provider faults."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.daemon import daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.turn_ends import NOT_RUN_RESULT
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e


async def test_initialize_advertises_agentd(client: AgentdClient) -> None:
    assert client.init_result is not None
    experimental = client.init_result.capabilities.experimental
    assert isinstance(experimental, dict)
    caps = experimental["agentd"]
    assert caps["protocolVersion"] == 1
    assert caps["clientTools"] == ["edit_file", "run_command"]
    assert set(caps["daemonTools"]) == {"read_file", "list_dir", "search", "glob"}
    # The pickers can show before any session: the modes as agent/newSession lists
    # them, the one a new session starts in, and agent/compact.
    assert [m["id"] for m in caps["modes"]] == ["ask", "code", "auto-edit"]
    assert all(m["name"] and m["description"] for m in caps["modes"])
    assert caps["defaultMode"] == "code"
    assert caps["compaction"] is True
    from agentd.lsp.ext import AgentdCapabilities

    AgentdCapabilities.model_validate(caps)


async def test_prompt_streams_chunks_and_result(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue({"chunks": ["Hello", ", ", "world"], "usage": {"input": 11, "output": 3}})
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "say hello")
    # The cache figure is there because the server reported it (OpenAI always does).
    usage = {"inputTokens": 11, "outputTokens": 3, "cacheReadTokens": 0}
    assert result == {"stopReason": "end_turn", "usage": usage}
    chunks = [u["update"]["text"] for u in client.updates if u["update"]["kind"] == "message_chunk"]
    assert chunks == ["Hello", ", ", "world"]
    assert client.kinds(sid)[-1] == "usage"
    (req,) = model_server.requests("main")
    assert req["headers"]["x-agentd-purpose"] == "main"
    assert req["headers"]["authorization"] == "<redacted>"
    body = req["body"]
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    # The date rides on the session's first user message, as a reminder, not
    # in the system prompt: a new day must not change every request's prefix.
    user = body["messages"][-1]
    assert user["role"] == "user"
    assert user["content"].startswith("<system-reminder>\nToday's date is ")
    assert user["content"].endswith("</system-reminder>\n\nsay hello")
    assert "Today's date" not in body["messages"][0]["content"]
    # No client tools beyond those declared; the daemon's own are offered.
    names = {t["function"]["name"] for t in body["tools"]}
    assert names == {
        "read_file",
        "list_dir",
        "search",
        "glob",
        "edit_file",
        "run_command",
        "update_plan",
    }


async def test_history_carries_over_between_prompts(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    sid = await client.new_session(workspace)
    await client.prompt(sid, "first")
    await client.prompt(sid, "second")
    second = model_server.requests("main")[1]["body"]["messages"]
    assert [m["role"] for m in second[1:]] == ["user", "assistant", "user"]
    assert second[2]["content"] == "Echo: first"


async def test_daemon_tool_round_trip(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue(
        {"toolCalls": [{"id": "c1", "name": "read_file", "arguments": {"path": "README.md"}}]}
    )
    model_server.enqueue({"text": "The README says 42."})
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "what does the readme say?")
    assert result["stopReason"] == "end_turn"
    updates = [u["update"] for u in client.updates if u["sessionId"] == sid]
    call = next(u for u in updates if u["kind"] == "tool_call")
    assert call == {
        "kind": "tool_call",
        "toolCallId": "c1",
        "name": "read_file",
        "arguments": {"path": "README.md"},
        "executor": "daemon",
        "locations": [{"path": str(workspace / "README.md")}],
    }
    done = [u for u in updates if u["kind"] == "tool_call_update" and u["status"] == "completed"]
    assert "The answer is 42." in done[0]["content"]
    assert done[0]["locations"] == [{"path": str(workspace / "README.md"), "line": 1}]
    second = model_server.requests("main")[1]["body"]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "c1"
    assert second[-1]["role"] == "tool" and "The answer is 42." in second[-1]["content"]


async def test_client_tool_round_trip(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    args = {"path": "src/app.py", "old_text": "42", "new_text": "43"}
    model_server.enqueue({"toolCalls": [{"id": "e1", "name": "edit_file", "arguments": args}]})
    seen: list[dict[str, Any]] = []

    def run_tool(update: dict[str, Any]) -> tuple[str, bool]:
        seen.append(update)
        return ("applied 1 edit", False)

    client.tool_handler = run_tool
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "bump the answer")
    assert result["stopReason"] == "end_turn"
    assert seen[0]["executor"] == "client" and seen[0]["arguments"] == args
    second = model_server.requests("main")[1]["body"]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "e1", "content": "applied 1 edit"}
    assert client.text(sid).endswith("Tool result received: applied 1 edit")


async def test_client_tool_error_result_reaches_model(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue(
        {"toolCalls": [{"id": "r1", "name": "run_command", "arguments": {"command": "ls"}}]}
    )
    client.tool_handler = lambda u: ("The user denied this command.", True)
    sid = await client.new_session(workspace)
    await client.prompt(sid, "list files")
    statuses = [
        u["update"]["status"] for u in client.updates if u["update"]["kind"] == "tool_call_update"
    ]
    assert statuses == ["failed"]
    assert "denied" in model_server.requests("main")[1]["body"]["messages"][-1]["content"]


async def test_cancel_mid_stream(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue({"chunks": [f"w{i} " for i in range(200)], "chunkDelay": 0.05})
    sid = await client.new_session(workspace)
    task = asyncio.ensure_future(client.prompt(sid, "long answer", msg_id="p-1"))
    await client.wait_for_update(lambda u: u["update"]["kind"] == "message_chunk")
    client.cancel("p-1")
    with pytest.raises(JsonRpcException) as info:
        await task
    assert info.value.code == -32800
    await model_server.wait_for(lambda e: e["type"] == "disconnect")
    n = len(client.updates)
    # The session takes the next prompt, and the interrupted text is in its history.
    result = await client.prompt(sid, "next")
    assert result["stopReason"] == "end_turn"
    late = [u for u in client.updates[n:] if u["update"]["kind"] == "message_chunk"]
    assert "".join(u["update"]["text"] for u in late) == "Echo: next"
    history = model_server.requests("main")[-1]["body"]["messages"]
    assert history[2]["role"] == "assistant" and history[2]["content"].startswith("w0 ")


async def test_cancel_while_waiting_for_client_tool(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue(
        {"toolCalls": [{"id": "t1", "name": "run_command", "arguments": {"command": "sleep 100"}}]}
    )
    sid = await client.new_session(workspace)
    task = asyncio.ensure_future(client.prompt(sid, "run it", msg_id=77))
    await client.wait_for_update(lambda u: u["update"]["kind"] == "tool_call")
    client.notify("agent/cancel", {"sessionId": sid})
    with pytest.raises(JsonRpcException) as info:
        await task
    assert info.value.code == -32800
    statuses = [u["update"] for u in client.updates if u["update"]["kind"] == "tool_call_update"]
    assert statuses == [{"kind": "tool_call_update", "toolCallId": "t1", "status": "cancelled"}]
    # A late result is ignored without an error; the session still works.
    client.tool_result(sid, "t1", "too late")
    assert (await client.prompt(sid, "again"))["stopReason"] == "end_turn"
    history = model_server.requests("main")[-1]["body"]["messages"]
    tool_msgs = [m for m in history if m["role"] == "tool"]
    assert tool_msgs == [
        {
            "role": "tool",
            "tool_call_id": "t1",
            "content": "The user cancelled this tool call before it finished.",
        }
    ]


async def test_second_prompt_while_running_is_refused(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue({"chunks": ["a"] * 50, "chunkDelay": 0.05})
    sid = await client.new_session(workspace)
    first = asyncio.ensure_future(client.prompt(sid, "one", msg_id="one"))
    await client.wait_for_update(lambda u: u["update"]["kind"] == "message_chunk")
    with pytest.raises(JsonRpcException) as info:
        await client.prompt(sid, "two")
    assert info.value.code == -32003
    client.cancel("one")
    with pytest.raises(JsonRpcException):
        await first


async def test_reset_and_close(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    sid = await client.new_session(workspace)
    await client.prompt(sid, "remember me")
    assert await client.request("agent/resetSession", {"sessionId": sid}) == {}
    await client.prompt(sid, "fresh")
    messages = model_server.requests("main")[-1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert await client.request("agent/closeSession", {"sessionId": sid}) == {}
    with pytest.raises(JsonRpcException) as info:
        await client.prompt(sid, "gone")
    assert info.value.code == -32001


@pytest.mark.parametrize(
    ("limits", "replies", "expected", "requests"),
    [
        ({"maxStepsPerPrompt": 0}, [], "max_turns", 0),
        (
            {"maxStepsPerPrompt": 1},
            [{"toolCalls": [{"name": "list_dir", "arguments": {}}]}],
            "max_turns",
            1,
        ),
        ({"maxSessionTurns": 0}, [], "max_turns", 0),
        (
            {"sessionTokenLimit": 1},
            [{"text": "x", "usage": {"input": 5, "output": 5}}],
            "token_limit",
            1,
        ),
    ],
)
async def test_limits_end_prompt_with_stop_reason(
    model_server: ModelServer,
    tmp_path: Path,
    workspace: Path,
    limits: dict[str, int],
    replies: list[dict[str, Any]],
    expected: str,
    requests: int,
) -> None:
    for reply in replies:
        model_server.enqueue(reply)
    c = await start_client(daemon_env(model_server.openai_base_url, tmp_path), {"limits": limits})
    try:
        sid = await c.new_session(workspace)
        if expected == "token_limit":
            assert (await c.prompt(sid, "spend"))["stopReason"] == "end_turn"
        result = await c.prompt(sid, "go")
        assert result["stopReason"] == expected
        assert len(model_server.requests("main")) == requests
    finally:
        await c.lsp.shutdown_session()


async def test_refusal(client: AgentdClient, model_server: ModelServer, workspace: Path) -> None:
    model_server.enqueue({"text": "I can't help with that.", "stopReason": "refusal"})
    sid = await client.new_session(workspace)
    assert (await client.prompt(sid, "bad"))["stopReason"] == "refusal"
    # A refusal that came with a tool call: the call is not run, and is
    # answered so, or the API would refuse every later request of the session.
    call = {"name": "run_command", "arguments": {"command": "rm -rf /"}}
    model_server.enqueue({"toolCalls": [call], "stopReason": "refusal"})
    assert (await client.prompt(sid, "worse"))["stopReason"] == "refusal"
    assert "tool_call_update" not in client.kinds(sid)
    assert (await client.prompt(sid, "sorry"))["stopReason"] == "end_turn"
    messages = model_server.requests("main")[-1]["body"]["messages"]
    assert messages[-3]["role"] == "assistant" and messages[-2]["role"] == "tool"
    assert messages[-2]["content"] == NOT_RUN_RESULT


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        ([{"status": 429, "retryAfter": "1"}], "end_turn"),
        ([{"status": 500}, {"status": 503}], "end_turn"),
        (
            [{"status": 401, "errorBody": {"error": {"message": "bad key sk-test-key-123456"}}}],
            "error",
        ),
        ([{"status": 429, "retryAfter": "3600"}], "error"),
    ],
)
async def test_provider_faults(
    client: AgentdClient,
    model_server: ModelServer,
    workspace: Path,
    faults: list[dict[str, Any]],
    expected: str,
) -> None:
    for fault in faults:
        model_server.enqueue(fault)
    model_server.enqueue({"text": "recovered"})
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "hello")
    assert result["stopReason"] == expected
    if expected == "end_turn":
        assert client.text(sid) == "recovered"
        assert len(model_server.requests("main")) == len(faults) + 1
    else:
        assert len(model_server.requests("main")) == 1  # no retry
        assert "sk-test-key-123456" not in json.dumps(result)
        assert result["error"]["message"]


async def test_mid_stream_drop_keeps_partial_text(
    client: AgentdClient, model_server: ModelServer, workspace: Path
) -> None:
    model_server.enqueue(
        {
            "chunks": ["partial ", "answer "],
            "toolCalls": [{"id": "x", "name": "read_file", "arguments": {"path": "README.md"}}],
            "dropAfter": 3,
        }
    )
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "go")
    assert result["stopReason"] == "error"
    assert result["error"]["kind"] == "stream_interrupted"
    assert "tool_call" not in client.kinds(sid)  # the cut-off call never ran
    await client.prompt(sid, "again")
    history = model_server.requests("main")[-1]["body"]["messages"]
    assert history[2] == {"role": "assistant", "content": "partial answer "}


@pytest.mark.parametrize("kind", ["error_event", "bad_json"])
async def test_malformed_sse_is_a_clear_error(
    client: AgentdClient, model_server: ModelServer, workspace: Path, kind: str
) -> None:
    model_server.enqueue({"text": "some text here", "malformed": kind})
    sid = await client.new_session(workspace)
    result = await client.prompt(sid, "go")
    assert result["stopReason"] == "error"
    assert result["error"]["message"]


async def test_sessions_persist_list_and_load_after_restart(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.enqueue({"toolCalls": [{"id": "c9", "name": "list_dir", "arguments": {}}]})
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env)
    sid = await c.new_session(workspace)
    await c.prompt(sid, "What is in here?\nsecond line")
    await c.lsp.shutdown_session()

    c2 = await start_client(env)
    try:
        listed = await c2.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert [(s["sessionId"], s["title"]) for s in listed["sessions"]] == [
            (sid, "What is in here?")
        ]
        loaded = await c2.request("agent/loadSession", {"sessionId": sid})
        assert (loaded["mode"], loaded["model"], loaded["plan"]) == ("code", "test-model", [])
        kinds = c2.kinds(sid)
        assert kinds == [
            "user_message",
            "tool_call",
            "usage",
            "tool_call_update",
            "message_chunk",
            "usage",
            "prompt_end",
        ]
        # The restored history goes to the model with the next prompt.
        await c2.prompt(sid, "and now?")
        messages = model_server.requests("main")[-1]["body"]["messages"]
        assert [m["role"] for m in messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
        ]
        with pytest.raises(JsonRpcException) as info:
            await c2.request("agent/loadSession", {"sessionId": "../../etc/passwd"})
        assert info.value.code == -32602  # never a path: refused naming sessionId
    finally:
        await c2.lsp.shutdown_session()


async def test_anthropic_provider_end_to_end(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(
        model_server.openai_base_url,
        tmp_path,
        AGENTD_PROVIDER="anthropic",
        AGENTD_BASE_URL=model_server.base_url,
    )
    model_server.enqueue(
        {"toolCalls": [{"id": "tu1", "name": "read_file", "arguments": {"path": "README.md"}}]}
    )
    model_server.enqueue({"thinking": "The file says 42.", "text": "It is 42."})
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "what is the answer?")
        assert result["stopReason"] == "end_turn"
        assert "thought_chunk" in c.kinds(sid)
        assert c.text(sid) == "It is 42."
        first, second = model_server.requests("main")
        assert first["api"] == "anthropic" and first["headers"]["x-api-key"] == "<redacted>"
        # No client tools declared: only the daemon's own tools are offered.
        offered = {t["name"] for t in first["body"]["tools"]}
        assert offered == {"read_file", "list_dir", "search", "glob", "update_plan"}
        last = second["body"]["messages"][-1]
        assert last["role"] == "user"
        assert last["content"][0]["type"] == "tool_result"
        assert last["content"][0]["tool_use_id"] == "tu1"
    finally:
        await c.lsp.shutdown_session()


async def test_replay_shows_what_the_live_view_showed_and_the_token_count_goes_on(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    from tests.e2e.test_memory_prefetch import write_topic

    topic = write_topic(
        memory_folder(workspace, tmp_path),
        "Deploy checklist",
        "How we ship releases to production",
        "Run the smoke tests, then deploy with make ship.",
    )
    env = daemon_env(model_server.openai_base_url, tmp_path)
    model_server.enqueue({"text": "Use make ship.", "usage": {"input": 10, "output": 5}})
    model_server.enqueue({"chunks": [f"w{i} " for i in range(200)], "chunkDelay": 0.05})
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})  # index ready
        await c.prompt(sid, "how do we deploy a release to production?")
        task = asyncio.ensure_future(c.prompt(sid, "write a long essay", msg_id="long"))
        await c.wait_for_update(lambda u: u["update"].get("text") == "w0 ")
        c.cancel("long")
        with pytest.raises(JsonRpcException):
            await task
    finally:
        await c.lsp.shutdown_session()

    c2 = await start_client(env)
    try:
        loaded = await c2.request("agent/loadSession", {"sessionId": sid})
        assert (loaded["mode"], loaded["model"], loaded["plan"]) == ("code", "test-model", [])
        replayed = [u["update"] for u in c2.updates if u["sessionId"] == sid]
        assert [u["kind"] for u in replayed] == [
            "user_message",
            "memory",
            "message_chunk",
            "usage",
            "prompt_end",
            "user_message",
            "message_chunk",
            "prompt_end",
        ]
        assert replayed[1] == {
            "kind": "memory",
            "point": "user_query",
            "tier": "local",
            "docs": [str(topic)],
        }
        assert replayed[3] == {
            "kind": "usage",
            "inputTokens": 10,
            "outputTokens": 5,
            "sessionTotalTokens": 15,
            # The context meter as it was: the provider's 10 input tokens and
            # the answer, in a window the model's name does not tell (32k).
            "contextTokens": replayed[3]["contextTokens"],
            "contextWindow": 32_768,
            "cacheReadTokens": 0,
        }
        assert 10 < replayed[3]["contextTokens"] < 40
        assert replayed[4] == {"kind": "prompt_end", "stopReason": "end_turn"}
        assert replayed[-1] == {"kind": "prompt_end", "stopReason": "cancelled"}
        # The session total goes on from the restored session, not from zero.
        model_server.enqueue({"text": "ok", "usage": {"input": 20, "output": 2}})
        n = len(c2.updates)
        await c2.prompt(sid, "and now?")
        (usage,) = [u["update"] for u in c2.updates[n:] if u["update"]["kind"] == "usage"]
        assert usage["sessionTotalTokens"] == 15 + 22

        # After a reset the list shows the new conversation's title, and a
        # replay shows only what came after the reset.
        await c2.request("agent/resetSession", {"sessionId": sid})
        listed = await c2.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert [s["title"] for s in listed["sessions"]] == ["(empty session)"]
        await c2.prompt(sid, "a fresh start")
        listed = await c2.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert [s["title"] for s in listed["sessions"]] == ["a fresh start"]
    finally:
        await c2.lsp.shutdown_session()

    c3 = await start_client(env)
    try:
        await c3.request("agent/loadSession", {"sessionId": sid})
        kinds = c3.kinds(sid)
        assert kinds == ["user_message", "message_chunk", "usage", "prompt_end"]
        assert c3.text(sid) == "Echo: a fresh start"
    finally:
        await c3.lsp.shutdown_session()


async def test_a_new_sessions_meta_file_is_written_once_its_request_is_out(
    client: AgentdClient, model_server: ModelServer, workspace: Path, tmp_path: Path
) -> None:
    """The listing's meta file is kept off the first prompt's path to its model
    request but written as soon as that request is out, not at the reply: here
    the model never answers (the prompt is cancelled)."""
    from agentd.testing.daemon import agentd_home
    from agentd.transcript import meta_path, sessions_dir

    model_server.enqueue({"text": "never", "ttft": 600})
    sid = await client.new_session(workspace)
    task = asyncio.ensure_future(client.prompt(sid, "a question\nmore", msg_id="p-meta"))
    await model_server.wait_for(lambda e: e["type"] == "request")
    meta = meta_path(sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl")

    async def written() -> None:
        # No event says a file appeared: look until it has (the timeout turns
        # a meta file that waits for the reply into a failure).
        while not meta.exists():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(written(), 20)
        assert json.loads(meta.read_text())["title"] == "a question"
    finally:
        client.cancel("p-meta")
        with pytest.raises(JsonRpcException):
            await task
