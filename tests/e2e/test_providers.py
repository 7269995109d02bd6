"""Today's models end to end: reasoning models, extended thinking across tool
use, prompt caching figures, reasoning text from compatible servers.

The real daemon over stdio (pytest-lsp) against the bundled model server,
which refuses what the real APIs refuse (`agentd/testing/model_server/checks.py`)
and emulates their prompt caches.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from agentd.messages import ThinkingPart
from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.transcript import load, sessions_dir
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

READ_README = {"name": "read_file", "arguments": {"path": "README.md"}}


def openai_env(server: ModelServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    return daemon_env(server.openai_base_url, tmp_path, AGENTD_MEMORY="off", **extra)


def anthropic_env(server: ModelServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    return daemon_env(
        server.openai_base_url,
        tmp_path,
        AGENTD_PROVIDER="anthropic",
        AGENTD_BASE_URL=server.base_url,
        AGENTD_MODEL="claude-sonnet-4-5",
        AGENTD_MEMORY="off",
        **extra,
    )


def updates(c: AgentdClient, sid: str, kind: str) -> list[dict[str, Any]]:
    return [u["update"] for u in c.updates if u["sessionId"] == sid and u["update"]["kind"] == kind]


# --- OpenAI reasoning models ---------------------------------------------------------------


async def test_reasoning_model_gets_max_completion_tokens_and_effort(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.enqueue({"toolCalls": [READ_README]})
    model_server.enqueue({"text": "It is 42."})
    options = {"reasoningEffort": "high", "maxOutputTokens": 20000}
    c = await start_client(openai_env(model_server, tmp_path, AGENTD_MODEL="o4-mini"), options)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "what is the answer?")
        assert result["stopReason"] == "end_turn", result
        for request in model_server.requests("main"):
            body = request["body"]
            assert "max_tokens" not in body  # the server would have answered 400
            assert body["max_completion_tokens"] == 20000
            assert body["reasoning_effort"] == "high"
    finally:
        await c.lsp.shutdown_session()


async def test_a_reasoning_deployment_under_its_own_name(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.set_model("corp-o3-prod", reasoning=True)
    env = openai_env(model_server, tmp_path, AGENTD_MODEL="corp-o3-prod")
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "hello")
        assert result["stopReason"] == "error"
        message = result["error"]["message"]
        # The endpoint's words, then what to change.
        assert "Unsupported parameter: 'max_tokens'" in message
        assert message.endswith(
            "— this model takes max_completion_tokens, not max_tokens: "
            "set reasoningModel = true in the agentd config"
        )
    finally:
        await c.lsp.shutdown_session()
    c = await start_client(env, {"reasoningModel": True})
    try:
        sid = await c.new_session(workspace)
        assert (await c.prompt(sid, "hello"))["stopReason"] == "end_turn"
        assert "max_completion_tokens" in model_server.requests("main")[-1]["body"]
    finally:
        await c.lsp.shutdown_session()


# --- Anthropic extended thinking across tool use -----------------------------------------


async def test_thinking_across_tool_use_signed_blocks_go_back_and_survive_a_reload(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = anthropic_env(model_server, tmp_path)
    options = {"thinking": {"budgetTokens": 2048}}
    model_server.enqueue({"thinking": "I should read the README.", "toolCalls": [READ_README]})
    model_server.enqueue(
        {"redactedThinking": "a hidden thought", "toolCalls": [{"name": "list_dir"}]}
    )
    model_server.enqueue({"thinking": "Both say 42.", "text": "It is 42."})
    c = await start_client(env, options)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "what is the answer?")
        assert result["stopReason"] == "end_turn", result
        thoughts = "".join(u["text"] for u in updates(c, sid, "thought_chunk"))
        assert thoughts == "I should read the README.Both say 42."
        first, second, third = (r["body"] for r in model_server.requests("main"))
        assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        assert first["max_tokens"] == 2048 + 8192
        # Each tool turn went back with its thinking first, as it came.
        assert [b["type"] for b in second["messages"][1]["content"]] == ["thinking", "tool_use"]
        assert second["messages"][1]["content"][0]["thinking"] == "I should read the README."
        assert [b["type"] for b in third["messages"][3]["content"]] == [
            "redacted_thinking",
            "tool_use",
        ]
    finally:
        await c.lsp.shutdown_session()

    # The transcript keeps the blocks with their signatures: a restored session
    # replays the thought and sends the blocks back as they came.
    path = sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl"
    loaded = load(path)
    assert loaded is not None
    thinking = [p for m in loaded.history for p in m.parts if isinstance(p, ThinkingPart)]
    assert [bool(p.signature) for p in thinking if p.text] == [True, True]
    assert [bool(p.redacted) for p in thinking] == [False, True, False]
    c = await start_client(env, options)
    try:
        await c.request("agent/loadSession", {"sessionId": sid})
        replayed = "".join(u["text"] for u in updates(c, sid, "thought_chunk"))
        assert replayed == "I should read the README.Both say 42."
        model_server.enqueue({"toolCalls": [{"name": "list_dir"}]})
        result = await c.prompt(sid, "and the other files?")
        assert result["stopReason"] == "end_turn", result
        last = model_server.requests("main")[-1]["body"]["messages"]
        sent = [b["type"] for m in last if m["role"] == "assistant" for b in m["content"]]
        assert sent.count("thinking") == 3 and sent.count("redacted_thinking") == 1
    finally:
        await c.lsp.shutdown_session()


# --- prompt caching ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_cache_figures_in_usage_updates_and_the_prompt_result(
    api: str, model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.configure_cache(min_tokens=0)  # agentd's prompt here is under 1,024 tokens
    env = (openai_env if api == "openai" else anthropic_env)(model_server, tmp_path)
    model_server.enqueue({"toolCalls": [READ_README]})
    model_server.enqueue({"text": "It is 42."})
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "what is the answer?")
        assert result["stopReason"] == "end_turn"
        steps = updates(c, sid, "usage")
        served = [r["cache"] for r in model_server.requests("main")]
        assert [u["cacheReadTokens"] for u in steps] == [s["read"] for s in served]
        assert [u["inputTokens"] for u in steps] == [s["input"] for s in served]
        assert steps[0]["cacheReadTokens"] == 0 and steps[1]["cacheReadTokens"] > 0
        usage = result["usage"]
        assert usage["cacheReadTokens"] == sum(u["cacheReadTokens"] for u in steps)
        if api == "anthropic":
            # Step 1 wrote its whole prompt; step 2 read all of it back.
            assert steps[0]["cacheWriteTokens"] == served[0]["input"]
            assert steps[1]["cacheReadTokens"] == steps[0]["cacheWriteTokens"]
            assert usage["cacheWriteTokens"] == sum(u["cacheWriteTokens"] for u in steps)
        else:
            assert "cacheWriteTokens" not in usage  # OpenAI does not report writes
    finally:
        await c.lsp.shutdown_session()


async def test_every_step_repeats_the_previous_request_as_its_prefix(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Memory reminders, the date and instruction files included: a later
    request starts with the earlier one's system prompt, tools and messages."""
    from tests.e2e.test_memory_prefetch import write_topic

    write_topic(
        memory_folder(workspace, tmp_path),
        "Deploy checklist",
        "How we ship releases to production",
        "Run the smoke tests, then deploy with make ship.",
    )
    (workspace / "AGENTS.md").write_text("Answer in one line.\n")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    model_server.set_default_arguments("select_memories", {"paths": []})
    for _ in range(2):
        model_server.enqueue({"toolCalls": [READ_README]})
        model_server.enqueue({"toolCalls": [{"name": "list_dir"}]})
        model_server.enqueue({"text": "Done."})
    c = await start_client(env)
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})  # index ready
        await c.prompt(sid, "how do we deploy a release to production?")
        await c.prompt(sid, "and after the deploy?")
        assert updates(c, sid, "memory")  # a reminder was attached
        bodies = [r["body"] for r in model_server.requests("main")]
        assert len(bodies) == 6
        for before, after in itertools.pairwise(bodies):
            assert after["tools"] == before["tools"]
            n = len(before["messages"])
            assert json.dumps(after["messages"][:n]) == json.dumps(before["messages"])
        assert "Answer in one line." in bodies[0]["messages"][0]["content"]
        users = [m["content"] for b in bodies[-1:] for m in b["messages"] if m["role"] == "user"]
        assert sum("Today's date is" in u for u in users) == 1  # told once
    finally:
        await c.lsp.shutdown_session()


