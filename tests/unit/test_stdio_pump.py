"""stdin's bytes handed to a front end's framer (`agentd.stdio.open_pump`)."""

from __future__ import annotations

import asyncio
import os
import tempfile

from agentd.stdio import open_pump, read_pump


async def test_bytes_are_handed_over_from_the_pipes_read_callback_not_a_woken_task() -> None:
    # A task woken for each read (a StreamReader between pipe and framer)
    # cost every message a turn of the loop on its way to its handler.
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as stdin:
        pump = await open_pump(loop, stdin)
        got: list[tuple[bytes, bool]] = []
        first = loop.create_future()

        def feed(data: bytes) -> None:
            got.append((data, asyncio.current_task() is None))
            if not first.done():
                first.set_result(None)

        pumping = loop.create_task(pump(feed))
        await asyncio.sleep(0)  # the pump attached
        os.write(w, b'{"a":1}\n')
        await first
        assert got == [(b'{"a":1}\n', True)]
        os.close(w)
        await pumping


async def test_the_prefix_then_bytes_that_came_before_the_pump_started_then_the_rest() -> None:
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as stdin:
        pump = await open_pump(loop, stdin, prefix=b"{")
        os.write(w, b'"a":1}\n{"b"')
        # Turns of the loop before the framer is attached: the pipe's read
        # callback runs in them, and what it read is held for the framer.
        for _ in range(3):
            await asyncio.sleep(0)
        chunks: list[bytes] = []
        pumping = loop.create_task(pump(chunks.append))
        os.write(w, b":2}\n")
        os.close(w)
        await pumping
    assert b"".join(chunks) == b'{"a":1}\n{"b":2}\n'


async def test_a_regular_file_is_read_in_a_thread_to_its_end() -> None:
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryFile() as stdin:
        stdin.write(b'"a":1}\n')
        stdin.seek(0)
        pump = await open_pump(loop, stdin, prefix=b"{")
        chunks: list[bytes] = []
        await pump(chunks.append)
    assert b"".join(chunks) == b'{"a":1}\n'


async def test_read_pump_hands_over_each_read_until_the_end() -> None:
    reads = [b"ab", b"c", b""]

    async def read(n: int) -> bytes:
        return reads.pop(0)

    chunks: list[bytes] = []
    await read_pump(read, prefix=b">")(chunks.append)
    assert chunks == [b">", b"ab", b"c"]
