// Messages between the extension host and the chat webview. The protocol
// layer (AgentController) emits ChatEvents; the chat view forwards them to
// the webview unchanged, so the webview can be tested by replaying them.

import type { AgentUpdate, MemoryDoc, SessionInfo, StopReason, Usage } from '../protocol/types';

export type TurnOutcome = 'completed' | 'cancelled' | 'error' | 'replayed';

/** Local progress of a tool the editor runs, beyond the daemon's statuses. */
export type ClientToolState = 'awaiting_approval' | 'running' | 'denied' | 'done' | 'failed';

/** What the user can answer from the panel while a proposed edit is under review. */
export type ReviewDecision = 'accept' | 'reject' | 'acceptSession' | 'show';

export type ChatEvent =
  | { type: 'turnStart'; turnId: string; sessionId: string; prompt: string; replay?: boolean }
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
  | { type: 'daemon'; state: 'starting' | 'ready' | 'stopped' | 'failed'; message?: string };

/** What the webview posts to the extension. */
export type WebviewMessage =
  | { type: 'ready' }
  | { type: 'prompt'; text: string }
  | { type: 'cancel' }
  | { type: 'newSession' }
  | { type: 'reset' }
  | { type: 'switchSession' }
  | { type: 'openFile'; path: string }
  | { type: 'refreshMemory' }
  | { type: 'openMemoryFolder' }
  | { type: 'restart' }
  | { type: 'review'; toolCallId: string; decision: ReviewDecision };

export function isWebviewMessage(v: unknown): v is WebviewMessage {
  if (!v || typeof v !== 'object') return false;
  const m = v as { type?: unknown; text?: unknown; path?: unknown };
  switch (m.type) {
    case 'ready':
    case 'cancel':
    case 'newSession':
    case 'reset':
    case 'switchSession':
    case 'refreshMemory':
    case 'openMemoryFolder':
    case 'restart':
      return true;
    case 'prompt':
      return typeof m.text === 'string';
    case 'openFile':
      return typeof m.path === 'string';
    case 'review': {
      const r = v as { toolCallId?: unknown; decision?: unknown };
      return typeof r.toolCallId === 'string' && ['accept', 'reject', 'acceptSession', 'show'].includes(r.decision as string);
    }
    default:
      return false;
  }
}
