"""Compaction end to end: the real daemon, the model server with a context window.

The model server refuses requests over its window as OpenAI and Anthropic
do (status and body), and answers `X-Agentd-Purpose: compact` requests with
its stand-in summariser, which returns every user sentence that states a
constraint (`agentd/testing/model_server/summarise.py`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.layout import memory_dir
from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from tests.e2e.test_extraction import wait_caught_up
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

# Each filler turn is about 2,000 tokens of the user's text.
FILLER = " ".join(f"word{i % 97}" for i in range(1000))
FACTS = [
    "Always run the tests with pytest -p no:cacheprovider.",
    "Never push to the release branch on Fridays.",
    "The staging database must be db-blue-7.",
]


def turn_text(n: int) -> str:
    """A turn's prompt: its number and fact on the first line (the stand-in
    summariser quotes a fact and the last prompt's first line), then a
    marker that only the verbatim turn holds."""
    fact = FACTS[n] if n < len(FACTS) else ""
    return f"Turn {n}. {fact}\nmarker-{n}-verbatim {FILLER}"


def threshold(window: int) -> float:
    """The daemon's default threshold: 0.8 of the window less the answer's room."""
    return 0.8 * (window - min(8192, window // 4))


async def prompt_until_past_threshold(c: AgentdClient, sid: str, window: int) -> int:
    """Filler turns until the context meter says the history is past the
    threshold (the daemon then starts the summary after that reply)."""
    n = 0
    while True:
        assert n < 12
        result = await c.prompt(sid, turn_text(n))
        assert result["stopReason"] == "end_turn", result
        n += 1
        usage = updates(c, sid, "usage")[-1]
        if usage["contextTokens"] >= threshold(window):
            return n


async def new_client(
    server: ModelServer, home: Path, window: int | None, **options: Any
) -> AgentdClient:
    init: dict[str, Any] = {"clientTools": ["run_command"], **options}
    if window is not None:
        init["contextWindow"] = window
    init.setdefault("memory", {"enabled": False})
    # Filler turns get a short answer: the history grows by the user's text.
    server.add_rule("-verbatim", {"text": "Noted."})
    return await start_client(daemon_env(server.openai_base_url, home), init)


def updates(c: AgentdClient, sid: str, kind: str) -> list[dict[str, Any]]:
    return [u["update"] for u in c.updates if u["sessionId"] == sid and u["update"]["kind"] == kind]


def main_requests(server: ModelServer) -> list[dict[str, Any]]:
    return [r for r in server.requests("main") if r["replySource"] != "overflow"]


def request_text(request: dict[str, Any]) -> str:
    """Every string in a request's messages (and system prompt), one per line."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(request["body"].get("system", ""))
    walk(request["body"]["messages"])
    return "\n".join(out)


async def test_threshold_compaction_runs_between_turns_and_is_swapped_in(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.set_context_window(12_000)
    c = await new_client(model_server, tmp_path, 12_000)
    try:
        sid = await c.new_session(workspace)
        # The reply that leaves the history past the threshold starts the
        # summary, between turns.
        n = await prompt_until_past_threshold(c, sid, 12_000)
        compact = await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "compact"
        )
        assert compact["headers"]["x-agentd-purpose"] == "compact"
        assert compact["body"]["tool_choice"]["function"]["name"] == "record_summary"
        await model_server.wait_for(lambda e: e["type"] == "complete" and e["id"] == compact["id"])
        # The model server's last byte is not the summariser's end: the
        # daemon may still be reading the answer when the next prompt starts,
        # and that prompt then goes out uncompacted. The summary is swapped
        # in at the start of the first prompt that finds it finished; until
        # then each prompt fits and goes out whole (nobody waits: a wait
        # would be reported `started`). A short question and answer add
        # about 20 tokens each: some ten of them fit in the room left below
        # the window, and the summariser needs a few event-loop turns.
        model_server.add_rule("Summary yet?", {"text": "No."})
        while True:
            before = len(c.updates)
            result = await c.prompt(sid, "Summary yet?")
            assert result["stopReason"] == "end_turn"
            new = [u["update"] for u in c.updates[before:] if u["update"]["kind"] == "compaction"]
            if new:
                break
            assert "marker-0-verbatim" in request_text(main_requests(model_server)[-1])
        # Swapped in at the prompt's start: done, and nobody waited for it.
        assert [u["status"] for u in new] == ["done"]
        done = new[0]
        assert done["trigger"] == "threshold" and done["summarized"] > 0
        assert done["tokensAfter"] < done["tokensBefore"]
        first = main_requests(model_server)[-1]
        messages = first["body"]["messages"]
        summary = messages[1]["content"]
        assert "was compacted" in summary
        # The oldest turn is only in the summary (its fact verbatim); the
        # newest are verbatim.
        assert FACTS[0] in summary
        assert "marker-0-" not in request_text(first)
        assert turn_text(n - 1) in request_text(first)
        for fact in FACTS[:n]:
            assert fact in request_text(first)
        usage = updates(c, sid, "usage")[-1]
        assert usage["contextWindow"] == 12_000
        assert 0 < usage["contextTokens"] < 12_000 * 0.8
    finally:
        await c.lsp.shutdown_session()


