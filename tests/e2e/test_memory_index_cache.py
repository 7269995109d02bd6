"""The memory index kept across daemon starts, over the real daemon: a second
daemon on the same `$AGENTD_HOME` takes the notes that did not change from the
index cache, reads the one edited while no daemon ran, and recalls at its
first prompt; a third takes the whole index the second saved. A daemon
sweeping the cache folder leaves what another running daemon holds."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentd.testing.daemon import (
    agentd_home,
    daemon_env,
    hold_warmup,
    memory_folder,
    release_warmup,
    release_warmup_nowait,
)
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

FILLERS = 40


def _note(folder: Path, stem: str, name: str, description: str, body: str) -> Path:
    path = folder / f"{stem}.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\ntype: project\n---\n{body}\n")
    # Last changed an hour ago: a folder as the previous daemon left it.
    an_hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(an_hour_ago, an_hour_ago))
    return path


async def _stop(d: RawDaemon) -> None:
    d.request(90, "shutdown")
    await d.response(90)
    d.notify("exit")
    assert await d.wait_exit() == 0


async def test_a_second_daemon_recalls_from_the_index_cache_and_sees_an_edit_made_meanwhile(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    folder = memory_folder(workspace, tmp_path)
    _note(
        folder,
        "deploy",
        "Deploy checklist",
        "How we ship releases to production",
        "Run the smoke tests, then tag the release and deploy with make ship.",
    )
    db = _note(
        folder,
        "db",
        "Database notes",
        "Postgres connection pooling",
        "Pool size is 20 per service; pgbouncer runs in transaction mode.",
    )
    for i in range(FILLERS):
        _note(
            folder, f"filler-{i}", f"Filler {i}", f"Grafana panel {i}", f"Panel {i} shows latency."
        )
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "memory/status", {"workspaceRoot": str(workspace)})
        assert (await d.response(1))["result"]["docCount"] == FILLERS + 2
        await _stop(d)  # the cache is written, at the latest, as the daemon stops
    finally:
        await d.close()
    cache_dir = agentd_home(tmp_path) / "cache" / "memory-index"
    (cache_file,) = cache_dir.glob("*.jsonl")
    (saved_index,) = cache_dir.glob("*.index")
    assert cache_file.suffix == ".jsonl" and b"pgbouncer" in cache_file.read_bytes()
    assert saved_index.suffix == ".index"
    for written in (cache_file, saved_index):
        assert written.stat().st_mode & 0o777 == 0o600

    # Edited while no daemon runs, keeping its size: its mtime tells.
    before = db.stat()
    db.write_text(db.read_text().replace("transaction", "zanzibarish"))
    assert db.stat().st_size == before.st_size
    # A second later than before, and long enough ago to be trusted at once
    # (`index_cache.RACY_NS`): the next start's read is kept.
    later = before.st_mtime_ns + 10**9
    os.utime(db, ns=(later, later))

    log = tmp_path / "second.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, stderr=stderr)
        try:
            await d.initialize()
            d.request(2, "agent/newSession", {"workspaceRoot": str(workspace)})
            sid = (await d.response(2))["result"]["sessionId"]
            # Written the instant the session exists: its first request carries the note.
            d.request(
                3, "agent/prompt", {"sessionId": sid, "prompt": "how do we deploy a release?"}
            )
            assert (await d.response(3))["result"]["stopReason"] == "end_turn"
            first = model_server.requests("main")[0]
            users = [m["content"] for m in first["body"]["messages"] if m["role"] == "user"]
            assert users[-1].startswith("<system-reminder>") and "make ship" in users[-1]
            query = {"workspaceRoot": str(workspace), "query": "zanzibarish pooling mode"}
            d.request(4, "memory/recall", query)
            docs = (await d.response(4))["result"]["docs"]
            assert [doc["path"] for doc in docs] == [str(db)]
            await _stop(d)
        finally:
            await d.close()
    said = log.read_text()
    assert f"{FILLERS + 1} notes from the index cache, 1 read" in said, said[-2000:]
    assert b"zanzibarish" in cache_file.read_bytes() or b"pgbouncer" not in cache_file.read_bytes()

    # Nothing changed since: the third daemon takes the whole index the
    # second one saved, and recalls the edit from it.
    log = tmp_path / "third.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, stderr=stderr)
        try:
            await d.initialize()
            d.request(5, "memory/recall", query)
            docs = (await d.response(5))["result"]["docs"]
            assert [doc["path"] for doc in docs] == [str(db)]
            await _stop(d)
        finally:
            await d.close()
    said = log.read_text()
    assert f"{FILLERS + 2} notes from the saved index, 0 read" in said, said[-2000:]


def _cli_recall(env: dict[str, str], workspace: Path, query: str) -> tuple[list[str], str]:
    """`agentd memory recall` as a user runs it: the docs' paths, and what it logged."""
    command = [sys.executable, "-m", "agentd", "--log-level", "info", "memory", "recall"]
    done = subprocess.run(
        [*command, str(workspace), query, "--json"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return [d["path"] for d in json.loads(done.stdout)["docs"]], done.stderr


async def test_the_memory_cli_reads_the_index_cache_a_daemon_wrote_and_keeps_it_current(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """`agentd memory recall` after a daemon ran takes every unchanged note
    from the cache the daemon wrote (none read again), reads the one edited
    since (and finds it by its new words), and writes the cache again, so
    that the next command reads nothing."""
    folder = memory_folder(workspace, tmp_path)
    db = _note(folder, "db", "Database notes", "Postgres pooling", "Pool size is 20 per service.")
    for i in range(FILLERS):
        _note(folder, f"filler-{i}", f"Filler {i}", f"Grafana panel {i}", f"Panel {i} latency.")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "memory/status", {"workspaceRoot": str(workspace)})
        assert (await d.response(1))["result"]["docCount"] == FILLERS + 1
        await _stop(d)  # the daemon writes the cache as it stops
    finally:
        await d.close()

    docs, said = _cli_recall(env, workspace, "postgres pooling")
    assert docs[:1] == [str(db)]
    # No note changed: the whole index the daemon saved beside the cache.
    assert f"{FILLERS + 1} notes from the saved index, 0 read" in said, said

    # Edited since, an hour old again (a `git pull`): read, and found by its new words.
    db.write_text(db.read_text().replace("Pool size", "Zanzibarish pool size"))
    an_hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(db, ns=(an_hour_ago, an_hour_ago))
    docs, said = _cli_recall(env, workspace, "zanzibarish")
    assert docs == [str(db)]
    assert f"{FILLERS} notes from the index cache, 1 read" in said, said
    # That command wrote what it read (the cache and the whole index): the
    # next one reads nothing.
    docs, said = _cli_recall(env, workspace, "zanzibarish")
    assert docs == [str(db)]
    assert f"{FILLERS + 1} notes from the saved index, 0 read" in said, said


async def test_a_sweep_of_old_cache_files_spares_those_a_running_daemon_holds(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """Two daemons, one `$AGENTD_HOME`: the first runs on a project whose cache
    files look two months unused; the second, on another project, sweeps the
    cache folder as it stops (`cache_sweep`). It removes a stem no one holds
    and a writer's leftover, keeps the running daemon's files (held under a
    shared lock) and anything not of the cache's making; the first daemon
    recalls as before, and its next start still takes its saved index."""
    folder = memory_folder(workspace, tmp_path)
    _note(folder, "db", "Database notes", "Postgres pooling", "Pool size is 20 per service.")
    for i in range(FILLERS):
        _note(folder, f"filler-{i}", f"Filler {i}", f"Grafana panel {i}", f"Panel {i} latency.")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    query = {"workspaceRoot": str(workspace), "query": "postgres pooling"}

    async def status(d: RawDaemon, root: Path, request_id: int) -> int:
        d.request(request_id, "memory/status", {"workspaceRoot": str(root)})
        count: int = (await d.response(request_id))["result"]["docCount"]
        return count

    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        assert await status(d, workspace, 1) == FILLERS + 1
        await _stop(d)  # writes the index cache and the saved index
    finally:
        await d.close()
    cache_dir = agentd_home(tmp_path) / "cache" / "memory-index"
    running = await RawDaemon.spawn(env)
    try:
        await running.initialize()
        assert await status(running, workspace, 2) == FILLERS + 1  # its files held now
        held = sorted(p.name for p in cache_dir.iterdir())
        assert {p.rsplit(".", 1)[1] for p in held} == {"jsonl", "index", "lock"}
        gone = ["0" * 32 + ".jsonl", "0" * 32 + ".index", "0" * 32 + ".delta", "0" * 32 + ".lock"]
        leftover = "." + "1" * 32 + ".index.4242.abcd.tmp"
        other = "notes.txt"
        for name in [*gone, leftover, other]:
            (cache_dir / name).write_bytes(b"x")
        two_months_ago = time.time() - 60 * 24 * 3600
        for path in cache_dir.iterdir():
            os.utime(path, (two_months_ago, two_months_ago))

        other_root = tmp_path / "other"
        other_root.mkdir()
        _note(memory_folder(other_root, tmp_path), "x", "X", "Y", "Z.")
        sweeper = await RawDaemon.spawn(env)
        try:
            await sweeper.initialize()
            assert await status(sweeper, other_root, 3) == 1
            await _stop(sweeper)  # sweeps as its project closes, if not done yet
        finally:
            await sweeper.close()
        left = {p.name for p in cache_dir.iterdir()}
        assert set(held) | {other} <= left
        assert not left & {*gone, leftover}

        running.request(4, "memory/recall", query)
        assert (await running.response(4))["result"]["docs"]
        await _stop(running)
    finally:
        await running.close()
    log = tmp_path / "next.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, stderr=stderr)
        try:
            await d.initialize()
            d.request(5, "memory/recall", query)
            assert (await d.response(5))["result"]["docs"]
            await _stop(d)
        finally:
            await d.close()
    said = log.read_text()
    assert f"{FILLERS + 1} notes from the saved index, 0 read" in said, said[-2000:]


async def test_edits_are_restored_from_the_delta_and_its_torn_tail_is_never_used(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A daemon that saw a note edited saves the edit in the saved index's
    delta (`index_delta`), not the saved index again; the next daemon recalls
    the edit from it, reading no note. A line cut short at the delta's end
    (a crash in an append), even one naming a note with its true identity,
    is never used: its words are not recalled, and that daemon writes the
    index whole again, the delta gone."""
    from agentd.memory import index_cache, index_delta

    folder = memory_folder(workspace, tmp_path)
    db = _note(folder, "db", "Database notes", "Postgres pooling", "Pool size is 20 per service.")
    for i in range(FILLERS):
        _note(folder, f"filler-{i}", f"Filler {i}", f"Grafana panel {i}", f"Panel {i} latency.")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    cache_dir = agentd_home(tmp_path) / "cache" / "memory-index"

    async def recalled(d: RawDaemon, request_id: int, query: str) -> list[str]:
        params = {"workspaceRoot": str(workspace), "query": query}
        d.request(request_id, "memory/recall", params)
        return [doc["path"] for doc in (await d.response(request_id))["result"]["docs"]]

    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        assert await recalled(d, 1, "postgres pooling") == [str(db)]
        await _stop(d)  # the saved index written whole
    finally:
        await d.close()
    (saved_index,) = cache_dir.glob("*.index")
    saved_before = saved_index.stat()

    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        assert await recalled(d, 2, "postgres pooling") == [str(db)]
        # The watcher registered, and the look at the folder that follows
        # its registration done (`running`).
        request_id = 3
        while True:
            d.request(request_id, "memory/status", {"workspaceRoot": str(workspace)})
            status = (await d.response(request_id))["result"]
            request_id += 1
            if status["watcher"] == "running":
                break
        # Edited while it runs (the watcher sees it), an hour old: trusted.
        _note(folder, "db", "Database notes", "Postgres pooling", "Pool size is 40: quokkaish.")
        while await recalled(d, request_id, "quokkaish") != [str(db)]:
            request_id += 1
        await _stop(d)  # the edit saved as the project closes
    finally:
        await d.close()
    assert (saved_index.stat().st_ino, saved_index.stat().st_mtime_ns) == (
        saved_before.st_ino,
        saved_before.st_mtime_ns,
    )
    delta = index_delta.delta_file(saved_index)
    assert b"quokkaish" in delta.read_bytes()

    # A crash in a later append: a whole record for the note, with its
    # true identity and words it does not hold, cut before its newline.
    lie = index_cache.CacheEntry(
        identity=index_cache.identity_of(db.stat()),
        content_hash="0" * 64,
        name="Database notes",
        description="Postgres pooling",
        type="project",
        problems=(),
        head="wombatish",
        terms=("database notes", "postgres pooling", "wombatish"),
        verified=True,
    )
    line = index_delta.encode([(False, "db.md", lie)])
    assert line is not None
    with delta.open("ab") as out:
        out.write(line[:-1])

    log = tmp_path / "third.log"
    with log.open("wb") as stderr:
        d = await RawDaemon.spawn(env, stderr=stderr)
        try:
            await d.initialize()
            assert await recalled(d, 20, "quokkaish") == [str(db)]
            assert await recalled(d, 21, "wombatish") == []
            await _stop(d)
        finally:
            await d.close()
    said = log.read_text()
    assert f"{FILLERS + 1} notes from the saved index, 0 read; 1 of them from its delta" in said
    assert "damaged at byte" in said, said[-2000:]
    # Written whole again (that start's save): the delta is gone.
    assert not delta.exists()
    assert saved_index.stat().st_ino != saved_before.st_ino


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_a_restarted_daemon_scans_its_memory_while_its_app_is_built(
    model_server: ModelServer, tmp_path: Path, workspace: Path, acp: bool
) -> None:
    """A new session's project memory is scanned ahead, in a thread of its
    own, while the daemon's App is still being built (`Warmup.
    scan_memory_ahead`): with the build held, the scan is done (its log line
    read), and the first prompt's request carries the note."""
    folder = memory_folder(workspace, tmp_path)
    _note(
        folder,
        "deploy",
        "Deploy checklist",
        "How we ship releases to production",
        "Run the smoke tests, then tag the release and deploy with make ship.",
    )
    for i in range(FILLERS):
        _note(folder, f"filler-{i}", f"Filler {i}", f"Grafana panel {i}", f"Panel {i} latency.")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "memory/status", {"workspaceRoot": str(workspace)})
        assert (await d.response(1))["result"]["docCount"] == FILLERS + 1
        await _stop(d)  # the saved index written
    finally:
        await d.close()
    hold = tmp_path / "warmup-hold"
    d = await RawDaemon.spawn({**env, **hold_warmup(hold)}, acp=acp, stderr=asyncio.subprocess.PIPE)
    try:
        sid = await d.open_session(workspace)
        # The App is held: only the scan ahead can have indexed the project.
        assert d.proc.stderr is not None
        while True:
            # Not a speed bound: without the scan ahead the line never comes.
            line = await asyncio.wait_for(d.proc.stderr.readline(), 60)
            assert line, "the daemon's log ended"
            if b"notes from the saved index" in line:
                break
        await asyncio.to_thread(release_warmup, hold)
        if acp:
            text = [{"type": "text", "text": "how do we deploy a release?"}]
            d.request(2, "session/prompt", {"sessionId": sid, "prompt": text})
        else:
            d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "how do we deploy?"})
        assert (await d.response(2, timeout=60))["result"]["stopReason"] == "end_turn"
        first = model_server.requests("main")[0]
        users = [m["content"] for m in first["body"]["messages"] if m["role"] == "user"]
        assert users[-1].startswith("<system-reminder>") and "make ship" in users[-1]
    finally:
        release_warmup_nowait(hold)
        await d.close()


async def test_notes_changed_before_the_late_watcher_are_read_alone_after_a_restart(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A restarted daemon's project memory, scanned ahead while its App is
    built, registers its watcher after the first prompt's request: the notes
    written or removed between that scan and the registration are found by
    the look that follows it, which reads those alone (its log line says
    how many), not every note again."""
    folder = memory_folder(workspace, tmp_path)
    for i in range(FILLERS):
        _note(folder, f"filler-{i}", f"Filler {i}", f"Grafana panel {i}", f"Panel {i} latency.")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    d = await RawDaemon.spawn(env)
    try:
        await d.initialize()
        d.request(1, "memory/status", {"workspaceRoot": str(workspace)})
        assert (await d.response(1))["result"]["docCount"] == FILLERS
        await _stop(d)  # the saved index written
    finally:
        await d.close()
    hold = tmp_path / "warmup-hold"
    d = await RawDaemon.spawn({**env, **hold_warmup(hold)}, stderr=asyncio.subprocess.PIPE)

    async def log_line(words: bytes) -> bytes:
        assert d.proc.stderr is not None
        while True:
            line = await asyncio.wait_for(d.proc.stderr.readline(), 60)
            assert line, "the daemon's log ended"
            if words in line:
                return line

    async def recalled(request_id: int, query: str) -> list[str]:
        params = {"workspaceRoot": str(workspace), "query": query}
        d.request(request_id, "memory/recall", params)
        return [doc["path"] for doc in (await d.response(request_id))["result"]["docs"]]

    try:
        sid = await d.open_session(workspace)
        await log_line(b"notes from the saved index")  # the first index, scanned ahead
        gap = _note(
            folder, "gap", "Rollback steps", "Undoing a bad deploy", "Revert with make rollback."
        )
        (folder / "filler-0.md").unlink()
        await asyncio.to_thread(release_warmup, hold)
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "how do we roll back?"})
        assert (await d.response(2, timeout=60))["result"]["stopReason"] == "end_turn"
        line = await log_line(b"looked at again as its watcher registered")
        assert line.rstrip().endswith(b": 2 notes new, changed or gone")
        assert await recalled(3, "rollback") == [str(gap)]
        assert str(folder / "filler-0.md") not in await recalled(4, "grafana panel 0")
        d.request(5, "memory/status", {"workspaceRoot": str(workspace)})
        assert (await d.response(5))["result"]["docCount"] == FILLERS
    finally:
        release_warmup_nowait(hold)
        await d.close()
