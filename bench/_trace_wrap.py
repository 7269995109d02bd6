"""Run a daemon (or a bare baseline) with wall-clock marks on its event loop,
for `segments_bench.py`: where a prompt's time goes from the client's write to
the request's first bytes, outside the daemon's own code as well as inside.

    python bench/_trace_wrap.py -m agentd.acp
    python bench/_trace_wrap.py bench/bare_acp_agent.py --model URL --body FILE

Marks (`time.time()`, the benchmark's and the model server's clock), kept in
memory and written at exit to `$TRACE_DIR/<pid>.json`:

- `stdin`: a read of stdin woke the loop: when the loop's `epoll` wait began
  and returned, when the pipe's read callback began and ended (asyncio's
  read pipe; for `bare_pygls_server.py`, which reads stdin in pygls' thread
  pool, when a message's first header line was read in the thread and when
  its body reached the loop);
- `sock`: a socket write (asyncio's socket transport): its start and end;
- `sel`: each blocking `epoll` wait (its start and return);
- `gc`: the collector's runs;
- `httpx_send`, `pool`, `h11conn`: httpx's `AsyncClient.send` and httpcore's
  connection pool and HTTP/1.1 connection entered;
- `$TRACE_MARKS`: more functions, `module:Qualified.name` separated by commas,
  each marked on entry (and a synchronous one on return, `name/end`); a
  module the wrapped program does not have is skipped, as are agentd's in a
  bare baseline and `_bare_model`'s in agentd (a library's, httpcore's or
  h11's, is marked in both).

The marks patch asyncio's private transport classes: a measuring tool, never
imported by agentd. Each costs about a microsecond.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import inspect
import json
import os
import runpy
import selectors
import sys
import time
from asyncio import selector_events, unix_events
from typing import Any

now = time.time
EVENTS: list[list[Any]] = []
# The last `epoll` wait: when it began and when it returned.
LAST_WAIT = [0.0, 0.0]


def _patch_loop() -> None:
    select = selectors.EpollSelector.select

    def timed_select(self: Any, timeout: float | None = None) -> Any:
        began = now()
        ready = select(self, timeout)
        LAST_WAIT[0], LAST_WAIT[1] = began, now()
        if timeout is None or timeout > 0:
            EVENTS.append(["sel", began, LAST_WAIT[1]])
        return ready

    selectors.EpollSelector.select = timed_select  # type: ignore[method-assign]

    pipe_read = unix_events._UnixReadPipeTransport._read_ready

    def timed_pipe_read(self: Any) -> None:
        mark = ["stdin", LAST_WAIT[0], LAST_WAIT[1], now()]
        EVENTS.append(mark)
        pipe_read(self)
        mark.append(now())

    unix_events._UnixReadPipeTransport._read_ready = timed_pipe_read  # type: ignore[method-assign]

    sock_write = selector_events._SelectorSocketTransport.write

    def timed_sock_write(self: Any, data: Any) -> None:
        began = now()
        sock_write(self, data)
        EVENTS.append(["sock", began, now(), len(data)])

    selector_events._SelectorSocketTransport.write = timed_sock_write  # type: ignore[method-assign]

    def collected(phase: str, info: dict[str, Any]) -> None:
        EVENTS.append(["gc", now(), phase, info.get("generation")])

    gc.callbacks.append(collected)


def _patch_pygls() -> None:
    """pygls reads each header line and the body in its thread pool."""
    from pygls import io_

    first_line = [0.0, True]

    def readline(self: Any) -> Any:
        def blocking() -> bytes:
            data: bytes = self.stdin.readline()
            if first_line[1]:
                first_line[0], first_line[1] = now(), False
            return data

        return self.loop.run_in_executor(self.executor, blocking)

    def readexactly(self: Any, n: int) -> Any:
        fut = self.loop.run_in_executor(self.executor, self.stdin.read, n)

        def in_loop(_: Any) -> None:
            t = now()
            EVENTS.append(["stdin", first_line[0], first_line[0], t, t])
            first_line[1] = True

        fut.add_done_callback(in_loop)
        return fut

    io_.StdinAsyncReader.readline = readline
    io_.StdinAsyncReader.readexactly = readexactly


def _marked(func: Any, tag: str) -> Any:
    if inspect.iscoroutinefunction(func):

        async def marked_async(*args: Any, **kwargs: Any) -> Any:
            EVENTS.append([tag, now()])
            return await func(*args, **kwargs)

        return marked_async

    def marked(*args: Any, **kwargs: Any) -> Any:
        EVENTS.append([tag, now()])
        try:
            return func(*args, **kwargs)
        finally:
            EVENTS.append([tag + "/end", now()])

    return marked


def _patch_marks(specs: list[str]) -> None:
    for spec in specs:
        module_name, _, qualname = spec.partition(":")
        try:
            owner: Any = importlib.import_module(module_name)
            *path, name = qualname.split(".")
            for part in path:
                owner = getattr(owner, part)
            func = getattr(owner, name)
        except (ImportError, AttributeError):
            continue  # another program's function
        setattr(owner, name, _marked(func, qualname))


def _dump() -> None:
    folder = os.environ.get("TRACE_DIR")
    if folder:
        meta = {"pid": os.getpid(), "argv": sys.argv}
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            json.dump({"meta": meta, "events": EVENTS}, f)


def main() -> None:
    args = sys.argv[1:]
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    script = None if args[0] == "-m" else os.path.abspath(args[0])
    if script is not None:
        sys.path.insert(0, os.path.dirname(script))
    _patch_loop()
    import httpcore
    import httpx

    for owner, name, tag in (
        (httpx.AsyncClient, "send", "httpx_send"),
        (httpcore.AsyncConnectionPool, "handle_async_request", "pool"),
        (httpcore.AsyncHTTP11Connection, "handle_async_request", "h11conn"),
    ):
        setattr(owner, name, _marked(getattr(owner, name), tag))
    if script is not None and script.endswith("bare_pygls_server.py"):
        _patch_pygls()
    wanted = [s for s in os.environ.get("TRACE_MARKS", "").split(",") if s]
    # The other program's own functions are left; libraries' (httpcore's,
    # h11's) are marked in whichever program has them.
    theirs = "agentd" if script is not None else "_bare_model"
    _patch_marks([s for s in wanted if not s.startswith(theirs)])
    atexit.register(_dump)
    if script is None:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
