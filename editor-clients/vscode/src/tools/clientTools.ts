// The tools the editor runs for the agent (`executor: "client"`): argument
// checks, workspace confinement, approvals and result texts. Everything that
// touches the editor goes through WorkspaceAdapter, so this file runs the same
// in VS Code (vscodeWorkspace.ts) and in Node tests (a fake adapter).

import * as path from 'node:path';
import { OutsideWorkspaceError, resolveInRoots } from './paths';

export interface ToolCall {
  sessionId: string;
  toolCallId: string;
  name: string;
  arguments: Record<string, unknown>;
  /** The session's mode runs this edit without asking (auto-edit); commands always ask. */
  autoApprove?: boolean;
}

export interface ToolOutcome {
  content: string;
  isError: boolean;
  /** The user said no (shown as "denied", not as a failure). */
  denied?: boolean;
}

/** "Allow once", "Allow for this session" or "Deny". No answer (a dismissed dialog) is a denial. */
export type ApprovalChoice = 'once' | 'session' | 'deny';

export interface ApprovalRequest {
  kind: 'edit' | 'command';
  tool: string;
  toolCallId: string;
  /** One line, e.g. "agentd wants to edit src/main.py". */
  title: string;
  /** The change or the command, shown in the dialog. */
  detail: string;
  path?: string;
  /** For edits: the text now (undefined for a new file) and the text after the change, for a diff view. */
  original?: string;
  proposed?: string;
  command?: string;
  cwd?: string;
}

export interface CommandResult {
  output: string;
  exitCode: number | null;
  /** Set when the process was killed (by the cancel, or by a signal); neither set: the shell did not say. */
  signal?: string | null;
  /** Set when the command was stopped for running past its time limit (that limit, ms). */
  timedOutMs?: number;
}

export interface WorkspaceAdapter {
  /** The file's text: the open buffer (unsaved changes included) if there is one, else the disk; undefined if it does not exist. */
  readText(absPath: string): Promise<string | undefined>;
  /**
   * Replace [start, end) of the current text (UTF-16 offsets) undoably.
   * `expected` is the text the offsets were computed on; an adapter that sees
   * a different text must refuse (return false) rather than edit blindly.
   */
  replaceText(absPath: string, start: number, end: number, newText: string, expected: string): Promise<boolean>;
  /** Create or overwrite the file, undoably where the editor can. */
  writeText(absPath: string, content: string): Promise<boolean>;
  /** Ask the user (edits: as a reviewable diff). Resolve undefined when dismissed or when `signal` aborts. */
  approve(req: ApprovalRequest, signal: AbortSignal): Promise<ApprovalChoice | undefined>;
  /** Run a shell command in `cwd`, killed with what it started when `signal` aborts. */
  runCommand(command: string, cwd: string, signal: AbortSignal): Promise<CommandResult>;
}

export interface ClientToolOptions {
  workspaceRoot(): string | undefined;
  /** The window's other folders: absolute paths inside them are allowed too. */
  additionalRoots?(): string[];
  /** agentd.approval.edits: "ask" before each edit, or apply "always". */
  editApproval(): 'ask' | 'always';
  maxOutputChars?: number;
}

/** `review`: the approval is a diff the user can accept or reject (from the panel too). */
export type ToolStateListener = (state: 'awaiting_approval' | 'running' | 'denied', detail?: string, review?: boolean) => void;

export const DENIED_COMMAND = 'The user denied this command.';
export const DENIED_EDIT = 'The user denied this edit.';
export const CANCELLED = 'The tool call was cancelled.';
const READ_LIMIT_CHARS = 512 * 1024;

class ToolFailure extends Error {}

export class ClientToolRunner {
  /** `${sessionId}\0${kind}` for "Allow for this session". */
  private readonly sessionAllows = new Set<string>();
  /** A loaded session's folders as the daemon has them, its workspace root first (`setSessionRoots`). */
  private readonly sessionRoots = new Map<string, string[]>();

  constructor(
    private readonly ws: WorkspaceAdapter,
    private readonly options: ClientToolOptions,
  ) {}

  forgetSession(sessionId: string): void {
    for (const key of [...this.sessionAllows]) if (key.startsWith(sessionId + '\0')) this.sessionAllows.delete(key);
  }

  /**
   * The folders a session's tools may use, as the daemon has them (a
   * session loaded, resumed or forked: its stored roots, which need not be
   * this window's folders); `undefined` drops them, and the session's calls
   * are checked against the window's folders again, as a new session's are.
   */
  setSessionRoots(sessionId: string, roots: string[] | undefined): void {
    if (roots?.length) this.sessionRoots.set(sessionId, roots);
    else this.sessionRoots.delete(sessionId);
  }

