"""A session whose daemon was killed mid-turn loads and goes on (LSP): the real
daemon killed with SIGKILL while a client tool call waits on the editor, a new
daemon loads the session and is prompted, against the bundled model server,
which refuses tool calls without results as the real APIs do. An older
transcript (a cut session prompted again before cut prompts were closed)
loads and compacts without parting a call from its result."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentd.events import CompactionReport
from agentd.messages import Message, TextPart, ToolCall, ToolCallPart, user_text
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import CompactionRecord, TranscriptWriter, sessions_dir
from tests.e2e.test_providers import anthropic_env
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

CLIENT_TOOLS: dict[str, Any] = {"clientTools": ["edit_file", "run_command"]}
INTERRUPTED = "This tool call was interrupted"


async def killed_mid_tool(
    env: dict[str, str], options: dict[str, Any], workspace: Path, prompt: str
) -> tuple[str, str]:
    """A session whose daemon is killed (SIGKILL) while the editor holds the
    client tool call `prompt` asked for; its id and the call's id."""
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize(options)
        d.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = str((await d.response(1))["result"]["sessionId"])
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": prompt})
        while True:
            msg = await d.read_message()
            update = msg.get("params", {}).get("update", {})
            if msg.get("method") == "agent/update" and update.get("kind") == "tool_call":
                break
        d.proc.kill()
        await d.wait_exit()
    finally:
        await d.close()
    return sid, str(update["toolCallId"])


def replayed(c: AgentdClient, sid: str, since: int) -> list[dict[str, Any]]:
    return [u["update"] for u in c.updates[since:] if u["sessionId"] == sid]


def transcript(tmp_path: Path, workspace: Path, sid: str) -> Path:
    return sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl"


def plain(messages: list[Any]) -> list[Any]:
    """Messages without Anthropic's cache breakpoints, which move as the
    conversation grows."""
    text = json.dumps(messages).replace(', "cache_control": {"type": "ephemeral"}', "")
    out: list[Any] = json.loads(text)
    return out


