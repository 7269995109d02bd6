"""Pydantic models of the ACP params agentd accepts, validated at the boundary.

Field names are the wire's (camelCase); a `ValidationError` becomes `-32602`
naming each bad field (`handlers.validate`). Unknown fields, `_meta` among
them, are ignored. Imported after `initialize` has been answered.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentd.params import MAX_ADDITIONAL_ROOTS


class AcpModel(BaseModel):
    # Validators are built when the warm-up asks (`agentd.params.build_models`:
    # the new-session model first, the rest while the App is built), not at
    # import: building them all would delay the new-session reply.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )


class Empty(AcpModel):
    pass


class AuthenticateParams(AcpModel):
    method_id: str


class SetProviderParams(AcpModel):
    """`providers/set`; `apiType` and the headers are checked by
    `agentd.acp.providers`, which never echoes a value in its errors."""

    provider_id: str
    # A string of ACP's list or an object (a custom API): any JSON, refused
    # unless agentd speaks it.
    api_type: Any
    base_url: str
    headers: dict[str, Any] | None = None


class ProviderParams(AcpModel):
    """`providers/disable`."""

    provider_id: str


class NameValue(AcpModel):
    name: str
    value: str


class McpServer(AcpModel):
    """ACP's `McpServer`: stdio (`command`, `args`, `env`), with `type`
    `http` / `sse` a URL with `headers`, or with `type` `acp` a `serverId`
    (a server the editor provides over this connection). Checked further
    (one transport, an http(s) URL, a usable serverId) when the session
    starts its servers."""

    name: str
    # `http`, `sse`, `acp`, `stdio` (or none: stdio); other kinds are skipped, with a log line.
    type: str | None = None
    server_id: str | None = None
    command: str | None = None
    args: list[str] = []
    env: list[NameValue] = []
    url: str | None = None
    headers: list[NameValue] = []


# ACP `additionalDirectories`: folders beside `cwd` the session's tools may
# use; each checked by `agentd.params.additional_roots` (the count first, here).
# Null is the schema's too, and means none, as omitted does.
AdditionalDirectories = Annotated[list[str], Field(max_length=MAX_ADDITIONAL_ROOTS)]


class NewSessionParams(AcpModel):
    cwd: str
    additional_directories: AdditionalDirectories | None = None
    # The editor's MCP servers for this session, beside the user's configured ones.
    mcp_servers: list[McpServer] = []


class LoadSessionParams(AcpModel):
    """`session/load` and `session/resume`. `additionalDirectories` replaces
    the session's list; omitted or empty, the session has none (ACP's words)."""

    session_id: str
    cwd: str
    additional_directories: AdditionalDirectories | None = None
    mcp_servers: list[McpServer] = []


class ForkSessionParams(AcpModel):
    """`session/fork`; the fork has the request's `additionalDirectories`
    (omitted or empty: none, as ACP says), not the source's."""

    session_id: str
    cwd: str
    additional_directories: AdditionalDirectories | None = None
    mcp_servers: list[McpServer] = []


class StatusParams(AcpModel):
    pass


class McpMessageParams(AcpModel):
    """`mcp/message` from the editor: an inner MCP message on an open connection."""

    connection_id: str
    method: str
    params: dict[str, Any] | None = None


class SessionParams(AcpModel):
    session_id: str


class ListSessionsParams(AcpModel):
    cwd: str | None = None
    cursor: str | None = None


class SetModeParams(AcpModel):
    session_id: str
    mode_id: str


class SetConfigOptionParams(AcpModel):
    session_id: str
    config_id: str
    # Select options take a value id; agentd has no boolean options.
    value: str


# --- content blocks (ACP `ContentBlock`) --------------------------------------------


class TextBlock(AcpModel):
    type: Literal["text"]
    text: str


class ResourceLinkBlock(AcpModel):
    type: Literal["resource_link"]
    uri: str
    name: str | None = None


class TextResource(AcpModel):
    uri: str
    text: str
    mime_type: str | None = None


class BlobResource(AcpModel):
    uri: str
    blob: str
    mime_type: str | None = None


class ResourceBlock(AcpModel):
    type: Literal["resource"]
    resource: TextResource | BlobResource


class ImageBlock(AcpModel):
    type: Literal["image"]
    data: str
    mime_type: str
    uri: str | None = None


class AudioBlock(AcpModel):
    type: Literal["audio"]


ContentBlock = Annotated[
    TextBlock | ResourceLinkBlock | ResourceBlock | ImageBlock | AudioBlock,
    Field(discriminator="type"),
]


class PromptParams(AcpModel):
    session_id: str
    prompt: list[ContentBlock]


# --- extension methods (`_agentd/...`) --------------------------------------------------


class WorkspaceParams(AcpModel):
    """`workspaceRoot` as in the LSP protocol; `cwd` accepted as ACP's name for it."""

    workspace_root: str | None = None
    cwd: str | None = None


class RecallParams(WorkspaceParams):
    query: str
    limit: int = Field(default=5, ge=1, le=50)


# --- next edit suggestions (`nes/*`, agentd.acp.nes) --------------------------------------

# Folders of one NES session: an editor window has a few.
MAX_NES_FOLDERS = 64
# The editor's context lists: any length is read, the last few are used (agentd.nes.predict).
MAX_CONTEXT_ITEMS = 1000


class WorkspaceFolder(AcpModel):
    uri: str
    name: str = ""


class StartNesParams(AcpModel):
    """`nes/start`: its folders are `workspaceUri` and `workspaceFolders`,
    each checked as `session/new`'s `cwd` is."""

    workspace_uri: str | None = None
    workspace_folders: Annotated[list[WorkspaceFolder], Field(max_length=MAX_NES_FOLDERS)] = []


class NesSessionParams(AcpModel):
    session_id: str


class NesOutcomeParams(AcpModel):
    """`nes/accept` and `nes/reject` sent as requests (ACP makes them notifications)."""

    session_id: str
    id: str
    reason: str | None = None


class Position(AcpModel):
    line: int = Field(ge=0, lt=2**31)
    character: int = Field(ge=0, lt=2**31)


class Range(AcpModel):
    start: Position
    end: Position


class NesRecentFile(AcpModel):
    uri: str
    text: str


class NesEditHistoryEntry(AcpModel):
    uri: str
    diff: str


class NesOpenFile(AcpModel):
    uri: str


class NesDiagnostic(AcpModel):
    uri: str
    range: Range
    severity: str
    message: str


ContextList = Field(max_length=MAX_CONTEXT_ITEMS)


class NesSuggestContext(AcpModel):
    recent_files: Annotated[list[NesRecentFile] | None, ContextList] = None
    edit_history: Annotated[list[NesEditHistoryEntry] | None, ContextList] = None
    open_files: Annotated[list[NesOpenFile] | None, ContextList] = None
    diagnostics: Annotated[list[NesDiagnostic] | None, ContextList] = None


class SuggestNesParams(AcpModel):
    session_id: str
    uri: str
    version: int = Field(ge=0, lt=2**63)
    position: Position
    selection: Range | None = None
    trigger_kind: str
    context: NesSuggestContext | None = None