async def test_the_window_is_learned_from_the_endpoints_model_list(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.set_context_window(20_000)
    c = await new_client(model_server, tmp_path, None)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "hello")
        # The first request goes out before the endpoint is asked: the model's
        # name says nothing, so the meter shows the fallback window.
        assert updates(c, sid, "usage")[0]["contextWindow"] == 32_768
        for _ in range(20):
            await c.prompt(sid, "again")
            if updates(c, sid, "usage")[-1]["contextWindow"] == 20_000:
                break
        assert updates(c, sid, "usage")[-1]["contextWindow"] == 20_000
    finally:
        await c.lsp.shutdown_session()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_provider_overflow_compacts_and_retries_the_step(
    model_server: ModelServer, tmp_path: Path, workspace: Path, provider: str
) -> None:
    # The daemon believes in a larger window than the model has.
    model_server.set_context_window(30_000)
    init: dict[str, Any] = {"provider": provider}
    if provider == "anthropic":
        init["baseUrl"] = model_server.base_url
    c = await new_client(model_server, tmp_path, 30_000, **init)
    try:
        sid = await c.new_session(workspace)
        for n in range(4):
            assert (await c.prompt(sid, turn_text(n)))["stopReason"] == "end_turn"
        model_server.set_context_window(9_000)
        result = await c.prompt(sid, "What must the staging database be?")
        assert result["stopReason"] == "end_turn", result
        faults = [e for e in model_server.log if e["type"] == "fault"]
        assert [f["kind"] for f in faults] == ["overflow"]
        assert faults[0]["status"] == 400
        # The refused request, the summary (one request per chunk), one retry.
        purposes = [e["purpose"] for e in model_server.requests()]
        at = [r["id"] for r in model_server.requests()].index(faults[0]["id"])
        tail = purposes[at:]
        assert tail[0] == "main" and tail[-1] == "main"
        assert set(tail[1:-1]) == {"compact"}
        new = updates(c, sid, "compaction")
        assert [u["status"] for u in new] == ["started", "done"]
        assert new[-1]["trigger"] == "overflow"
        retry = model_server.requests("main")[-1]
        assert "The staging database must be db-blue-7." in request_text(retry)
        # The window the provider named is the meter's from now on.
        assert updates(c, sid, "usage")[-1]["contextWindow"] == 9_000
    finally:
        await c.lsp.shutdown_session()


async def test_overflow_that_cannot_be_compacted_ends_with_token_limit(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    # The daemon's system prompt and tools take about 2,000 tokens of it.
    model_server.set_context_window(6_000)
    c = await new_client(model_server, tmp_path, 100_000)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, FILLER * 3)
        assert result["stopReason"] == "token_limit"
        assert result["error"]["kind"] == "context_full"
        assert "new session" in result["error"]["message"]
        # Until the session is reset (as the message says), it stays too long.
        again = await c.prompt(sid, "hello")
        assert again["stopReason"] == "token_limit"
        await c.request("agent/resetSession", {"sessionId": sid})
        assert (await c.prompt(sid, "hello"))["stopReason"] == "end_turn"
    finally:
        await c.lsp.shutdown_session()


