// The daemon's lifecycle in the editor: find agentd, start it through a
// language client over stdio, explain failures with a fix, restart on demand,
// and hand the live connection to the chat surfaces (AgentControllers).

import * as vscode from 'vscode';
import { multiplexNotifications, type AgentConnection } from '../protocol/connection';
import { INITIALIZATION_OPTIONS } from '../protocol/types';
import { which } from '../common/which';

export const NOT_FOUND_MESSAGE = 'agentd was not found: install it with `pipx install agentd-editor` or set agentd.command';

export interface DaemonConfig {
  command: string;
  args: string[];
  env: Record<string, string>;
}

export interface ClientHooks {
  /** The server process ended (crash, exit) without us stopping it. */
  onClosed(): void;
}

/** What the manager needs of a language client (LanguageClient in the editor, a fake in tests). */
export interface DaemonClient extends AgentConnection {
  start(): Promise<void>;
  stop(timeoutMs?: number): Promise<void>;
}

export type ClientFactory = (
  config: DaemonConfig & { resolvedCommand: string; initializationOptions: Record<string, unknown> },
  hooks: ClientHooks,
) => DaemonClient;

export interface Attachable {
  attach(conn: AgentConnection): void;
  detach(reason?: string): void;
}

export type DaemonState = 'stopped' | 'starting' | 'ready' | 'failed';

export function readConfig(): DaemonConfig {
  const cfg = vscode.workspace.getConfiguration('agentd');
  const command = (cfg.get<string>('command') ?? 'agentd').trim() || 'agentd';
  const args = cfg.get<string[]>('args') ?? ['serve'];
  const env = cfg.get<Record<string, string>>('env') ?? {};
  return {
    command,
    args: Array.isArray(args) ? args.map(String) : ['serve'],
    env: Object.fromEntries(Object.entries(env ?? {}).map(([k, v]) => [k, String(v)])),
  };
}

export class DaemonManager implements vscode.Disposable {
  private client: DaemonClient | undefined;
  /** `client`, shared by every attached chat surface. */
  private shared: AgentConnection | undefined;
  private stateValue: DaemonState = 'stopped';
  private readonly stateEmitter = new vscode.EventEmitter<{ state: DaemonState; message?: string }>();
  readonly onDidChangeState = this.stateEmitter.event;
  private readonly attached = new Set<Attachable>();
  /** Serialises start/stop/restart so a double click cannot spawn two daemons. */
  private queue: Promise<unknown> = Promise.resolve();
  private generation = 0;

  constructor(
    private readonly factory: ClientFactory,
    private readonly output: vscode.OutputChannel,
    private readonly getConfig: () => DaemonConfig = readConfig,
  ) {}

  get state(): DaemonState {
    return this.stateValue;
  }

  get connection(): AgentConnection | undefined {
    return this.stateValue === 'ready' ? this.shared : undefined;
  }

  /** Controllers get the connection on every (re)start and lose it on every stop. */
  attach(target: Attachable): vscode.Disposable {
    this.attached.add(target);
    if (this.shared && this.stateValue === 'ready') target.attach(this.shared);
    return new vscode.Disposable(() => this.attached.delete(target));
  }

  start(): Promise<boolean> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.doStop('agentd was stopped.'));
  }

  restart(): Promise<boolean> {
    return this.enqueue(async () => {
      this.output.appendLine('Restarting agentd…');
      await this.doStop('agentd restarted while the prompt was running.');
      return this.doStart();
    });
  }

  private enqueue<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private setState(state: DaemonState, message?: string): void {
    this.stateValue = state;
    this.stateEmitter.fire({ state, message });
  }

  private async doStart(): Promise<boolean> {
    if (this.client) return true;
    const config = this.getConfig();
    const env = { ...process.env, ...config.env };
    const resolved = which(config.command, env);
    if (!resolved) {
      this.output.appendLine(`${NOT_FOUND_MESSAGE} (looked for ${JSON.stringify(config.command)} on PATH).`);
      this.setState('failed', NOT_FOUND_MESSAGE);
      void this.offerFix(NOT_FOUND_MESSAGE, true);
      return false;
    }
    this.setState('starting');
    const gen = ++this.generation;
    const client = this.factory(
      {
        ...config,
        env: env as Record<string, string>,
        resolvedCommand: resolved,
        initializationOptions: INITIALIZATION_OPTIONS,
      },
      { onClosed: () => this.onClosed(gen) },
    );
    this.client = client;
    this.output.appendLine(`Starting ${resolved} ${config.args.join(' ')}`);
    try {
      await client.start();
    } catch (err) {
      if (this.client === client) this.client = undefined;
      const detail = err instanceof Error ? err.message : String(err);
      const message = `agentd could not be started (${config.command} ${config.args.join(' ')}): ${detail}. See the agentd output for what it printed.`;
      this.output.appendLine(message);
      this.setState('failed', message);
      void this.offerFix(message, false);
      return false;
    }
    if (this.client !== client) return false; // stopped meanwhile
    this.shared = multiplexNotifications(client);
    for (const t of this.attached) t.attach(this.shared);
    this.setState('ready');
    return true;
  }

  private async doStop(reason: string): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.shared = undefined;
    this.generation++; // a close of the old process is expected now
    for (const t of this.attached) t.detach(reason);
    if (client) {
      try {
        await client.stop(3000);
      } catch (err) {
        this.output.appendLine(`agentd did not stop cleanly: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    this.setState('stopped');
  }

  private onClosed(gen: number): void {
    if (gen !== this.generation || !this.client) return; // a stop we asked for
    if (this.stateValue === 'starting') return; // doStart reports a failed start itself
    this.client = undefined;
    this.shared = undefined;
    const message = 'agentd exited unexpectedly. Its last messages are in the agentd output.';
    this.output.appendLine(message);
    for (const t of this.attached) t.detach('agentd exited while the prompt was running.');
    this.setState('stopped', message);
    void this.offerFix(message, false);
  }

  private async offerFix(message: string, notFound: boolean): Promise<void> {
    const actions = notFound ? ['Open Settings', 'Show Output'] : ['Restart', 'Show Output', 'Open Settings'];
    const choice = await vscode.window.showErrorMessage(message, ...actions);
    if (choice === 'Open Settings') await vscode.commands.executeCommand('workbench.action.openSettings', 'agentd.command');
    else if (choice === 'Show Output') this.output.show(true);
    else if (choice === 'Restart') await this.restart();
  }

  async dispose(): Promise<void> {
    await this.stop();
    this.stateEmitter.dispose();
  }
}
