// Wire types of agentd protocol v1 (docs/protocol.md, agentd/lsp/ext.py).
// Only what this client reads or sends; field names are the wire's camelCase.

export const CLIENT_TOOLS = ['edit_file', 'write_file', 'run_command', 'read_file'] as const;
export type ClientToolName = (typeof CLIENT_TOOLS)[number];

/**
 * What the extension tells the daemon at initialize: the tools it runs, that
 * it answers agent/requestPermission (the panel asks the user; without it
 * the daemon refuses tools that need permission), and the modes of
 * agent/elicit it shows (without them an MCP server's question is declined).
 */
export const INITIALIZATION_OPTIONS = { clientTools: [...CLIENT_TOOLS], requestPermission: true, elicitation: { form: true, url: true } };

/** JSON-RPC error codes the client reacts to. */
export const ErrorCodes = {
  MethodNotFound: -32601,
  InvalidParams: -32602,
  ServerNotInitialized: -32002,
  UnknownSession: -32001,
  SessionBusy: -32003,
  RequestCancelled: -32800,
} as const;

export type StopReason = 'end_turn' | 'max_turns' | 'token_limit' | 'refusal' | 'max_tokens' | 'error';

export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

export interface PromptResult {
  stopReason: StopReason;
  usage: Usage;
  error?: { kind: string; message: string; status?: number };
}

export type ContentBlock =
  | { type: 'text'; text: string }
  | { type: 'resource_link'; uri: string; name?: string }
  | { type: 'resource'; resource: { uri: string; text?: string; mimeType?: string } }
  | ImageBlock;

/** An image in a prompt: base64 `data` (no data: prefix). */
export interface ImageBlock {
  type: 'image';
  data: string;
  mimeType: string;
}

/** `capabilities.experimental.agentd` of the initialize result: what this daemon offers. */
export interface AgentdCapabilities {
  protocolVersion: number;
  version?: string;
  clientTools?: string[];
  daemonTools?: string[];
  memory?: boolean;
  /** Content block types agent/prompt takes; "image" when a model the user can pick takes images. */
  promptContent?: string[];
  /** MCP servers are supported (mcp/status). */
  mcp?: boolean;
  /** The session modes and the one a new session starts in (the mode picker before any session). */
  modes?: { id: string; name: string; description: string }[];
  defaultMode?: SessionMode;
  /** agent/compact and the `compaction` update kind are supported. */
  compaction?: boolean;
}

/** A place a tool call is about: `path` absolute, `line` 1-based. */
export interface ToolLocation {
  path: string;
  line?: number;
}

export type SessionMode = 'ask' | 'code' | 'auto-edit';

/** How a session runs (agent/newSession, agent/loadSession): its mode and model, and the choices. */
export interface SessionSetup {
  mode?: SessionMode;
  modes?: { id: string; name: string; description: string }[];
  model?: string;
  models?: { id: string; name: string; supportsImages: boolean }[];
  /** Only in agent/loadSession's result: the plan as it stands. */
  plan?: PlanEntry[];
  /**
   * Only in agent/loadSession's and agent/forkSession's results (a daemon
   * that says them): the session's folders as the daemon has them.
   */
  workspaceRoot?: string;
  additionalDirectories?: string[];
}

export interface PlanEntry {
  content: string;
  priority: 'high' | 'medium' | 'low';
  status: 'pending' | 'in_progress' | 'completed';
}

export interface SlashCommand {
  name: string;
  description: string;
  hint?: string;
}

export interface PermissionOption {
  optionId: string;
  name: string;
  kind: 'allow_once' | 'allow_always' | 'reject_once' | 'reject_always';
}

/** agent/requestPermission (daemon -> editor): may a daemon-run tool with side effects run (or its MCP server use the model)? */
export interface RequestPermissionParams {
  sessionId: string;
  toolCallId: string;
  tool: string;
  title: string;
  arguments: Record<string, unknown>;
  options: PermissionOption[];
  server?: string;
  serverTool?: string;
  /** The tool's description; for `kind: "sampling"`, what the server sends the model, in words. */
  description?: string;
  /** `sampling`: the MCP server running this call asks to use the model (`arguments` preview the request). */
  kind?: string;
}

export type RequestPermissionResult = { outcome: { outcome: 'selected'; optionId: string } | { outcome: 'cancelled' } };

/** One property of an agent/elicit form: the restricted shapes of MCP elicitation (docs/protocol.md). */
export interface ElicitProperty {
  type?: 'string' | 'number' | 'integer' | 'boolean' | 'array';
  title?: string;
  description?: string;
  enum?: unknown[];
  enumNames?: unknown[];
  oneOf?: { const?: unknown; title?: unknown }[];
  minLength?: number;
  maxLength?: number;
  format?: string;
  minimum?: number;
  maximum?: number;
  default?: unknown;
  items?: { type?: string; enum?: unknown[]; anyOf?: { const?: unknown; title?: unknown }[] };
  minItems?: number;
  maxItems?: number;
}

