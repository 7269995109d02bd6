// run_command through child_process: output captured for the model (and
// echoed to an output sink the user sees), killed with its whole process
// group when the prompt is cancelled.

import { spawn } from 'node:child_process';
import type { CommandResult } from './clientTools';

const MAX_CAPTURE = 2 * 1024 * 1024;

export function runShellCommand(
  command: string,
  cwd: string,
  signal: AbortSignal,
  onOutput: (chunk: string) => void = () => {},
): Promise<CommandResult> {
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
      // Its own process group, so a cancel kills the shell's children too.
      detached: !isWin,
      windowsHide: true,
    });
    child.stdout.setEncoding('utf8').on('data', append);
    child.stderr.setEncoding('utf8').on('data', append);
    const kill = (): void => {
      if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
      try {
        if (isWin) child.kill();
        else process.kill(-child.pid, 'SIGTERM');
      } catch {
        child.kill('SIGKILL');
      }
    };
    if (signal.aborted) kill();
    signal.addEventListener('abort', kill, { once: true });
    child.on('error', (err) => {
      signal.removeEventListener('abort', kill);
      resolve({ output: `${output}Could not start the command: ${err.message}\n`, exitCode: 127, signal: null });
    });
    child.on('close', (code, sig) => {
      signal.removeEventListener('abort', kill);
      const prefix = dropped ? `[… first ${dropped} characters of output dropped …]\n` : '';
      resolve({ output: prefix + output, exitCode: code, signal: sig });
    });
  });
}
