"""What a running prompt reports, independent of any wire protocol.

The turn engine emits these through a per-prompt `Emit` callback; each front
end (LSP `agent/update`, ACP `session/update`) maps them to its own messages.
Some of them (`Note`s: memory deliveries, usage, how a prompt ended) are also
kept in the session's transcript for replay. Part of the core's vocabulary
with `messages.py`: it imports nothing of agentd, so the transcript (below
the turn engine) and the front ends (above it) can both speak it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

ToolStatus = Literal["running", "completed", "failed", "cancelled"]
Executor = Literal["client", "daemon"]
MemoryPoint = Literal["user_query", "tool_result"]
PlanPriority = Literal["high", "medium", "low"]
PlanStatus = Literal["pending", "in_progress", "completed"]


@dataclass(slots=True)
class MessageChunk:
    text: str


@dataclass(slots=True)
class ThoughtChunk:
    text: str


@dataclass(frozen=True, slots=True)
class Location:
    """A place a tool call touched or found: an absolute path, and a 1-based line."""

    path: str
    line: int | None = None


@dataclass(slots=True)
class ToolCallStarted:
    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    executor: Executor
    # The files the call is about (its `path` argument), for editors to follow along.
    locations: list[Location] = field(default_factory=list)
    # A client tool the session's mode lets run without asking the user
    # (an edit in the auto-edit mode): the editor applies it at once.
    auto_approve: bool = False
    # The MCP server that runs the call (its configured name); None for agentd's own tools.
    server: str | None = None


@dataclass(slots=True)
class ToolCallUpdate:
    tool_call_id: str
    status: ToolStatus
    content: str | None = None
    # Where a finished call's results are (search hits, files found), so that
    # editors can offer file:line links; empty when there are none.
    locations: list[Location] = field(default_factory=list)


@dataclass(slots=True)
class MemoryDelivered:
    point: MemoryPoint
    tier: str  # "local" or "model"
    docs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class UsageReport:
    input_tokens: int
    output_tokens: int
    session_total_tokens: int
    # The context meter: the tokens the conversation now takes in the model's
    # context window (what the next request starts from) and that window;
    # 0 when unknown (a usage note written before the meter existed).
    context_tokens: int = 0
    context_window: int = 0
    # Of input_tokens, those read from / written to the provider's prompt
    # cache; None when the provider did not say.
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


@dataclass(slots=True)
class PlanEntry:
    content: str
    priority: PlanPriority
    status: PlanStatus


@dataclass(slots=True)
class PlanUpdated:
    """The session's plan, whole (the model's `update_plan` tool replaces it)."""

    entries: list[PlanEntry]


@dataclass(slots=True)
class ModeChanged:
    """The session's mode changed (`agentd.agent.modes`)."""

    mode: str


@dataclass(slots=True)
class UserMessage:
    """Only emitted when a stored session is replayed to the client."""

    text: str


@dataclass(slots=True)
class UserImage:
    """An image of a user's prompt; only emitted when a session is replayed."""

    mime_type: str
    data: str


@dataclass(slots=True)
class PromptEnded:
    """How a stored prompt ended; only emitted when a session is replayed
    (live, the prompt's reply says it). `stop_reason` is a `StopReason` or
    "cancelled"; `error` is the model error's detail for "error"."""

    stop_reason: str
    error: dict[str, Any] | None = None


CompactionStatus = Literal["started", "done", "failed", "cancelled"]
# Why a compaction ran: the history passed the threshold (between turns or at
# a request), the next request would not fit the window, the provider said it
# did not fit, or the user asked for it.
CompactionTrigger = Literal["threshold", "window", "overflow", "manual"]


@dataclass(slots=True)
class CompactionReport:
    """A compaction of a session's history: `started` when a prompt (or the
    user) waits for one, then `done`, `failed` or `cancelled`. A `done` one
    is kept as a note: a replay shows it as the divider where it happened."""

    status: CompactionStatus
    trigger: CompactionTrigger
    tokens_before: int = 0
    tokens_after: int = 0
    # Old tool results replaced by a one-line stub, and messages summarised.
    cleared: int = 0
    summarized: int = 0
    # The summary that replaced the older messages (None: only output cleared).
    summary: str | None = None
    # Why it failed, in words for the chat panel.
    message: str | None = None


Update = (
    MessageChunk
    | ThoughtChunk
    | ToolCallStarted
    | ToolCallUpdate
    | MemoryDelivered
    | UsageReport
    | PlanUpdated
    | ModeChanged
    | UserMessage
    | UserImage
    | PromptEnded
    | CompactionReport
)
# Updates a session keeps beside its history (in the transcript as "note"
# lines), so that a replay shows what the live view showed.
Note = MemoryDelivered | UsageReport | PlanUpdated | PromptEnded | CompactionReport
Emit = Callable[[Update], None]
