"""The model server behaviours of the last round (a hang-up before any
answer byte, keep-alive comments while the first token waits, every answer
with `Connection: close`) met by the editor's cancel and by SIGTERM, over
both front ends: one reply per prompt, the model stream closed, the next
prompt working, and a clean exit."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

# What the server does to the prompt the editor stops.
SCENARIOS: dict[str, list[dict[str, Any]]] = {
    # Keep-alive comments while the first token waits.
    "pinging": [{"text": "late", "ttft": 600, "pingEvery": 0.05}],
    # The kept-alive connection hung up on, the request sent again, and
    # that one pinging.
    "hung-up-then-pinging": [{"hangUp": True}, {"text": "late", "ttft": 600, "pingEvery": 0.05}],
    # A long stream, each answer closing its connection.
    "streaming-connection-close": [{"chunks": ["part "] * 1200, "chunkDelay": 0.05}],
}


def _prompt(d: RawDaemon, msg_id: Any, sid: str, text: str) -> None:
    if d.framing == "acp":
        blocks = [{"type": "text", "text": text}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})


def _cancelled(reply: dict[str, Any]) -> bool:
    return bool(
        reply.get("error", {}).get("code") == -32800
        or reply.get("result", {}).get("stopReason") == "cancelled"
    )


async def _stopped_prompt(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, scenario: str
) -> tuple[RawDaemon, str, int]:
    """A daemon whose second prompt is in the scenario's state; the session,
    and the log id of the request the stop must close."""
    if scenario == "streaming-connection-close":
        model_server.close_every = True
    # The window configured: no `/models` request of its discovery takes the
    # kept-alive connection the hang-up is meant for.
    env = daemon_env(
        model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off", AGENTD_CONTEXT_WINDOW="32768"
    )
    d = await RawDaemon.spawn(env, acp=acp)
    sid = await d.open_session(workspace)
    _prompt(d, 2, sid, "first")
    assert (await d.response(2))["result"]["stopReason"] == "end_turn"
    await model_server.wait_answered(model_server.answered)  # back in the pool
    for reply in SCENARIOS[scenario]:
        model_server.enqueue(reply)
    before = len(model_server.requests("main"))
    _prompt(d, 3, sid, "second")
    wanted = before + len(SCENARIOS[scenario])
    while len(model_server.requests("main")) < wanted:
        await model_server.wait_for(
            lambda e: e["type"] == "request" and len(model_server.requests("main")) >= wanted
        )
    request = model_server.requests("main")[-1]
    if scenario == "hung-up-then-pinging":
        hung = model_server.requests("main")[-2]
        assert request["connection"] > hung["connection"] == 1  # the kept-alive one, then a new one
    if scenario == "streaming-connection-close":
        await model_server.wait_for(
            lambda e: e["type"] == "first_chunk" and e["id"] == request["id"]
        )
    return d, sid, request["id"]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_cancel_ends_the_prompt_and_the_next_one_works(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, scenario: str
) -> None:
    d, sid, rid = await _stopped_prompt(model_server, tmp_path, workspace, acp, scenario)
    try:
        if acp:
            d.notify("session/cancel", {"sessionId": sid})
        else:
            d.notify("$/cancelRequest", {"id": 3})
        assert _cancelled(await d.response(3))
        await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == rid)
        _prompt(d, 4, sid, "third")
        assert (await d.response(4))["result"]["stopReason"] == "end_turn"
        # Sent once more at most: never again after the cancel.
        assert len(model_server.requests("main")) == 2 + len(SCENARIOS[scenario])
    finally:
        await d.close()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_sigterm_answers_the_prompt_and_exits_cleanly(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, scenario: str
) -> None:
    d, _, rid = await _stopped_prompt(model_server, tmp_path, workspace, acp, scenario)
    try:
        d.proc.send_signal(signal.SIGTERM)
        assert _cancelled(await d.response(3))
        await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == rid)
        assert await d.wait_exit(30) == 0
    finally:
        await d.close()
