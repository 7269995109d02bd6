"""Cancellation cases not covered by tests/e2e: unknown and finished ids, a
cancel racing the request's start, and exactly one reply per request."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentd.testing.daemon import daemon_env
from agentd.testing.framing import frame, notification, request
from agentd.testing.model_server import ModelServer
from agentd.testing.model_server.replies import strip_reminders
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e


def disconnected(request_id: Any, event: dict[str, Any]) -> bool:
    """A model server log predicate: the client left request `request_id`'s stream."""
    return bool(event["type"] == "disconnect" and event["id"] == request_id)


@pytest_asyncio.fixture
async def raw(model_server: ModelServer, tmp_path: Path) -> AsyncIterator[RawDaemon]:
    d = await RawDaemon.spawn(
        daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    )
    await d.initialize()
    yield d
    await d.close()


async def new_session(raw: RawDaemon, workspace: Path, msg_id: Any = "ns") -> str:
    raw.request(msg_id, "agent/newSession", {"workspaceRoot": str(workspace)})
    return str((await raw.response(msg_id))["result"]["sessionId"])


async def read_until_reply(raw: RawDaemon, msg_id: Any) -> list[dict[str, Any]]:
    """Every message up to and including the reply to `msg_id`."""
    seen = []
    while True:
        msg = await raw.read_message()
        seen.append(msg)
        if msg.get("id") == msg_id and ("result" in msg or "error" in msg):
            return seen


async def test_cancel_for_unknown_or_finished_id_does_nothing(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sid = await new_session(raw, workspace)
    raw.request(1, "agent/prompt", {"sessionId": sid, "prompt": "first"})
    assert (await raw.response(1))["result"]["stopReason"] == "end_turn"
    # Cancels for the finished id, for ids never used (both types), and agent/cancel
    # for a session with nothing running; then a barrier request.
    raw.send(notification("$/cancelRequest", {"id": 1}))
    raw.send(notification("$/cancelRequest", {"id": 424242}))
    raw.send(notification("$/cancelRequest", {"id": "never-sent"}))
    raw.send(notification("agent/cancel", {"sessionId": sid}))
    raw.send(notification("agent/cancel", {"sessionId": "unknown-session"}))
    raw.request(2, "agent/prompt", {"sessionId": sid, "prompt": "second"})
    seen = await read_until_reply(raw, 2)
    replies = [m for m in seen if "id" in m and "method" not in m]
    # Nothing answered the cancels; the next prompt ran normally, with the history intact.
    assert replies == [{"jsonrpc": "2.0", "id": 2, "result": replies[0]["result"]}]
    assert replies[0]["result"]["stopReason"] == "end_turn"
    messages = model_server.requests("main")[-1]["body"]["messages"]
    # (The first prompt also carries the date, as a reminder.)
    users = [strip_reminders(m["content"]) for m in messages if m["role"] == "user"]
    assert users == ["first", "second"]


async def test_a_cancel_racing_the_start_still_cancels_it(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sid = await new_session(raw, workspace)
    model_server.add_rule("long", {"chunks": ["x "] * 400, "chunkDelay": 0.05})
    # The prompt and its cancel arrive in one write: the cancel is read before the
    # prompt's handler has had a chance to run (it awaits the warm-up first).
    raw.write_raw(
        frame(request("p", "agent/prompt", {"sessionId": sid, "prompt": "long"}))
        + frame(notification("$/cancelRequest", {"id": "p"}))
    )
    reply = await raw.response("p")
    assert reply["error"]["code"] == -32800
    # The same race with agent/cancel, which names the session instead of the id.
    raw.write_raw(
        frame(request("q", "agent/prompt", {"sessionId": sid, "prompt": "long"}))
        + frame(notification("agent/cancel", {"sessionId": sid}))
    )
    assert (await raw.response("q"))["error"]["code"] == -32800
    # Whatever reached the model was closed; the session takes the next prompt.
    raw.request("r", "agent/prompt", {"sessionId": sid, "prompt": "next"})
    assert (await raw.response("r"))["result"]["stopReason"] == "end_turn"
    for rid in [e["id"] for e in model_server.requests("main")][:-1]:
        await model_server.wait_for(functools.partial(disconnected, rid))


async def test_exactly_one_reply_per_request_under_cancel(
    raw: RawDaemon, workspace: Path, model_server: ModelServer
) -> None:
    sessions = [await new_session(raw, workspace, f"ns{i}") for i in range(4)]
    model_server.add_rule("slow", {"chunks": ["s "] * 50, "chunkDelay": 0.02}, times=1000)
    sent: list[Any] = []
    n = 0
    for round_ in range(5):
        for i, sid in enumerate(sessions):
            n += 1
            msg_id: Any = n if n % 2 else f"id-{n}"
            text = "slow" if (round_ + i) % 3 else "fast"
            raw.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})
            sent.append(msg_id)
            how = (round_ + i) % 4
            if how == 0:
                raw.send(notification("$/cancelRequest", {"id": msg_id}))
                raw.send(notification("$/cancelRequest", {"id": msg_id}))  # twice
            elif how == 1:
                raw.send(notification("agent/cancel", {"sessionId": sid}))
            elif how == 2:
                raw.send(notification("$/cancelRequest", {"id": msg_id}))
                raw.send(notification("agent/cancel", {"sessionId": sid}))
            # how == 3: not cancelled; a busy session answers -32003 or it runs.
        # Each round ends when every prompt of the round is answered.
        pending = set(sent[-len(sessions) :])
        counts: Counter[Any] = Counter()
        while pending:
            msg = await raw.read_message()
            if "method" in msg:
                continue
            counts[msg["id"]] += 1
            pending.discard(msg["id"])
            if "error" in msg:
                assert msg["error"]["code"] in (-32800, -32003), msg
        assert all(c == 1 for c in counts.values()), counts
    # After a barrier no late or duplicate reply shows up.
    raw.request("barrier", "agent/listSessions", {"workspaceRoot": str(workspace)})
    seen = await read_until_reply(raw, "barrier")
    assert [m for m in seen if "id" in m and m["id"] != "barrier" and "method" not in m] == []


async def test_a_cancel_request_whose_id_no_request_can_have_is_ignored(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """`$/cancelRequest` with an object, an array, a fraction, a boolean or
    null as its id: pygls looked an object or array up in its table of
    requests and failed the dispatch with a traceback. Each is ignored
    (logged) now; the prompt running meanwhile is not cancelled."""
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    log = tmp_path / "agentd-stderr.log"
    with log.open("wb") as stderr:
        raw = await RawDaemon.spawn(env, stderr=stderr)
    try:
        await raw.initialize()
        sid = await new_session(raw, workspace)
        raw.request(1, "agent/prompt", {"sessionId": sid, "prompt": "!delay 0.5\nslow"})
        for hostile in ({"id": 1}, [1], 1.5, True, None):
            raw.notify("$/cancelRequest", {"id": hostile})
        raw.notify("$/cancelRequest", [1])
        assert (await raw.response(1))["result"]["stopReason"] == "end_turn"
        raw.request(2, "shutdown")
        await raw.response(2)
        raw.notify("exit")
        assert await raw.wait_exit(30) == 0
    finally:
        await raw.close()
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.count("$/cancelRequest ignored") == 6, text
