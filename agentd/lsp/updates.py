"""Core `Update`s -> `agent/update` payloads, built as plain dicts.

This is the streaming hot path (one call per model chunk), so no pydantic
here; `tests/unit/test_protocol_schema.py` validates these dicts against the
models in `ext.py`.
"""

from __future__ import annotations

from typing import Any

from agentd.events import (
    CompactionReport,
    Location,
    MemoryDelivered,
    MessageChunk,
    ModeChanged,
    PlanEntry,
    PlanUpdated,
    PromptEnded,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdate,
    Update,
    UsageReport,
    UserImage,
    UserMessage,
)
from agentd.transcript import compaction_to_json, usage_to_json


def locations_to_wire(locations: list[Location]) -> list[dict[str, Any]]:
    """`[{path, line?}]`: the shape of ACP's `ToolCallLocation`, shared by both wires."""
    return [
        {"path": loc.path} if loc.line is None else {"path": loc.path, "line": loc.line}
        for loc in locations
    ]


def update_to_wire(update: Update) -> dict[str, Any]:
    if isinstance(update, MessageChunk):
        return {"kind": "message_chunk", "text": update.text}
    if isinstance(update, ThoughtChunk):
        return {"kind": "thought_chunk", "text": update.text}
    if isinstance(update, ToolCallStarted):
        out: dict[str, Any] = {
            "kind": "tool_call",
            "toolCallId": update.tool_call_id,
            "name": update.name,
            "arguments": update.arguments,
            "executor": update.executor,
        }
        if update.locations:
            out["locations"] = locations_to_wire(update.locations)
        if update.server is not None:
            out["server"] = update.server
        if update.auto_approve:
            out["autoApprove"] = True
        return out
    if isinstance(update, ToolCallUpdate):
        out = {
            "kind": "tool_call_update",
            "toolCallId": update.tool_call_id,
            "status": update.status,
        }
        if update.content is not None:
            out["content"] = update.content
        if update.locations:
            out["locations"] = locations_to_wire(update.locations)
        return out
    if isinstance(update, MemoryDelivered):
        return {"kind": "memory", "point": update.point, "tier": update.tier, "docs": update.docs}
    if isinstance(update, UsageReport):
        return usage_to_json(update)
    if isinstance(update, CompactionReport):
        return compaction_to_json(update)
    if isinstance(update, PlanUpdated):
        return {"kind": "plan", "entries": plan_to_wire(update.entries)}
    if isinstance(update, ModeChanged):
        return {"kind": "mode", "mode": update.mode}
    if isinstance(update, UserMessage):
        return {"kind": "user_message", "text": update.text}
    if isinstance(update, UserImage):
        return {"kind": "user_image", "mimeType": update.mime_type, "data": update.data}
    if isinstance(update, PromptEnded):
        ended: dict[str, Any] = {"kind": "prompt_end", "stopReason": update.stop_reason}
        if update.error is not None:
            ended["error"] = update.error
        return ended
    raise TypeError(f"unknown update {update!r}")


def plan_to_wire(entries: list[PlanEntry]) -> list[dict[str, Any]]:
    return [{"content": e.content, "priority": e.priority, "status": e.status} for e in entries]
