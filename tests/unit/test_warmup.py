"""The warm-up's two stages, in process: the settings come before the App,
`when_built` callbacks run before any `wait()` returns, a failed first
stage fails both waits with its error (`StartupFailed`), and the App comes with the threads
a session's start-up needs (the loop's default executor's, the memory
watcher's) started."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentd.errors import INTERNAL_ERROR, StartupFailed
from agentd.memory.watcher import Changes, FolderWatcher
from agentd.testing.daemon import hold_warmup, release_warmup, release_warmup_nowait
from agentd.warmup import WORKERS, Warmup


@pytest.fixture(autouse=True)
def daemon_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENTD_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("AGENTD_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AGENTD_MODEL", "stage-model")


async def test_settings_first_then_the_app_with_its_callbacks_before_any_wait_returns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    for name, value in hold_warmup(hold).items():
        monkeypatch.setenv(name, value)
    warmup = Warmup(imports=("agentd.lsp.ext",), first=("NewSessionParams",))
    warmup.options = {"models": ["other-model"]}
    try:
        warmup.start()
        settings = await warmup.wait_settings()
        assert [m for m, _ in settings.model_choices()] == ["stage-model", "other-model"]
        assert warmup.get() is None  # held: the App cannot exist yet
        built: list[object] = []
        warmup.when_built(built.append)
        waiting = asyncio.ensure_future(warmup.wait("the test"))
        await asyncio.to_thread(release_warmup, hold)
        app = await waiting
        assert built == [app] and app.settings is settings
        warmup.when_built(built.append)  # built: called at once
        assert built == [app, app]
        assert await warmup.wait_settings() is settings
    finally:
        release_warmup_nowait(hold)
        await warmup.aclose()


async def test_a_failed_settings_stage_fails_both_waits() -> None:
    warmup = Warmup(imports=("agentd.no_such_module",))
    warmup.start()
    # Both say so in a user's words (what the front ends answer, -32603),
    # with the cause's type and text, and keep the cause.
    for wait in (warmup.wait_settings, warmup.wait):
        with pytest.raises(StartupFailed) as failed:
            await wait()
        assert failed.value.code == INTERNAL_ERROR
        assert isinstance(failed.value.cause, ModuleNotFoundError)
        assert failed.value.message == (
            "agentd could not start: ModuleNotFoundError: No module named "
            "'agentd.no_such_module'. The details are in agentd's log (its stderr, "
            "which the editor keeps)."
        )
    await warmup.aclose()


async def test_the_app_comes_with_the_default_executors_threads_started() -> None:
    # A session's first `to_thread` calls (its instruction files, its project's
    # first scan) find idle threads: none is started on the loop as a prompt arrives.
    def workers() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("asyncio_")}

    assert workers() == set()  # this test's loop has not used its executor yet
    warmup = Warmup(imports=("agentd.lsp.ext",))
    warmup.start()
    try:
        await warmup.wait()
        started = workers()
        assert len(started) == WORKERS
        # They are the loop's default executor's, and one takes the next call.
        assert (await asyncio.to_thread(threading.current_thread)).name in started
        assert workers() == started
    finally:
        await warmup.aclose()


async def test_the_app_comes_with_the_memory_watchers_thread_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A project's first watcher blocks in a worker thread of anyio's: the
    # warm-up started it, so registering the watcher starts no thread on the loop.
    warmup = Warmup(imports=("agentd.lsp.ext",))
    warmup.start()
    try:
        app = await warmup.wait()
        assert app.watch_thread is not None
        await app.watch_thread
        started: list[str] = []
        start = threading.Thread.start

        def recording(thread: threading.Thread) -> None:
            started.append(thread.name)
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", recording)

        async def nothing_changes(changes: Changes) -> bool:
            return False

        async def nothing_to_rescan() -> None:
            pass

        watcher = FolderWatcher(lambda: [tmp_path], nothing_changes, nothing_to_rescan)
        await watcher.start()
        assert watcher.state == "running"
        await watcher.aclose()
        monkeypatch.undo()
        assert started == []
    finally:
        await warmup.aclose()
