"""The agentd protocol extension: every custom message as a pydantic model.

This module is the single source of truth for params, results and update
shapes. Handlers validate params with it at the boundary; `schema.json` and
the tables in docs/protocol.md are generated from / checked against it by
tests. Runtime `agent/update` payloads are built as plain dicts on the hot
path (see `updates.py`) and a test validates them against these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentd.params import MAX_ADDITIONAL_ROOTS


class WireModel(BaseModel):
    # Validators are built when the warm-up asks (`agentd.params.build_models`:
    # the new-session model first, the rest while the App is built), not at
    # import: building them all would delay the new-session reply.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )


class Empty(WireModel):
    pass


# --- content ----------------------------------------------------------------


class TextBlock(WireModel):
    type: Literal["text"]
    text: str


class ResourceLinkBlock(WireModel):
    type: Literal["resource_link"]
    uri: str
    name: str | None = None


class EmbeddedResource(WireModel):
    uri: str
    text: str | None = None
    mime_type: str | None = None


class ResourceBlock(WireModel):
    type: Literal["resource"]
    resource: EmbeddedResource


class ImageBlock(WireModel):
    """An image: base64 `data`, `mimeType` png, jpeg, gif or webp."""

    type: Literal["image"]
    data: str
    mime_type: str
    uri: str | None = None


ContentBlock = Annotated[
    TextBlock | ResourceLinkBlock | ResourceBlock | ImageBlock, Field(discriminator="type")
]


# --- initialize ---------------------------------------------------------------


class ClientToolDecl(WireModel):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class NameValue(WireModel):
    name: str
    value: str


class McpServerDecl(WireModel):
    """An MCP server: `command` (+ `args`, `env`, `cwd`) for stdio, or `url`
    (+ `headers`) for streamable HTTP (`type: "sse"` for the older SSE
    transport). Policy keys as in the config file's `[mcp_servers.NAME]`."""

    type: Literal["stdio", "http", "sse"] | None = None
    command: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | list[NameValue] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | list[NameValue] | None = None
    enabled: bool | None = None
    include_tools: list[str] | None = None
    exclude_tools: list[str] | None = None
    trust: bool | None = None
    trusted_tools: list[str] | None = None
    timeout: float | None = None


class McpServerEntry(McpServerDecl):
    """ACP's list shape of `mcpServers`: the name inside each entry."""

    name: str


class ElicitationOptions(WireModel):
    """`initializationOptions.elicitation`: the modes of `agent/elicit` the editor shows."""

    form: bool = False
    url: bool = False


class InitializationOptions(WireModel):
    """`initialize.initializationOptions`. Settings keys (provider, baseUrl,
    apiKey, model, fastModel, limits, memory, mcp, mcpServers, logLevel) are
    read by `agentd.config.load_settings`; listed here for the schema."""

    client_tools: list[str | ClientToolDecl] = Field(default_factory=list)
    # The editor answers `agent/requestPermission`; without it, daemon-run
    # tools that need permission are refused.
    request_permission: bool = False
    # The editor answers `agent/elicit` in these modes; without it, an MCP
    # server's questions are declined.
    elicitation: ElicitationOptions | None = None
    # MCP servers by name (or ACP's list shape), for every session of this daemon.
    mcp_servers: dict[str, McpServerDecl] | list[McpServerEntry] | None = None
    # startupWait, callTimeout, permissionTimeout, startupTimeout (seconds).
    mcp: dict[str, float] | None = None
    log_level: Literal["error", "warning", "info", "debug"] | None = None
    provider: Literal["openai", "anthropic"] | None = None
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    fast_model: str | None = None
    supports_images: bool | None = None
    models: list[str | dict[str, Any]] | None = None
    limits: dict[str, int] | None = None
    memory: dict[str, Any] | None = None
    tools: dict[str, Any] | None = Field(
        default=None, description="searchEngine: auto | ripgrep | python; searchTimeout (s)"
    )
    context_window: int | dict[str, int] | None = None
    compaction: dict[str, Any] | None = None


