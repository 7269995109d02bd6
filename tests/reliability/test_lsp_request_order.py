"""agentd's LSP requests are started by its own dispatch, past pygls'
(`AgentdProtocol._start_direct`); LSP's lifecycle requests and the
notifications still go through pygls. Over the real daemon, with messages
written together in one write (read in one callback): each is handled in
the order it was written, whichever way it goes, every request gets its
one reply, and a prompt still ends as it did (-32602 naming the field,
-32003 for a busy session, -32800 when cancelled, -32600 after shutdown).
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentd.testing.daemon import daemon_env
from agentd.testing.framing import frame, notification, request
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

MODELS = {"models": ["big-model", {"id": "small-model", "name": "Small"}]}


@pytest_asyncio.fixture
async def raw(model_server: ModelServer, tmp_path: Path) -> AsyncIterator[RawDaemon]:
    d = await RawDaemon.spawn(
        daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    )
    await d.initialize(MODELS)
    yield d
    await d.close()


async def new_session(raw: RawDaemon, workspace: Path, msg_id: Any = "ns") -> str:
    raw.request(msg_id, "agent/newSession", {"workspaceRoot": str(workspace)})
    return str((await raw.response(msg_id))["result"]["sessionId"])


async def replies(raw: RawDaemon, ids: list[Any]) -> dict[Any, dict[str, Any]]:
    """The replies to `ids`, by id; fails on a second reply to any of them."""
    got: dict[Any, dict[str, Any]] = {}
    while set(ids) - set(got):
        msg = await raw.read_message()
        if "method" in msg:
            continue
        assert msg["id"] not in got, msg
        got[msg["id"]] = msg
    return got


def prompt(msg_id: Any, sid: str, text: str) -> bytes:
    return frame(request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text}))


def disconnected(request_id: Any, event: dict[str, Any]) -> bool:
    return bool(event["type"] == "disconnect" and event["id"] == request_id)


async def test_a_prompt_runs_after_the_requests_written_before_it(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sid = await new_session(raw, workspace)
    # A model switch, a mode switch and a prompt in one write: the prompt's
    # request is made with what the two before it set.
    raw.write_raw(
        frame(request(1, "agent/setModel", {"sessionId": sid, "model": "small-model"}))
        + frame(request(2, "agent/setMode", {"sessionId": sid, "mode": "ask"}))
        + prompt(3, sid, "after the switch")
    )
    got = await replies(raw, [1, 2, 3])
    assert got[1]["result"] == {"model": "small-model"}
    assert got[2]["result"] == {"mode": "ask"}
    assert got[3]["result"]["stopReason"] == "end_turn"
    body = model_server.requests("main")[-1]["body"]
    assert body["model"] == "small-model"
    # The model is told of the read-only mode.
    assert "in Ask mode (read-only)" in json.dumps(body)


async def test_of_two_prompts_written_together_the_first_runs(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sid = await new_session(raw, workspace)
    model_server.add_rule("slow", {"chunks": ["s "] * 20, "chunkDelay": 0.02})
    raw.write_raw(prompt("a", sid, "slow") + prompt("b", sid, "second"))
    got = await replies(raw, ["a", "b"])
    assert got["a"]["result"]["stopReason"] == "end_turn"
    assert got["b"]["error"]["code"] == -32003
    assert "second" not in json.dumps(model_server.requests("main")[-1]["body"])


async def test_a_cancel_written_after_the_prompt_cancels_it_and_before_does_not(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sid = await new_session(raw, workspace)
    model_server.add_rule("long", {"chunks": ["x "] * 400, "chunkDelay": 0.05}, times=2)
    # Before: a cancel of the id to come finds no request; the prompt runs.
    # After: it cancels the prompt, which had not started (read in the same callback).
    raw.write_raw(
        frame(notification("$/cancelRequest", {"id": "p"}))
        + prompt("p", sid, "hello")
        + prompt("q", sid, "long")
        + frame(notification("$/cancelRequest", {"id": "q"}))
    )
    got = await replies(raw, ["p", "q"])
    assert got["q"]["error"]["code"] == -32800
    assert got["p"]["result"]["stopReason"] == "end_turn"
    # "q" never started: the model was never asked for it.
    assert not any('"long"' in json.dumps(e["body"]) for e in model_server.requests("main"))
    # A cancel of a prompt under way: its stream to the model is closed.
    seen = max(e["id"] for e in model_server.requests())
    raw.write_raw(prompt("r", sid, "long"))
    sent = await model_server.wait_for(lambda e: e["type"] == "request" and e["id"] > seen)
    assert '"long"' in json.dumps(sent["body"])  # as the check above would have seen "q"
    raw.send(notification("$/cancelRequest", {"id": "r"}))
    assert (await raw.response("r"))["error"]["code"] == -32800
    await model_server.wait_for(functools.partial(disconnected, sent["id"]))
    raw.request("s", "agent/prompt", {"sessionId": sid, "prompt": "next"})
    assert (await raw.response("s"))["result"]["stopReason"] == "end_turn"


async def test_bad_prompts_written_together_each_get_their_error(
    raw: RawDaemon, workspace: Path
) -> None:
    sid = await new_session(raw, workspace)
    raw.write_raw(
        frame(request(1, "agent/prompt", {"sessionId": sid}))
        + frame(request(2, "agent/prompt", {"sessionId": sid, "prompt": 7}))
        + frame(request(3, "agent/prompt", {"sessionId": "no-such-session", "prompt": "x"}))
        + frame(request(4, "agent/prompt", [sid, "x"]))
        + frame(request(5, "agent/nope", {}))
    )
    got = await replies(raw, [1, 2, 3, 4, 5])
    assert got[1]["error"]["code"] == -32602
    assert [f["field"] for f in got[1]["error"]["data"]["fields"]] == ["prompt"]
    assert got[2]["error"]["code"] == -32602
    assert got[2]["error"]["data"]["fields"][0]["field"].startswith("prompt")
    assert got[3]["error"]["code"] == -32001
    assert got[4]["error"]["code"] == -32602
    assert got[5]["error"]["code"] == -32601


async def test_a_prompt_written_after_shutdown_is_refused(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sid = await new_session(raw, workspace)
    before = len(model_server.requests("main"))
    # pygls answers `shutdown` (its handler runs in the read); the prompt
    # after it, agentd's, is refused as every request after shutdown is.
    raw.write_raw(frame(request("bye", "shutdown")) + prompt("late", sid, "too late"))
    got = await replies(raw, ["bye", "late"])
    assert got["bye"]["result"] is None
    assert got["late"]["error"]["code"] == -32600
    raw.notify("exit")
    assert await raw.wait_exit() == 0
    assert len(model_server.requests("main")) == before
