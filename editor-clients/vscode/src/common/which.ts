// Find an executable the way a shell would, so a missing agentd is reported
// with a clear fix before anything is spawned.

import * as fs from 'node:fs';
import * as path from 'node:path';

function isExecutable(p: string): boolean {
  try {
    const st = fs.statSync(p);
    if (!st.isFile()) return false;
    if (process.platform === 'win32') return true;
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Absolute path of `command`, or undefined when it cannot be run. */
export function which(command: string, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): string | undefined {
  if (!command) return undefined;
  const exts =
    process.platform === 'win32' ? ['', ...(env.PATHEXT ?? '.EXE;.CMD;.BAT;.COM').split(';').filter(Boolean)] : [''];
  if (command.includes('/') || (process.platform === 'win32' && command.includes('\\'))) {
    const abs = path.resolve(cwd, command.startsWith('~/') ? path.join(env.HOME ?? '', command.slice(2)) : command);
    return exts.map((e) => abs + e).find(isExecutable);
  }
  const dirs = (env.PATH ?? env.Path ?? '').split(path.delimiter).filter(Boolean);
  for (const dir of dirs) {
    for (const e of exts) {
      const candidate = path.join(dir, command + e);
      if (isExecutable(candidate)) return candidate;
    }
  }
  return undefined;
}
