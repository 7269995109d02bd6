"""`MemoryRecall` keeps each session's recall state (handles, surfaced docs) by
session id, and drops it when the session is reset or closed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentd.agent.prefetch import MemoryRecall
from agentd.agent.session import AwaitClientResult, Session
from agentd.layout import memory_dir
from agentd.memory import MemoryManager
from agentd.providers import ProviderConfig, make_provider
from agentd.tasks import Supervisor


@contextlib.asynccontextmanager
async def recall_for(
    home: Path, **options: Any
) -> AsyncIterator[tuple[MemoryManager, MemoryRecall]]:
    """A `MemoryRecall` over a memory manager of `home` (no watcher) and a
    provider nothing listens for, closed with all it owns on the way out."""
    manager = MemoryManager(home, watch=False)
    supervisor = Supervisor()
    provider = make_provider(ProviderConfig(base_url="http://127.0.0.1:9/v1"))
    recall = MemoryRecall(manager, provider, supervisor, fast_model="m", **options)
    try:
        yield manager, recall
    finally:
        await supervisor.aclose()
        await manager.aclose()
        await provider.aclose()


async def delivered(recall: MemoryRecall, session: Session, query: str) -> list[str]:
    """The docs the user-query point delivers for `query`, once the local tier settled."""
    recall.prompt_started(session, query)
    for handle in recall.handles(session.id):
        if handle.task is not None:
            await handle.task
    docs = [d for _, delivery in recall.take_nowait(session, "user_query") for d in delivery.docs]
    recall.prompt_ended(session, cancelled=False)
    return docs


async def test_surfaced_docs_are_per_session_and_forgotten_on_reset_and_close(
    tmp_path: Path,
) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    folder = memory_dir(workspace, home)
    folder.mkdir(parents=True)
    (folder / "deploy.md").write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases\ntype: project\n---\n"
        "Run the smoke tests, then tag.\n"
    )
    one = Session("one", workspace, AwaitClientResult([]))
    two = Session("two", workspace, AwaitClientResult([]))
    async with recall_for(home, model_tier=False) as (_manager, recall):
        assert await delivered(recall, one, "deploy checklist") == [str(folder / "deploy.md")]
        # Surfaced in `one`: not again there, but a session of its own sees it.
        assert await delivered(recall, one, "deploy checklist") == []
        assert await delivered(recall, two, "deploy checklist") == [str(folder / "deploy.md")]
        recall.session_reset(one)
        assert await delivered(recall, one, "deploy checklist") == [str(folder / "deploy.md")]
        recall.session_closed(two)
        assert recall.handles("two") == []
        # A session that reuses the id (a reload) starts from nothing surfaced.
        assert await delivered(recall, two, "deploy checklist") == [str(folder / "deploy.md")]


async def test_a_prompt_before_the_first_index_waits_for_it_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`first_index` is None once the project is indexed (the common path has no
    wait at all); before that, it waits for the local tier, and only as long
    as `first_index_wait` allows: a build that never ends does not hold the
    prompt."""
    from agentd.memory.project import ProjectMemory

    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    release = asyncio.Event()
    real_start = ProjectMemory.start

    async def stuck_start(self: ProjectMemory, progress: Any = None) -> None:
        await release.wait()  # the first build "takes" until the test releases it
        await real_start(self, progress)

    monkeypatch.setattr(ProjectMemory, "start", stuck_start)
    session = Session("one", workspace, AwaitClientResult([]))
    async with recall_for(home, model_tier=False, first_index_wait=0.05) as (manager, recall):
        try:
            recall.prompt_started(session, "deploy checklist")
            await asyncio.sleep(0)  # the turn's one yield: the local tier starts the project
            wait = recall.first_index(session)
            assert wait is not None
            async with asyncio.timeout(30):  # a hang guard, not a measurement
                await wait
            (local,) = recall.handles(session.id)
            assert not local.settled  # the bound expired; the build goes on
            assert recall.stats.counts["user_query.local.indexWaitExpired"] == 1
            recall.prompt_ended(session, cancelled=False)
            release.set()
            await manager.get(workspace)
            # Indexed: a prompt does not wait for anything.
            recall.prompt_started(session, "deploy checklist")
            await asyncio.sleep(0)
            assert recall.first_index(session) is None
            recall.prompt_ended(session, cancelled=False)
        finally:
            release.set()


