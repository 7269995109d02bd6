"""Hostile memory content: nothing crashes, budgets hold, status says what happened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.memory import ProjectMemory
from agentd.memory.recall import DOC_CHARS
from agentd.memory.store import (
    INDEX_MAX_CHARS,
    MAX_TOPIC_BYTES,
    Skipped,
    TopicDoc,
    list_topics,
    read_index_file,
    read_topic,
)


def topic(folder: Path, name: str, title: str, body: str = "", kind: str = "project") -> Path:
    path = folder / name
    path.write_text(f"---\nname: {title}\ndescription: {title} notes\ntype: {kind}\n---\n{body}\n")
    return path


def problems_by_file(memory: ProjectMemory) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in memory.status()["problems"]:
        out.setdefault(Path(p["path"]).name, []).append(p["problem"])
    return out


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    mem = tmp_path / "mem"
    mem.mkdir()
    return ws, mem


@pytest.mark.asyncio
async def test_hostile_folder(folders: tuple[Path, Path], tmp_path: Path) -> None:
    ws, mem = folders
    topic(mem, "good.md", "Kafka consumers", "Rebalance with cooperative sticky assignor.")
    (mem / "latin1.md").write_bytes(
        b"---\nname: Caf\xe9 notes\ndescription: broken bytes\ntype: user\n---\nespresso \xff\xfe\n"
    )
    with open(mem / "huge.md", "w") as fh:  # 50 MB of text
        fh.write("---\nname: Huge telemetry dump\ndescription: big\ntype: reference\n---\n")
        line = "telemetry sample value " * 4 + "\n"
        fh.write(line * (50 * 1024 * 1024 // len(line)))
    (mem / "blob.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00" + os.urandom(4096))
    outside = tmp_path / "secret.md"
    topic(tmp_path, "secret.md", "Outside secret", "password hunter2")
    (mem / "escape.md").symlink_to(outside)
    (mem / "inside-link.md").symlink_to(mem / "good.md")
    (mem / "dangling.md").symlink_to(mem / "nowhere.md")
    (mem / "folder.md").mkdir()
    os.mkfifo(mem / "pipe.md")
    with open(mem / "MEMORY.md", "w") as fh:  # a 100k-line index
        for i in range(100_000):
            fh.write(f"- [Topic {i}](topic-{i}.md) — hook {i}\n")
    (mem / ".#editor-lock.md").symlink_to("user@host.1234")  # Emacs lock: ignored silently
    (mem / "notes.txt").write_text("not a topic")

    memory = ProjectMemory(ws, directory=mem, watch=False)
    await memory.start()
    try:
        names = {d.path.name for d in memory.list_docs()}
        assert names == {"good.md", "latin1.md", "huge.md", "inside-link.md"}
        problems = problems_by_file(memory)
        assert "invalid UTF-8" in problems["latin1.md"][0]
        assert any("only the first 256 KiB" in p for p in problems["huge.md"])
        assert "binary" in problems["blob.md"][0]
        assert "outside the memory folder" in problems["escape.md"][0]
        assert "broken symlink" in problems["dangling.md"][0]
        assert "not a regular file" in problems["folder.md"][0]
        assert "not a regular file" in problems["pipe.md"][0]
        assert "over its budget" in problems["MEMORY.md"][0]
        assert ".#editor-lock.md" not in problems and "notes.txt" not in problems
        assert len(memory.index_text()) <= INDEX_MAX_CHARS

        assert memory.recall("hunter2 password").docs == ()  # the symlink was not followed
        huge = memory.recall("telemetry sample")
        assert huge.docs and len(huge.docs[0].excerpt) <= DOC_CHARS
        assert memory.recall("espresso").docs[0].path.name == "latin1.md"
        assert "\ufffd" in memory.recall("espresso").docs[0].name
        assert memory.recall("kafka").docs  # the good file is unaffected
        status = memory.status()
        assert status["docCount"] == 4 and status["watcher"] == "stopped"
    finally:
        await memory.aclose()


def test_read_topic_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.md"
    # A multi-byte character straddles the read limit: no replacement char appears.
    path.write_bytes(b"x" * (MAX_TOPIC_BYTES - 1) + "é".encode() + b"tail")
    outcome = read_topic(path, tmp_path, team=False)
    assert isinstance(outcome, TopicDoc)
    assert "\ufffd" not in outcome.body
    assert not any("UTF-8" in p for p in outcome.info.problems)
    assert any("256 KiB" in p for p in outcome.info.problems)


def test_vanishing_and_unreadable_files(tmp_path: Path) -> None:
    assert read_topic(tmp_path / "gone.md", tmp_path, team=False) is None
    path = topic(tmp_path, "locked.md", "Locked")
    path.chmod(0)
    try:
        outcome = read_topic(path, tmp_path, team=False)
        if os.geteuid() != 0:  # root reads anything
            assert isinstance(outcome, Skipped) and "cannot read" in outcome.problem
    finally:
        path.chmod(0o644)
    assert list_topics(tmp_path / "missing").paths == []
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    assert "not a directory" in list_topics(not_dir).problems[0].problem


@pytest.mark.asyncio
async def test_files_vanishing_mid_scan(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, mem = folders
    for i in range(10):
        topic(mem, f"t{i}.md", f"Topic {i}", "shared words")
    import agentd.memory.project as project_module
    from agentd.memory.store import read_topic_stat as real_read

    def flaky_read(
        path: Path, folder_real: Path, *, team: bool
    ) -> tuple[TopicDoc | Skipped | None, os.stat_result | None]:
        # Every other file disappears between the listing and the read.
        if int(path.stem[1:]) % 2:
            path.unlink()
        return real_read(path, folder_real, team=team)

    monkeypatch.setattr(project_module, "read_topic_stat", flaky_read)
    memory = ProjectMemory(ws, directory=mem, watch=False)
    await memory.start()
    try:
        assert {d.path.name for d in memory.list_docs()} == {f"t{i}.md" for i in range(0, 10, 2)}
        assert memory.status()["problems"] == []
    finally:
        await memory.aclose()


def test_index_file_budget(tmp_path: Path) -> None:
    assert read_index_file(tmp_path).text == ""
    (tmp_path / "MEMORY.md").write_text("".join(f"- [t{i}](t{i}.md) hook\n" for i in range(300)))
    index = read_index_file(tmp_path)
    assert len(index.text.splitlines()) == 200 and index.problem
    (tmp_path / "MEMORY.md").write_text("- [a](a.md) hook\n")
    assert read_index_file(tmp_path) == read_index_file(tmp_path)
    assert read_index_file(tmp_path).problem is None


@pytest.mark.asyncio
async def test_team_memory_is_marked(folders: tuple[Path, Path]) -> None:
    ws, mem = folders
    team = ws / ".agentd" / "memory"
    team.mkdir(parents=True)
    topic(team, "conventions.md", "Commit conventions", "Use conventional commits.")
    topic(mem, "personal.md", "Personal commit habits", "Sign commits.")
    memory = ProjectMemory(ws, directory=mem, watch=False)
    await memory.start()
    try:
        result = memory.recall("commits")
        by_name = {d.path.name: d.team for d in result.docs}
        assert by_name == {"conventions.md": True, "personal.md": False}
        assert memory.status()["teamDocCount"] == 1
        assert all(d.path.is_absolute() for d in result.docs)
    finally:
        await memory.aclose()


@pytest.mark.asyncio
async def test_team_folder_symlinked_outside_is_ignored(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, mem = folders
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    topic(elsewhere, "x.md", "Planted note")
    (ws / ".agentd").mkdir()
    (ws / ".agentd" / "memory").symlink_to(elsewhere)
    memory = ProjectMemory(ws, directory=mem, watch=False)
    await memory.start()
    try:
        assert memory.list_docs() == []
        assert "outside the workspace" in memory.status()["problems"][0]["problem"]
    finally:
        await memory.aclose()


@pytest.mark.asyncio
async def test_candidates_and_recalled_for_another_tier(folders: tuple[Path, Path]) -> None:
    ws, mem = folders
    for i in range(12):
        topic(mem, f"n{i:02d}.md", f"Deploy note {i}", "deploy " * (i + 1) + "x" * 3000)
    memory = ProjectMemory(ws, directory=mem, watch=False)
    await memory.start()
    try:
        assert len(memory.recall("deploy").docs) == 5
        shortlist = memory.candidates("deploy", limit=60)
        assert len(shortlist) == 12  # no 5-doc cap, no relative floor
        assert memory.candidates("unrelated words") == []
        excluded = str(shortlist[0].path)
        rest = memory.candidates("deploy", exclude={excluded})
        assert excluded not in {str(d.path) for d in rest}
        picks = [str(d.path) for d in shortlist[:7]] + [str(mem / "unknown.md")]
        result = memory.recalled(picks, tier="model")
        assert result.tier == "model"
        assert [str(d.path) for d in result.docs] == picks[:5]
        assert all(len(d.excerpt) <= 1200 for d in result.docs)
    finally:
        await memory.aclose()


def test_a_listing_s_paths_are_those_a_join_gives(tmp_path: Path) -> None:
    """`list_topics` makes its paths from the folder's parsed parts (CPython
    3.11): each is what `folder / name` gives, string, parts and hash."""
    from agentd.memory.store import _children, list_topics

    names = ["a.md", "é ü.md", "topic-00001.md", "\udcff.md"]
    for name in names[:3]:
        (tmp_path / name).write_text("x")
    listed = list_topics(tmp_path).paths
    assert listed == sorted(tmp_path / n for n in names[:3])
    for folder in (tmp_path, Path("/"), Path("relative/folder")):
        made = _children(folder, names)
        joined = [folder / n for n in names]
        assert made == joined
        assert [str(p) for p in made] == [str(p) for p in joined]
        assert [p.parts for p in made] == [p.parts for p in joined]
        assert [hash(p) for p in made] == [hash(p) for p in joined]
        assert [p.parent for p in made] == [folder] * len(names)