class ModeOut(WireModel):
    id: str
    name: str
    description: str


class AgentdCapabilities(WireModel):
    """`initialize` result: `capabilities.experimental.agentd`."""

    protocol_version: int
    version: str
    client_tools: list[str]
    daemon_tools: list[str]
    memory: bool
    # Content block types `agent/prompt` takes; "image" when a model the user
    # can pick takes images.
    prompt_content: list[str]
    # MCP servers are supported (`mcp/status`, `initializationOptions.mcpServers`).
    mcp: bool
    # The session modes (as `agent/newSession` lists them) and the one a new
    # session starts in: an editor can show its mode picker before any session.
    modes: list[ModeOut]
    default_mode: Literal["ask", "code", "auto-edit"]
    # `agent/compact` and the `compaction` update kind are supported.
    compaction: bool
    # `agent/forkSession` and `agent/deleteSession` are supported.
    fork_session: bool
    delete_session: bool
    # `additionalDirectories` is taken by the session requests and listed.
    additional_directories: bool


# --- requests -------------------------------------------------------------------


# Folders beside the workspace root the session's tools may use (ACP's
# `additionalDirectories`): absolute paths or file:// URIs of directories.
AdditionalDirectories = Annotated[
    list[str],
    Field(
        max_length=MAX_ADDITIONAL_ROOTS,
        description="Absolute paths or file:// URIs of more folders the tools may use",
    ),
]


class NewSessionParams(WireModel):
    workspace_root: str = Field(min_length=1, description="Path or file:// URI")
    # Null or absent: none.
    additional_directories: AdditionalDirectories | None = None


class PlanEntryOut(WireModel):
    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


class ModelOut(WireModel):
    id: str
    name: str
    supports_images: bool


class SessionSetup(WireModel):
    """How a session runs: its mode and model, and the choices of each."""

    mode: Literal["ask", "code", "auto-edit"]
    modes: list[ModeOut]
    model: str
    models: list[ModelOut]


class NewSessionResult(SessionSetup):
    session_id: str


class SessionRoots(WireModel):
    """The folders a session's tools may use, as the daemon has them: an
    editor that runs tools checks their paths against these."""

    workspace_root: str
    # The folders beside it ([] when none).
    additional_directories: list[str]


class LoadSessionResult(SessionSetup, SessionRoots):
    # The session's plan as it stands (also replayed as `plan` updates).
    plan: list[PlanEntryOut]


class SetModeParams(WireModel):
    session_id: str
    mode: str


class SetModeResult(WireModel):
    mode: Literal["ask", "code", "auto-edit"]


class SetModelParams(WireModel):
    session_id: str
    model: str


class SetModelResult(WireModel):
    model: str


class ListCommandsParams(WireModel):
    session_id: str | None = None


class CommandOut(WireModel):
    name: str
    description: str
    # What to type after the name; absent when the command takes nothing.
    hint: str | None = None


class ListCommandsResult(WireModel):
    commands: list[CommandOut]


class PromptParams(WireModel):
    session_id: str
    prompt: str | list[ContentBlock]


class UsageOut(WireModel):
    input_tokens: int
    output_tokens: int
    # Of input_tokens, those the provider read from / wrote to its prompt
    # cache; present only when it reported them.
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


class ErrorDetail(WireModel):
    kind: str
    message: str
    status: int | None = None


class PromptResult(WireModel):
    stop_reason: Literal["end_turn", "max_turns", "token_limit", "refusal", "max_tokens", "error"]
    usage: UsageOut
    error: ErrorDetail | None = None


class SessionParams(WireModel):
    session_id: str


class ToolResultParams(WireModel):
    session_id: str
    tool_call_id: str
    content: str | list[TextBlock]
    is_error: bool = False


class WorkspaceParams(WireModel):
    workspace_root: str = Field(min_length=1)


