"""Fuzz the daemon's input stream (bounded for CI; `bench/fuzz.py` runs longer).

One real daemon per test function, many examples through it: random bytes,
random valid-looking JSON-RPC messages, mutated real messages, each cut into
random 1..1024-byte slices. After each: the daemon is alive and answers; at
the end its RSS is bounded and `shutdown`/`exit` still work (exit code 0).

The hostile values of issue 14 (numbers of more than 4,300 digits, nesting
up to 100,000 levels, lone surrogates in prompts, tool results and the
model's tool-call arguments) go through both front ends, LSP and ACP, with
a live model server: every prompt among them is answered without -32603,
and after them the session still answers a prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings

from agentd.testing.model_server import ModelServerThread
from tests.reliability.fuzzing import (
    FuzzDaemon,
    fuzz_env,
    hostile_input,
    message_input,
    mutated_input,
    random_bytes_input,
)

pytestmark = pytest.mark.e2e

# Generous: an idle daemon after warm-up is ~60 MiB; a leak per input would pass it.
RSS_BOUND_MIB = 400
HOSTILE = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
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


def test_a_body_only_the_probes_would_fill_does_not_swallow_them(daemon: FuzzDaemon) -> None:
    # A declared length that the input leaves open and the harness's probes would
    # complete: the daemon looks for a cut only while a body is short, so probes
    # arriving in one read are taken as the body. Every length up to past the
    # probes' size is tried; the harness must still get an answer after each.
    for length in range(1, 1200, 7):
        daemon.feed([b"Content-Length: %d\r\n\r\n{" % length], timeout=10.0)


@pytest.fixture
def model_thread(tmp_path: Path) -> Iterator[ModelServerThread]:
    with ModelServerThread(log_path=tmp_path / "model-server.jsonl") as server:
        yield server


def _hostile_daemon(
    tmp_path: Path, server: ModelServerThread, framing: Literal["lsp", "acp"]
) -> Iterator[FuzzDaemon]:
    d = FuzzDaemon(fuzz_env(tmp_path, server.openai_base_url), tmp_path, framing)
    try:
        d.initialize()
        yield d
        # Whatever came before, the session is not poisoned: a prompt still works.
        reply = d.prompt("still there?")
        assert reply.get("result", {}).get("stopReason") == "end_turn", reply
        assert d.rss_mib() < RSS_BOUND_MIB
        assert d.finish() == 0
    finally:
        d.kill()


@pytest.fixture
def lsp_daemon(tmp_path: Path, model_thread: ModelServerThread) -> Iterator[FuzzDaemon]:
    yield from _hostile_daemon(tmp_path, model_thread, "lsp")


@pytest.fixture
def acp_daemon(tmp_path: Path, model_thread: ModelServerThread) -> Iterator[FuzzDaemon]:
    yield from _hostile_daemon(tmp_path, model_thread, "acp")


@HOSTILE
@given(data=hostile_input("lsp"))
def test_hostile_values_lsp(lsp_daemon: FuzzDaemon, data: tuple[list[bytes], list[int]]) -> None:
    lsp_daemon.feed_bodies(*data)


@HOSTILE
@given(data=hostile_input("acp"))
def test_hostile_values_acp(acp_daemon: FuzzDaemon, data: tuple[list[bytes], list[int]]) -> None:
    acp_daemon.feed_bodies(*data)
