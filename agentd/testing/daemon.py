"""The daemon under test or benchmark, spawned as an editor spawns it.

`daemon_env` is the one environment of such a daemon: nothing of the
caller's own `AGENTD_*` settings leaks in, the model endpoint is the
bundled model server, and its data and config live in a folder of the
test's. `daemon_command` / `spawn_agentd` start `agentd serve` (or the ACP
entry point) with the interpreter running the caller.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path
from typing import Any

from agentd.layout import memory_dir

TEST_API_KEY = "sk-test-key-123456"
TEST_MODEL = "test-model"


def daemon_env(base_url: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a daemon pointed at `base_url` (the model server's
    `openai_base_url`), with `$AGENTD_HOME` and its config under `home`;
    `extra` adds or overrides variables (`AGENTD_MEMORY="off"`, ...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k != "COVERAGE"}
    env.update(
        AGENTD_BASE_URL=base_url,
        AGENTD_API_KEY=TEST_API_KEY,
        AGENTD_MODEL=TEST_MODEL,
        AGENTD_HOME=str(agentd_home(home)),
        AGENTD_CONFIG_DIR=str(home / "agentd-config"),
        AGENTD_LOG_LEVEL="info",
    )
    env.update(extra)
    return env


def agentd_home(home: Path) -> Path:
    """The `$AGENTD_HOME` of a daemon started with `daemon_env(..., home)`."""
    return home / "agentd-home"


def memory_folder(workspace: Path, home: Path) -> Path:
    """The memory folder of `workspace` for a daemon started with `daemon_env(..., home)`
    (what `agentd memory dir` prints there), created."""
    folder = memory_dir(workspace, agentd_home(home))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def daemon_command(*args: str, acp: bool = False) -> list[str]:
    """`python -m agentd serve ARGS` (or `python -m agentd.acp`), with this interpreter."""
    if acp:
        return [sys.executable, "-m", "agentd.acp", *args]
    return [sys.executable, "-m", "agentd", "serve", *args]


async def spawn_agentd(
    env: dict[str, str],
    *args: str,
    acp: bool = False,
    stdout: Any = asyncio.subprocess.PIPE,
    stderr: Any = asyncio.subprocess.DEVNULL,
) -> asyncio.subprocess.Process:
    """The daemon with its stdin (and by default its stdout) as pipes."""
    return await spawn_process(daemon_command(*args, acp=acp), env, stdout=stdout, stderr=stderr)


async def spawn_process(
    command: list[str],
    env: dict[str, str],
    *,
    stdout: Any = asyncio.subprocess.PIPE,
    stderr: Any = asyncio.subprocess.DEVNULL,
) -> asyncio.subprocess.Process:
    """Any stdio server (agentd, or the bare pygls server the benchmarks compare with)."""
    return await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=stdout, stderr=stderr, env=env
    )


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (nan when it cannot be read)."""
    try:
        for row in Path(f"/proc/{pid}/status").read_text().splitlines():
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


# --- holding the warm-up -------------------------------------------------------------


def hold_warmup(fifo: Path) -> dict[str, str]:
    """The environment that makes a daemon's warm-up stop after its settings
    stage, before the App is built, until `release_warmup(fifo)`."""
    os.mkfifo(fifo)
    # `agentd.warmup.HOLD_ENV` (that module is above this one in the layers).
    return {"AGENTD_TEST_WARMUP_HOLD": str(fifo)}


def release_warmup(fifo: Path) -> None:
    """Let a held warm-up go on: open the FIFO's writing end (this waits for the
    warm-up to reach the hold) and close it. Blocking: run it in a thread."""
    fifo.open("wb").close()


def release_warmup_nowait(fifo: Path) -> None:
    """`release_warmup` if the warm-up is at the hold now, else nothing (for
    clean-up after a failed test)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader: released already, or not there yet