async def test_a_prompt_cancelled_before_its_recall_ran_leaves_no_coroutine_unawaited(
    tmp_path: Path,
) -> None:
    """A prompt cancelled in the same loop iteration it started in cancels its
    recall tasks before their first step. The tier coroutines they wrap must
    be closed, not dropped: a dropped one warns "coroutine ... was never
    awaited" when it is collected (an error under this suite's filterwarnings)."""
    import gc
    import warnings

    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    session = Session("one", workspace, AwaitClientResult([]))
    async with recall_for(home, model_tier=True) as (_manager, recall):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            recall.prompt_started(session, "deploy checklist")
            # Not indexed yet: the local tier runs as a task; the model tier
            # starts once the request is out, which never happens here.
            local, model = recall.handles(session.id)
            assert local.task is not None and model.task is None
            tasks = [local.task]
            recall.prompt_ended(session, cancelled=True)  # before the task ran
            await asyncio.gather(*tasks, return_exceptions=True)
            assert all(t.cancelled() for t in tasks)
            assert model.settled and model.task is None
            assert recall.stats.counts["aborted.cancelled.model"] == 1
            # The request of a later prompt does not start the aborted tier.
            session.request_out()
            assert model.task is None
            del tasks, local
            gc.collect()
        unawaited = [w for w in caught if "never awaited" in str(w.message)]
        assert unawaited == []


