// run_command in a real VS Code terminal, with its output captured for the
// tool result. With shell integration (bash, zsh, fish, pwsh in VS Code 1.93+)
// the command runs in the user's shell and `execution.read()` yields its
// output; without it (another shell, integration off, a remote that lacks
// it) the command runs as a child process shown in a pseudo-terminal, so the
// user still watches it in the terminal panel and the model still gets the
// output and the exit code.
//
// A command is stopped, with what it started, when its call is withdrawn
// (Stop, or the daemon cancelling the prompt), when it runs past
// agentd.commandTimeout, and when the extension is deactivated (dispose):
// the child process's whole group gets SIGTERM, then SIGKILL after a grace
// (commandRunner.ts); the shell-integrated terminal is closed, and its shell
// hangs up its jobs (SIGHUP to each job's process group).

import * as vscode from 'vscode';
import type { CommandResult } from '../tools/clientTools';
import { runShellCommand, type ShellCommandOptions } from '../tools/commandRunner';

const MAX_CAPTURE = 2 * 1024 * 1024;
/** How long a new terminal may take to report shell integration before the fallback is used. */
export const SHELL_INTEGRATION_WAIT_MS = 5000;

// CSI sequences (colours, cursor moves) and OSC sequences (VS Code's 633
// markers, titles) are for the screen, not for the model.
// eslint-disable-next-line no-control-regex
const ESCAPES = /\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]/g;

export function plainText(s: string): string {
  return s.replace(ESCAPES, '').replace(/\r\n/g, '\n').replace(/\r/g, '\n');
}

function terminalName(command: string): string {
  const first = command.trim().split('\n')[0];
  return `agentd: ${first.length > 40 ? `${first.slice(0, 39)}…` : first}`;
}

export interface TerminalRunnerOptions extends Pick<ShellCommandOptions, 'killGraceMs' | 'onSpawn'> {
  /** The time limit of one command in ms (agentd.commandTimeout), read as each starts; 0: none. */
  timeoutMs?: () => number;
}

export class TerminalCommandRunner {
  /** Aborted by dispose (the extension's deactivation): every command running stops. */
  private readonly disposed = new AbortController();

  constructor(
    private readonly waitMs = SHELL_INTEGRATION_WAIT_MS,
    private readonly options: TerminalRunnerOptions = {},
  ) {}

  /** Stops the commands still running (the extension is deactivated; the window closes or reloads). */
  dispose(): void {
    this.disposed.abort();
  }

