"""`agentd.heap`: what the warm-up releases of the start-up's leftovers."""

from __future__ import annotations

import linecache
import platform
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from agentd import heap


def test_only_attrs_generated_source_is_dropped_from_linecache() -> None:
    generated = "<attrs generated methods tests.Example>"
    kept = "<agentd test source>"
    linecache.cache[generated] = (3, None, ["x\n"], generated)
    linecache.cache[kept] = (3, None, ["y\n"], kept)
    try:
        assert heap.drop_generated_source() >= 1
        assert generated not in linecache.cache
        assert kept in linecache.cache
        assert not any(name.startswith("<attrs generated") for name in linecache.cache)
    finally:
        linecache.cache.pop(generated, None)
        linecache.cache.pop(kept, None)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_gives_glibc_heap_pages_back() -> None:
    assert heap.trim() is True


def test_collect_young_leaves_the_youngest_generation_empty() -> None:
    """What a new session's first prompt then allocates starts from zero: the
    collector's next young run is a threshold's worth of allocations away."""
    import gc

    if not gc.isenabled():
        pytest.skip("the collector is off")
    # From an empty young generation, so that no collection of the
    # collector's own falls among these allocations.
    gc.collect(0)
    kept = [[i] for i in range(gc.get_threshold()[0] // 2)]
    assert gc.get_count()[0] >= len(kept) // 2
    heap.collect_young()
    assert gc.get_count()[0] < 10
    assert len(kept) == gc.get_threshold()[0] // 2


def test_a_young_hold_raises_the_threshold_until_its_last_release() -> None:
    import gc

    before = gc.get_threshold()
    if not 0 < before[0] < heap.HELD_THRESHOLD:
        pytest.skip("the collector's threshold is not the default")
    first, second = heap.YoungHold(), heap.YoungHold()
    assert gc.get_threshold() == (heap.HELD_THRESHOLD, *before[1:])
    first.release()
    first.release()  # idempotent: the other prompt's hold stays
    assert gc.get_threshold()[0] == heap.HELD_THRESHOLD
    second.release()
    assert gc.get_threshold() == before


async def test_no_young_collection_on_a_prompts_way_to_its_request(tmp_path: Path) -> None:
    """From a prompt's start to its request's body written, allocations past
    the young generation's threshold set off no collection; the threshold is
    back once the body is out, and the collection that came due runs then.
    (The provider allocates the threshold's worth itself, on the way: what a
    prompt allocates depends on what the process did before.)"""
    import gc

    from agentd.agent.core import AgentCore
    from agentd.agent.session import AwaitClientResult
    from agentd.config import Settings
    from agentd.providers.base import ModelRequest, StreamEnd, StreamEvent, TextDelta, Usage
    from agentd.tasks import Supervisor

    threshold = gc.get_threshold()[0]
    if not gc.isenabled() or not 0 < threshold < heap.HELD_THRESHOLD // 2:
        pytest.skip("the collector is off or not at its default threshold")
    seen: list[str] = []

    def collected(phase: str, info: dict[str, Any]) -> None:
        # A young collection, or an older one that takes the young along.
        if phase == "start":
            seen.append("collection")

    class Provider:
        name = "test"

        async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
            seen.append("request")
            assert gc.get_threshold()[0] == heap.HELD_THRESHOLD
            burst = [[i] for i in range(threshold)]
            assert gc.get_count()[0] > threshold  # a collection is due
            assert seen == ["request"]  # and none ran
            assert request.on_sent is not None
            request.on_sent()  # the body is written
            seen.append("sent")
            assert gc.get_threshold()[0] == threshold
            kept = [[i] for i in range(10)]  # the next allocations: the due collection runs
            yield TextDelta(str(len(kept) + len(burst)))
            yield StreamEnd("end_turn", Usage(1, 1))

        def warm(self) -> None:
            return None

        async def aclose(self) -> None:
            return None

    core = AgentCore(Settings(), Provider(), Supervisor(), persist=False)
    session = core.new_session(tmp_path, AwaitClientResult([]))
    # From an empty young generation: the prompt's own allocations before its
    # hold (a few) set off none of the collector's runs.
    heap.collect_young()
    gc.callbacks.append(collected)
    try:
        await core.prompt(session.id, "hello", lambda u: None)
    finally:
        gc.callbacks.remove(collected)
    assert seen[:2] == ["request", "sent"] and "collection" in seen[2:]
    assert gc.get_threshold()[0] == threshold
