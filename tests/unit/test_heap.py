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
