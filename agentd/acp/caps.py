"""What each side can do, known before the core is imported (stdlib only).

`initialize` is answered before pydantic, httpx and the turn engine are
imported (cold start), yet its result must say whether `session/load` and
the memory extension methods exist. `core_methods` answers that by reading
the names of the methods defined in `agentd/agent/core.py` and
`agentd/app.py` without importing them; after the warm-up, handlers check
the real objects with `hasattr`, so a method advertised by mistake is still
answered `-32601`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

_METHOD = re.compile(r"^    (?:async )?def ([A-Za-z]\w*)\(", re.MULTILINE)


@cache
def core_methods() -> frozenset[str]:
    """Method names defined in the core's and the App's modules (without importing them)."""
    package = Path(__file__).resolve().parent.parent
    names: set[str] = set()
    for source in (package / "agent" / "core.py", package / "app.py"):
        try:
            names.update(_METHOD.findall(source.read_text(encoding="utf-8")))
        except OSError:
            continue
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class ClientCaps:
    """What the client said it can do (`initialize.clientCapabilities`)."""

    read_text_file: bool = False
    write_text_file: bool = False
    terminal: bool = False

    @classmethod
    def from_json(cls, caps: Any) -> ClientCaps:
        caps = caps if isinstance(caps, dict) else {}
        fs = caps.get("fs") if isinstance(caps.get("fs"), dict) else {}
        return cls(
            read_text_file=fs.get("readTextFile") is True,
            write_text_file=fs.get("writeTextFile") is True,
            terminal=caps.get("terminal") is True,
        )

    def tool_names(self) -> list[str]:
        """The client tools offered to the model (each needs what its ACP calls need)."""
        names = []
        if self.read_text_file:
            names.append("read_file")
        if self.read_text_file and self.write_text_file:
            names.append("edit_file")
        if self.write_text_file:
            names.append("write_file")
        if self.terminal:
            names.append("run_command")
        return names