async def test_manual_compaction(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await new_client(model_server, tmp_path, 50_000, fastModel="fast-model")
    try:
        sid = await c.new_session(workspace)
        for n in range(4):
            await c.prompt(sid, turn_text(n))
        result = await c.request(
            "agent/compact", {"sessionId": sid, "instructions": "Keep the database facts."}
        )
        assert result["kind"] == "compaction" and result["status"] == "done"
        assert result["trigger"] == "manual" and result["summarized"] > 0
        assert result["tokensAfter"] < result["tokensBefore"]
        (compact,) = model_server.requests("compact")
        assert compact["body"]["model"] == "fast-model"
        assert "Keep the database facts." in request_text(compact)
        assert [u["status"] for u in updates(c, sid, "compaction")] == ["started", "done"]
        await c.prompt(sid, "and now?")
        messages = main_requests(model_server)[-1]["body"]["messages"]
        assert "was compacted" in messages[1]["content"]
        assert turn_text(3) in request_text(main_requests(model_server)[-1])
        with pytest.raises(JsonRpcException) as unknown:
            await c.request("agent/compact", {"sessionId": "nope"})
        assert unknown.value.code == -32001
        # Not while a prompt runs on the session.
        running = asyncio.ensure_future(c.prompt(sid, "!ttft 30\nslow", msg_id="slow"))
        await model_server.wait_for(lambda e: e["type"] == "request" and "slow" in json.dumps(e))
        with pytest.raises(JsonRpcException) as busy:
            await c.request("agent/compact", {"sessionId": sid})
        assert busy.value.code == -32003
        c.cancel("slow")
        with pytest.raises(JsonRpcException):
            await running
    finally:
        await c.lsp.shutdown_session()


async def test_instructions_and_memory_are_never_summarised(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    (workspace / "AGENTS.md").write_text("Project rule: the marker word is ZEBRA-42.\n")
    topic = memory_folder(workspace, tmp_path) / "deploy-checklist.md"
    topic.write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases to production\n"
        "type: project\n---\n\nRun the smoke tests, then deploy with make ship.\n"
    )
    c = await new_client(model_server, tmp_path, 50_000, memory={"modelTier": False})
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})  # index ready
        await c.prompt(sid, "how do we deploy a release to production?")
        assert [u["docs"] for u in updates(c, sid, "memory")] == [[str(topic)]]
        for n in range(3):
            await c.prompt(sid, turn_text(n))
        result = await c.request("agent/compact", {"sessionId": sid})
        assert result["status"] == "done"
        (compact,) = model_server.requests("compact")
        # The summariser saw the turn, not the memory note nor the instructions.
        assert "how do we deploy a release" in request_text(compact)
        assert "make ship" not in request_text(compact)
        assert "ZEBRA-42" not in request_text(compact)
        await c.prompt(sid, "how do we deploy a release to production, again?")
        last = main_requests(model_server)[-1]
        # The instructions are in the system prompt of every request ...
        assert "ZEBRA-42" in last["body"]["messages"][0]["content"]
        # ... and the note, summarised away, was recalled again.
        assert [u["docs"] for u in updates(c, sid, "memory")] == [[str(topic)], [str(topic)]]
        assert "make ship" in request_text(last)
    finally:
        await c.lsp.shutdown_session()


async def test_cancel_during_compaction_leaves_the_history(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await new_client(model_server, tmp_path, 50_000)
    try:
        sid = await c.new_session(workspace)
        for n in range(3):
            await c.prompt(sid, turn_text(n))
        model_server.set_latency("compact", 60)
        task = asyncio.ensure_future(c.request("agent/compact", {"sessionId": sid}, msg_id=77))
        compact = await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "compact"
        )
        c.cancel(77)
        with pytest.raises(JsonRpcException) as cancelled:
            await task
        assert cancelled.value.code == -32800
        # The summariser's stream was closed, not left running.
        await model_server.wait_for(
            lambda e: e["type"] == "disconnect" and e["id"] == compact["id"]
        )
        assert [u["status"] for u in updates(c, sid, "compaction")] == ["started", "cancelled"]
        model_server.set_latency("compact", 0)
        await c.prompt(sid, "still there?")
        last = main_requests(model_server)[-1]
        assert turn_text(0) in request_text(last)
        assert "was compacted" not in request_text(last)
    finally:
        await c.lsp.shutdown_session()


