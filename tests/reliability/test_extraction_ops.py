"""What one extraction reply may do to a memory folder (issue 14, items 11 and 13).

Item 11: an operation whose file name held a lone surrogate made the whole
run fail: the valid notes of the same reply were not written and the cursor
stayed. Now the bad operation is refused (and listed), the rest is written
and the cursor moves on.

Item 13, first part: an extractor `delete` removed a note the user wrote by
hand. Extraction now deletes (or creates over) only notes it created itself
and nobody changed since; a note of the user's is kept, the refusal listed.

The real daemon and the model server: the extraction replies are scripted
at the server, as a model's would come.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

BODY = "The project deploys with make ship once the smoke tests pass on CI."
HANDWRITTEN = (
    "---\nname: style\ndescription: code style\ntype: feedback\n---\n\nTabs, never spaces.\n"
)


def create(file: str, body: str = BODY) -> dict[str, Any]:
    return {
        "action": "create",
        "file": file,
        "name": file.removesuffix(".md"),
        "description": "a durable fact",
        "type": "project",
        "body": body,
    }


def extraction_reply(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"toolCalls": [{"name": "save_memories", "arguments": {"operations": list(ops)}}]}


async def start(server: ModelServer, home: Path, workspace: Path) -> tuple[RawDaemon, str]:
    d = await RawDaemon.spawn(daemon_env(server.openai_base_url, home))
    await d.initialize({"memory": {"modelTier": False}})
    d.request("s", "agent/newSession", {"workspaceRoot": str(workspace)})
    return d, (await d.response("s"))["result"]["sessionId"]


async def turn_then_changed(d: RawDaemon, sid: str, text: str, name: str) -> None:
    """A prompt, then the `memory/changed` that announces `name` (written or removed)."""
    d.request(text, "agent/prompt", {"sessionId": sid, "prompt": text})
    assert (await d.response(text))["result"]["stopReason"] == "end_turn"
    seen = [n for n in d.notifications if n.get("method") == "memory/changed"]
    while not any(Path(p).name == name for n in seen for p in n["params"]["paths"]):
        msg = await d.read_message(30)
        if msg.get("method") == "memory/changed":
            seen.append(msg)
    d.notifications.clear()


async def extraction_status(d: RawDaemon, workspace: Path, n: int = 0) -> dict[str, Any]:
    d.request(f"st-{n}", "memory/status", {"workspaceRoot": str(workspace)})
    return dict((await d.response(f"st-{n}"))["result"]["extraction"])


async def extraction_settled(d: RawDaemon, workspace: Path) -> dict[str, Any]:
    """The extraction status once every cursor is at its transcript's end. The
    cursor is written last (after the notes, MEMORY.md and the ledger), and
    the note's `memory/changed` can come before those: asked until then."""
    async with asyncio.timeout(60):  # a hang guard, not a measurement
        for n in itertools.count():
            ext = await extraction_status(d, workspace, n)
            rows = ext.get("cursors", [])
            if rows and all(r["processedOffset"] == r["transcriptEnd"] for r in rows):
                return ext
    raise AssertionError("unreachable")


async def test_one_bad_operation_is_refused_and_the_rest_written(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    folder = memory_folder(workspace, tmp_path)
    model_server.enqueue(
        extraction_reply(
            create("first.md"),
            create("bad\ud83d.md"),
            # Half an emoji in a body is text to clean, not a reason to refuse.
            create("second.md", BODY + " Half an emoji: \ud83d."),
        ),
        purpose="extract",
    )
    d, sid = await start(model_server, tmp_path, workspace)
    try:
        await turn_then_changed(d, sid, "remember how we deploy", "second.md")
        ext = await extraction_settled(d, workspace)
    finally:
        await d.close()
    assert (folder / "first.md").read_text().endswith(BODY + "\n")
    assert "Half an emoji: \ufffd." in (folder / "second.md").read_text()
    assert sorted(p.name for p in folder.glob("*.md")) == ["MEMORY.md", "first.md", "second.md"]
    [row] = ext["cursors"]
    assert row["processedOffset"] == row["transcriptEnd"] > 0, ext
    assert any("not valid Unicode" in s for s in ext["skipped"]), ext
    assert "lastError" not in ext, ext


async def test_extraction_never_deletes_or_overwrites_a_note_it_did_not_create(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    folder = memory_folder(workspace, tmp_path)
    (folder / "style.md").write_text(HANDWRITTEN)
    model_server.enqueue(
        extraction_reply(
            {"action": "delete", "file": "style.md"},
            create("style.md", "Spaces, four of them. " + BODY),
            create("deploy.md"),
        ),
        purpose="extract",
    )
    # Its own note, unchanged since it wrote it: that one it may delete.
    model_server.enqueue(extraction_reply({"action": "delete", "file": "deploy.md"}), "extract")
    d, sid = await start(model_server, tmp_path, workspace)
    try:
        await turn_then_changed(d, sid, "we deploy with make ship", "deploy.md")
        assert (folder / "deploy.md").exists()
        # The run's refusals are recorded as it ends, after the note's `memory/changed`.
        ext = await extraction_settled(d, workspace)
        await turn_then_changed(d, sid, "make ship is gone", "deploy.md")
    finally:
        await d.close()
    assert (folder / "style.md").read_text() == HANDWRITTEN
    assert not (folder / "deploy.md").exists()
    refusals = [s for s in ext["skipped"] if s.startswith("style.md")]
    assert len(refusals) == 2, ext["skipped"]
    # The model is told which notes are the user's.
    request = model_server.requests("extract")[-1]
    assert '"byUser": true' in str(request["body"]) or '"byUser":true' in str(request["body"])
