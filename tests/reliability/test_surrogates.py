"""Lone surrogates never poison a session (issue 14, item 6).

Half an emoji (`\\ud83d`, which a JSON escape decodes to) in an editor's
prompt, in a tool result or in the model's output used to make the
transcript write fail with `UnicodeEncodeError`, stay in the history, and
make every later prompt of the session fail when the request body was
encoded. The real daemon over stdio (LSP and ACP) against the model server:
each way in, the text arrives with U+FFFD in its place, the next prompt of
the session works, the model never receives a surrogate, and the transcript
holds the same history as the session (a restarted daemon replays it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from agentd.messages import clean_text
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import read_slice, sessions_dir

pytestmark = pytest.mark.e2e

HALF = "\ud83d"
SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(value: Any) -> bool:
    return bool(SURROGATE.search(json.dumps(value, ensure_ascii=False)))


def bodies(server: ModelServer) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests("main")]


async def start(
    server: ModelServer, home: Path, workspace: Path, acp: bool, tools: list[str] | None = None
) -> tuple[RawDaemon, str]:
    env = daemon_env(server.openai_base_url, home, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    if acp:
        d.request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        await d.response(1)
        d.request(2, "session/new", {"cwd": str(workspace), "mcpServers": []})
    else:
        await d.initialize({"clientTools": tools or []})
        d.request(2, "agent/newSession", {"workspaceRoot": str(workspace)})
    return d, (await d.response(2))["result"]["sessionId"]


async def prompt(d: RawDaemon, acp: bool, sid: str, text: str, msg_id: Any) -> dict[str, Any]:
    if acp:
        blocks = [{"type": "text", "text": text}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})
    return await d.response(msg_id)


def transcript(home: Path, workspace: Path, sid: str) -> list[str]:
    path = sessions_dir(workspace, agentd_home(home)) / f"{sid}.jsonl"
    raw = path.read_bytes()
    raw.decode("utf-8")  # valid UTF-8 throughout
    for line in raw.splitlines():
        json.loads(line)
    return [m.text for _, m in read_slice(path, 0)]


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_lone_surrogate_in_the_prompt(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    d, sid = await start(model_server, tmp_path, workspace, acp)
    try:
        reply = await prompt(d, acp, sid, f"half an emoji {HALF}!", 10)
        assert reply["result"]["stopReason"] == "end_turn", reply
        reply = await prompt(d, acp, sid, "and now?", 11)
        assert reply["result"]["stopReason"] == "end_turn", reply
    finally:
        await d.close()
    sent = bodies(model_server)
    assert len(sent) == 2 and not any(has_surrogate(b) for b in sent)
    assert "half an emoji \ufffd!" in json.dumps(sent[1], ensure_ascii=False)
    lines = transcript(tmp_path, workspace, sid)
    assert lines == [
        "half an emoji \ufffd!",
        "Echo: half an emoji \ufffd!",
        "and now?",
        "Echo: and now?",
    ]


async def test_lone_surrogates_from_the_model_and_the_editor(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    d, sid = await start(model_server, tmp_path, workspace, acp=False, tools=["edit_file"])
    try:
        # Text with half an emoji, and a pair split across two deltas (joined, not lost).
        model_server.enqueue({"chunks": ["half ", HALF, " and whole \ud83d", "\ude00"]})
        reply = await prompt(d, False, sid, "text please", 10)
        assert reply["result"]["stopReason"] == "end_turn", reply
        chunks = [
            n["params"]["update"]["text"]
            for n in d.notifications
            if n["params"]["update"]["kind"] == "message_chunk"
        ]
        assert "".join(chunks) == "half \ufffd and whole \U0001f600"
        # A daemon tool called with half an emoji in its arguments, then an
        # editor tool whose result holds one.
        model_server.enqueue(
            {"toolCalls": [{"name": "read_file", "arguments": {"path": f"README{HALF}.md"}}]}
        )
        model_server.enqueue({"toolCalls": [{"name": "edit_file", "arguments": {"path": "x"}}]})
        d.request(11, "agent/prompt", {"sessionId": sid, "prompt": "tools please"})
        call_id = None
        while call_id is None:
            msg = await d.read_message()
            update = msg.get("params", {}).get("update", {})
            if update.get("kind") == "tool_call" and update.get("name") == "edit_file":
                call_id = update["toolCallId"]
        d.notify(
            "agent/toolResult",
            {"sessionId": sid, "toolCallId": call_id, "content": f"edited {HALF}"},
        )
        reply = await d.response(11)
        assert reply["result"]["stopReason"] == "end_turn", reply
        reply = await prompt(d, False, sid, "still fine?", 12)
        assert reply["result"]["stopReason"] == "end_turn", reply
    finally:
        await d.close()
    sent = bodies(model_server)
    assert not any(has_surrogate(b) for b in sent)
    last = json.dumps(sent[-1], ensure_ascii=False)
    assert "half \ufffd and whole \U0001f600" in last
    assert "README\ufffd.md" in last and "edited \ufffd" in last

    # The transcript holds what the session held: a restarted daemon replays it.
    d, _ = await start(model_server, tmp_path, workspace, acp=False)
    try:
        d.request(20, "agent/loadSession", {"sessionId": sid})
        await d.response(20)
        replayed = [n["params"]["update"] for n in d.notifications if "update" in n["params"]]
        texts = [u.get("text") or u.get("content") for u in replayed]
        assert "half \ufffd and whole \U0001f600" in texts
        assert "edited \ufffd" in texts
        assert not has_surrogate(replayed)
    finally:
        await d.close()
    assert clean_text(f"a{HALF}b\udc00") == "a\ufffdb\ufffd"


def root_requests(acp: bool, sid: str, root: str) -> list[tuple[str, dict[str, Any], str]]:
    """Every request that names a workspace root, with `root` there: (method,
    params, the field the refusal names)."""
    if acp:
        at = {"cwd": root, "mcpServers": []}
        return [
            ("session/new", at, "cwd"),
            ("session/load", {"sessionId": sid, **at}, "cwd"),
            ("session/resume", {"sessionId": sid, **at}, "cwd"),
            ("session/fork", {"sessionId": sid, **at}, "cwd"),
            ("session/list", {"cwd": root}, "cwd"),
        ]
    return [
        ("agent/newSession", {"workspaceRoot": root}, "workspaceRoot"),
        ("agent/loadSession", {"sessionId": sid, "workspaceRoot": root}, "workspaceRoot"),
        ("agent/forkSession", {"sessionId": sid, "workspaceRoot": root}, "workspaceRoot"),
        ("agent/listSessions", {"workspaceRoot": root}, "workspaceRoot"),
        ("memory/status", {"workspaceRoot": root}, "workspaceRoot"),
    ]


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_root_named_with_a_lone_surrogate_is_refused_naming_the_field(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A folder whose name is not UTF-8 (`b"ws\\x80"`) exists, and Python
    names it `ws\\udc80` (surrogateescape): a root sent so is refused by
    every request of both front ends, -32602 naming the field; nothing of it
    reaches a transcript or the listing (before: ACP took it, and wrote the
    surrogate into the session's files; LSP refused it on `agent/newSession`
    only)."""
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/ws\x80"))
    odd.mkdir()
    home = tmp_path / "home"
    d, sid = await start(model_server, home, workspace, acp)
    try:
        for n, (method, params, field) in enumerate(root_requests(acp, sid, str(odd))):
            d.request(100 + n, method, params)
            reply = await d.response(100 + n)
            assert reply["error"]["code"] == -32602, (method, reply)
            assert field in [f["field"] for f in reply["error"]["data"]["fields"]], (method, reply)
        # The session is still bound to its own root and answers.
        assert (await prompt(d, acp, sid, "still here", 200))["result"]["stopReason"] == "end_turn"
    finally:
        await d.close()
    for path in agentd_home(home).rglob("*"):
        assert not path.is_file() or "\\udc80" not in path.read_text("utf-8"), path
