// Tees an AgentConnection so tests can see what crossed the wire, in order:
// notifications received, notifications sent, and how each request settled.

import type { AgentConnection, CancellationToken } from '../../src/protocol/connection';
import { errorCode } from '../../src/protocol/connection';

export type WireEvent =
  | { dir: 'in'; method: string; params: any }
  | { dir: 'out-notification'; method: string; params: any }
  | { dir: 'request'; method: string; params: any }
  | { dir: 'reply'; method: string; result?: any; errorCode?: number; error?: unknown }
  /** A request from the daemon, and what this client answered. */
  | { dir: 'in-request'; method: string; params: any }
  | { dir: 'answer'; method: string; result: any };

export function recording(inner: AgentConnection): { conn: AgentConnection; events: WireEvent[] } {
  const events: WireEvent[] = [];
  const conn: AgentConnection = {
    async sendRequest<R>(method: string, params: unknown, token?: CancellationToken): Promise<R> {
      events.push({ dir: 'request', method, params });
      try {
        const result = await inner.sendRequest<R>(method, params, token);
        events.push({ dir: 'reply', method, result });
        return result;
      } catch (error) {
        events.push({ dir: 'reply', method, errorCode: errorCode(error), error });
        throw error;
      }
    },
    sendNotification(method, params) {
      events.push({ dir: 'out-notification', method, params });
      return inner.sendNotification(method, params);
    },
    onNotification(method, handler) {
      return inner.onNotification(method, (params) => {
        events.push({ dir: 'in', method, params });
        handler(params);
      });
    },
    onRequest(method, handler) {
      const sub = inner.onRequest?.(method, async (params, token) => {
        events.push({ dir: 'in-request', method, params });
        const result = await handler(params, token);
        events.push({ dir: 'answer', method, result });
        return result;
      });
      return sub ?? { dispose() {} };
    },
    capabilities: () => inner.capabilities?.(),
  };
  return { conn, events };
}
