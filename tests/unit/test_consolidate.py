"""Consolidation ("dream"): merges and retirements through the safe write path."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentd.layout import memory_dir
from agentd.memory.extraction import ExtractionService, consolidate
from agentd.memory.extraction.apply import FileVersion, FolderSnapshot
from agentd.memory.extraction.writer import TEMP_PREFIX
from agentd.memory.manager import MemoryManager
from agentd.messages import Message, TextPart, ToolCall
from agentd.providers.base import ModelRequest, StreamEnd, StreamEvent, ToolCallReady, Usage
from agentd.tasks import Supervisor
from agentd.transcript import TranscriptWriter, load, sessions_dir

SID = "session-1"
DEPLOY = "The project deploys with make ship after the smoke tests pass on CI."
DEPLOY2 = "Deploys go out through make ship; CI smoke tests must be green first."
MERGED = "Deploy with make ship, only after the CI smoke tests are green."
STALE = "The staging server lives on the old cluster that was shut down last year."


class FakeProvider:
    """Answers `consolidate_memories` with `plan`, `save_memories` with `ops`."""

    name = "fake"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.plan: Callable[[ModelRequest], dict[str, Any]] = lambda req: {
            "merge": [],
            "retire": [],
        }
        self.ops: list[dict[str, Any]] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        self.requests.append(request)
        if request.tool_choice == "consolidate_memories":
            call = ToolCall("c1", "consolidate_memories", self.plan(request))
        else:
            call = ToolCall("c1", "save_memories", {"operations": self.ops})
        yield ToolCallReady(call)
        yield StreamEnd("tool_use", Usage())

    def warm(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def dream_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.tool_choice == "consolidate_memories"]


class Env:
    def __init__(self, tmp_path: Path, provider: FakeProvider, **kw: Any) -> None:
        self.home = tmp_path / "home"
        self.root = tmp_path / "ws"
        self.root.mkdir(exist_ok=True)
        self.provider = provider
        self.manager = MemoryManager(self.home, watch=False)
        self.supervisor = Supervisor()
        self.now = 1_000_000.0
        self.svc = ExtractionService(
            self.manager,
            provider,
            self.supervisor,
            fast_model="fast",
            transcripts=lambda sid: None,
            home=self.home,
            clock=lambda: self.now,
            **kw,
        )
        self.folder = memory_dir(self.root, self.home)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.writer: TranscriptWriter | None = None

    def note(self, file: str, body: str, name: str = "", kind: str = "project") -> None:
        (self.folder / file).write_text(
            f'---\nname: "{name or file[:-3]}"\ndescription: "a fact"\ntype: {kind}\n---\n\n'
            f"{body}\n"
        )

    def say(self, text: str) -> None:
        if self.writer is None:
            path = sessions_dir(self.root, self.home) / f"{SID}.jsonl"
            loaded = load(path) if path.exists() else None
            self.writer = TranscriptWriter(path, SID, self.root, loaded.total if loaded else 0)
        self.writer.append(Message("user", [TextPart(text)]))
        self.writer.append(Message("assistant", [TextPart("ok")]))
        self.writer.sync()

    async def settle(self) -> None:
        """Wait until every project's flight is over (lock released, files final)."""
        for p in list(self.svc._projects.values()):
            while p.flight is not None and (task := p.flight.task) is not None:
                await asyncio.wait([task])

    async def extract(self, text: str) -> None:
        self.say(text)
        self.svc.schedule(self.root, SID)
        await self.settle()

    async def consolidate(self) -> dict[str, Any]:
        # The pass answers before its flight has released the lock; tests look
        # at the folder afterwards, so they wait for the flight too.
        result = await self.svc.consolidate(self.root)
        await self.settle()
        return result

    def files(self) -> dict[str, str]:
        # The run's lock file may vanish between listing and reading: the pass
        # answers its caller before the flight has released the lock.
        out: dict[str, str] = {}
        for p in sorted(self.folder.iterdir()):
            try:
                if p.is_file():
                    out[p.name] = p.read_text()
            except FileNotFoundError:
                continue
        return out

    def topics(self) -> list[str]:
        return sorted(n for n in self.files() if n.endswith(".md") and n != "MEMORY.md")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        await self.svc.drain(1)
        await self.supervisor.aclose()
        await self.manager.aclose()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = Env(tmp_path, FakeProvider())
    yield e
    await e.close()


def merge(into: str, *sources: str, body: str = MERGED) -> dict[str, Any]:
    return {
        "into": into,
        "from": list(sources),
        "name": "Deploy",
        "description": "how deploys go out",
        "type": "project",
        "body": body,
    }


