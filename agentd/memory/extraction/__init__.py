"""Memory extraction after each turn (stub: being implemented)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd.memory.manager import MemoryManager
from agentd.providers.base import ModelProvider
from agentd.tasks import Supervisor

# (session_id) -> (transcript path, current end offset), or None if unknown.
TranscriptLookup = Callable[[str], tuple[Path, int] | None]


class ExtractionService:
    def __init__(
        self,
        manager: MemoryManager,
        provider: ModelProvider,
        supervisor: Supervisor,
        *,
        fast_model: str,
        transcripts: TranscriptLookup,
        home: Path,
        grace: float = 5.0,
        progress: Callable[[Path], Callable[[int, int], None] | None] | None = None,
    ) -> None:
        self.manager = manager

    def schedule(self, workspace_root: Path, session_id: str) -> None:
        return None

    def status(self, workspace_root: Path) -> dict[str, Any]:
        return {"state": "idle", "trailingPending": False, "cursors": []}

    async def resume(self, workspace_root: Path) -> None:
        return None

    async def drain(self, timeout: float) -> None:
        return None

    async def aclose(self) -> None:
        return None
