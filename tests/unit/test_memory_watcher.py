"""The watcher end to end on real folders: no sleeps, we await index generations."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import agentd.memory.project as project_module
import agentd.memory.store as store_module
import agentd.memory.watcher as watcher_module
from agentd.memory import MemoryManager, ProjectMemory

TIMEOUT = 10.0


def topic(folder: Path, name: str, title: str, body: str = "") -> Path:
    path = folder / name
    path.write_text(f"---\nname: {title}\ndescription: {title}\ntype: project\n---\n{body}\n")
    return path


def found(memory: ProjectMemory, query: str) -> list[str]:
    return [d.path.name for d in memory.recall(query).docs]


async def until(memory: ProjectMemory, predicate: Callable[[], bool]) -> None:
    """Wait for index changes until ``predicate`` holds (an editor may save in steps)."""

    async def wait() -> None:
        while not predicate():
            await memory.wait_indexed_generation(memory.generation + 1)

    await asyncio.wait_for(wait(), TIMEOUT)


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[ProjectMemory]:
    ws = tmp_path / "ws"
    ws.mkdir()
    mem = ProjectMemory(ws, home=tmp_path / "home")
    await mem.start()
    assert mem.status()["watcher"] == "running"
    try:
        yield mem
    finally:
        await mem.aclose()
    assert mem.status()["watcher"] == "stopped"


@pytest.mark.asyncio
async def test_write_edit_rename_delete(memory: ProjectMemory, tmp_path: Path) -> None:
    heard: list[list[Path]] = []
    memory.add_listener(heard.append)
    folder = memory.directory
    assert folder.is_dir()  # created so that it can be watched

    path = topic(folder, "redis.md", "Redis cache", "Eviction is allkeys-lru.")
    await until(memory, lambda: found(memory, "eviction") == ["redis.md"])
    assert heard and heard[-1] == [path]

    path.write_text(path.read_text().replace("allkeys-lru", "volatile-ttl"))
    await until(memory, lambda: found(memory, "volatile") == ["redis.md"])
    assert found(memory, "allkeys") == []

    renamed = folder / "cache.md"
    os.rename(path, renamed)
    await until(memory, lambda: found(memory, "volatile") == ["cache.md"])
    assert [d.path.name for d in memory.list_docs()] == ["cache.md"]

    # A file moved in from elsewhere (as `git checkout` or `mv` would).
    outside = topic(tmp_path, "kafka.md", "Kafka consumers", "Cooperative rebalancing.")
    shutil.move(outside, folder / "kafka.md")
    await until(memory, lambda: found(memory, "rebalancing") == ["kafka.md"])

    renamed.unlink()
    await until(memory, lambda: found(memory, "volatile") == [])
    assert {p.name for batch in heard for p in batch} >= {"redis.md", "cache.md", "kafka.md"}


@pytest.mark.asyncio
async def test_write_right_after_start_is_seen(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    mem = ProjectMemory(ws, home=tmp_path / "home")
    await mem.start()
    try:
        topic(mem.directory, "early.md", "Early bird", "written at once")
        await until(mem, lambda: found(mem, "early") == ["early.md"])
    finally:
        await mem.aclose()


@pytest.mark.asyncio
async def test_own_writes_cause_no_extra_work(memory: ProjectMemory) -> None:
    heard: list[list[Path]] = []
    memory.add_listener(heard.append)
    start = memory.generation
    own = memory.directory / "own.md"
    content = (
        "---\nname: Extracted fact\ndescription: from a turn\ntype: project\n---\nGRPC deadline\n"
    )
    own.write_text(content)
    memory.note_own_write(own, content)
    # Indexed at once, without waiting for the watcher.
    assert found(memory, "grpc deadline") == ["own.md"]
    assert memory.generation == start + 1
    # A later sentinel write: once it is indexed, the own write's event has been handled too.
    sentinel = topic(memory.directory, "sentinel.md", "Sentinel")
    await until(memory, lambda: found(memory, "sentinel") == ["sentinel.md"])
    assert memory.generation == start + 2  # the own write's watcher event changed nothing
    assert heard == [[own], [sentinel]]
    # Noting the same content again is a no-op.
    memory.note_own_write(own, content)
    assert memory.generation == start + 2
    # Files outside the memory folders are ignored.
    memory.note_own_write(memory.directory.parent / "elsewhere.md", content)
    assert memory.generation == start + 2


@pytest.mark.asyncio
async def test_team_folder_appearing_later(memory: ProjectMemory) -> None:
    team = memory.team_directory
    assert not team.exists()
    team.mkdir(parents=True)
    topic(team, "style.md", "House style", "Tabs never spaces.")
    await until(memory, lambda: found(memory, "tabs spaces") == ["style.md"])
    assert memory.recall("tabs").docs[0].team
    topic(team, "review.md", "Review rules", "Two approvals.")
    await until(memory, lambda: found(memory, "approvals") == ["review.md"])
    shutil.rmtree(team)
    await until(memory, lambda: found(memory, "approvals") == [])


@pytest.mark.asyncio
async def test_memory_folder_deleted_and_recreated(memory: ProjectMemory) -> None:
    topic(memory.directory, "a.md", "Alpha", "first")
    await until(memory, lambda: found(memory, "alpha") == ["a.md"])
    shutil.rmtree(memory.directory)
    await until(memory, lambda: found(memory, "alpha") == [])
    await until(memory, lambda: memory.directory.is_dir())  # re-created by the re-registration
    topic(memory.directory, "b.md", "Beta", "second")
    await until(memory, lambda: found(memory, "beta") == ["b.md"])
    assert memory.status()["watcher"] == "running"


@pytest.mark.asyncio
async def test_broken_and_binary_edits_show_in_status(memory: ProjectMemory) -> None:
    path = topic(memory.directory, "x.md", "Xylophone", "music")
    await until(memory, lambda: found(memory, "xylophone") == ["x.md"])
    path.write_bytes(b"\x00\x01binary now")
    await until(memory, lambda: found(memory, "xylophone") == [])
    assert "binary" in memory.status()["problems"][0]["problem"]
    path.write_text("no header any more, mentions xylophone\n")
    await until(memory, lambda: found(memory, "xylophone") == ["x.md"])
    assert memory.status()["problems"] == [{"path": str(path), "problem": "no front matter"}]


@pytest.mark.asyncio
async def test_progress_for_a_large_folder(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    folder = tmp_path / "mem"
    folder.mkdir()
    total = 192
    for i in range(total):
        topic(folder, f"t{i:04d}.md", f"Topic {i}", f"body{i}")
    calls: list[tuple[int, int]] = []
    threads: set[int] = set()

    def progress(done: int, all_: int) -> None:
        calls.append((done, all_))
        threads.add(threading.get_ident())

    mem = ProjectMemory(ws, directory=folder)
    await mem.start(progress)
    try:
        assert calls[0] == (0, total) and calls[-1] == (total, total)
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
        assert threads == {threading.get_ident()}  # delivered on the loop, not the worker
        assert mem.status()["docCount"] == total
        assert found(mem, f"body{total - 1}") == [f"t{total - 1:04d}.md"]
    finally:
        await mem.aclose()


@pytest.mark.asyncio
async def test_watcher_failure_is_reported_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from watchfiles import awatch as real_awatch

    attempts = 0

    def flaky_awatch(*paths: Any, **kwargs: Any) -> Any:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise OSError("inotify watch limit reached")
        return real_awatch(*paths, **kwargs)

    monkeypatch.setattr(watcher_module, "awatch", flaky_awatch)
    ws = tmp_path / "ws"
    ws.mkdir()
    mem = ProjectMemory(ws, home=tmp_path / "home")
    await mem.start()
    try:
        status = mem.status()
        assert status["watcher"] == "failed"
        assert "inotify watch limit" in status["problems"][0]["problem"]
        # Written while the watcher is down: the rescan after recovery finds it.
        topic(mem.directory, "late.md", "Late note", "written during the outage")
        await until(mem, lambda: found(mem, "outage") == ["late.md"])
        assert mem.status()["watcher"] == "running"
        topic(mem.directory, "next.md", "Next note", "after recovery")
        await until(mem, lambda: found(mem, "recovery") == ["next.md"])
    finally:
        await mem.aclose()


@pytest.mark.asyncio
async def test_manager_shares_one_start(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    manager = MemoryManager(home=tmp_path / "home")
    assert manager.get_nowait(ws) is None
    calls: list[tuple[int, int]] = []
    first, second = await asyncio.gather(
        manager.get(ws, lambda done, total: calls.append((done, total))),
        manager.get(ws / "."),
    )
    assert first is second
    assert manager.get_nowait(ws) is first
    assert calls[-1] == (0, 0)  # an empty folder still reports its (empty) progress
    other = await manager.get(tmp_path)
    assert other is not first and other.directory != first.directory
    await manager.aclose()
    assert first.status()["watcher"] == "stopped" and other.status()["watcher"] == "stopped"
    with pytest.raises(RuntimeError):
        await manager.get(ws)


@pytest.mark.asyncio
async def test_cancelled_caller_does_not_cancel_the_shared_start(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    manager = MemoryManager(home=tmp_path / "home", watch=False)
    waiter = asyncio.ensure_future(manager.get(ws))
    await asyncio.sleep(0)  # let it begin the start
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    memory = await manager.get(ws)
    assert memory.status()["watcher"] == "stopped"  # watch=False
    await manager.aclose()


@pytest.mark.asyncio
async def test_a_watcher_registered_after_the_first_scan_sees_what_was_written_before_it(
    tmp_path: Path,
) -> None:
    """With a watch gate the project scans first and registers its watcher when
    the gate opens (after the first prompt's request): a note written between
    the scan and the registration, unseen by both, is found by the rescan
    that follows the registration, and later writes are watched as usual."""
    ws = tmp_path / "ws"
    ws.mkdir()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asked: list[bool] = []

    def watch_gate() -> asyncio.Future[None]:
        asked.append(True)
        return gate

    mem = ProjectMemory(ws, home=tmp_path / "home", watch_gate=watch_gate)
    try:
        await mem.start()
        assert asked == [True]
        assert mem.status()["watcher"] == "starting"
        mem.directory.mkdir(parents=True, exist_ok=True)
        topic(mem.directory, "gap.md", "Gap note", "written before any watch existed")
        assert found(mem, "gap note") == []  # the first index was built before it
        gate.set_result(None)
        await until(mem, lambda: found(mem, "gap note") == ["gap.md"])
        assert mem.status()["watcher"] == "running"
        topic(mem.directory, "later.md", "Later note", "written once watched")
        await until(mem, lambda: found(mem, "later note") == ["later.md"])
    finally:
        await mem.aclose()
    assert mem.status()["watcher"] == "stopped"


@pytest.mark.asyncio
async def test_the_look_after_a_late_registration_reads_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look that follows a late registration (a watch gate) reads the
    notes new, edited or gone since the first scan, not every note again
    (a whole scan cost about 0.5 s of CPU at 10,000 notes as the first
    prompt was answered); a symlinked note that did not change is not read."""
    ws = tmp_path / "ws"
    ws.mkdir()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    mem = ProjectMemory(ws, home=tmp_path / "home", watch_gate=lambda: gate)
    folder = mem.directory
    folder.mkdir(parents=True)
    an_hour_ago = time.time_ns() - 3600 * 10**9
    for name, title in [("keep.md", "Kept"), ("edit.md", "Edited"), ("gone.md", "Removed")]:
        path = topic(folder, name, title, f"{title} body")
        os.utime(path, ns=(an_hour_ago, an_hour_ago))
    (folder / "alias.md").symlink_to("keep.md")
    os.utime(folder / "alias.md", ns=(an_hour_ago, an_hour_ago), follow_symlinks=False)
    scans: list[bool] = []
    real_scan = ProjectMemory._scan
    reads: list[str] = []
    real_read = store_module.read_topic_stat

    def counted_scan(self: ProjectMemory, progress: Any, **options: Any) -> Any:
        scans.append(True)
        return real_scan(self, progress, **options)

    def counted_read(path: Path, *args: Any, **kwargs: Any) -> Any:
        reads.append(path.name)
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(ProjectMemory, "_scan", counted_scan)
    monkeypatch.setattr(project_module, "read_topic_stat", counted_read)
    try:
        await mem.start()
        assert scans == [True] and len(mem.list_docs()) == 4
        scans.clear()
        reads.clear()
        topic(folder, "edit.md", "Edited", "now about zeppelins")
        (folder / "gone.md").unlink()
        topic(folder, "new.md", "Fresh", "written before the watcher registered")
        gate.set_result(None)
        await until(
            mem,
            lambda: (
                found(mem, "zeppelins") == ["edit.md"]
                and found(mem, "fresh") == ["new.md"]
                and found(mem, "removed") == []
            ),
        )
        assert scans == []  # no whole scan
        assert sorted(reads) == ["edit.md", "gone.md", "new.md"]
        assert sorted(d.path.name for d in mem.list_docs()) == [
            "alias.md",
            "edit.md",
            "keep.md",
            "new.md",
        ]
        assert mem.status()["watcher"] == "running"
    finally:
        await mem.aclose()


@pytest.mark.asyncio
async def test_a_watcher_waiting_for_its_gate_stops_at_once_on_close(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    mem = ProjectMemory(ws, home=tmp_path / "home", watch_gate=lambda: never)
    await mem.start()
    assert mem.status()["watcher"] == "starting"
    await asyncio.wait_for(mem.aclose(), TIMEOUT)
    assert mem.status()["watcher"] == "stopped"
    assert never.cancelled()


@pytest.mark.asyncio
async def test_a_project_without_memory_folders_is_indexed_without_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scanning first (with a watch gate), a project with neither memory folder
    has its (empty) index at once, with no worker thread's round trip; one
    with a folder is scanned. A folder made afterwards is found by the rescan
    that follows the watcher's registration."""
    scans: list[Path] = []
    real_scan = ProjectMemory._scan

    def counted(self: ProjectMemory, progress: Any, **options: Any) -> Any:
        scans.append(self.workspace_root)
        return real_scan(self, progress, **options)

    monkeypatch.setattr(ProjectMemory, "_scan", counted)
    fresh, known = tmp_path / "fresh", tmp_path / "known"
    fresh.mkdir()
    (known / ".agentd" / "memory").mkdir(parents=True)
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    progress: list[tuple[int, int]] = []
    new = ProjectMemory(fresh, home=tmp_path / "home", watch_gate=lambda: gate)
    old = ProjectMemory(known, home=tmp_path / "home", watch_gate=lambda: gate)
    try:
        await new.start(lambda done, total: progress.append((done, total)))
        assert scans == [] and progress == [(0, 0)]
        assert new.status()["docCount"] == 0
        await old.start()
        assert scans == [old.workspace_root]
        new.directory.mkdir(parents=True)
        topic(new.directory, "made.md", "Made later", "after the first index")
        gate.set_result(None)
        await until(new, lambda: found(new, "made later") == ["made.md"])
    finally:
        await new.aclose()
        await old.aclose()


@pytest.mark.asyncio
async def test_a_folder_deleted_before_the_late_registration_is_said_in_status(
    tmp_path: Path,
) -> None:
    """The memory folder scanned at the start and gone when the watcher
    registers was deleted under us: the rescan empties the index and status
    says so, as for a folder deleted while watched."""
    ws = tmp_path / "ws"
    ws.mkdir()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    mem = ProjectMemory(ws, home=tmp_path / "home", watch_gate=lambda: gate)
    mem.directory.mkdir(parents=True)
    topic(mem.directory, "a.md", "Alpha", "first")
    try:
        await mem.start()
        assert found(mem, "alpha") == ["a.md"]
        shutil.rmtree(mem.directory)
        gate.set_result(None)
        await until(mem, lambda: found(mem, "alpha") == [])
        assert any("deleted" in p["problem"] for p in mem.status()["problems"])
    finally:
        await mem.aclose()