async def test_merges_two_duplicates_into_one(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)
    env.note(
        "style.md", "The user wants short commit messages in the imperative mood.", kind="feedback"
    )
    env.provider.plan = lambda req: {"merge": [merge("deploy.md", "shipping.md")], "retire": []}
    result = await env.consolidate()
    assert result == {
        "merged": [{"into": "deploy.md", "from": ["shipping.md"]}],
        "retired": [],
        "skipped": [],
    }
    files = env.files()
    assert env.topics() == ["deploy.md", "style.md"]
    assert MERGED in files["deploy.md"] and 'name: "Deploy"' in files["deploy.md"]
    index = files["MEMORY.md"]
    assert "(deploy.md)" in index and "(style.md)" in index and "shipping.md" not in index
    assert not [n for n in files if n.startswith(TEMP_PREFIX)]
    assert not (env.folder / ".extract.lock").exists()
    # The model saw whole notes (bodies, not only headers), with the pinned purpose.
    (req,) = env.provider.dream_requests()
    assert req.purpose == "extract" and DEPLOY2 in req.messages[0].text
    st = env.svc.status(env.root)["consolidation"]
    assert st["lastRunAt"] and st["runsSince"] == 0
    assert st["lastResult"]["merged"] == [{"into": "deploy.md", "from": ["shipping.md"]}]


async def test_merge_into_a_new_file_and_retire_a_stale_one(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)
    env.note("staging.md", STALE)
    env.provider.plan = lambda req: {
        "merge": [merge("deploys.md", "deploy.md", "shipping.md")],
        "retire": ["staging.md"],
    }
    result = await env.consolidate()
    assert result["retired"] == ["staging.md"]
    assert result["merged"] == [{"into": "deploys.md", "from": ["deploy.md", "shipping.md"]}]
    assert env.topics() == ["deploys.md"]
    assert "staging.md" not in env.files()["MEMORY.md"]


async def test_refuses_files_outside_the_folder_or_missing(env: Env, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("not a memory")
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)
    (env.folder / "link.md").symlink_to(outside)
    env.provider.plan = lambda req: {
        "merge": [
            merge("../escape.md", "shipping.md"),
            merge("deploy.md", "ghost.md"),
            merge("deploy.md", str(outside)),
            merge("deploy.md", "link.md"),
        ],
        "retire": ["../outside.md", "ghost.md", "MEMORY.md", "link.md", str(outside)],
    }
    result = await env.consolidate()
    assert result["merged"] == [] and result["retired"] == []
    assert len(result["skipped"]) == 9
    assert outside.read_text() == "not a memory"
    assert not (tmp_path / "escape.md").exists() and not (env.home / "escape.md").exists()
    assert (env.folder / "link.md").is_symlink()
    assert env.topics() == ["deploy.md", "link.md", "shipping.md"]
    assert DEPLOY in env.files()["deploy.md"]


async def test_secrets_in_a_merged_body_are_redacted(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)
    key = "sk-" + "a" * 40
    body = f"{MERGED} The deploy token is {key} for the CI job."
    env.provider.plan = lambda req: {
        "merge": [merge("deploy.md", "shipping.md", body=body)],
        "retire": [],
    }
    result = await env.consolidate()
    assert result["merged"] and any("redacted" in s for s in result["skipped"])
    assert key not in env.files()["deploy.md"] and "[REDACTED]" in env.files()["deploy.md"]


async def test_a_user_edit_between_plan_and_write_wins(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)
    env.note("staging.md", STALE)
    env.note("other.md", "The user prefers tabs over spaces in every Makefile.", kind="user")
    edited = "---\nname: mine\ntype: project\n---\n\nThe user's own words about deploys.\n"
    staging_edit = "---\nname: staging\ntype: project\n---\n\nStaging moved; still in use.\n"

    def plan(req: ModelRequest) -> dict[str, Any]:
        # The user saves two files while the model is thinking.
        (env.folder / "shipping.md").write_text(edited)
        (env.folder / "staging.md").write_text(staging_edit)
        return {"merge": [merge("deploy.md", "shipping.md")], "retire": ["staging.md"]}

    env.provider.plan = plan
    result = await env.consolidate()
    assert result["merged"] == [] and result["retired"] == []
    assert any("shipping.md changed by the user" in s for s in result["skipped"])
    assert any("staging.md" in s and "not deleted" in s for s in result["skipped"])
    files = env.files()
    assert files["shipping.md"] == edited and files["staging.md"] == staging_edit
    assert DEPLOY in files["deploy.md"]  # the merge was skipped whole
    assert "(staging.md)" in files["MEMORY.md"] and "(shipping.md)" in files["MEMORY.md"]


async def test_a_user_edit_of_the_target_skips_the_merge(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)
    edited = "---\nname: mine\ntype: project\n---\n\nMy deploy notes, edited by hand.\n"

    def plan(req: ModelRequest) -> dict[str, Any]:
        (env.folder / "deploy.md").write_text(edited)
        return {"merge": [merge("deploy.md", "shipping.md")], "retire": []}

    env.provider.plan = plan
    result = await env.consolidate()
    assert result["merged"] == []
    assert env.files()["deploy.md"] == edited and "shipping.md" in env.files()


