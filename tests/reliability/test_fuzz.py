"""Fuzz the daemon's input stream (bounded for CI; `bench/fuzz.py` runs longer).

One real daemon per test function, many examples through it: random bytes,
random valid-looking JSON-RPC messages, mutated real messages, each cut into
random 1..1024-byte slices. After each: the daemon is alive and answers; at
the end its RSS is bounded and `shutdown`/`exit` still work (exit code 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.reliability.fuzzing import (
    FuzzDaemon,
    fuzz_env,
    message_input,
    mutated_input,
    random_bytes_input,
)

pytestmark = pytest.mark.e2e

# Generous: an idle daemon after warm-up is ~60 MiB; a leak per input would pass it.
RSS_BOUND_MIB = 400
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FuzzDaemon]:
    d = FuzzDaemon(fuzz_env(tmp_path), tmp_path)
    try:
        d.initialize()
        yield d
        assert d.rss_mib() < RSS_BOUND_MIB
        assert d.finish() == 0
    finally:
        d.kill()


@FUZZ
@given(chunks=random_bytes_input())
def test_random_bytes(daemon: FuzzDaemon, chunks: list[bytes]) -> None:
    daemon.feed(chunks)


@FUZZ
@given(chunks=message_input())
def test_random_valid_looking_messages(daemon: FuzzDaemon, chunks: list[bytes]) -> None:
    daemon.feed(chunks)


@FUZZ
@given(chunks=mutated_input())
def test_mutated_real_messages(daemon: FuzzDaemon, chunks: list[bytes]) -> None:
    daemon.feed(chunks)
