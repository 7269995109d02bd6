"""The `update_plan` tool: the model's plan for multi-step work, kept per session.

The model sends the whole plan each time (entries with content, priority,
status), as ACP's `plan` update carries it; the turn engine keeps it on the
session, reports it as a `PlanUpdated` event (ACP `plan`, LSP `plan`), and
keeps it in the transcript as a note, so that a loaded session shows it
again. The call itself is not shown as a tool call: the plan is what the
user sees. Read-only (it changes nothing outside the conversation), so every
mode offers it.
"""

from __future__ import annotations

from typing import Any

from agentd.errors import ToolError
from agentd.events import PlanEntry, PlanPriority, PlanStatus
from agentd.messages import ToolSpec

UPDATE_PLAN = "update_plan"
PRIORITIES: tuple[PlanPriority, ...] = ("high", "medium", "low")
STATUSES: tuple[PlanStatus, ...] = ("pending", "in_progress", "completed")
MAX_ENTRIES = 50
MAX_CONTENT_CHARS = 500

UPDATE_PLAN_SPEC = ToolSpec(
    UPDATE_PLAN,
    "Keep a plan for work that takes several steps: send the whole list each time "
    "(it replaces the previous one). Mark one entry in_progress while you work on it "
    "and completed when it is done. Skip it for simple questions.",
    {
        "type": "object",
        "properties": {
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "What to do."},
                        "priority": {"type": "string", "enum": list(PRIORITIES)},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["content", "priority", "status"],
                },
            }
        },
        "required": ["entries"],
    },
    read_only=True,
)


def parse_plan(arguments: dict[str, Any]) -> list[PlanEntry]:
    """The plan the model sent; `ToolError` (its message goes to the model) if malformed."""
    entries = arguments.get("entries")
    if not isinstance(entries, list):
        raise ToolError("entries must be a list of {content, priority, status}.")
    if len(entries) > MAX_ENTRIES:
        raise ToolError(f"A plan holds at most {MAX_ENTRIES} entries.")
    plan: list[PlanEntry] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ToolError(f"entries[{i}] must be an object.")
        content = entry.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ToolError(f"entries[{i}].content must be a non-empty string.")
        priority = entry.get("priority", "medium")
        status = entry.get("status", "pending")
        if priority not in PRIORITIES:
            raise ToolError(f"entries[{i}].priority must be one of {', '.join(PRIORITIES)}.")
        if status not in STATUSES:
            raise ToolError(f"entries[{i}].status must be one of {', '.join(STATUSES)}.")
        plan.append(PlanEntry(content.strip()[:MAX_CONTENT_CHARS], priority, status))
    return plan


def plan_summary(plan: list[PlanEntry]) -> str:
    """The tool's result for the model: short, so it costs few tokens."""
    done = sum(1 for e in plan if e.status == "completed")
    return f"Plan updated: {len(plan)} entries, {done} completed."