  /** Never rejects: every failure becomes an `isError` result the model can read. */
  async run(call: ToolCall, signal: AbortSignal, onState: ToolStateListener = () => {}): Promise<ToolOutcome> {
    try {
      if (signal.aborted) return { content: CANCELLED, isError: true };
      // A loaded session's own folders: a call the daemon's view refuses is
      // refused here too, whatever folders this window has open.
      const own = this.sessionRoots.get(call.sessionId);
      const root = own ? own[0] : this.options.workspaceRoot();
      if (!root) throw new ToolFailure('No workspace folder is open in the editor.');
      const roots = own ?? [root, ...(this.options.additionalRoots?.() ?? [])];
      const args = call.arguments ?? {};
      switch (call.name) {
        case 'read_file':
          return await this.readFile(roots, args);
        case 'edit_file':
          return await this.editFile(roots, call, args, signal, onState);
        case 'write_file':
          return await this.writeFile(roots, call, args, signal, onState);
        case 'run_command':
          return await this.runCommand(roots, call, args, signal, onState);
        default:
          throw new ToolFailure(`The editor does not provide a tool named ${JSON.stringify(call.name)}.`);
      }
    } catch (err) {
      if (err instanceof ToolFailure) return { content: err.message, isError: true };
      if (err instanceof OutsideWorkspaceError) return { content: `Refused: ${err.message}.`, isError: true };
      const msg = err instanceof Error ? err.message : String(err);
      return { content: `${call.name} failed: ${msg}`, isError: true };
    }
  }

  private async readFile(roots: string[], args: Record<string, unknown>): Promise<ToolOutcome> {
    const rel = str(args, 'path');
    const abs = resolveInRoots(roots, rel);
    const text = await this.ws.readText(abs);
    if (text === undefined) throw new ToolFailure(`${rel} does not exist.`);
    if (text.slice(0, 8192).includes('\0')) throw new ToolFailure(`${rel} looks like a binary file.`);
    const truncated = text.length > READ_LIMIT_CHARS;
    // Same shape as the daemon's read_file: numbered lines, 1-based offset.
    const lines = text.slice(0, READ_LIMIT_CHARS).split(/\r?\n/);
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
    const start = Math.max(1, intOr(args.offset, 1));
    const limit = args.limit === undefined || args.limit === null ? undefined : Math.max(0, intOr(args.limit, 0));
    const end = limit === undefined ? lines.length : Math.min(lines.length, start - 1 + limit);
    const width = String(Math.max(end, 1)).length;
    const out: string[] = [];
    for (let i = start; i <= end; i++) out.push(`${String(i).padStart(width)}  ${lines[i - 1]}`);
    let body = out.join('\n');
    if (truncated) body += `\n[file truncated at ${READ_LIMIT_CHARS} characters]`;
    return { content: body || '(empty file)', isError: false };
  }

  private async editFile(
    roots: string[],
    call: ToolCall,
    args: Record<string, unknown>,
    signal: AbortSignal,
    onState: ToolStateListener,
  ): Promise<ToolOutcome> {
    const rel = str(args, 'path');
    const oldText = str(args, 'old_text', true);
    const newText = str(args, 'new_text', true);
    if (oldText === '') throw new ToolFailure('old_text must not be empty (use write_file to create a file).');
    const abs = resolveInRoots(roots, rel);
    const root = roots[0];
    // Check before asking, so the user is not asked about an edit that cannot apply.
    const before = await this.ws.readText(abs);
    const at = locate(before, oldText, rel);
    const original = before as string;
    const display = displayPath(root, abs);
    const ok = await this.approveIfNeeded(
      call,
      {
        kind: 'edit',
        tool: 'edit_file',
        toolCallId: call.toolCallId,
        title: `agentd wants to edit ${display}`,
        detail: `Replace:\n${clip(oldText, 1500)}\n\nWith:\n${clip(newText, 1500)}`,
        path: abs,
        original,
        proposed: original.slice(0, at) + newText + original.slice(at + oldText.length),
      },
      this.options.editApproval() === 'always' || call.autoApprove === true,
      signal,
      onState,
    );
    if (!ok) return signal.aborted ? { content: CANCELLED, isError: true } : { content: DENIED_EDIT, isError: true, denied: true };
    onState('running');
    // Read again: the buffer may have changed while the dialog was open.
    const current = await this.ws.readText(abs);
    const start = locate(current, oldText, rel);
    const applied = await this.ws.replaceText(abs, start, start + oldText.length, newText, current as string);
    if (!applied) throw new ToolFailure(`The editor could not apply the edit to ${rel}.`);
    return { content: `Edited ${display}: replaced 1 occurrence.`, isError: false };
  }

  private async writeFile(
    roots: string[],
    call: ToolCall,
    args: Record<string, unknown>,
    signal: AbortSignal,
    onState: ToolStateListener,
  ): Promise<ToolOutcome> {
    const rel = str(args, 'path');
    const content = str(args, 'content', true);
    const abs = resolveInRoots(roots, rel);
    const root = roots[0];
    const original = await this.ws.readText(abs);
    const exists = original !== undefined;
    const display = displayPath(root, abs);
    const ok = await this.approveIfNeeded(
      call,
      {
        kind: 'edit',
        tool: 'write_file',
        toolCallId: call.toolCallId,
        title: `agentd wants to ${exists ? 'overwrite' : 'create'} ${display}`,
        detail: clip(content, 3000),
        path: abs,
        original,
        proposed: content,
      },
      this.options.editApproval() === 'always' || call.autoApprove === true,
      signal,
      onState,
    );
    if (!ok) return signal.aborted ? { content: CANCELLED, isError: true } : { content: DENIED_EDIT, isError: true, denied: true };
    onState('running');
    if (!(await this.ws.writeText(abs, content))) throw new ToolFailure(`The editor could not write ${rel}.`);
    return { content: `${exists ? 'Overwrote' : 'Created'} ${display} (${content.length} characters).`, isError: false };
  }

