"""Single flight per project, one coalesced trailing run; driven by asyncio.Events."""

from __future__ import annotations

import asyncio
from typing import Any

from agentd.memory.extraction.scheduler import SingleFlight
from agentd.tasks import Supervisor


class FakeExtract:
    """Each run waits for its own release event; records concurrency."""

    def __init__(self) -> None:
        self.started: list[asyncio.Event] = [asyncio.Event() for _ in range(10)]
        self.release: list[asyncio.Event] = [asyncio.Event() for _ in range(10)]
        self.runs = 0
        self.active = 0
        self.max_active = 0
        self.seen: list[list[str]] = []
        self.inbox: list[str] = []
        self.fail_on: set[int] = set()

    async def __call__(self) -> None:
        n = self.runs
        self.runs += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        # A run reads the newest state when it starts.
        self.seen.append(list(self.inbox))
        self.inbox.clear()
        self.started[n].set()
        try:
            await self.release[n].wait()
            if n in self.fail_on:
                raise RuntimeError("boom")
        finally:
            self.active -= 1


def make(fake: FakeExtract) -> tuple[SingleFlight, Supervisor]:
    sup = Supervisor()

    def spawn(coro: Any) -> asyncio.Task[None]:
        return sup.spawn(coro, name="extract")

    return SingleFlight(fake, spawn), sup


async def test_burst_gives_one_run_plus_one_trailing_run() -> None:
    fake = FakeExtract()
    flight, sup = make(fake)
    fake.inbox.append("m0")
    flight.request()
    await fake.started[0].wait()
    for i in range(1, 21):  # a burst while the first run is in flight
        fake.inbox.append(f"m{i}")
        flight.request()
        assert flight.running and flight.pending
    fake.release[0].set()
    await fake.started[1].wait()
    assert not flight.pending  # the trailing run took the pending mark
    fake.release[1].set()
    task = flight.task
    assert task is not None
    await task
    assert fake.runs == 2
    assert fake.max_active == 1
    # The trailing run read everything that arrived meanwhile, once.
    assert fake.seen == [["m0"], [f"m{i}" for i in range(1, 21)]]
    assert not flight.running and not flight.pending
    await sup.aclose()


async def test_request_never_blocks_and_idle_request_starts_a_run() -> None:
    fake = FakeExtract()
    flight, sup = make(fake)
    flight.request()  # returns at once: nothing ran yet
    assert fake.runs == 0 and flight.running
    await fake.started[0].wait()
    fake.release[0].set()
    task = flight.task
    assert task is not None
    await task
    flight.request()  # idle again: a fresh run, not a trailing one
    await fake.started[1].wait()
    fake.release[1].set()
    task = flight.task
    assert task is not None
    await task
    assert fake.runs == 2 and fake.max_active == 1
    await sup.aclose()


async def test_failed_run_does_not_stop_the_trailing_run() -> None:
    fake = FakeExtract()
    fake.fail_on = {0}
    flight, sup = make(fake)
    flight.request()
    await fake.started[0].wait()
    flight.request()
    fake.release[0].set()
    await fake.started[1].wait()
    fake.release[1].set()
    task = flight.task
    assert task is not None
    await task
    assert fake.runs == 2
    await sup.aclose()


async def test_cancel_stops_the_run_and_the_pending_one() -> None:
    fake = FakeExtract()
    flight, sup = make(fake)
    flight.request()
    await fake.started[0].wait()
    flight.request()
    task = flight.task
    assert task is not None
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled() and fake.runs == 1 and not flight.running
    await sup.aclose()