def check_closed_request(api: str, body: dict[str, Any], call_id: str) -> list[Any]:
    """The request after the cut prompt, in each API's shape: the call, its
    interrupted result right after it, the reminder, the new prompt."""
    messages: list[Any] = body["messages"]
    if api == "openai":
        assert [m["role"] for m in messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "user",
            "user",
        ]
        assert messages[2]["tool_calls"][0]["id"] == call_id
        assert messages[3]["tool_call_id"] == call_id and INTERRUPTED in messages[3]["content"]
        # The model is told the turn was cut short, in the harness's words.
        assert "<system-reminder>" in messages[4]["content"] and "stopped" in messages[4]["content"]
        return messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    # The call goes back after its signed thinking (thinking is on).
    assert [b["type"] for b in messages[1]["content"]] == ["thinking", "tool_use"]
    assert messages[1]["content"][1]["id"] == call_id
    result, reminder, asked = messages[2]["content"]
    assert (result["type"], result["tool_use_id"], result["is_error"]) == (
        "tool_result",
        call_id,
        True,
    )
    assert INTERRUPTED in result["content"]
    assert "<system-reminder>" in reminder["text"] and "stopped" in reminder["text"]
    assert asked["text"] == "what happened?"
    return messages


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_session_killed_while_a_client_tool_ran_loads_and_goes_on(
    api: str, model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    if api == "openai":
        env, options = daemon_env(model_server.openai_base_url, tmp_path), CLIENT_TOOLS
    else:
        env = anthropic_env(model_server, tmp_path)
        options = {**CLIENT_TOOLS, "thinking": {"budgetTokens": 2048}}
    call = '!tool run_command {"command": "make test"}'
    sid, call_id = await killed_mid_tool(env, options, workspace, call)
    path = transcript(tmp_path, workspace, sid)
    written = path.read_bytes()

    c = await start_client(env, options)
    try:
        await c.request("agent/loadSession", {"sessionId": sid})
        shown = [u for u in replayed(c, sid, 0) if u["kind"] != "thought_chunk"]
        # The call replays as failed, saying why, and the prompt as cut short.
        assert [u["kind"] for u in shown] == [
            "user_message",
            "tool_call",
            "usage",
            "tool_call_update",
            "prompt_end",
        ]
        assert shown[3]["status"] == "failed" and INTERRUPTED in shown[3]["content"]
        assert shown[4]["stopReason"] == "error"
        assert shown[4]["error"]["kind"] == "interrupted"
        # A load alone writes nothing: the session may be running elsewhere.
        assert path.read_bytes() == written

        result = await c.prompt(sid, "what happened?")
        assert result["stopReason"] == "end_turn"
        assert c.text(sid) == "Echo: what happened?"
        request = check_closed_request(api, model_server.requests("main")[-1]["body"], call_id)
    finally:
        await c.lsp.shutdown_session()
    # Appended to, never rewritten: what the killed daemon wrote is still the start.
    assert path.read_bytes().startswith(written)

    # The next daemon reads the closed turn back from the file: the same
    # history, the interruption shown once.
    c2 = await start_client(env, options)
    try:
        await c2.request("agent/loadSession", {"sessionId": sid})
        kinds = [u["kind"] for u in replayed(c2, sid, 0)]
        assert kinds.count("prompt_end") == 2 and kinds.count("tool_call_update") == 1
        before = len(model_server.requests("main"))
        assert (await c2.prompt(sid, "and now?"))["stopReason"] == "end_turn"
        again = model_server.requests("main")[before]["body"]["messages"]
        assert plain(again[: len(request)]) == plain(request)
    finally:
        await c2.lsp.shutdown_session()


async def test_a_session_killed_while_the_model_streamed_loads_and_goes_on(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    model_server.enqueue({"chunks": ["x "] * 400, "chunkDelay": 0.05})
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize(CLIENT_TOOLS)
        d.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = str((await d.response(1))["result"]["sessionId"])
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "write a long story"})
        await model_server.wait_for(lambda e: e["type"] == "first_chunk")
        d.proc.kill()
        await d.wait_exit()
    finally:
        await d.close()

    c = await start_client(env, CLIENT_TOOLS)
    try:
        await c.request("agent/loadSession", {"sessionId": sid})
        shown = replayed(c, sid, 0)
        assert [u["kind"] for u in shown] == ["user_message", "prompt_end"]
        assert shown[1]["error"]["kind"] == "interrupted"
        result = await c.prompt(sid, "shorter, please")
        assert result["stopReason"] == "end_turn"
        assert c.text(sid) == "Echo: shorter, please"
        request = model_server.requests("main")[-1]["body"]["messages"]
        texts = [json.dumps(m["content"]) for m in request[1:]]
        assert "write a long story" in texts[0] and "stopped" in texts[1]
        assert "shorter, please" in texts[-1]
    finally:
        await c.lsp.shutdown_session()


async def test_a_transcript_torn_mid_line_loads_and_the_next_line_is_kept(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    c = await start_client(env, CLIENT_TOOLS)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "first")
    finally:
        await c.lsp.shutdown_session()
    path = transcript(tmp_path, workspace, sid)
    # A crash in the middle of a write: the last line ends half-way.
    torn = b'{"type":"message","offset":2,"ts":1,"message":{"role":"user","par'
    with path.open("ab") as f:
        f.write(torn)

    c2 = await start_client(env, CLIENT_TOOLS)
    try:
        await c2.request("agent/loadSession", {"sessionId": sid})
        assert [u["kind"] for u in replayed(c2, sid, 0) if u["kind"] != "usage"] == [
            "user_message",
            "message_chunk",
            "prompt_end",
        ]
        assert (await c2.prompt(sid, "second"))["stopReason"] == "end_turn"
    finally:
        await c2.lsp.shutdown_session()
    # The torn line stays as it was, and the next daemon's lines start on a
    # line of their own: a third daemon reads the second prompt back.
    assert torn + b"\n" in path.read_bytes()
    c3 = await start_client(env, CLIENT_TOOLS)
    try:
        await c3.request("agent/loadSession", {"sessionId": sid})
        said = [u["text"] for u in replayed(c3, sid, 0) if u["kind"] == "user_message"]
        assert said == ["first", "second"]
    finally:
        await c3.lsp.shutdown_session()


