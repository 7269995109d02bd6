// A WorkspaceAdapter over the real file system with editor-like buffers: a
// "dirty" buffer shadows the disk (like an unsaved editor), edits are recorded
// like WorkspaceEdits and applied to the buffer (saved when it was clean), and
// approvals come from a scripted queue (undefined = dismissed dialog).

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ApprovalChoice, ApprovalRequest, CommandResult, WorkspaceAdapter } from '../../src/tools/clientTools';
import { runShellCommand } from '../../src/tools/commandRunner';

export interface RecordedEdit {
  path: string;
  start: number;
  end: number;
  newText: string;
}

export class FakeWorkspace implements WorkspaceAdapter {
  readonly dirty = new Map<string, string>();
  readonly edits: RecordedEdit[] = [];
  readonly writes: { path: string; content: string }[] = [];
  readonly approvals: ApprovalRequest[] = [];
  readonly commands: { command: string; cwd: string }[] = [];
  answers: (ApprovalChoice | undefined)[] = [];
  /** Resolves the next approval request (for tests that cancel while a dialog is open). */
  onApprove?: (req: ApprovalRequest, signal: AbortSignal) => Promise<ApprovalChoice | undefined>;

  async readText(p: string): Promise<string | undefined> {
    if (this.dirty.has(p)) return this.dirty.get(p);
    try {
      return fs.readFileSync(p, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw e;
    }
  }

  async replaceText(p: string, start: number, end: number, newText: string, expected: string): Promise<boolean> {
    const current = await this.readText(p);
    if (current !== expected) return false;
    this.edits.push({ path: p, start, end, newText });
    const next = current.slice(0, start) + newText + current.slice(end);
    if (this.dirty.has(p)) this.dirty.set(p, next);
    else fs.writeFileSync(p, next);
    return true;
  }

  async writeText(p: string, content: string): Promise<boolean> {
    this.writes.push({ path: p, content });
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
    this.dirty.delete(p);
    return true;
  }

  async approve(req: ApprovalRequest, signal: AbortSignal): Promise<ApprovalChoice | undefined> {
    this.approvals.push(req);
    if (this.onApprove) return this.onApprove(req, signal);
    return this.answers.shift();
  }

  async runCommand(command: string, cwd: string, signal: AbortSignal): Promise<CommandResult> {
    this.commands.push({ command, cwd });
    return runShellCommand(command, cwd, signal);
  }
}
