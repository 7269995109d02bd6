// Spawns the real counterparts for protocol tests: the bundled local model
// server and `agentd serve`, connected with vscode-jsonrpc over stdio.

import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { inject } from 'vitest';
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from 'vscode-jsonrpc/node';
import { multiplexNotifications, type AgentConnection, type CancellationToken } from '../../src/protocol/connection';
import { INITIALIZATION_OPTIONS, type AgentdCapabilities } from '../../src/protocol/types';

/** `AGENTD_BIN` (CI) or `agentd` on PATH. */
export const AGENTD_BIN = process.env.AGENTD_BIN || 'agentd';

export interface ModelServer {
  url: string;
  log(): Promise<Array<Record<string, unknown>>>;
  stop(): Promise<void>;
}

export async function startModelServer(): Promise<ModelServer> {
  const child = spawn(AGENTD_BIN, ['model-server', '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const firstLine = await new Promise<string>((resolve, reject) => {
    const rl = readline.createInterface({ input: child.stdout! });
    rl.once('line', (l) => {
      rl.close();
      resolve(l);
    });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`model-server exited with ${code}: ${stderr}`)));
  });
  const { url } = JSON.parse(firstLine) as { url: string };
  return {
    url,
    async log() {
      const res = await fetch(`${url}/_agentd/log`);
      return (await res.json()) as Array<Record<string, unknown>>;
    },
    stop: () => stopChild(child),
  };
}

export function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

export interface Daemon {
  conn: MessageConnection;
  agent: AgentConnection;
  home: string;
  child: ChildProcess;
  stderr(): string;
  env: NodeJS.ProcessEnv;
  /** capabilities.experimental.agentd of the initialize result. */
  caps: AgentdCapabilities | undefined;
  stop(): Promise<void>;
}

/** A fresh folder under this run's temporary root (removed by test/globalSetup.ts). */
export function tmpDir(prefix: string): string {
  let base: string;
  try {
    base = inject('tmpRoot');
  } catch {
    base = os.tmpdir();
  }
  return fs.realpathSync(fs.mkdtempSync(path.join(base, prefix)));
}

/** Adapts a vscode-jsonrpc connection to the protocol layer's interface (what LanguageClient is in the editor). */
export function asAgentConnection(conn: MessageConnection, caps?: AgentdCapabilities): AgentConnection {
  return {
    sendRequest: <R>(method: string, params: unknown, token?: CancellationToken) =>
      (token ? conn.sendRequest(method, params, token as never) : conn.sendRequest(method, params)) as Promise<R>,
    sendNotification: (method, params) => conn.sendNotification(method, params),
    onNotification: (method, handler) => conn.onNotification(method, handler),
    onRequest: (method, handler) => conn.onRequest(method, (params: unknown, token) => handler(params, token)),
    capabilities: () => caps,
  };
}

/** `initializationOptions` are merged over what the extension sends (settings such as `models`, `supportsImages`). */
export async function startDaemon(modelUrl: string, extraEnv: Record<string, string> = {}, initializationOptions: Record<string, unknown> = {}): Promise<Daemon> {
  const home = tmpDir('agentd-home-');
  const env = {
    ...process.env,
    AGENTD_BASE_URL: `${modelUrl}/v1`,
    AGENTD_API_KEY: 'test',
    AGENTD_MODEL: 'test',
    AGENTD_HOME: home,
    ...extraEnv,
  };
  const child = spawn(AGENTD_BIN, ['serve'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const conn = createMessageConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
  conn.listen();
  // The same initializationOptions the extension sends.
  const init = await conn.sendRequest<{ capabilities: { experimental?: { agentd?: AgentdCapabilities } } }>('initialize', {
    processId: process.pid,
    rootUri: null,
    capabilities: {},
    initializationOptions: { ...INITIALIZATION_OPTIONS, ...initializationOptions },
  });
  const caps = init.capabilities.experimental?.agentd;
  await conn.sendNotification('initialized', {});
  return {
    conn,
    // Shared like the extension shares LanguageClient: one handler per method underneath.
    agent: multiplexNotifications(asAgentConnection(conn, caps)),
    caps,
    home,
    child,
    env,
    stderr: () => stderr,
    async stop() {
      try {
        await conn.sendRequest('shutdown');
        await conn.sendNotification('exit');
      } catch {
        // already gone
      }
      conn.dispose();
      await stopChild(child);
    },
  };
}