async def test_an_index_installed_during_the_prompt_start_is_still_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first index can land while the prompt's start is busy elsewhere
    (its system prompt is read in a thread): the project is indexed by the
    time `first_index` is asked, but the local tier has yet to resume from
    its wait for it. That prompt still waits for the local tier, and its
    note reaches the first request."""
    from agentd.memory.project import ProjectMemory

    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    folder = memory_dir(workspace, home)
    folder.mkdir(parents=True)
    (folder / "deploy.md").write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases\ntype: project\n---\n"
        "Run the smoke tests, then tag.\n"
    )
    release = asyncio.Event()
    real_start = ProjectMemory.start

    async def held_start(self: ProjectMemory, progress: Any = None) -> None:
        await release.wait()
        await real_start(self, progress)

    monkeypatch.setattr(ProjectMemory, "start", held_start)
    session = Session("one", workspace, AwaitClientResult([]))
    async with recall_for(home, model_tier=False, first_index_wait=30) as (manager, recall):
        try:
            recall.prompt_started(session, "deploy checklist")
            await asyncio.sleep(0)  # the local tier starts the project and waits for it
            release.set()
            # The turn's view: it looks again the moment the index is there, as
            # it does when its system prompt's thread returns.
            while manager.get_nowait(workspace) is None:
                await asyncio.sleep(0)
            (local,) = recall.handles(session.id)
            assert not local.settled  # indexed, and the local tier has yet to resume
            wait = recall.first_index(session)
            assert wait is not None
            async with asyncio.timeout(30):  # a hang guard, not a measurement
                await wait
            docs = [d for _, dl in recall.take_nowait(session, "user_query") for d in dl.docs]
            assert docs == [str(folder / "deploy.md")]
            recall.prompt_ended(session, cancelled=False)
        finally:
            release.set()


async def test_instruction_files_are_read_ahead_of_the_first_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prepare` (called when a session names its root) finds and reads the
    instruction files in a worker thread, so the first prompt's system prompt
    needs no thread hop and no read; an edit made after that is still seen."""
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").mkdir()
    (workspace / "AGENTS.md").write_text("Run make check before committing.\n")
    session = Session("one", workspace, AwaitClientResult([]))
    async with recall_for(home, config_dir=tmp_path / "config") as (_manager, recall):
        reading = recall.prepare(workspace)
        assert reading is not None and recall.prepare(workspace) is reading  # once per root
        await reading
        assert recall.prepare(workspace) is None

        async def no_thread(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the first prompt read the instruction files itself")

        with monkeypatch.context() as patched:
            patched.setattr("agentd.agent.prefetch.asyncio.to_thread", no_thread)
            text = await recall.system_context(session)
        assert "Run make check before committing." in text
        (workspace / "AGENTS.md").write_text("Run make lint first.\n")
        assert "Run make lint first." in await recall.system_context(session)


async def test_a_starting_projects_watcher_registers_once_a_prompts_request_is_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`watch_gate` (asked as a project starts) opens when a prompt started
    after it has its model request out: the watcher's registration, which
    holds the GIL, comes after the first prompt's request, not before it.
    The fallback delay is made endless here, so only the request can open it."""
    import agentd.agent.prefetch as prefetch

    monkeypatch.setattr(prefetch, "WATCH_DELAY", 3600.0)
    session = Session("one", tmp_path, AwaitClientResult([]))
    async with recall_for(tmp_path / "home", model_tier=False) as (_manager, recall):
        try:
            gate = asyncio.ensure_future(recall.watch_gate())
            recall.prompt_started(session, "hello")
            await asyncio.sleep(0)
            assert not gate.done()  # the prompt started, its request is not out yet
            recall.prompt_started(session, "hello again")  # a prompt that replaced it
            assert session.sent_listeners.count(recall._open_gates) == 1
            session.request_out()
            await asyncio.wait_for(gate, 10)
            assert recall._open_gates not in session.sent_listeners  # it went with its gates
            # Later prompts add nothing once no project waits.
            listeners = len(session.sent_listeners)
            recall.prompt_started(session, "again")
            assert len(session.sent_listeners) == listeners
        finally:
            recall.prompt_ended(session, cancelled=False)


async def test_an_indexed_projects_local_tier_is_answered_when_the_prompt_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the project's memory is loaded, the local tier is answered inside
    `prompt_started` (no task, no turn of the loop before the request): the
    user-query point takes its notes with nothing awaited in between. A recall
    that fails there yields nothing, is logged and counted, as a task's would."""
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    folder = memory_dir(workspace, home)
    folder.mkdir(parents=True)
    (folder / "deploy.md").write_text(
        "---\nname: Deploy checklist\ndescription: How we ship releases\ntype: project\n---\n"
        "Run the smoke tests, then tag.\n"
    )
    session = Session("one", workspace, AwaitClientResult([]))
    async with recall_for(home, model_tier=True) as (manager, recall):
        pm = await manager.get(workspace)
        recall.prompt_started(session, "deploy checklist")
        local, model = recall.handles(session.id)
        assert (local.tier, local.settled, local.task) == ("local", True, None)
        assert model.tier == "model" and model.task is None  # starts once the request is out
        taken = recall.take_nowait(session, "user_query")
        assert [d for _, delivery in taken for d in delivery.docs] == [str(folder / "deploy.md")]
        recall.prompt_ended(session, cancelled=False)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise OSError("index gone")

        pm.recall = broken  # type: ignore[method-assign]
        recall.prompt_started(session, "deploy checklist again")
        local = recall.handles(session.id)[0]
        assert local.settled and local.result is not None and local.result.docs == ()
        assert recall.take_nowait(session, "user_query") == []
        assert recall.stats.counts["local.failed"] == 1
        assert "local recall failed" in caplog.text
        recall.prompt_ended(session, cancelled=False)


async def test_the_model_tier_starts_when_the_prompts_request_is_out(tmp_path: Path) -> None:
    """The side query's task is created once the main request's bytes are
    written (`Session.request_out`), not when the prompt starts: its creation
    and first step no longer come before the user's request. Started once per
    prompt, whatever the number of requests."""
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    session = Session("one", workspace, AwaitClientResult([]))
    async with recall_for(home, model_tier=True) as (manager, recall):
        await manager.get(workspace)  # indexed (empty): the local tier answers at once
        recall.prompt_started(session, "deploy checklist")
        local, model = recall.handles(session.id)
        assert local.settled and model.task is None and not model.settled
        session.request_out()
        task = model.task
        assert task is not None
        session.request_out()  # a later step's request
        assert model.task is task
        async with asyncio.timeout(30):  # a hang guard, not a measurement
            await asyncio.wait([task])
        assert model.settled  # an empty folder: no side query, nothing chosen
        recall.prompt_ended(session, cancelled=False)
        assert session.sent_listeners == []
