// Wire types of agentd protocol v1 (docs/protocol.md, agentd/lsp/ext.py).
// Only what this client reads or sends; field names are the wire's camelCase.

export const CLIENT_TOOLS = ['edit_file', 'write_file', 'run_command', 'read_file'] as const;
export type ClientToolName = (typeof CLIENT_TOOLS)[number];

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
  | { type: 'resource'; resource: { uri: string; text?: string; mimeType?: string } };

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
}
export type ToolStatus = 'running' | 'completed' | 'failed' | 'cancelled';
export interface ToolCallStatusUpdate {
  kind: 'tool_call_update';
  toolCallId: string;
  status: ToolStatus;
  content?: string;
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
  | PromptEndUpdate;

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
