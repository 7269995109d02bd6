// The minimal connection the protocol layer needs. Both vscode-languageclient's
// LanguageClient (in the editor) and vscode-jsonrpc's MessageConnection (in the
// tests, over a real `agentd serve` child process) satisfy it structurally, so
// the session logic is exercised against the real daemon without VS Code.

import type { AgentdCapabilities } from './types';

export interface Disposable {
  dispose(): void;
}

/** Structural subset of vscode.CancellationToken / vscode-jsonrpc's token. */
export interface CancellationToken {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: (e: unknown) => unknown): Disposable;
}

export interface AgentConnection {
  /** Cancelling `token` must send `$/cancelRequest` for this request. */
  sendRequest<R>(method: string, params: unknown, token?: CancellationToken): Promise<R>;
  sendNotification(method: string, params: unknown): Promise<void> | void;
  onNotification(method: string, handler: (params: any) => void): Disposable;
  /**
   * A handler for a request the daemon sends (agent/requestPermission). Like
   * notifications, one handler per method underneath; the multiplexer fans out.
   */
  onRequest?(method: string, handler: (params: any, token: CancellationToken) => unknown): Disposable;
  /** `capabilities.experimental.agentd` of the initialize result, once known. */
  capabilities?(): AgentdCapabilities | undefined;
}

/**
 * A request handler's answer "not mine" (another chat surface's session):
 * the multiplexer asks the next handler.
 */
export const NOT_MINE = Symbol('not mine');

/** A JSON-RPC error as both libraries raise it (ResponseError has `code`). */
export function errorCode(err: unknown): number | undefined {
  if (err && typeof err === 'object' && typeof (err as { code?: unknown }).code === 'number') {
    return (err as { code: number }).code;
  }
  return undefined;
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err && typeof err === 'object' && typeof (err as { message?: unknown }).message === 'string') {
    return (err as { message: string }).message;
  }
  return String(err);
}

/**
 * A cancellation source independent of any library: the token it hands out
 * fits both LanguageClient.sendRequest and MessageConnection.sendRequest,
 * which only call `isCancellationRequested` and `onCancellationRequested`.
 */
export class CancellationSource {
  private cancelled = false;
  private listeners = new Set<(e: unknown) => unknown>();
  readonly token: CancellationToken;

  constructor() {
    const self = this;
    this.token = {
      get isCancellationRequested(): boolean {
        return self.cancelled;
      },
      onCancellationRequested(listener) {
        if (self.cancelled) {
          // Same contract as vscode's Event for an already-cancelled token.
          queueMicrotask(() => listener(undefined));
          return { dispose() {} };
        }
        self.listeners.add(listener);
        return { dispose: () => self.listeners.delete(listener) };
      },
    };
  }

  get isCancelled(): boolean {
    return this.cancelled;
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    const listeners = [...this.listeners];
    this.listeners.clear();
    for (const l of listeners) l(undefined);
  }
}

/**
 * LanguageClient and MessageConnection keep ONE handler per notification
 * method (a second onNotification replaces the first). The panel and the chat
 * participant each listen to agent/update, so the connection they share fans
 * every notification out to all listeners.
 */
export function multiplexNotifications(inner: AgentConnection): AgentConnection {
  const listeners = new Map<string, Set<(params: any) => void>>();
  const registrations = new Map<string, Disposable>();
  const requestHandlers = new Map<string, Set<(params: any, token: CancellationToken) => unknown>>();
  return {
    sendRequest: (method, params, token) => inner.sendRequest(method, params, token),
    sendNotification: (method, params) => inner.sendNotification(method, params),
    capabilities: () => inner.capabilities?.(),
    onRequest(method, handler) {
      let set = requestHandlers.get(method);
      if (!set) {
        const fresh = new Set<(params: any, token: CancellationToken) => unknown>();
        requestHandlers.set(method, fresh);
        set = fresh;
        // Registered once per method for the connection's life: the first
        // handler that does not answer NOT_MINE answers the request.
        inner.onRequest?.(method, async (params, token) => {
          for (const h of [...fresh]) {
            const r = await h(params, token);
            if (r !== NOT_MINE) return r;
          }
          throw new Error(`No chat surface handles ${method} for this session.`);
        });
      }
      const own = set;
      own.add(handler);
      return { dispose: () => own.delete(handler) };
    },
    onNotification(method, handler) {
      let set = listeners.get(method);
      if (!set) {
        const fresh = new Set<(params: any) => void>();
        listeners.set(method, fresh);
        set = fresh;
        registrations.set(
          method,
          inner.onNotification(method, (params) => {
            for (const l of [...fresh]) l(params);
          }),
        );
      }
      const own = set;
      own.add(handler);
      return {
        dispose: () => {
          own.delete(handler);
          if (own.size === 0 && listeners.get(method) === own) {
            listeners.delete(method);
            registrations.get(method)?.dispose();
            registrations.delete(method);
          }
        },
      };
    },
  };
}