class SessionInfo(WireModel):
    session_id: str
    title: str
    updated_at: str
    # Present when the session has folders beside its workspace root.
    additional_directories: list[str] | None = None


class ListSessionsResult(WireModel):
    sessions: list[SessionInfo]


class LoadSessionParams(WireModel):
    session_id: str
    workspace_root: str | None = None
    # Replaces the session's list ([] clears it); absent: the session keeps its own.
    additional_directories: AdditionalDirectories | None = None


class ForkSessionParams(WireModel):
    session_id: str
    # The fork's workspace; absent: the source's.
    workspace_root: str | None = Field(default=None, min_length=1)
    # How the fork runs; absent: as the source does.
    mode: str | None = None
    model: str | None = None
    # The fork's additional roots; absent: the source's.
    additional_directories: AdditionalDirectories | None = None


class ForkSessionResult(SessionSetup, SessionRoots):
    session_id: str
    # The plan copied from the source.
    plan: list[PlanEntryOut]


class DeleteSessionResult(WireModel):
    # False when the id named no session (deleting is idempotent).
    deleted: bool


class CompactParams(WireModel):
    session_id: str
    instructions: str | None = None


CompactionStatus = Literal["started", "done", "failed", "cancelled"]
CompactionTrigger = Literal["threshold", "window", "overflow", "manual"]


class CompactResult(WireModel):
    """`agent/compact`'s result: the final `compaction` update's fields."""

    kind: Literal["compaction"]
    status: CompactionStatus
    trigger: CompactionTrigger
    tokens_before: int
    tokens_after: int
    cleared: int
    summarized: int
    summary: str | None = None
    message: str | None = None


class MemoryDocOut(WireModel):
    path: str
    name: str
    description: str
    type: str
    mtime: float
    team: bool = False


class MemoryListResult(WireModel):
    directory: str
    docs: list[MemoryDocOut]


class RecallParams(WireModel):
    workspace_root: str = Field(min_length=1)
    query: str
    limit: int = Field(default=5, ge=1, le=5)


class RecalledDocOut(WireModel):
    path: str
    name: str
    score: float


class RecallResult(WireModel):
    docs: list[RecalledDocOut]
    tier: Literal["local", "model"]


class ExtractionStatus(WireModel):
    state: Literal["idle", "running"]
    trailing_pending: bool
    cursors: list[dict[str, Any]]
    last_error: str | None = None
    last_run_at: str | None = None
    # Operations dropped (user edits won, refusals), newest last.
    skipped: list[str] | None = None
    # The slow-schedule consolidation pass: lastRunAt, lastOkAt, runsSince, ...
    consolidation: dict[str, Any] | None = None


class PrefetchOut(WireModel):
    session_id: str
    tier: Literal["local", "model"]
    settled: bool
    consumed: bool


class McpServerStatus(WireModel):
    name: str
    state: Literal["idle", "starting", "ready", "restarting", "failed", "stopped"]
    transport: Literal["stdio", "http", "sse"]
    tool_count: int
    tools: list[str]
    restarts: int
    sessions: int
    last_error: str | None = None
    protocol_version: str | None = None


class McpStatusResult(WireModel):
    servers: list[McpServerStatus]
    # Whether the MCP SDK is loaded in the daemon (it is only when a server started).
    sdk_loaded: bool


class PermissionOption(WireModel):
    option_id: Literal["allow_once", "allow_always", "reject_once"]
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once"]


class RequestPermissionParams(WireModel):
    session_id: str
    tool_call_id: str
    # The name the model called (`mcp__server__tool`).
    tool: str
    title: str
    arguments: dict[str, Any]
    options: list[PermissionOption]
    server: str | None = None
    server_tool: str | None = None
    description: str | None = None
    # "sampling": the MCP server of the call `toolCallId` asks to use the
    # model; `arguments` preview what it asks. Absent for a tool call.
    kind: Literal["sampling"] | None = None


