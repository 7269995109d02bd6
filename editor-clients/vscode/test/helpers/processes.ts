// Whether the processes a run_command started are still there: tests poll
// these (bounded) after a stop, so a shell killed alone, leaving the child
// it started in the background, fails them.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, vi } from 'vitest';

/** The state letter of /proc/PID/stat ('R', 'S', 'Z', ...), undefined if there is no such process. */
function procState(pid: number): string | undefined {
  try {
    return /^\d+ \(.*\) (\S)/s.exec(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))?.[1];
  } catch {
    return undefined;
  }
}

/**
 * Whether `pid` runs. A zombie (dead, not yet reaped: an orphan's new parent
 * may never reap it in a container) does not.
 */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  if (!fs.existsSync('/proc/self/stat')) return true; // no /proc: kill's answer is all there is
  const state = procState(pid);
  return state !== undefined && state !== 'Z';
}

/** The live (not zombie) members of process group `pgid` (Linux: /proc). */
export function groupMembers(pgid: number): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(path.join('/proc', name, 'stat'), 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z') out.push(Number(name));
  }
  return out;
}

/** The `count` pids a command wrote to `file` (`echo $$ $! > file`: the shell and its background child). */
export async function pidsFrom(file: string, count = 2): Promise<number[]> {
  let pids: number[] = [];
  await vi.waitFor(
    () => {
      pids = (fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '').trim().split(/\s+/).filter(Boolean).map(Number);
      expect(pids).toHaveLength(count);
    },
    { timeout: 30_000, interval: 20 },
  );
  return pids;
}

/** Wait (bounded) until none of `pids` runs. */
export async function gone(pids: number[]): Promise<void> {
  await vi.waitFor(() => expect(pids.filter(alive)).toEqual([]), { timeout: 30_000, interval: 50 });
}

/** Wait (bounded) until process group `pgid` has no live member. */
export async function groupGone(pgid: number): Promise<void> {
  await vi.waitFor(() => expect(groupMembers(pgid)).toEqual([]), { timeout: 30_000, interval: 50 });
}
