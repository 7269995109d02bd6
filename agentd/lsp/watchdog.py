"""Exit when the editor process is gone (LSP `initialize.processId`).

Editors that crash never send `exit`; without this the daemon would live on.
Linux gives a pidfd that becomes readable when the process ends (no polling);
elsewhere, or when the pid is not ours to open, poll every 2 s as
vscode-languageserver does (it checks every 3 s).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


async def watch_process(pid: int, on_gone: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except OSError:
            fd = -1
        if fd >= 0:
            gone = asyncio.Event()
            loop.add_reader(fd, gone.set)
            try:
                await gone.wait()
            finally:
                loop.remove_reader(fd)
                os.close(fd)
            on_gone()
            return
    # No event exists for "some other process ended" without a pidfd: poll.
    while _alive(pid):  # noqa: ASYNC110
        await asyncio.sleep(POLL_SECONDS)
    on_gone()
