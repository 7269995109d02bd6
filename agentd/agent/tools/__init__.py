"""Tools: the read-only ones the daemon runs itself, and the specs of the ones
editors run.

    specs.py       what the model sees (names, descriptions, schemas), limits
    args.py        a model's arguments checked against the schema
    worker.py      one daemon thread per call; cancel and time limits
    fs.py          confined opens from the root's descriptor; regular files only
    globs.py       gitignore-syntax globs compiled for RE2
    walk.py        the ignore-aware confined walk (ripgrep's rules)
    ripgrep.py     finding and running `rg`
    read.py, listing.py, search.py, glob_files.py    one module per tool

Daemon tools are confined to the session's workspace roots and never write:
a relative path is the workspace root's, an absolute one may be inside any
root (`agentd.paths.root_of`); paths a tool shows are relative to the root
it worked in, which its output names when that is not the workspace root. A
call's failure, whatever it is, comes back as a failed result the model
reads (`DaemonTools.run` raises only `ToolError` and `CancelledError`).
Client tools (`edit_file`, `write_file`, `run_command`, and a client's own
`read_file` that sees unsaved buffers) are only offered to the model when
the editor declared them in `initialize`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentd.agent.tools import glob_files, listing, read, search
from agentd.agent.tools.args import check_arguments
from agentd.agent.tools.fs import Root
from agentd.agent.tools.output import ToolConfig, ToolOutput
from agentd.agent.tools.specs import (
    CLIENT_TOOL_SPECS,
    DAEMON_TOOL_NAMES,
    DAEMON_TOOL_SPECS,
    client_tool_specs,
)
from agentd.agent.tools.worker import Stopped, StopToken, run_in_worker
from agentd.errors import ToolError
from agentd.events import Location
from agentd.paths import root_of

__all__ = [
    "CLIENT_TOOL_SPECS",
    "DAEMON_TOOL_NAMES",
    "DAEMON_TOOL_SPECS",
    "DaemonTools",
    "ToolConfig",
    "ToolOutput",
    "call_locations",
    "client_tool_specs",
    "truncate_result",
]

log = logging.getLogger(__name__)

ToolFn = Callable[[Root, dict[str, Any], ToolConfig, StopToken], ToolOutput]
_RUN: dict[str, ToolFn] = {
    "read_file": read.run,
    "list_dir": listing.run,
    "search": search.run,
    "glob": glob_files.run,
}
# How long past its soft time limit a call may take before it is given up on.
_GRACE = 10.0


class DaemonTools:
    """The daemon's own read-only tools, bound to a session's workspace root
    and the folders beside it (`extra_roots`)."""

    def __init__(
        self, root: Path, config: ToolConfig | None = None, extra_roots: Sequence[Path] = ()
    ) -> None:
        self.root = root
        self.roots = [root, *extra_roots]
        self.config = config or ToolConfig()

    async def run(self, name: str, args: Any) -> ToolOutput:
        """Run a tool in a worker thread. Raises `ToolError` (the model reads
        it) or `CancelledError`; any other failure is turned into a `ToolError`."""
        fn = _RUN.get(name)
        if fn is None:
            raise ToolError(f"unknown daemon tool {name!r}")
        clean = check_arguments(name, DAEMON_TOOL_SPECS[name].parameters, args)
        timeout = self.config.search_timeout
        return await run_in_worker(
            lambda token: self._call(fn, name, clean, token),
            name=name,
            soft_timeout=timeout if name in ("search", "glob") else None,
            hard_timeout=timeout + _GRACE,
        )

    def call(self, name: str, **args: Any) -> str:
        """Run a tool synchronously in this thread (tests, scripts): its text."""
        fn = _RUN.get(name)
        if fn is None:
            raise ToolError(f"unknown daemon tool {name!r}")
        clean = check_arguments(name, DAEMON_TOOL_SPECS[name].parameters, args)
        return self._call(fn, name, clean, StopToken(self.config.search_timeout)).text

    def _call(self, fn: ToolFn, name: str, args: dict[str, Any], token: StopToken) -> ToolOutput:
        try:
            where = root_of(self.roots, str(args.get("path") or "."))
            with Root(where) as root:
                out = fn(root, args, self.config, token)
            if where != self.root and name != "read_file":
                # Its paths are relative to another root than the one relative
                # paths start from: said, or the model would take them for the
                # workspace root's.
                out = ToolOutput(f"(paths relative to {root.path})\n{out.text}", out.locations)
            return out
        except ToolError:
            raise
        except Stopped:
            raise ToolError(f"{name} cancelled") from None
        except OSError as exc:
            raise ToolError(f"{name} failed: {exc.strerror or exc}") from exc
        except Exception as exc:
            # A bug of ours must not end the prompt: the model gets a failed
            # result and the log gets the traceback.
            log.exception("daemon tool %s failed", name)
            raise ToolError(f"{name} failed unexpectedly ({type(exc).__name__})") from exc


def call_locations(name: str, args: Mapping[str, Any], root: Path) -> list[Location]:
    """The file a call is about (its `path` argument), as an absolute path."""
    import os

    path = args.get("path")
    if name == "run_command" or not isinstance(path, str) or not path or "\x00" in path:
        return []
    full = os.path.normpath(os.path.join(root, path))
    offset = args.get("offset")
    if name == "read_file" and isinstance(offset, int) and not isinstance(offset, bool):
        return [Location(full, max(1, offset))]
    return [Location(full)]


def truncate_result(text: str, limit: int) -> str:
    """Cut huge tool output, saying so: never drop it silently."""
    if len(text) <= limit:
        return text
    return (
        text[:limit]
        + f"\n[output truncated: {len(text):,} characters, showing the first {limit:,}]"
    )
