"""What a daemon tool returns, its settings, and the confined re-check of paths."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from agentd.agent.tools.fs import Root
from agentd.errors import ToolError
from agentd.events import Location


@dataclass(slots=True)
class ToolOutput:
    """The text the model reads, and where the results are (for editors)."""

    text: str
    locations: list[Location] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ToolConfig:
    # "auto": ripgrep when its binary runs, else the Python walker; "ripgrep"
    # requires it; "python" never uses it.
    search_engine: str = "auto"
    # Wall-clock limit of one search or glob: the results found by then are returned.
    search_timeout: float = 20.0

    def engine(self) -> str | None:
        """The `rg` binary to use, or None for the Python engine."""
        if self.search_engine == "python":
            return None
        from agentd.agent.tools.ripgrep import find_rg

        rg = find_rg()
        if rg is None and self.search_engine == "ripgrep":
            raise ToolError("ripgrep was asked for (tools.searchEngine) but no working rg found")
        return rg


class ConfinedStats:
    """`stat` of root-relative paths through confined folder descriptors.

    Paths reported by ripgrep are re-checked this way: a path counts only if
    every folder on the way opens with O_NOFOLLOW from the root and the last
    component is a regular file. The paths come sorted, so consecutive ones
    share their folder and a few cached folder descriptors keep this to about
    one `fstatat` per path. Use it as a context manager (it closes them).
    """

    def __init__(self, root: Root, size: int = 32) -> None:
        self.root = root
        self.size = size
        self._cache: dict[tuple[str, ...], int] = {}

    def __enter__(self) -> ConfinedStats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._cache.values():
            os.close(fd)
        self._cache.clear()

    def __call__(self, rel: str) -> os.stat_result | None:
        parts = tuple(rel.split("/"))
        parent = parts[:-1]
        fd = self._cache.get(parent)
        if fd is None:
            try:
                fd = self.root.open_dir(parent)
            except (ToolError, OSError):
                return None
            if len(self._cache) >= self.size:
                self.close()
            self._cache[parent] = fd
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) else None