def older_cut_transcript(path: Path, sid: str, workspace: Path, split: int = 0) -> str:
    """A transcript written before cut prompts were closed: a prompt whose
    call a crash left unanswered, then the next prompt right after the call
    (which `load` answers in that prompt's message), holding most of the
    history's bytes; with `split`, then a compaction there. The call's id."""
    call = ToolCall("call_cut", "run_command", {"command": "make test"})
    path.parent.mkdir(parents=True, exist_ok=True)
    w = TranscriptWriter(path, sid, workspace)
    for message in [
        user_text("first question"),
        Message("assistant", [TextPart("Hello.")]),
        user_text("fix it"),
        Message("assistant", [ToolCallPart(call)]),
        user_text("go on " + "g" * 8000),
        Message("assistant", [TextPart("Done.")]),
    ]:
        w.append(message)
    if split:
        report = CompactionReport("done", "manual", 2000, 100, summarized=split, summary="S")
        w.compaction(CompactionRecord(split, "the story so far", None, {}, report))
    w.close()
    return call.id


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_an_older_cut_transcript_compacts_with_its_calls_and_results_together(
    api: str, model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The prompt whose message also holds the interrupted result is no
    place for the verbatim tail to start (it would keep the result of a call
    the summary replaced, and the API would refuse every later request): the
    tail starts at the prompt that made the call."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    if api == "anthropic":
        env = anthropic_env(model_server, tmp_path)
    sid = uuid.uuid4().hex
    call_id = older_cut_transcript(transcript(tmp_path, workspace, sid), sid, workspace)
    c = await start_client(env, CLIENT_TOOLS)
    try:
        await c.request("agent/loadSession", {"sessionId": sid})
        report = await c.request("agent/compact", {"sessionId": sid})
        result = await c.prompt(sid, "and now?")
        assert result["stopReason"] == "end_turn", result
        assert report["status"] == "done", report
        assert report["summarized"] == 2  # "first question" and its answer
        assert c.text(sid).endswith("Echo: and now?")
        sent = json.dumps(model_server.requests("main")[-1]["body"]["messages"])
    finally:
        await c.lsp.shutdown_session()
    # The call and its interrupted result both went verbatim, after the summary.
    # (The summary names the summarised request; its message is gone.)
    assert '"first question"' not in sent and '"fix it"' in sent
    assert sent.count(call_id) == 2 and INTERRUPTED in sent


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_an_older_compaction_at_a_prompt_that_holds_results_loads_valid(
    api: str, model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A compaction recorded before that rule, its tail starting at the
    prompt that `load` gives the interrupted result: the result, whose call
    the summary replaced, is left out, and the session goes on."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    if api == "anthropic":
        env = anthropic_env(model_server, tmp_path)
    sid = uuid.uuid4().hex
    call_id = older_cut_transcript(transcript(tmp_path, workspace, sid), sid, workspace, 4)
    c = await start_client(env, CLIENT_TOOLS)
    try:
        await c.request("agent/loadSession", {"sessionId": sid})
        result = await c.prompt(sid, "and now?")
        assert result["stopReason"] == "end_turn", result
        sent = json.dumps(model_server.requests("main")[-1]["body"]["messages"])
    finally:
        await c.lsp.shutdown_session()
    assert "the story so far" in sent and '"go on ' in sent
    assert call_id not in sent and INTERRUPTED not in sent