  private async runCommand(
    roots: string[],
    call: ToolCall,
    args: Record<string, unknown>,
    signal: AbortSignal,
    onState: ToolStateListener,
  ): Promise<ToolOutcome> {
    const command = str(args, 'command');
    const cwdArg = args.cwd === undefined || args.cwd === null || args.cwd === '' ? '.' : str(args, 'cwd');
    const cwd = resolveInRoots(roots, cwdArg);
    const root = roots[0];
    // Commands are always asked for (unless allowed for this session): the
    // setting only relaxes edits, which stay undoable; a command does not.
    const ok = await this.approveIfNeeded(
      call,
      {
        kind: 'command',
        tool: 'run_command',
        toolCallId: call.toolCallId,
        title: 'agentd wants to run a command',
        detail: `${command}\n\nin ${displayPath(root, cwd) || '.'}`,
        command,
        cwd,
      },
      false,
      signal,
      onState,
    );
    if (!ok) return signal.aborted ? { content: CANCELLED, isError: true } : { content: DENIED_COMMAND, isError: true, denied: true };
    onState('running');
    const res = await this.ws.runCommand(command, cwd, signal);
    const output = clipMiddle(res.output, this.options.maxOutputChars ?? 40_000);
    // No exit code and no signal: the shell did not say how the command ended.
    const status =
      res.timedOutMs !== undefined
        ? `timed out after ${res.timedOutMs / 1000} s, killed by ${res.signal ?? 'a signal'}`
        : res.exitCode !== null
          ? `exit code: ${res.exitCode}`
          : !res.signal && !signal.aborted
            ? 'exit code unknown'
            : `killed by ${res.signal ?? 'a signal'}${signal.aborted ? ' (cancelled)' : ''}`;
    return { content: `${output}${output && !output.endsWith('\n') ? '\n' : ''}[${status}]`, isError: res.exitCode !== 0 };
  }

  private async approveIfNeeded(
    call: ToolCall,
    req: ApprovalRequest,
    preApproved: boolean,
    signal: AbortSignal,
    onState: ToolStateListener,
  ): Promise<boolean> {
    const key = `${call.sessionId}\0${req.kind}`;
    if (preApproved || this.sessionAllows.has(key)) return true;
    onState('awaiting_approval', req.title, req.kind === 'edit');
    let choice: ApprovalChoice | undefined;
    try {
      choice = await this.ws.approve(req, signal);
    } catch {
      choice = undefined; // fail closed: a broken dialog is a denial
    }
    if (signal.aborted) return false;
    if (choice === 'session') this.sessionAllows.add(key);
    const ok = choice === 'once' || choice === 'session';
    if (!ok) onState('denied');
    return ok;
  }
}

function str(args: Record<string, unknown>, key: string, allowEmpty = false): string {
  const v = args[key];
  if (typeof v !== 'string' || (!allowEmpty && v === '')) {
    throw new ToolFailure(`Missing or invalid argument ${JSON.stringify(key)} (a string is required).`);
  }
  return v;
}

function intOr(v: unknown, dflt: number): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
  return Number.isFinite(n) ? Math.trunc(n) : dflt;
}

/** Offset of the single occurrence of `needle`, or a failure explaining why not. */
function locate(text: string | undefined, needle: string, rel: string): number {
  if (text === undefined) throw new ToolFailure(`${rel} does not exist (use write_file to create it).`);
  const first = text.indexOf(needle);
  if (first < 0) throw new ToolFailure(`old_text was not found in ${rel}.`);
  let count = 1;
  for (let i = text.indexOf(needle, first + 1); i >= 0; i = text.indexOf(needle, i + 1)) count++;
  if (count > 1) {
    throw new ToolFailure(`old_text occurs ${count} times in ${rel}; include more context so it matches exactly once.`);
  }
  return first;
}

function displayPath(root: string, abs: string): string {
  const rel = path.relative(root, abs);
  return rel && !rel.startsWith('..') ? rel : abs;
}

function clip(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n)}\n… (${s.length - n} more characters)`;
}

/** Keep the head and the tail of long output: errors are usually at the end. */
export function clipMiddle(s: string, n: number): string {
  if (s.length <= n) return s;
  const head = Math.floor(n / 4);
  const tail = n - head;
  return `${s.slice(0, head)}\n[… ${s.length - n} characters of output cut …]\n${s.slice(s.length - tail)}`;
}
