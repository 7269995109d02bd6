"""Memory the process holds for nothing after its start-up (issue 20: RSS
after the warm-up).

Two leftovers of the imports, released by the warm-up (`agentd.warmup`):

- `drop_generated_source()`: attrs puts the source of every method it
  generates (`__init__`, `__repr__`, `__eq__` of each class) in `linecache`
  under a made-up file name, so that a debugger can step through it.
  lsprotocol's ~550 classes leave about 1.5 MB of source lines there, read
  by nothing in a daemon (a traceback through such a method just shows no
  line). Called on the loop thread: `linecache` is a plain dict that
  `traceback` reads there.
- `trim()`: glibc keeps freed memory inside its heaps (the warm-up thread
  allocates in its own arena, so what the loop thread freed is not reused
  by it) until `malloc_trim` returns the free pages to the OS. One call, a
  millisecond or two, at the end of the warm-up. A no-op where the C library
  has no `malloc_trim` (musl, macOS).

And one moment to collect: `collect_young()`, right after a new session's
reply (`AgentCore.prepare_session`); and a stretch not to: `YoungHold`,
a prompt's way to its model request (`AgentCore.prompt`).
"""

from __future__ import annotations

import gc
import linecache

_GENERATED = "<attrs generated"


def drop_generated_source() -> int:
    """Forget the source lines of attrs' generated methods; how many entries went."""
    names = [name for name in linecache.cache if name.startswith(_GENERATED)]
    for name in names:
        linecache.cache.pop(name, None)
    return len(names)


def trim() -> bool:
    """Return the C heap's free pages to the OS; False if this libc cannot."""
    # ctypes only here: about 0.25 MB and a few ms, paid in the warm-up thread.
    import ctypes

    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True


def collect_young() -> None:
    """Collect the youngest generation now, while nothing waits: the collector
    runs when allocations since its last run pass a threshold (700 objects),
    wherever that falls, and a young collection took 0.1-0.25 ms of the
    prompts it fell in. Run where a prompt is next and nothing else is
    (a new session's reply just written), the prompt's own allocations, a
    few hundred up to its request, start from an empty young generation."""
    gc.collect(0)


# The young generation's threshold while a prompt is on its way to its model
# request: a prompt allocates about 100 objects (net) up to its request, so
# none reaches it; a wait on the way (a summary being finished, a project's
# first index) still collects, later.
HELD_THRESHOLD = 5_000


class YoungHold:
    """No young collection on a prompt's way to its model request: the
    collector runs when the objects allocated since its last run pass a
    threshold (700), wherever that falls, and 1 in 5 to 7 prompts met it on
    that way (0.1-0.25 ms each, after the daemon had idled). Held, the threshold
    is `HELD_THRESHOLD`; released (the request's body written, or the prompt
    over without one), it is what it was, and a collection that came due
    runs at the next allocation, while the model is being waited for.
    Holds of prompts running at once nest; `release` is idempotent."""

    __slots__ = ("_held",)

    # Holds now, and the thresholds the first one found.
    _count = 0
    _saved: tuple[int, int, int] | None = None

    def __init__(self) -> None:
        self._held = True
        cls = YoungHold
        if cls._count == 0:
            saved = gc.get_threshold()
            # 0 is the collector's automatic runs turned off: left so.
            if 0 < saved[0] < HELD_THRESHOLD:
                cls._saved = saved
                gc.set_threshold(HELD_THRESHOLD, saved[1], saved[2])
        cls._count += 1

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        cls = YoungHold
        cls._count -= 1
        if cls._count == 0 and cls._saved is not None:
            gc.set_threshold(*cls._saved)
            cls._saved = None
