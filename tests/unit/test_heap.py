"""`agentd.heap`: what the warm-up releases of the start-up's leftovers."""

from __future__ import annotations

import linecache
import platform

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
    kept = [[i] for i in range(gc.get_threshold()[0] // 2)]
    assert gc.get_count()[0] >= len(kept) // 2
    heap.collect_young()
    assert gc.get_count()[0] < 10
    assert len(kept) == gc.get_threshold()[0] // 2