async def test_cancel_of_a_prompt_waiting_for_compaction(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await new_client(model_server, tmp_path, 12_000)
    try:
        sid = await c.new_session(workspace)
        model_server.set_latency("compact", 60)
        # Past the threshold: the summary starts (and hangs).
        await prompt_until_past_threshold(c, sid, 12_000)
        await model_server.wait_for(lambda e: e["type"] == "request" and e["purpose"] == "compact")
        # A prompt too long to fit without the summary waits for it.
        task = asyncio.ensure_future(c.prompt(sid, FILLER * 2, msg_id=99))
        await c.wait_for_update(
            lambda u: u["update"]["kind"] == "compaction" and u["update"]["status"] == "started"
        )
        c.cancel(99)
        with pytest.raises(JsonRpcException) as cancelled:
            await task
        assert cancelled.value.code == -32800
        compact = model_server.requests("compact")[0]
        await model_server.wait_for(
            lambda e: e["type"] == "disconnect" and e["id"] == compact["id"]
        )
        assert updates(c, sid, "compaction")[-1]["status"] == "cancelled"
    finally:
        await c.lsp.shutdown_session()


async def test_reload_restores_the_compacted_session(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await new_client(model_server, tmp_path, 50_000)
    try:
        sid = await c.new_session(workspace)
        for n in range(4):
            await c.prompt(sid, turn_text(n))
        await c.request("agent/compact", {"sessionId": sid})
        await c.prompt(sid, "after the compaction")
        live = main_requests(model_server)[-1]["body"]["messages"]
    finally:
        await c.lsp.shutdown_session()

    c2 = await new_client(model_server, tmp_path, 50_000)
    try:
        await c2.request("agent/loadSession", {"sessionId": sid})
        kinds = c2.kinds(sid)
        # The divider first, then the verbatim tail; the summarised turns are gone.
        assert kinds[0] == "compaction"
        divider = c2.updates[0]["update"]
        assert divider["status"] == "done" and "was compacted" in divider["summary"]
        users = [u["text"] for u in updates(c2, sid, "user_message")]
        assert turn_text(0) not in users
        assert users[-2:] == [turn_text(3), "after the compaction"]
        sessions = await c2.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert sessions["sessions"][0]["title"] == turn_text(0).splitlines()[0]
        await c2.prompt(sid, "one more")
        restored = main_requests(model_server)[-1]["body"]["messages"]
        # The reloaded session sends what the live one would have: the same
        # summary and tail, then the reply and the new prompt.
        assert restored[1 : len(live)] == live[1:]
        assert restored[-1] == {"role": "user", "content": "one more"}
    finally:
        await c2.lsp.shutdown_session()


async def test_extraction_sees_every_turn_including_summarised_ones(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    # The first daemon extracts nothing; it compacts the session.
    c = await new_client(
        model_server, tmp_path, 50_000, memory={"extraction": False, "modelTier": False}
    )
    try:
        sid = await c.new_session(workspace)
        for n in range(4):
            await c.prompt(sid, turn_text(n))
        await c.request("agent/compact", {"sessionId": sid})
        await c.prompt(sid, "Remember: the deploy window is Tuesday.")
    finally:
        await c.lsp.shutdown_session()
    assert not model_server.requests("extract")

    # The next one resumes extraction from the transcript: every turn, the
    # summarised ones included, reaches the extractor verbatim.
    model_server.set_default_arguments("save_memories", {"operations": []})
    c2 = await new_client(model_server, tmp_path, 50_000, memory={"modelTier": False})
    try:
        await c2.new_session(workspace)
        await wait_caught_up(c2, workspace, sessions=1)
        seen = "\n".join(request_text(r) for r in model_server.requests("extract"))
        for n in range(4):
            assert f"Turn {n}." in seen
        assert "the deploy window is Tuesday" in seen
        assert memory_dir(workspace, agentd_home(tmp_path)).is_dir()
    finally:
        await c2.lsp.shutdown_session()


def screenshot(width: int, height: int) -> str:
    """A grey PNG of that size, in base64: a few KB (its rows compress to
    nothing), billed by providers for its pixels all the same."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = zlib.compress(b"".join(b"\x00" + b"\x80" * width for _ in range(height)), 9)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows)
    return base64.b64encode(png + chunk(b"IEND", b"")).decode()


async def test_screenshots_in_a_prompt_count_toward_the_threshold(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Seven full-HD screenshots cost about 7,700 input tokens (1,105 each by
    OpenAI's count, the API the daemon talks to here) though their bytes are
    few: with a 14,000-token window (threshold 8,400, budget 10,500) and
    about 1,500 for the system prompt, the tools and a first turn, the
    prompt that brings them is past the threshold, so the summary starts
    then, in the background, while the request still goes (it fits);
    counted by their bytes they were invisible and nothing was compacted
    until the provider refused a request."""
    c = await new_client(model_server, tmp_path, 14_000, supportsImages=True)
    try:
        sid = await c.new_session(workspace)
        assert (await c.prompt(sid, "Hello."))["stopReason"] == "end_turn"
        # (The set-up's arithmetic: the images alone take the count past the
        # threshold, and not past the budget.)
        tokens = updates(c, sid, "usage")[-1]["contextTokens"]
        assert threshold(14_000) < tokens + 7 * 1105 < 14_000 - 14_000 // 4 - 200
        image = screenshot(1920, 1080)
        content = [{"type": "text", "text": "What do these screenshots show?"}] + [
            {"type": "image", "data": image, "mimeType": "image/png"} for _ in range(7)
        ]
        result = await c.request("agent/prompt", {"sessionId": sid, "prompt": content})
        assert result["stopReason"] == "end_turn"
        # Not a speed bound: without the images counted no summary ever starts.
        compact = await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "compact", timeout=60
        )
        await model_server.wait_for(lambda e: e["type"] == "complete" and e["id"] == compact["id"])
        # The first turn is summarised; the screenshots' prompt stays verbatim.
        assert "Hello." in request_text(compact)
        assert "What do these screenshots show?" not in request_text(compact)
        # Nobody waited for it (a wait is reported `started`): the request fit.
        assert [u["status"] for u in updates(c, sid, "compaction")] == []
        assert any("screenshots" in request_text(r) for r in main_requests(model_server))
    finally:
        await c.lsp.shutdown_session()


@pytest.mark.parametrize(("provider", "billed"), [("openai", 1105), ("anthropic", 1600)])
async def test_the_meter_counts_a_screenshot_as_the_server_bills_it(
    model_server: ModelServer, tmp_path: Path, workspace: Path, provider: str, billed: int
) -> None:
    """The meter's figure for a prompt with a full-HD screenshot, before its
    request is sent, is what the model server then bills for that request
    (which bills the image as the API it emulates does: 1105 tokens by
    OpenAI's tiles, 1600 by Anthropic's pixels). The figure is read from the
    request's `max_tokens`: with a known window the daemon asks for the
    window less its estimate with a 5 % margin."""
    window = 9_000
    init: dict[str, Any] = {"provider": provider, "supportsImages": True}
    if provider == "anthropic":
        init["baseUrl"] = model_server.base_url
    c = await new_client(model_server, tmp_path, window, **init)
    try:
        sid = await c.new_session(workspace)
        # The first answer anchors the count and calibrates the text's share.
        assert (await c.prompt(sid, "Hello."))["stopReason"] == "end_turn"
        content = [
            {"type": "text", "text": "What does this screenshot show?"},
            {"type": "image", "data": screenshot(1920, 1080), "mimeType": "image/png"},
        ]
        result = await c.request("agent/prompt", {"sessionId": sid, "prompt": content})
        assert result["stopReason"] == "end_turn"
        request = main_requests(model_server)[-1]
        body = request["body"]
        room = body.get("max_completion_tokens") or body["max_tokens"]
        estimate = (window - room) / 1.05
        charged = request["cache"]["input"]  # the server's count, as its usage reports it
        before = main_requests(model_server)[-2]["cache"]["input"]
        assert billed < charged - before < billed + 100  # the image, and a few lines of text
        # Within a few tokens (about 30 here: the JSON around the image and
        # the text parts, which the meter's bytes leave out); counting the
        # image by the other API's formula is off by about 500.
        assert abs(charged - estimate) < 80, (charged, estimate)
    finally:
        await c.lsp.shutdown_session()