  /**
   * Runs `command`; it is stopped when `signal` aborts (the call withdrawn),
   * when the time limit passes (the result then has `timedOutMs`), and on
   * dispose.
   */
  async run(command: string, cwd: string, signal: AbortSignal): Promise<CommandResult> {
    const stop = new AbortController();
    const onStop = (): void => stop.abort();
    if (signal.aborted || this.disposed.signal.aborted) onStop();
    signal.addEventListener('abort', onStop, { once: true });
    this.disposed.signal.addEventListener('abort', onStop, { once: true });
    const limitMs = this.options.timeoutMs?.() ?? 0;
    let timedOut = false;
    const timer =
      limitMs > 0
        ? setTimeout(() => {
            timedOut = true;
            stop.abort();
          }, limitMs)
        : undefined;
    try {
      const res = await this.runUntil(command, cwd, stop.signal);
      return timedOut ? { ...res, timedOutMs: limitMs } : res;
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onStop);
      this.disposed.signal.removeEventListener('abort', onStop);
    }
  }

  private async runUntil(command: string, cwd: string, signal: AbortSignal): Promise<CommandResult> {
    if (signal.aborted) return { output: '', exitCode: null, signal: 'SIGTERM' };
    const terminal = vscode.window.createTerminal({ name: terminalName(command), cwd, isTransient: true });
    terminal.show(true);
    const integration = await this.shellIntegration(terminal, signal);
    if (signal.aborted) {
      terminal.dispose();
      return { output: '', exitCode: null, signal: 'SIGTERM' };
    }
    if (integration) return this.runIntegrated(terminal, integration, command, signal);
    terminal.dispose();
    return this.runInPseudoterminal(command, cwd, signal);
  }

  private shellIntegration(terminal: vscode.Terminal, signal: AbortSignal): Promise<vscode.TerminalShellIntegration | undefined> {
    if (terminal.shellIntegration) return Promise.resolve(terminal.shellIntegration);
    return new Promise((resolve) => {
      const done = (value: vscode.TerminalShellIntegration | undefined): void => {
        clearTimeout(timer);
        sub.dispose();
        closed.dispose();
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      };
      const onAbort = (): void => done(undefined);
      const sub = vscode.window.onDidChangeTerminalShellIntegration((e) => {
        if (e.terminal === terminal) done(e.shellIntegration);
      });
      const closed = vscode.window.onDidCloseTerminal((t) => {
        if (t === terminal) done(undefined);
      });
      // Not a synchronisation point: a shell that never reports integration
      // gets the fallback after this long.
      const timer = setTimeout(() => done(undefined), this.waitMs);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  private runIntegrated(
    terminal: vscode.Terminal,
    integration: vscode.TerminalShellIntegration,
    command: string,
    signal: AbortSignal,
  ): Promise<CommandResult> {
    return new Promise((resolve) => {
      let output = '';
      let settled = false;
      let exitCode: number | undefined;
      let ended = false;
      let drained = false;
      const finish = (result: CommandResult): void => {
        if (settled) return;
        settled = true;
        endSub.dispose();
        closeSub.dispose();
        signal.removeEventListener('abort', onAbort);
        resolve(result);
      };
      // Both the end event and the end of the output stream are needed: the
      // exit code comes with the first, the last output with the second.
      const maybeDone = (): void => {
        if (ended && drained) finish({ output: plainText(output), exitCode: exitCode ?? null, signal: null });
      };
      const onAbort = (): void => {
        finish({ output: plainText(output), exitCode: null, signal: 'SIGHUP' });
        // Closing the terminal ends the shell and the command's process group.
        terminal.dispose();
      };
      const execution = integration.executeCommand(command);
      const endSub = vscode.window.onDidEndTerminalShellExecution((e) => {
        if (e.execution !== execution) return;
        exitCode = e.exitCode;
        ended = true;
        maybeDone();
      });
      const closeSub = vscode.window.onDidCloseTerminal((t) => {
        if (t === terminal && !settled) finish({ output: plainText(output), exitCode: null, signal: 'the terminal was closed' });
      });
      signal.addEventListener('abort', onAbort, { once: true });
      void (async () => {
        try {
          for await (const chunk of execution.read()) {
            output += chunk;
            if (output.length > MAX_CAPTURE) output = output.slice(output.length - MAX_CAPTURE);
          }
        } catch {
          // The stream ends with the terminal; what was read is kept.
        }
        drained = true;
        maybeDone();
      })();
    });
  }

  private runInPseudoterminal(command: string, cwd: string, signal: AbortSignal): Promise<CommandResult> {
    const write = new vscode.EventEmitter<string>();
    const close = new vscode.EventEmitter<number | void>();
    let opened!: () => void;
    const isOpen = new Promise<void>((r) => (opened = r));
    const pty: vscode.Pseudoterminal = {
      onDidWrite: write.event,
      onDidClose: close.event,
      open: () => opened(),
      close: () => undefined,
    };
    const terminal = vscode.window.createTerminal({ name: terminalName(command), pty, isTransient: true });
    terminal.show(true);
    return (async () => {
      await isOpen;
      write.fire(`\x1b[2m$ ${command}\x1b[0m\r\n`);
      const res = await runShellCommand(command, cwd, signal, {
        onOutput: (chunk) => write.fire(chunk.replace(/\r?\n/g, '\r\n')),
        killGraceMs: this.options.killGraceMs,
        onSpawn: this.options.onSpawn,
      });
      write.fire(`\r\n\x1b[2m[${res.exitCode !== null ? `exit code ${res.exitCode}` : `killed by ${res.signal}`}]\x1b[0m\r\n`);
      write.dispose();
      close.dispose();
      return res;
    })();
  }
}
