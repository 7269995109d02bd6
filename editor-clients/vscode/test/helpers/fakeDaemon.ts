// A scripted DaemonClient for extension tests that need no real process:
// requests are answered by handlers the test sets, notifications can be
// pushed to the registered handlers, and start/stop are observable.

import type { CancellationToken, Disposable } from '../../src/protocol/connection';
import type { AgentdCapabilities } from '../../src/protocol/types';
import type { ClientFactory, ClientHooks, DaemonClient } from '../../src/vscode/daemon';

const NEVER: CancellationToken = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

type Handler = (params: any, token?: CancellationToken) => unknown | Promise<unknown>;

export class FakeDaemon implements DaemonClient {
  started = 0;
  stopped = 0;
  startError: Error | undefined;
  readonly requests: { method: string; params: any }[] = [];
  readonly sent: { method: string; params: any }[] = [];
  readonly handlers = new Map<string, Handler>();
  private notificationHandlers = new Map<string, (p: any) => void>();
  private requestHandlers = new Map<string, (p: any, token: CancellationToken) => unknown>();
  /** What `capabilities()` answers (the initialize result's experimental.agentd). */
  caps: AgentdCapabilities | undefined = { protocolVersion: 1 };

  constructor(
    readonly config: Parameters<ClientFactory>[0],
    readonly hooks: ClientHooks,
  ) {
    this.handlers.set('agent/newSession', () => ({ sessionId: `sess-${Math.random().toString(36).slice(2, 8)}` }));
    this.handlers.set('agent/resetSession', () => ({}));
  }

  async start(): Promise<void> {
    this.started++;
    if (this.startError) throw this.startError;
  }

  async stop(): Promise<void> {
    this.stopped++;
  }

  async sendRequest<R>(method: string, params: unknown, token?: CancellationToken): Promise<R> {
    this.requests.push({ method, params });
    const h = this.handlers.get(method);
    if (!h) throw new RpcError(-32601, `Method Not Found: ${method}`);
    return (await h(params, token)) as R;
  }

  sendNotification(method: string, params: unknown): void {
    this.sent.push({ method, params });
  }

  onNotification(method: string, handler: (p: any) => void): Disposable {
    this.notificationHandlers.set(method, handler);
    return { dispose: () => this.notificationHandlers.delete(method) };
  }

  onRequest(method: string, handler: (p: any, token: CancellationToken) => unknown): Disposable {
    this.requestHandlers.set(method, handler);
    return { dispose: () => this.requestHandlers.delete(method) };
  }

  capabilities(): AgentdCapabilities | undefined {
    return this.caps;
  }

  /** A request from the daemon to the editor; `token` lets the test withdraw it. */
  async request(method: string, params: unknown, token: CancellationToken = NEVER): Promise<unknown> {
    const h = this.requestHandlers.get(method);
    if (!h) throw new RpcError(-32601, `Unhandled method ${method}`);
    return h(params, token);
  }

  notify(method: string, params: unknown): void {
    this.notificationHandlers.get(method)?.(params);
  }

  /** The process died under us. */
  crash(): void {
    this.hooks.onClosed();
  }
}

export function fakeFactory(configure: (d: FakeDaemon) => void = () => {}): { factory: ClientFactory; made: FakeDaemon[] } {
  const made: FakeDaemon[] = [];
  const factory: ClientFactory = (config, hooks) => {
    const d = new FakeDaemon(config, hooks);
    configure(d);
    made.push(d);
    return d;
  };
  return { factory, made };
}