# --- reasoning text from OpenAI-compatible servers ---------------------------------------


@pytest.mark.parametrize(
    ("model", "sent_back"), [("qwen3-coder", False), ("deepseek-v4-flash", True)]
)
async def test_reasoning_text_kept_and_sent_back_only_where_required(
    model: str, sent_back: bool, model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    # The server refuses reasoning text in the history for one model and
    # requires it after a tool call for the other, as their APIs do.
    model_server.enqueue({"thinking": "Let me read it.", "toolCalls": [READ_README]})
    model_server.enqueue({"thinking": "It says 42.", "text": "It is 42."})
    c = await start_client(openai_env(model_server, tmp_path, AGENTD_MODEL=model))
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "what is the answer?")
        assert result["stopReason"] == "end_turn", result
        thoughts = "".join(u["text"] for u in updates(c, sid, "thought_chunk"))
        assert thoughts == "Let me read it.It says 42."
        second = model_server.requests("main")[1]["body"]["messages"]
        assistant = next(m for m in second if m["role"] == "assistant")
        assert ("reasoning_content" in assistant) is sent_back
        if sent_back:
            assert assistant["reasoning_content"] == "Let me read it."
    finally:
        await c.lsp.shutdown_session()
    loaded = load(sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl")
    assert loaded is not None
    kept = [p for m in loaded.history for p in m.parts if isinstance(p, ThinkingPart)]
    assert kept == [
        ThinkingPart("Let me read it.", source="reasoning_content"),
        ThinkingPart("It says 42.", source="reasoning_content"),
    ]