class SelectedOutcome(WireModel):
    outcome: Literal["selected"]
    option_id: str


class CancelledOutcome(WireModel):
    outcome: Literal["cancelled"]


class RequestPermissionResult(WireModel):
    outcome: Annotated[SelectedOutcome | CancelledOutcome, Field(discriminator="outcome")]


class ElicitParams(WireModel):
    """`agent/elicit`: ACP's `elicitation/create` shape (form or URL mode)."""

    session_id: str
    tool_call_id: str
    mode: Literal["form", "url"]
    message: str
    # The MCP server asking (its configured name).
    server: str
    # Form mode: a flat object schema of string, number, integer, boolean
    # and multi-select (string array) properties.
    requested_schema: dict[str, Any] | None = None
    # URL mode.
    url: str | None = None
    elicitation_id: str | None = None


class ElicitResult(WireModel):
    action: Literal["accept", "decline", "cancel"]
    # Form mode, `accept`: the values, matching `requestedSchema`.
    content: dict[str, str | int | float | bool | list[str] | None] | None = None


class ElicitationCompleteParams(WireModel):
    session_id: str
    elicitation_id: str


class MemoryStatusResult(WireModel):
    directory: str
    doc_count: int
    watcher: str
    problems: list[dict[str, str]]
    extraction: ExtractionStatus
    deliveries: dict[str, int]
    prefetch: list[PrefetchOut]


# --- notifications from the daemon ------------------------------------------------


class MessageChunkUpdate(WireModel):
    kind: Literal["message_chunk"]
    text: str


class ThoughtChunkUpdate(WireModel):
    kind: Literal["thought_chunk"]
    text: str


class ToolLocation(WireModel):
    """A file a tool call is about or found: absolute path, 1-based line."""

    path: str
    line: int | None = Field(default=None, ge=1)


class ToolCallUpdateOut(WireModel):
    kind: Literal["tool_call"]
    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    executor: Literal["client", "daemon"]
    locations: list[ToolLocation] | None = None
    # The MCP server the call goes to (its configured name); absent for agentd's own tools.
    server: str | None = None
    # Present (true) for a client tool the session's mode runs without asking
    # the user (an edit in the auto-edit mode): apply it at once.
    auto_approve: bool | None = None


class ToolCallStatusUpdate(WireModel):
    kind: Literal["tool_call_update"]
    tool_call_id: str
    status: Literal["running", "completed", "failed", "cancelled"]
    content: str | None = None
    locations: list[ToolLocation] | None = None


class MemoryUpdate(WireModel):
    kind: Literal["memory"]
    point: Literal["user_query", "tool_result"]
    tier: Literal["local", "model"]
    docs: list[str]


class UsageUpdate(WireModel):
    kind: Literal["usage"]
    input_tokens: int
    output_tokens: int
    session_total_tokens: int
    # The context meter; absent when the window is not known (old notes).
    context_tokens: int | None = None
    context_window: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


class CompactionUpdate(WireModel):
    kind: Literal["compaction"]
    status: CompactionStatus
    trigger: CompactionTrigger
    tokens_before: int
    tokens_after: int
    cleared: int
    summarized: int
    summary: str | None = None
    message: str | None = None


class PlanUpdate(WireModel):
    kind: Literal["plan"]
    entries: list[PlanEntryOut]


class ModeUpdate(WireModel):
    kind: Literal["mode"]
    mode: Literal["ask", "code", "auto-edit"]


class UserMessageUpdate(WireModel):
    kind: Literal["user_message"]
    text: str


class UserImageUpdate(WireModel):
    kind: Literal["user_image"]
    mime_type: str
    data: str


class PromptEndUpdate(WireModel):
    kind: Literal["prompt_end"]
    stop_reason: Literal[
        "end_turn", "max_turns", "token_limit", "refusal", "max_tokens", "error", "cancelled"
    ]
    error: ErrorDetail | None = None


