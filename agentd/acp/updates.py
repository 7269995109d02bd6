"""Core `Update`s -> ACP messages, built as plain dicts (the streaming hot path).

One function, `to_acp`, decides what a core event looks like on the ACP
wire; a prompt's live updates and `session/load`'s replay (the core replays a
stored history as the same events) both go through it.
Golden files in `tests/acp/golden/` pin the shapes, and a test validates them
against the published ACP JSON Schema.

| core event                  | ACP                                                            |
| --------------------------- | -------------------------------------------------------------- |
| MessageChunk                | `session/update` `agent_message_chunk`                         |
| ThoughtChunk                | `session/update` `agent_thought_chunk`                         |
| UserMessage (replay)        | `session/update` `user_message_chunk`                          |
| ToolCallStarted             | `session/update` `tool_call`, status `pending`, `locations`    |
| ToolCallUpdate running      | `tool_call_update` `in_progress`                               |
| ToolCallUpdate completed    | `tool_call_update` `completed` + content (+ result `locations`)|
| ToolCallUpdate failed       | `tool_call_update` `failed` + content                          |
| ToolCallUpdate cancelled    | `tool_call_update` `failed` (ACP v1 has no cancelled status)   |
| MemoryDelivered             | `_agentd/memory` notification (extension)                      |
| PlanUpdated                 | `session/update` `plan` (the whole plan)                       |
| ModeChanged                 | `session/update` `current_mode_update`                         |
| UserImage (replay)          | `session/update` `user_message_chunk`, image content           |
| UsageReport                 | `_agentd/usage` notification (extension; with the context meter) |
| CompactionReport            | `_agentd/compaction` notification (extension)                  |
| PromptEnded (replay)        | nothing (ACP shows no stop reason in a loaded session)         |
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentd.agent.tools import call_locations
from agentd.events import (
    CompactionReport,
    Location,
    MemoryDelivered,
    MessageChunk,
    ModeChanged,
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

SESSION_UPDATE = "session/update"
MCP_PREFIX = "mcp__"
MEMORY_NOTIFICATION = "_agentd/memory"
USAGE_NOTIFICATION = "_agentd/usage"
COMPACTION_NOTIFICATION = "_agentd/compaction"

TOOL_KINDS = {
    "read_file": "read",
    "list_dir": "read",
    "search": "search",
    "glob": "search",
    "edit_file": "edit",
    "write_file": "edit",
    "run_command": "execute",
}
CANCELLED_TEXT = "Cancelled."
_STATUS = {"running": "in_progress", "completed": "completed", "failed": "failed"}

Outgoing = tuple[str, dict[str, Any]]


def display_name(name: str) -> str:
    """`mcp__db__query` -> `query`: a tool card already says which server."""
    if not name.startswith(MCP_PREFIX):
        return name
    return name[len(MCP_PREFIX) :].partition("__")[2] or name


def tool_kind(name: str) -> str:
    return TOOL_KINDS.get(name, "other")


def tool_title(name: str, args: Mapping[str, Any]) -> str:
    """A short human title for a tool call (the chat panel's row)."""
    path = args.get("path")
    where = path if isinstance(path, str) and path else "."
    if name == "read_file":
        return f"Read {where}"
    if name == "list_dir":
        depth = args.get("depth")
        deep = isinstance(depth, int) and not isinstance(depth, bool) and depth > 1
        return f"List {where}" + (f" (depth {depth})" if deep else "")
    if name == "search":
        return f"Search for {str(args.get('query', ''))[:80]!r} in {where}"
    if name == "glob":
        return f"Find files matching {str(args.get('pattern', ''))[:80]!r} in {where}"
    if name == "edit_file":
        return f"Edit {where}"
    if name == "write_file":
        return f"Write {where}"
    if name == "run_command":
        return f"Run `{str(args.get('command', ''))[:200]}`"
    return name


def tool_locations(name: str, args: Mapping[str, Any], root: Path) -> list[dict[str, Any]]:
    """The files a call touches, as absolute paths (for the editor's follow-along)."""
    return locations_json(call_locations(name, args, root))


def locations_json(locations: list[Location]) -> list[dict[str, Any]]:
    """ACP `ToolCallLocation`s: `{path, line?}`."""
    return [
        {"path": loc.path} if loc.line is None else {"path": loc.path, "line": loc.line}
        for loc in locations
    ]


def text_content(text: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": text}}]


def to_acp(
    session_id: str,
    update: Update,
    root: Path,
    display: Mapping[str, list[dict[str, Any]]] | None = None,
) -> Outgoing | None:
    """One core event -> (method, params), or None when ACP has nothing for it.

    `display` holds richer content a client tool already showed for a call
    (a diff, an embedded terminal); the final update keeps it instead of
    replacing it with the text the model sees.
    """
    if isinstance(update, MessageChunk):
        return _chunk(session_id, "agent_message_chunk", update.text)
    if isinstance(update, ThoughtChunk):
        return _chunk(session_id, "agent_thought_chunk", update.text)
    if isinstance(update, UserMessage):
        return _chunk(session_id, "user_message_chunk", update.text)
    if isinstance(update, UserImage):
        image = {"type": "image", "mimeType": update.mime_type, "data": update.data}
        return SESSION_UPDATE, {
            "sessionId": session_id,
            "update": {"sessionUpdate": "user_message_chunk", "content": image},
        }
    if isinstance(update, PlanUpdated):
        entries = [
            {"content": e.content, "priority": e.priority, "status": e.status}
            for e in update.entries
        ]
        return SESSION_UPDATE, {
            "sessionId": session_id,
            "update": {"sessionUpdate": "plan", "entries": entries},
        }
    if isinstance(update, ModeChanged):
        return SESSION_UPDATE, {
            "sessionId": session_id,
            "update": {"sessionUpdate": "current_mode_update", "currentModeId": update.mode},
        }
    if isinstance(update, ToolCallStarted):
        title = tool_title(update.name, update.arguments)
        if update.server is not None:
            title = f"{update.server}: {display_name(update.name)}"
        body: dict[str, Any] = {
            "sessionUpdate": "tool_call",
            "toolCallId": update.tool_call_id,
            "title": title,
            "kind": tool_kind(update.name),
            "status": "pending",
            "rawInput": update.arguments,
        }
        locations = (
            locations_json(update.locations)
            if update.locations
            else tool_locations(update.name, update.arguments, root)
        )
        if locations:
            body["locations"] = locations
        meta: dict[str, Any] = {"tool": update.name, "executor": update.executor}
        if update.server is not None:
            meta["server"] = update.server
        body["_meta"] = {"agentd": meta}
        return SESSION_UPDATE, {"sessionId": session_id, "update": body}
    if isinstance(update, ToolCallUpdate):
        return SESSION_UPDATE, {"sessionId": session_id, "update": _tool_update(update, display)}
    if isinstance(update, MemoryDelivered):
        return MEMORY_NOTIFICATION, {
            "sessionId": session_id,
            "point": update.point,
            "tier": update.tier,
            "docs": list(update.docs),
        }
    if isinstance(update, UsageReport):
        usage = usage_to_json(update)
        del usage["kind"]
        return USAGE_NOTIFICATION, {"sessionId": session_id, **usage}
    if isinstance(update, CompactionReport):
        body = compaction_to_json(update)
        del body["kind"]
        return COMPACTION_NOTIFICATION, {"sessionId": session_id, **body}
    if isinstance(update, PromptEnded):
        return None
    raise TypeError(f"unknown update {update!r}")


def _chunk(session_id: str, kind: str, text: str) -> Outgoing:
    return SESSION_UPDATE, {
        "sessionId": session_id,
        "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}},
    }


def _tool_update(
    update: ToolCallUpdate, display: Mapping[str, list[dict[str, Any]]] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": update.tool_call_id}
    if update.status == "cancelled":
        body["status"] = "failed"
        body["content"] = text_content(CANCELLED_TEXT)
        body["_meta"] = {"agentd": {"cancelled": True}}
        return body
    body["status"] = _STATUS[update.status]
    shown = display.get(update.tool_call_id) if display is not None else None
    if update.status == "completed" and shown:
        body["content"] = shown
        body["rawOutput"] = update.content
    elif update.content is not None:
        body["content"] = text_content(update.content)
    if update.locations:
        # Where the results are (search hits, files found): editors offer them as links.
        body["locations"] = locations_json(update.locations)
    return body
