// Messages between the extension host and the chat webview. The protocol
// layer (AgentController) emits ChatEvents; the chat view forwards them to
// the webview unchanged, so the webview can be tested by replaying them.

import type { AgentUpdate, MemoryDoc, SessionInfo, StopReason, Usage } from '../protocol/types';

export type TurnOutcome = 'completed' | 'cancelled' | 'error' | 'replayed';

/** Local progress of a tool the editor runs, beyond the daemon's statuses. */
export type ClientToolState = 'awaiting_approval' | 'running' | 'denied' | 'done' | 'failed';

export type ChatEvent =
  | { type: 'turnStart'; turnId: string; sessionId: string; prompt: string; replay?: boolean }
  | { type: 'update'; turnId: string; update: AgentUpdate }
  | { type: 'toolState'; turnId: string; toolCallId: string; state: ClientToolState; detail?: string }
  | {
      type: 'turnEnd';
      turnId: string;
      outcome: TurnOutcome;
      stopReason?: StopReason;
      usage?: Usage;
      /** Human-readable reason for an error or an unusual stop. */
      message?: string;
    }
  | { type: 'session'; sessionId: string | undefined; title?: string }
  | { type: 'cleared' }
  | { type: 'notice'; level: 'info' | 'warning' | 'error'; text: string }
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
  | { type: 'restart' };

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
    default:
      return false;
  }
}