AgentUpdate = Annotated[
    MessageChunkUpdate
    | ThoughtChunkUpdate
    | ToolCallUpdateOut
    | ToolCallStatusUpdate
    | MemoryUpdate
    | UsageUpdate
    | PlanUpdate
    | ModeUpdate
    | UserMessageUpdate
    | UserImageUpdate
    | PromptEndUpdate
    | CompactionUpdate,
    Field(discriminator="kind"),
]


class AgentUpdateParams(WireModel):
    session_id: str
    update: AgentUpdate


class MemoryChangedParams(WireModel):
    workspace_root: str
    paths: list[str]


# --- the method table -------------------------------------------------------------

# method -> (params model, result model or None for notifications, direction)
REQUESTS: dict[str, tuple[type[WireModel], type[WireModel]]] = {
    "agent/newSession": (NewSessionParams, NewSessionResult),
    "agent/prompt": (PromptParams, PromptResult),
    "agent/resetSession": (SessionParams, Empty),
    "agent/closeSession": (SessionParams, Empty),
    "agent/listSessions": (WorkspaceParams, ListSessionsResult),
    "agent/loadSession": (LoadSessionParams, LoadSessionResult),
    "agent/forkSession": (ForkSessionParams, ForkSessionResult),
    "agent/deleteSession": (SessionParams, DeleteSessionResult),
    "agent/setMode": (SetModeParams, SetModeResult),
    "agent/setModel": (SetModelParams, SetModelResult),
    "agent/listCommands": (ListCommandsParams, ListCommandsResult),
    "agent/compact": (CompactParams, CompactResult),
    "memory/list": (WorkspaceParams, MemoryListResult),
    "memory/recall": (RecallParams, RecallResult),
    "memory/status": (WorkspaceParams, MemoryStatusResult),
    "mcp/status": (Empty, McpStatusResult),
}

# Requests the daemon sends to the editor.
SERVER_REQUESTS: dict[str, tuple[type[WireModel], type[WireModel]]] = {
    "agent/requestPermission": (RequestPermissionParams, RequestPermissionResult),
    "agent/elicit": (ElicitParams, ElicitResult),
}

CLIENT_NOTIFICATIONS: dict[str, type[WireModel]] = {
    "agent/cancel": SessionParams,
    "agent/toolResult": ToolResultParams,
}

SERVER_NOTIFICATIONS: dict[str, type[WireModel]] = {
    "agent/update": AgentUpdateParams,
    "memory/changed": MemoryChangedParams,
    "agent/elicitationComplete": ElicitationCompleteParams,
}

UPDATE_KINDS = [
    "message_chunk",
    "thought_chunk",
    "tool_call",
    "tool_call_update",
    "memory",
    "usage",
    "plan",
    "mode",
    "user_message",
    "user_image",
    "prompt_end",
    "compaction",
]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of every message, keyed by method (committed as schema.json)."""
    out: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agentd protocol v1",
        "initializationOptions": InitializationOptions.model_json_schema(by_alias=True),
        "capabilities": AgentdCapabilities.model_json_schema(by_alias=True),
        "requests": {},
        "clientNotifications": {},
        "serverRequests": {},
        "serverNotifications": {},
    }
    for method, (params, result) in REQUESTS.items():
        out["requests"][method] = {
            "params": params.model_json_schema(by_alias=True),
            "result": result.model_json_schema(by_alias=True, mode="serialization"),
        }
    for method, (params, result) in SERVER_REQUESTS.items():
        out["serverRequests"][method] = {
            "params": params.model_json_schema(by_alias=True),
            "result": result.model_json_schema(by_alias=True, mode="serialization"),
        }
    for method, params in CLIENT_NOTIFICATIONS.items():
        out["clientNotifications"][method] = params.model_json_schema(by_alias=True)
    for method, params in SERVER_NOTIFICATIONS.items():
        out["serverNotifications"][method] = params.model_json_schema(by_alias=True)
    return out


def dump(model: WireModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
