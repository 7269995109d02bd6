// Messages between the extension host and the chat webview. The protocol
// layer (AgentController) emits ChatEvents; the chat view forwards them to
// the webview unchanged, so the webview can be tested by replaying them.

import type {
  AgentUpdate,
  CompactionUpdate,
  McpServerStatus,
  MemoryDoc,
  PermissionOption,
  PlanEntry,
  SessionInfo,
  SessionSetup,
  SlashCommand,
  StopReason,
  Usage,
} from '../protocol/types';

/** An image attached to a prompt (base64 data, no data: prefix). */
export interface PromptImage {
  mimeType: string;
  data: string;
}

/** Image types agentd takes (docs/protocol.md, Images). */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'] as const;

export type TurnOutcome = 'completed' | 'cancelled' | 'error' | 'replayed';

/** Local progress of a tool the editor runs, beyond the daemon's statuses. */
export type ClientToolState = 'awaiting_approval' | 'running' | 'denied' | 'done' | 'failed';

/** What the user can answer from the panel while a proposed edit is under review. */
export type ReviewDecision = 'accept' | 'reject' | 'acceptSession' | 'show';

export type ChatEvent =
  | { type: 'turnStart'; turnId: string; sessionId: string; prompt: string; replay?: boolean; images?: PromptImage[] }
  | { type: 'update'; turnId: string; update: AgentUpdate }
  | {
      type: 'toolState';
      turnId: string;
      toolCallId: string;
      state: ClientToolState;
      detail?: string;
      /** Set with `awaiting_approval` when the change is shown as a diff the panel can accept or reject. */
      review?: boolean;
    }
  | {
      type: 'turnEnd';
      turnId: string;
      outcome: TurnOutcome;
      /** The end of a turn replayed from a stored session (not a live prompt). */
      replay?: boolean;
      stopReason?: StopReason;
      usage?: Usage;
      /** Human-readable reason for an error or an unusual stop. */
      message?: string;
    }
  | { type: 'session'; sessionId: string | undefined; title?: string }
  | { type: 'cleared' }
  /** `scope: 'daemon'`: about the daemon being unavailable; cleared when it is ready again. */
  | { type: 'notice'; level: 'info' | 'warning' | 'error'; text: string; scope?: 'daemon' }
  | { type: 'memory'; available: boolean; directory?: string; docs: MemoryDoc[]; message?: string }
  | { type: 'sessions'; sessions: SessionInfo[] }
  | { type: 'daemon'; state: 'starting' | 'ready' | 'stopped' | 'failed'; message?: string }
  /** What the daemon offers, for controls shown only when it does (no dead buttons). */
  | { type: 'features'; images: boolean; mcp: boolean; commands: SlashCommand[]; compaction?: boolean }
  /** The session's mode and model and their choices (the pickers). */
  | { type: 'setup'; sessionId: string; setup: SessionSetup }
  /** The session's plan as it stands (each replaces the one before). */
  | { type: 'plan'; entries: PlanEntry[] }
  /** The context meter. */
  | { type: 'context'; tokens: number; window: number }
  /** A compaction of the conversation: a divider in the transcript. */
  | { type: 'compaction'; update: CompactionUpdate; replay?: boolean }
  /**
   * The daemon asks before a tool runs, or (`kind: 'sampling'`) before the
   * tool's MCP server uses the model; `description` is the daemon's text
   * (shown as text only); `options` empty once answered (`answer` says how).
   */
  | {
      type: 'permission';
      turnId: string;
      toolCallId: string;
      title: string;
      options: PermissionOption[];
      answer?: string;
      description?: string;
      kind?: 'sampling';
    }
  | { type: 'mcp'; servers: McpServerStatus[] };

/** What the webview posts to the extension. */
export type WebviewMessage =
  | { type: 'ready' }
  | { type: 'prompt'; text: string; images?: PromptImage[] }
  | { type: 'cancel' }
  | { type: 'newSession' }
  | { type: 'reset' }
  | { type: 'switchSession' }
  | { type: 'openFile'; path: string; line?: number }
  | { type: 'refreshMemory' }
  | { type: 'openMemoryFolder' }
  | { type: 'restart' }
  | { type: 'review'; toolCallId: string; decision: ReviewDecision }
  | { type: 'setMode'; mode: string }
  | { type: 'setModel'; model: string }
  | { type: 'permission'; toolCallId: string; optionId: string }
  | { type: 'refreshMcp' };

export function isWebviewMessage(v: unknown): v is WebviewMessage {
  if (!v || typeof v !== 'object') return false;
  const m = v as { type?: unknown; text?: unknown; path?: unknown; line?: unknown; images?: unknown };
  switch (m.type) {
    case 'ready':
    case 'cancel':
    case 'newSession':
    case 'reset':
    case 'switchSession':
    case 'refreshMemory':
    case 'openMemoryFolder':
    case 'restart':
    case 'refreshMcp':
      return true;
    case 'prompt':
      return typeof m.text === 'string' && (m.images === undefined || (Array.isArray(m.images) && m.images.every(isPromptImage)));
    case 'openFile':
      return typeof m.path === 'string' && (m.line === undefined || (Number.isInteger(m.line) && (m.line as number) > 0));
    case 'setMode':
      return typeof (v as { mode?: unknown }).mode === 'string';
    case 'setModel':
      return typeof (v as { model?: unknown }).model === 'string';
    case 'permission': {
      const p = v as { toolCallId?: unknown; optionId?: unknown };
      return typeof p.toolCallId === 'string' && typeof p.optionId === 'string';
    }
    case 'review': {
      const r = v as { toolCallId?: unknown; decision?: unknown };
      return typeof r.toolCallId === 'string' && ['accept', 'reject', 'acceptSession', 'show'].includes(r.decision as string);
    }
    default:
      return false;
  }
}

export function isPromptImage(v: unknown): v is PromptImage {
  if (!v || typeof v !== 'object') return false;
  const i = v as { mimeType?: unknown; data?: unknown };
  return typeof i.mimeType === 'string' && (IMAGE_TYPES as readonly string[]).includes(i.mimeType) && typeof i.data === 'string' && /^[A-Za-z0-9+/]*={0,2}$/.test(i.data);
}