async def test_nothing_to_do_with_fewer_than_two_notes(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    result = await env.consolidate()
    assert result == {"merged": [], "retired": [], "skipped": []}
    assert env.provider.dream_requests() == []


async def test_schedule_needs_n_runs_and_h_hours_and_persists(tmp_path: Path) -> None:
    e = Env(tmp_path, FakeProvider(), consolidate_after_runs=3, consolidate_every_hours=24)
    e.note("deploy.md", DEPLOY)
    e.note("shipping.md", DEPLOY2)
    try:
        await e.extract("one")
        await e.extract("two")
        assert e.provider.dream_requests() == []
        assert e.svc.status(e.root)["consolidation"]["runsSince"] == 2
        await e.extract("three")  # third run: due (never consolidated before)
        assert len(e.provider.dream_requests()) == 1
        st = e.svc.status(e.root)["consolidation"]
        assert st["runsSince"] == 0 and st["lastRunAt"]
        for text in ("four", "five", "six", "seven"):
            await e.extract(text)
        # Enough runs, but within 24 hours of the last pass: not yet.
        assert len(e.provider.dream_requests()) == 1
        assert e.svc.status(e.root)["consolidation"]["runsSince"] == 4
        state = json.loads((e.folder / consolidate.STATE_FILE).read_text())
        assert state["runsSince"] == 4
        writer, e.writer = e.writer, None
        assert writer is not None
        writer.close()
    finally:
        await e.close()
    # A new service (a restarted daemon) reads the persisted state.
    e2 = Env(tmp_path, FakeProvider(), consolidate_after_runs=3, consolidate_every_hours=24)
    try:
        await e2.manager.get(e2.root)
        assert e2.svc.status(e2.root)["consolidation"]["runsSince"] == 4
        e2.now += 23 * 3600
        e2.svc.schedule(e2.root, SID)  # nothing new to extract: not counted
        await e2.extract("eight")
        assert e2.provider.dream_requests() == []
        e2.now += 2 * 3600
        await e2.extract("nine")
        assert len(e2.provider.dream_requests()) == 1
        assert e2.svc.status(e2.root)["consolidation"]["runsSince"] == 0
    finally:
        await e2.close()


async def test_a_failed_pass_keeps_the_run_count(env: Env) -> None:
    env.note("deploy.md", DEPLOY)
    env.note("shipping.md", DEPLOY2)

    def boom(req: ModelRequest) -> dict[str, Any]:
        from agentd.errors import ModelHTTPError

        raise ModelHTTPError("HTTP 500 from the model")

    env.provider.plan = boom
    result = await env.consolidate()
    assert "consolidation request failed" in result["error"]
    st = env.svc.status(env.root)["consolidation"]
    assert "lastError" in st and env.topics() == ["deploy.md", "shipping.md"]


def test_validate_one_operation_per_file() -> None:
    snapshot = FolderSnapshot(
        files={n: FileVersion("h", "x") for n in ("a.md", "b.md", "c.md")},
    )
    raw = {
        "merge": [merge("a.md", "b.md"), merge("c.md", "b.md"), merge("a.md", "a.md")],
        "retire": ["a.md", "c.md", "c.md"],
    }
    proposal, notes = consolidate.validate(raw, snapshot, ["a.md", "b.md", "c.md"])
    assert proposal.merges == [
        consolidate.Merge("a.md", ("b.md",), "Deploy", "how deploys go out", "project", MERGED)
    ]
    assert proposal.retire == ["c.md"]
    assert len(notes) == 4


# --- the CLI --------------------------------------------------------------------------


def test_cli_consolidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentd import providers
    from agentd.memory.cli import register, run

    monkeypatch.setenv("AGENTD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENTD_CONFIG_DIR", str(tmp_path / "config"))
    ws = tmp_path / "ws"
    ws.mkdir()
    folder = memory_dir(ws)
    folder.mkdir(parents=True)
    for name, body in (("deploy.md", DEPLOY), ("shipping.md", DEPLOY2), ("staging.md", STALE)):
        (folder / name).write_text(f"---\nname: {name}\ntype: project\n---\n\n{body}\n")
    fake = FakeProvider()
    fake.plan = lambda req: {"merge": [merge("deploy.md", "shipping.md")], "retire": ["staging.md"]}
    monkeypatch.setattr(providers, "make_provider", lambda config: fake)

    parser = argparse.ArgumentParser(prog="agentd")
    register(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    code = run(parser.parse_args(["memory", "consolidate", str(ws)]), out)
    assert code == 0
    assert "merged   shipping.md -> deploy.md" in out.getvalue()
    assert "retired  staging.md" in out.getvalue()
    assert sorted(p.name for p in folder.glob("*.md")) == ["MEMORY.md", "deploy.md"]

    out = io.StringIO()
    code = run(parser.parse_args(["memory", "consolidate", str(ws), "--json"]), out)
    assert code == 0 and json.loads(out.getvalue()) == {"merged": [], "retired": [], "skipped": []}
