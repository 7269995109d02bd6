"""The seams where memory plugs into a prompt.

The turn engine calls these at fixed points and never waits on them, with
one bounded exception (`first_index`):

- `prompt_started`: the prompt arrived; fire the recall prefetch.
- `first_index`: None, except when the project's memory is still being
  indexed for the first time (a prompt sent the instant its session exists),
  or that index landed during the prompt's start and the local tier has yet
  to resume: then an awaitable that waits for the local tier, within a small bound, so
  that its notes still reach the first model request.
- `take_nowait(point)`: just before a model request (`user_query` before the
  first one, `tool_result` before each ToolResult step); returns a reminder
  and a delivery report per settled, unconsumed prefetch (one per tier),
  else an empty list at once.
- `prompt_ended`: every exit of a prompt (normal end, each early return,
  error, cancel); abort what is unsettled or unconsumed.
- `session_reset` / `session_closed`: the same abort, plus per-session state.
- `after_reply`: the front end has sent the prompt's reply; schedule
  background work (extraction) that must never delay the reply.
- `describe`: what the project's memory holds and where, in words for the
  chat (the `/memory` command; not on a prompt's path).
- `history_compacted`: older messages were summarised away, with the memory
  reminders they carried; only `kept_docs` are still in the history, so the
  others may be recalled again.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol

from agentd.events import MemoryDelivered, MemoryPoint
from agentd.messages import ReminderPart

if TYPE_CHECKING:
    from agentd.agent.session import Session


class MemoryHooks(Protocol):
    def prompt_started(self, session: Session, query: str) -> None: ...

    def first_index(self, session: Session) -> Awaitable[None] | None: ...

    def take_nowait(
        self, session: Session, point: MemoryPoint
    ) -> list[tuple[ReminderPart, MemoryDelivered]]: ...

    def prompt_ended(self, session: Session, *, cancelled: bool) -> None: ...

    def session_reset(self, session: Session) -> None: ...

    def session_closed(self, session: Session) -> None: ...

    def after_reply(self, session: Session) -> None: ...

    def history_compacted(self, session: Session, kept_docs: set[str]) -> None: ...

    async def system_context(self, session: Session) -> str:
        """Text appended to the system prompt (instruction files)."""
        ...

    async def describe(self, session: Session) -> str:
        """Markdown: the memory folder, its notes, the instruction files."""
        ...


class NoMemory:
    """Memory switched off: every seam is a no-op."""

    def prompt_started(self, session: Session, query: str) -> None:
        return None

    def first_index(self, session: Session) -> Awaitable[None] | None:
        return None

    def take_nowait(
        self, session: Session, point: MemoryPoint
    ) -> list[tuple[ReminderPart, MemoryDelivered]]:
        return []

    def prompt_ended(self, session: Session, *, cancelled: bool) -> None:
        return None

    def session_reset(self, session: Session) -> None:
        return None

    def session_closed(self, session: Session) -> None:
        return None

    def after_reply(self, session: Session) -> None:
        return None

    def history_compacted(self, session: Session, kept_docs: set[str]) -> None:
        return None

    async def system_context(self, session: Session) -> str:
        return ""

    async def describe(self, session: Session) -> str:
        return (
            "Memory is off for this daemon (`AGENTD_MEMORY=off` or `memory.enabled = false` "
            "in the settings): nothing is recalled or saved."
        )
