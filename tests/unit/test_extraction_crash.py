"""SIGKILL at every step of an extraction write, then a fresh run (SQLite-style).

The writer's testing seam `AGENTD_TEST_KILL_AT=<step>[@n]` kills the process
the n-th time a step is reached. After each kill: every file is the old or the
new version, MEMORY.md points at no missing file, and the cursor is never ahead
of the disk; after the next run: no temp file is left and everything is new,
written once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.layout import memory_dir
from agentd.messages import Message, TextPart
from agentd.transcript import TranscriptWriter, sessions_dir

OLD = "---\nname: deploy\ndescription: old\ntype: project\n---\n\nWe deploy with make ship.\n"
NEW_BODY = "We deploy with make release now; make ship was retired in June."
FRESH_BODY = "The CI cache key includes the lockfile hash and the python version."
GONE = "---\nname: gone\ndescription: obsolete\ntype: project\n---\n\nObsolete note.\n"

SCRIPT = r"""
import asyncio, sys
from pathlib import Path
from agentd.messages import ToolCall
from agentd.memory.extraction import ExtractionService
from agentd.memory.manager import MemoryManager
from agentd.providers.base import StreamEnd, ToolCallReady, Usage
from agentd.tasks import Supervisor

OPS = [
    {"action": "update", "file": "deploy.md", "name": "deploy", "description": "new",
     "type": "project", "body": sys.argv[3]},
    {"action": "create", "file": "fresh.md", "name": "fresh", "description": "ci cache",
     "type": "project", "body": sys.argv[4]},
    {"action": "delete", "file": "gone.md"},
]

class Provider:
    name = "fake"
    async def stream(self, request):
        yield ToolCallReady(ToolCall("c", "save_memories", {"operations": OPS}))
        yield StreamEnd("tool_use", Usage())
    def warm(self): pass
    async def aclose(self): pass

async def main():
    home, root = Path(sys.argv[1]), Path(sys.argv[2])
    manager = MemoryManager(home, watch=False)
    sup = Supervisor()
    svc = ExtractionService(manager, Provider(), sup, fast_model="m",
                            transcripts=lambda s: None, home=home)
    await svc.resume(root)
    for p in list(svc._projects.values()):
        while p.flight is not None and (t := p.flight.task) is not None:
            await asyncio.wait([t])
    print(svc.status(root).get("lastError", ""))
    await svc.drain(1)
    await sup.aclose()
    await manager.aclose()

asyncio.run(main())
"""

WRITE_STEPS = ["before_temp", "after_temp_write", "after_fsync", "after_rename", "after_dir_fsync"]
# Five atomic writes per run: deploy.md, fresh.md, MEMORY.md, the ownership
# ledger (gone.md leaves it), then the cursor.
CASES = [f"{s}@{n}" for s in WRITE_STEPS for n in (1, 2, 3, 4, 5)] + [
    "before_cursor",
    "after_cursor",
]


def new_text(body: str, name: str, desc: str) -> str:
    return f'---\nname: "{name}"\ndescription: "{desc}"\ntype: project\n---\n\n{body}\n'


def run(home: Path, root: Path, kill_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    if kill_at:
        env["AGENTD_TEST_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(home), str(root), NEW_BODY, FRESH_BODY],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )


def check_consistent(folder: Path, end: int) -> bool:
    """The invariants that must hold at any moment; True when the run's work is all on disk."""
    deploy = (folder / "deploy.md").read_text()
    new_deploy = new_text(NEW_BODY, "deploy", "new")
    assert deploy in (OLD, new_deploy)
    fresh = folder / "fresh.md"
    assert not fresh.exists() or fresh.read_text() == new_text(FRESH_BODY, "fresh", "ci cache")
    gone = folder / "gone.md"
    assert not gone.exists() or gone.read_text() == GONE
    index = folder / "MEMORY.md"
    if index.exists():
        for target in re.findall(r"\]\(([^)]+)\)", index.read_text()):
            assert (folder / target).exists(), f"MEMORY.md points at missing {target}"
    cursor_file = folder / ".cursors.json"
    cursors = json.loads(cursor_file.read_text())["sessions"] if cursor_file.exists() else []
    all_new = deploy == new_deploy and fresh.exists() and not gone.exists()
    if cursors and cursors[0]["processedOffset"] >= end:
        assert all_new, "the cursor is ahead of the disk"
    return all_new


@pytest.mark.parametrize("kill_at", CASES)
def test_sigkill_at_each_write_step(tmp_path: Path, kill_at: str) -> None:
    home, root = tmp_path / "home", tmp_path / "ws"
    root.mkdir()
    folder = memory_dir(root, home)
    folder.mkdir(parents=True)
    (folder / "deploy.md").write_text(OLD)
    (folder / "gone.md").write_text(GONE)
    # gone.md is a note extraction created: it may delete it (not a user's note).
    digest = hashlib.sha256(GONE.encode()).hexdigest()
    (folder / ".extracted.json").write_text(json.dumps({"created": {"gone.md": digest}}))
    (folder / "MEMORY.md").write_text(
        "# Memory index\n\n- [deploy](deploy.md)\n- [gone](gone.md)\n"
    )
    w = TranscriptWriter(sessions_dir(root, home) / "s1.jsonl", "s1", root)
    w.append(Message("user", [TextPart("deploys changed, and the CI cache key too")]))
    w.append(Message("assistant", [TextPart("noted")]))
    w.close()

    crashed = run(home, root, kill_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    check_consistent(folder, end=2)

    fresh = run(home, root, None)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.strip() == ""  # no lastError
    assert check_consistent(folder, end=2)
    assert [p.name for p in folder.iterdir() if p.name.startswith(".agentd-tmp-")] == []
    cursors = json.loads((folder / ".cursors.json").read_text())["sessions"]
    # Both messages processed: the next read starts at the transcript's end.
    size = (sessions_dir(root, home) / "s1.jsonl").stat().st_size
    assert cursors == [{"sessionId": "s1", "processedOffset": 2, "byteOffset": size}]
    index = (folder / "MEMORY.md").read_text()
    assert index.count("(fresh.md)") == 1 and "(gone.md)" not in index
    assert sorted(p.name for p in folder.glob("*.md")) == ["MEMORY.md", "deploy.md", "fresh.md"]
