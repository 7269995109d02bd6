"""A new session's first prompt, written the instant its session exists, over
both front ends: its transcript (created by that prompt) holds the prompt
before the model request goes out, so a daemon killed then keeps it."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import meta_path, sessions_dir

pytestmark = pytest.mark.e2e


async def _new_session(d: RawDaemon, acp: bool, workspace: Path, msg_id: int) -> str:
    if acp:
        d.request(msg_id, "session/new", {"cwd": str(workspace), "mcpServers": []})
    else:
        d.request(msg_id, "agent/newSession", {"workspaceRoot": str(workspace)})
    return str((await d.response(msg_id))["result"]["sessionId"])


def _prompt(d: RawDaemon, acp: bool, sid: str, text: str, msg_id: int) -> None:
    if acp:
        blocks = [{"type": "text", "text": text}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
@pytest.mark.parametrize("earlier", [False, True], ids=["first-session", "later-session"])
async def test_a_prompt_sent_the_instant_its_session_exists_is_on_disk_before_its_request(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool, earlier: bool
) -> None:
    """Default settings (memory on). `earlier`: another session of the project
    was prompted first, so its sessions folder exists (the warm case); else
    this prompt also makes the folder. The model holds its answer; once the
    request has arrived the daemon is killed, and the transcript has the
    session's header and the prompt, with no second header, and no meta file
    of a session that was never prompted."""
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            d.request(1, "initialize", {"protocolVersion": 1})
            await d.response(1)
        else:
            await d.initialize()
        folder = sessions_dir(workspace, agentd_home(tmp_path))
        if earlier:
            first = await _new_session(d, acp, workspace, 2)
            _prompt(d, acp, first, "an earlier question", 3)
            assert "result" in await d.response(3)
        unprompted = await _new_session(d, acp, workspace, 4)
        model_server.enqueue({"text": "never read", "ttft": 600})
        sid = await _new_session(d, acp, workspace, 5)
        _prompt(d, acp, sid, "the question the daemon must keep", 6)
        await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and _asks(e, "must keep")
        )
        d.proc.kill()
        assert await d.wait_exit() == -signal.SIGKILL
    finally:
        await d.close()
    records = [json.loads(line) for line in (folder / f"{sid}.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "message"]
    assert records[0]["sessionId"] == sid
    assert records[0]["workspaceRoot"] == str(workspace)
    texts = [p["text"] for p in records[1]["message"]["parts"] if p["type"] == "text"]
    assert texts == ["the question the daemon must keep"]
    assert not (folder / f"{unprompted}.jsonl").exists()
    assert not meta_path(folder / f"{unprompted}.jsonl").exists()


def _asks(entry: dict[str, Any], words: str) -> bool:
    return words in json.dumps(entry["body"]["messages"][-1])
