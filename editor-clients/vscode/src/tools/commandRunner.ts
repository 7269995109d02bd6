// run_command through child_process: output captured for the model (and
// echoed to an output sink the user sees), stopped with its whole process
// group when the call is withdrawn, the prompt cancelled, the time limit
// reached or the extension deactivated (stopProcessTree).

import { spawn } from 'node:child_process';
import type { CommandResult } from './clientTools';

const MAX_CAPTURE = 2 * 1024 * 1024;

/**
 * How long a command being stopped has to exit after SIGTERM before what is
 * left of its process group gets SIGKILL (ms).
 */
export const KILL_GRACE_MS = 3000;

/** Process groups sent SIGTERM whose SIGKILL is still to come. */
const stopping = new Set<number>();
let exitHookInstalled = false;

function signalGroup(pgid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch {
    return false; // ESRCH: nothing of the group is left
  }
}

/**
 * Stop a command started by runShellCommand and everything it started: on
 * POSIX SIGTERM to its process group (it leads one: `detached`), then
 * SIGKILL to what is left of the group after `graceMs`; on Windows
 * `taskkill /T /F` on its process tree. Killing the shell alone would leave
 * a job it started in the background (a test runner's workers, a server)
 * running, holding the output pipes so that no result would ever come.
 *
 * A group's id cannot be given to a new process while the group has a
 * member, so signalling it after the shell itself exited reaches only what
 * that command left behind. False when nothing was left to stop.
 */
export function stopProcessTree(pid: number, graceMs = KILL_GRACE_MS): boolean {
  if (process.platform === 'win32') {
    // No process groups to signal: taskkill walks the tree from the shell.
    try {
      spawn('taskkill', ['/pid', String(pid), '/T', '/F'], { stdio: 'ignore', windowsHide: true }).on('error', () => {});
    } catch {
      return false;
    }
    return true;
  }
  if (!signalGroup(pid, 'SIGTERM')) return false;
  stopping.add(pid);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // The extension host exiting (a window closed or reloaded) before a
    // grace ends: no timer runs after this, so what is left goes now.
    process.on('exit', () => {
      for (const pgid of stopping) signalGroup(pgid, 'SIGKILL');
    });
  }
  const timer = setTimeout(() => {
    stopping.delete(pid);
    // kill(-pgid, 0) answers whether any process of the group is left.
    if (signalGroup(pid, 0)) signalGroup(pid, 'SIGKILL');
  }, graceMs);
  // The grace does not keep a Node process (a test run) alive on its own.
  timer.unref();
  return true;
}

export interface ShellCommandOptions {
  /** Called with each piece of output as it comes (the pseudo-terminal shows it). */
  onOutput?: (chunk: string) => void;
  /** SIGTERM -> SIGKILL grace when the command is stopped (tests shorten it). */
  killGraceMs?: number;
  /** Called with the pids of each command started (tests check the tree is gone). */
  onSpawn?: (pid: number) => void;
}

export function runShellCommand(
  command: string,
  cwd: string,
  signal: AbortSignal,
  options: ShellCommandOptions = {},
): Promise<CommandResult> {
  const onOutput = options.onOutput ?? (() => {});
  return new Promise((resolve) => {
    let output = '';
    let dropped = 0;
    const append = (chunk: string): void => {
      onOutput(chunk);
      // Keep the tail when output is huge: the end usually says what failed.
      output += chunk;
      if (output.length > MAX_CAPTURE) {
        dropped += output.length - MAX_CAPTURE;
        output = output.slice(output.length - MAX_CAPTURE);
      }
    };
    const isWin = process.platform === 'win32';
    const child = spawn(command, {
      cwd,
      shell: true,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group (and session: no controlling terminal), so
      // that stopping it reaches what the shell started too.
      detached: !isWin,
      windowsHide: true,
    });
    if (child.pid !== undefined) options.onSpawn?.(child.pid);
    child.stdout.setEncoding('utf8').on('data', append);
    child.stderr.setEncoding('utf8').on('data', append);
    let closed = false;
    let stopped = false;
    const stop = (): void => {
      // Until `close` (every holder of the output pipes gone) the command
      // is not over, even when the shell itself has exited: a background
      // child it left is what keeps the result from coming.
      if (closed || stopped || child.pid === undefined) return;
      stopped = stopProcessTree(child.pid, options.killGraceMs);
    };
    if (signal.aborted) stop();
    signal.addEventListener('abort', stop, { once: true });
    child.on('error', (err) => {
      closed = true;
      signal.removeEventListener('abort', stop);
      resolve({ output: `${output}Could not start the command: ${err.message}\n`, exitCode: 127, signal: null });
    });
    child.on('close', (code, sig) => {
      closed = true;
      signal.removeEventListener('abort', stop);
      const prefix = dropped ? `[… first ${dropped} characters of output dropped …]\n` : '';
      // Stopped: even a shell that had exited on its own (its background
      // child was what ran on) reads as killed, which is what happened.
      resolve({ output: prefix + output, exitCode: stopped ? null : code, signal: stopped ? sig ?? 'SIGTERM' : sig });
    });
  });
}
