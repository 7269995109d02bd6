"""Memory extraction over the real daemon and the real local model server."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agentd.layout import memory_dir
from agentd.testing.daemon import agentd_home, daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e


async def new_client(model_server: ModelServer, tmp_path: Path, **memory: Any) -> AgentdClient:
    options: dict[str, Any] = {"clientTools": ["run_command"]}
    if memory:
        options["memory"] = memory
    return await start_client(daemon_env(model_server.openai_base_url, tmp_path), options)


async def status(c: AgentdClient, root: Path) -> dict[str, Any]:
    result = await c.request("memory/status", {"workspaceRoot": str(root)})
    return dict(result["extraction"])


async def wait_caught_up(
    c: AgentdClient, root: Path, sessions: int, timeout: float = 60
) -> dict[str, Any]:
    """memory/status until every session's cursor is at its transcript's end."""
    deadline = time.monotonic() + timeout
    while True:
        ext = await status(c, root)
        rows = ext["cursors"]
        if (
            ext["state"] == "idle"
            and not ext["trailingPending"]
            and len(rows) >= sessions
            and all(r["processedOffset"] == r["transcriptEnd"] > 0 for r in rows)
        ):
            return ext
        assert time.monotonic() < deadline, ext
        await asyncio.sleep(0.1)


def intervals(server: ModelServer, purpose: str = "extract") -> list[tuple[float, float, int]]:
    """(start, end, id) of each request of `purpose`; end = complete or disconnect."""
    ends = {e["id"]: e["ts"] for e in server.log if e["type"] in ("complete", "disconnect")}
    return sorted(
        (r["ts"], ends.get(r["id"], float("inf")), r["id"]) for r in server.requests(purpose)
    )


def body_text(request: dict[str, Any]) -> str:
    return json.dumps(request["body"], ensure_ascii=False)


def extract_request_with(fact: str, event: dict[str, Any]) -> bool:
    return event["type"] == "request" and event["purpose"] == "extract" and fact in body_text(event)


async def test_burst_single_flight_full_coverage_and_no_waiting(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.set_latency("extract", 2.0)
    c = await new_client(model_server, tmp_path, modelTier=False)
    try:
        sids = [await c.new_session(workspace) for _ in range(4)]
        texts: list[str] = []
        replied: list[float] = []

        async def session_burst(n: int, sid: str, ks: range) -> None:
            for k in ks:
                text = f"burst message s{n} k{k} remember topic{n * 5 + k}"
                texts.append(text)
                result = await c.prompt(sid, text)
                assert result["stopReason"] == "end_turn"
                replied.append(time.time())

        # One prompt per session, then the rest of the burst once the first
        # extraction request is out: on a fast machine twenty prompts could
        # all be answered before the first extraction even starts, and the
        # check that replies never wait for it would see nothing to check.
        await asyncio.gather(*(session_burst(n, sid, range(1)) for n, sid in enumerate(sids)))
        await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "extract", timeout=60
        )
        await asyncio.gather(*(session_burst(n, sid, range(1, 5)) for n, sid in enumerate(sids)))
        assert len(replied) == 20
        ext = await wait_caught_up(c, workspace, sessions=4)
        spans = intervals(model_server)
        assert spans, "no extraction request"
        # At most one extraction in flight per project at any moment.
        for (_, end, _), (start, _, _) in itertools.pairwise(spans):
            assert end <= start, spans
        # One running plus coalesced trailing runs: fewer requests than prompts.
        assert len(spans) < len(texts), spans
        # Replies kept coming while an extraction was in flight: none waited for it.
        assert any(start < r < end for r in replied for start, end, _ in spans)
        bodies = "\n".join(body_text(r) for r in model_server.requests("extract"))
        missing = [t for t in texts if t not in bodies]
        assert missing == []
        assert ext.get("lastError") is None and ext.get("lastRunAt")
    finally:
        await c.lsp.shutdown_session()


async def test_two_projects_extract_in_parallel(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    other = tmp_path / "other-workspace"
    other.mkdir()
    # Extractions that do not finish during the test: if projects were
    # serialised, the second request could never start while the first runs.
    model_server.set_latency("extract", 60.0)
    c = await new_client(model_server, tmp_path, modelTier=False, shutdownGrace=0.2)
    try:
        a, b = await c.new_session(workspace), await c.new_session(other)
        await asyncio.gather(c.prompt(a, "project A fact"), c.prompt(b, "project B fact"))
        for fact in ("project A fact", "project B fact"):
            await model_server.wait_for(
                functools.partial(extract_request_with, fact),
                timeout=20,
            )
        assert [end for _, end, _ in intervals(model_server)] == [float("inf")] * 2
    finally:
        await c.lsp.shutdown_session()


async def test_restart_extracts_exactly_the_unprocessed_slice(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    c = await new_client(model_server, tmp_path, modelTier=False, shutdownGrace=0.2)
    sid = await c.new_session(workspace)
    try:
        await c.prompt(sid, "first processed message")
        await c.prompt(sid, "second processed message")
        first = await wait_caught_up(c, workspace, 1)
        done_offset = first["cursors"][0]["processedOffset"]
        model_server.set_latency("extract", 30.0)  # the next extraction never finishes
        await c.prompt(sid, "third unprocessed message")
        await model_server.wait_for(
            lambda e: (
                e["type"] == "request"
                and e["purpose"] == "extract"
                and "third unprocessed" in body_text(e)
            )
        )
    finally:
        await c.lsp.shutdown_session()
    cursors = json.loads(
        (memory_dir(workspace, agentd_home(tmp_path)) / ".cursors.json").read_text()
    )
    (cursor,) = cursors["sessions"]
    assert (cursor["sessionId"], cursor["processedOffset"]) == (sid, done_offset)

    model_server.set_latency("extract", 0.0)
    before = len(model_server.requests("extract"))
    c2 = await new_client(model_server, tmp_path, modelTier=False)
    try:
        ext = await wait_caught_up(c2, workspace, 1)  # memory/status starts the project
        assert ext["cursors"][0]["processedOffset"] > done_offset
        new = model_server.requests("extract")[before:]
        assert len(new) == 1
        text = body_text(new[0])
        assert "third unprocessed message" in text
        assert "first processed message" not in text and "second processed" not in text
    finally:
        await c2.lsp.shutdown_session()


async def test_shutdown_drains_within_the_grace(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    model_server.set_latency("extract", 60.0)
    c = await new_client(model_server, tmp_path, modelTier=False, shutdownGrace=1)
    sid = await c.new_session(workspace)
    await c.prompt(sid, "something to extract")
    req = await model_server.wait_for(
        lambda e: e["type"] == "request" and e["purpose"] == "extract"
    )
    t0 = time.monotonic()
    await c.lsp.shutdown_session()
    elapsed = time.monotonic() - t0
    assert 0.9 <= elapsed < 5.0, elapsed
    # The HTTP stream was closed: the server saw the client leave.
    await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == req["id"])
    cursor_file = memory_dir(workspace, agentd_home(tmp_path)) / ".cursors.json"
    assert not cursor_file.exists() or json.loads(cursor_file.read_text())["sessions"] == []


async def test_proposed_create_is_written_confined_and_announced(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    body = "Releases ship with `make ship` once the smoke tests pass on CI."
    model_server.set_default_arguments(
        "save_memories",
        {
            "operations": [
                {
                    "action": "create",
                    "file": "deploy-notes.md",
                    "name": "Deploy notes",
                    "description": "How releases are shipped",
                    "type": "project",
                    "body": body,
                },
                {
                    "action": "create",
                    "file": "../../escape.md",
                    "name": "Escape",
                    "description": "should never be written",
                    "type": "project",
                    "body": "This operation tries to leave the memory folder entirely.",
                },
            ]
        },
    )
    c = await new_client(model_server, tmp_path, modelTier=False)
    try:
        sid = await c.new_session(workspace)
        folder = Path(
            (await c.request("memory/status", {"workspaceRoot": str(workspace)}))["directory"]
        )
        target = folder / "deploy-notes.md"
        await c.prompt(sid, "we ship releases with make ship after smoke tests")
        await c.wait_for_memory_changed(str(target))
        listed = await c.request("memory/list", {"workspaceRoot": str(workspace)})
        assert str(target) in json.dumps(listed)
        text = target.read_text()
        assert text.startswith("---\n") and body in text and 'name: "Deploy notes"' in text
        assert not (folder.parent.parent / "escape.md").exists()
        assert not (folder.parent / "escape.md").exists()
        # Once the run is over (its MEMORY.md write included), no temp file is left.
        await wait_caught_up(c, workspace, 1)
        assert [p.name for p in folder.iterdir() if p.name.startswith(".agentd-tmp-")] == []
        index = (folder / "MEMORY.md").read_text()
        assert "(deploy-notes.md)" in index
        assert os.stat(target).st_mode & 0o777 == 0o644
    finally:
        await c.lsp.shutdown_session()


async def test_one_prompt_in_a_fresh_project_is_extracted_once_after_its_reply(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The project's first use (its memory starts with the session, and
    extraction then resumes what earlier runs left) must not extract the live
    session's half turn: exactly one extract request, after the reply,
    holding the user's words and the answer."""
    # An answer that takes its time: the project has started (milliseconds)
    # long before it is complete, so a resume that took the live transcript
    # for leftover work would send the user's half on its own.
    model_server.enqueue({"chunks": ["Releases ship ", "with make ship."], "ttft": 3.0})
    c = await new_client(model_server, tmp_path, modelTier=False)
    try:
        sid = await c.new_session(workspace)
        result = await c.prompt(sid, "how do we cut a release here?")
        assert result["stopReason"] == "end_turn"
        await wait_caught_up(c, workspace, 1)
        (extract,) = model_server.requests("extract")
        (main,) = model_server.requests("main")
        completed = await model_server.wait_for(
            lambda e: e["type"] == "complete" and e["id"] == main["id"]
        )
        assert model_server.log.index(completed) < model_server.log.index(extract)
        text = body_text(extract)
        assert "how do we cut a release here?" in text
        assert "Releases ship with make ship." in text
    finally:
        await c.lsp.shutdown_session()


async def test_a_killed_daemons_transcript_is_extracted_at_the_next_start(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    model_server.set_latency("extract", 60.0)  # the extraction never ends: killed mid-way
    killed = await RawDaemon.spawn(env)
    try:
        await killed.initialize({"memory": {"modelTier": False}})
        killed.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await killed.response(1))["result"]["sessionId"]
        killed.request(2, "agent/prompt", {"sessionId": sid, "prompt": "left behind fact"})
        assert (await killed.response(2))["result"]["stopReason"] == "end_turn"
        await model_server.wait_for(functools.partial(extract_request_with, "left behind fact"))
        killed.proc.kill()
        assert await killed.wait_exit() == -signal.SIGKILL
    finally:
        await killed.close()
    model_server.set_latency("extract", 0.0)
    before = len(model_server.requests("extract"))
    c = await new_client(model_server, tmp_path, modelTier=False)
    try:
        ext = await wait_caught_up(c, workspace, 1)  # memory/status starts the project
        assert [r["sessionId"] for r in ext["cursors"]] == [sid]
        (resumed,) = model_server.requests("extract")[before:]
        assert "left behind fact" in body_text(resumed)
    finally:
        await c.lsp.shutdown_session()
