"""A request body handed to httpx as chunks, the history's built once (issue 20).

A step's request is the whole history again. Its bytes come from
per-message caches, but joining them into one `bytes` copied the whole body
on every step: at a megabyte (a long session in a 2M-token window) the copy
lands on pages fresh from the kernel, since each step's body is a little
larger than the last one freed, about 0.75 ms a step and growing with the
history. Here the history's pieces are joined into chunks of about
`CHUNK_BYTES` once, and a chunk is kept (`SealedChunks`, in a provider's kept
assembly, `messages.find_prefix`) for as long as the pieces in it stay
unchanged: a step joins only the head, the pieces after the last whole chunk
and what it added. httpcore writes each chunk as it comes (h11 passes a
`bytes` chunk through uncopied), after one `Content-Length` header, so the
bytes on the wire are those of the one joined body.

The pieces after the last chunk are walked once too: their running size is
kept (`SealedChunks._sizes`), so a step measures only the pieces it added.

Chunks are sealed small (`CHUNK_BYTES / 16`, 16 KB) and joined four at a
time into larger ones, up to `CHUNK_BYTES` (like the digits of a count in
base four): the pieces a step joins again stay under 16 KB whatever the
history's length, and a megabyte is still a dozen parts at most. With only
`CHUNK_BYTES` chunks, a history shorter than one (170 KB after compaction
has cleared old tool output, a default window's case) was joined whole at
every step, about 0.1 ms at 1,000 messages, and a longer one re-joined up
to 256 KB of its tail. The chunks depend only on the pieces: those kept
across steps are those a fresh `SealedChunks` makes.
"""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator

# The largest chunk: big enough that a megabyte is a handful of writes (each
# costs one turn of the event loop in anyio).
CHUNK_BYTES = 256 * 1024
# Chunks are sealed at CHUNK_BYTES / FAN_IN**LEVELS (16 KB), so that a step's
# re-joined tail is small, and FAN_IN of one size make one of the next.
FAN_IN = 4
LEVELS = 2


class SealedChunks:
    """A list of pieces (`bytes`) joined into chunks (but the last pieces,
    short of the smallest one), kept across the steps of a history."""

    __slots__ = ("_sizes", "chunks", "ends", "levels")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        # ends[c]: the index of the first piece after chunk c.
        self.ends: list[int] = []
        # levels[c]: chunk c joins FAN_IN**levels[c] sealed ones; never
        # rising along the list, and at most FAN_IN - 1 of a level below LEVELS.
        self.levels: list[int] = []
        # _sizes[j]: the bytes of the pieces after the last chunk up to and
        # including the j-th of them, for those the last call walked.
        self._sizes: list[int] = []

    def update(self, pieces: list[bytes], same: int, limit: int | None = None) -> int:
        """Chunk `pieces[:limit]`, keeping the chunks made of the first `same`
        pieces (unchanged since the last call); the index of the first piece
        that is in no chunk. Only the pieces from `same` on are read (and
        those of a chunk that does not hold any more)."""
        stop = len(pieces) if limit is None else min(limit, len(pieces))
        valid = min(same, stop)
        keep = bisect.bisect_right(self.ends, valid)
        sizes = self._sizes
        if keep < len(self.ends):
            # A prefix of the chunks is what a fresh count of its sealed ones makes.
            del self.chunks[keep:], self.ends[keep:], self.levels[keep:]
            sizes.clear()  # they were counted from a later chunk's end
        start = self.ends[-1] if self.ends else 0
        # The running sizes of unchanged pieces hold: go on from the first changed one.
        del sizes[valid - start :]
        size = sizes[-1] if sizes else 0
        seal = max(CHUNK_BYTES // FAN_IN**LEVELS, 1)
        for i in range(start + len(sizes), stop):
            size += len(pieces[i])
            if size >= seal:
                self._seal(b"".join(pieces[start : i + 1]), i + 1)
                start, size = i + 1, 0
                sizes.clear()
            else:
                sizes.append(size)
        return start

    def largest(self) -> int:
        """How many chunks, from the first, are of the largest size."""
        return bisect.bisect_left(self.levels, True, key=lambda level: level < LEVELS)

    def _seal(self, chunk: bytes, end: int) -> None:
        """Add a chunk ending before piece `end`; FAN_IN chunks of one level
        (the last ones) are joined into one of the next, up to LEVELS."""
        chunks, ends, levels = self.chunks, self.ends, self.levels
        chunks.append(chunk)
        ends.append(end)
        levels.append(0)
        level = 0
        while level < LEVELS and levels[-FAN_IN:] == [level] * FAN_IN:
            chunks[-FAN_IN:] = [b"".join(chunks[-FAN_IN:])]
            del ends[-FAN_IN:-1], levels[-FAN_IN:]
            level += 1
            levels.append(level)


class RequestBody:
    """A body of `bytes` parts whose length is known: sent with a
    `Content-Length` (never chunked transfer coding), and read afresh by each
    iteration, so a retry sends it again whole.

    Each part sent is one write, a syscall, and through httpcore's anyio
    backend a turn of the event loop and a cancel scope too (about 50 us in a
    daemon; the model client's own backend, `network.py`, has neither, but a
    proxy's client still uses anyio's): the parts after
    the first `written` (the chunks smaller than the largest, and the tail)
    are sent joined, as one write. The join is made as the body is sent,
    once the request's head is out, and copies only a few large `bytes`."""

    __slots__ = ("length", "parts", "written")

    def __init__(self, parts: list[bytes], written: int | None = None) -> None:
        self.parts = parts
        self.length = sum(map(len, parts))
        self.written = len(parts) if written is None else written

    @classmethod
    def of(cls, head: list[bytes], sealed: SealedChunks, tail: list[bytes]) -> RequestBody:
        """The body `head`, the kept chunks of `sealed`, then `tail`, closed
        as `join_array` closes it; each run of small pieces is joined into
        one part (without chunks, the whole body is one part). With chunks,
        `tail` holds the last piece: chunks never take it."""
        chunks = sealed.chunks
        if not chunks:
            return cls([join_array(head + tail)])
        return cls([b"".join(head), *chunks, join_array(tail)], 1 + sealed.largest())

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        parts, written = self.parts, self.written
        for part in parts[:written]:
            yield part
        if written < len(parts):
            yield b"".join(parts[written:])


def join_array(pieces: list[bytes]) -> bytes:
    """A request body from `pieces`: its head (an object's JSON without the
    closing brace), `,"key":[`, then each item of that last array followed
    by a comma; the array and the object are closed here (`pieces` is
    changed). One join, one allocation: joining the items first and then the
    whole copies the body twice."""
    if pieces[-1] == b",":
        pieces[-1] = b"]}"
    else:
        pieces.append(b"]}")
    return b"".join(pieces)