/** agent/elicit (daemon -> editor): an MCP server's question to the user during a tool call. */
export type ElicitParams = {
  sessionId: string;
  toolCallId: string;
  /** The MCP server's configured name. */
  server?: string;
  message: string;
} & (
  | { mode: 'form'; requestedSchema: { type?: 'object'; properties: Record<string, ElicitProperty>; required?: string[] } }
  | { mode: 'url'; url: string; elicitationId: string }
);

export type ElicitResult = { action: 'accept'; content?: Record<string, unknown> } | { action: 'decline' } | { action: 'cancel' };

/** agent/elicitationComplete (daemon -> editor): the server says the URL question of that id is done. */
export interface ElicitationCompleteParams {
  sessionId: string;
  elicitationId: string;
}

export interface McpServerStatus {
  name: string;
  state: 'idle' | 'starting' | 'ready' | 'restarting' | 'failed' | 'stopped';
  transport: 'stdio' | 'http' | 'sse';
  toolCount: number;
  tools: string[];
  restarts: number;
  sessions: number;
  lastError?: string | null;
}

export interface McpStatusResult {
  servers: McpServerStatus[];
  sdkLoaded?: boolean;
}

export interface MessageChunkUpdate {
  kind: 'message_chunk';
  text: string;
}
export interface ThoughtChunkUpdate {
  kind: 'thought_chunk';
  text: string;
}
export interface ToolCallUpdate {
  kind: 'tool_call';
  toolCallId: string;
  name: string;
  arguments: Record<string, unknown>;
  executor: 'client' | 'daemon';
  locations?: ToolLocation[];
  /** The MCP server that runs the call; absent for agentd's own tools. */
  server?: string;
  /** A client tool the session's mode runs without asking (an edit in auto-edit). */
  autoApprove?: boolean;
}
export type ToolStatus = 'running' | 'completed' | 'failed' | 'cancelled';
export interface ToolCallStatusUpdate {
  kind: 'tool_call_update';
  toolCallId: string;
  status: ToolStatus;
  content?: string;
  locations?: ToolLocation[];
}
export interface MemoryUpdate {
  kind: 'memory';
  point: 'user_query' | 'tool_result';
  tier: 'local' | 'model';
  docs: string[];
}
export interface UsageUpdate {
  kind: 'usage';
  inputTokens: number;
  outputTokens: number;
  sessionTotalTokens: number;
  /** The context meter: what the conversation takes of the model's window (absent when unknown). */
  contextTokens?: number;
  contextWindow?: number;
}
export interface CompactionUpdate {
  kind: 'compaction';
  status: 'started' | 'done' | 'failed' | 'cancelled';
  trigger: 'threshold' | 'window' | 'overflow' | 'manual';
  tokensBefore: number;
  tokensAfter: number;
  cleared: number;
  summarized: number;
  summary?: string;
  message?: string;
}
export interface PlanUpdate {
  kind: 'plan';
  entries: PlanEntry[];
}
export interface ModeUpdate {
  kind: 'mode';
  mode: SessionMode;
}
/** An image of a stored prompt; only sent while agent/loadSession replays. */
export interface UserImageUpdate {
  kind: 'user_image';
  mimeType: string;
  data: string;
}
export interface UserMessageUpdate {
  kind: 'user_message';
  text: string;
}
/** How a stored prompt ended; only sent while agent/loadSession replays. */
export interface PromptEndUpdate {
  kind: 'prompt_end';
  stopReason: StopReason | 'cancelled';
  error?: { kind: string; message: string; status?: number };
}

export type AgentUpdate =
  | MessageChunkUpdate
  | ThoughtChunkUpdate
  | ToolCallUpdate
  | ToolCallStatusUpdate
  | MemoryUpdate
  | UsageUpdate
  | UserMessageUpdate
  | PromptEndUpdate
  | CompactionUpdate
  | PlanUpdate
  | ModeUpdate
  | UserImageUpdate;

export interface AgentUpdateParams {
  sessionId: string;
  update: AgentUpdate;
}

export interface MemoryChangedParams {
  workspaceRoot: string;
  paths: string[];
}

export interface SessionInfo {
  sessionId: string;
  title: string;
  updatedAt: string;
  /** The folders beside the workspace root the session's tools may use, when it has some. */
  additionalDirectories?: string[];
}

export interface MemoryDoc {
  path: string;
  name: string;
  description: string;
  type: string;
  mtime: number;
  team?: boolean;
}

export interface MemoryListResult {
  directory: string;
  docs: MemoryDoc[];
}

export interface MemoryStatusResult {
  directory: string;
  docCount: number;
  watcher: string;
  problems: { path: string; problem: string }[];
  extraction: {
    state: 'idle' | 'running';
    trailingPending: boolean;
    cursors: Record<string, unknown>[];
    lastError?: string | null;
    lastRunAt?: string | null;
  };
  deliveries: Record<string, number>;
}

export interface ToolResultParams {
  sessionId: string;
  toolCallId: string;
  content: string;
  isError: boolean;
}
