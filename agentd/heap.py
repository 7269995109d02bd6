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
reply (`AgentCore.prepare_session`).
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
