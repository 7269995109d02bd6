// WorkspaceAdapter on VS Code: edits are WorkspaceEdits (undoable, applied to
// open buffers with their unsaved changes), reads prefer dirty buffers, edits
// are approved in a diff review (review.ts), commands in a modal dialog
// (dismissed = denied) and run in a terminal (terminal.ts).

import * as vscode from 'vscode';
import type { ApprovalChoice, ApprovalRequest, CommandResult, WorkspaceAdapter } from '../tools/clientTools';
import type { EditReviews } from './review';
import type { TerminalCommandRunner } from './terminal';

export const ALLOW_ONCE = 'Allow once';
export const ALLOW_SESSION_EDITS = 'Allow all edits this session';
export const ALLOW_SESSION_COMMANDS = 'Allow all commands this session';
export const DENY = 'Deny';

function openDocument(absPath: string): vscode.TextDocument | undefined {
  return vscode.workspace.textDocuments.find((d) => d.uri.scheme === 'file' && d.uri.fsPath === absPath);
}

function isNotFound(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return code === 'FileNotFound' || code === 'ENOENT' || (err instanceof vscode.FileSystemError && code === 'FileNotFound');
}

export class VscodeWorkspace implements WorkspaceAdapter {
  constructor(
    private readonly reviews: EditReviews,
    private readonly terminals: TerminalCommandRunner,
  ) {}

  async readText(absPath: string): Promise<string | undefined> {
    const doc = openDocument(absPath);
    if (doc && (doc.isDirty || doc.isUntitled)) return doc.getText();
    try {
      const bytes = await vscode.workspace.fs.readFile(vscode.Uri.file(absPath));
      return new TextDecoder('utf-8').decode(bytes);
    } catch (err) {
      if (isNotFound(err)) return doc?.getText();
      throw err;
    }
  }

  async replaceText(absPath: string, start: number, end: number, newText: string, expected: string): Promise<boolean> {
    const uri = vscode.Uri.file(absPath);
    const doc = await vscode.workspace.openTextDocument(uri);
    // The offsets were computed on `expected`; never apply them to other text.
    if (doc.getText() !== expected) return false;
    const wasDirty = doc.isDirty;
    const edit = new vscode.WorkspaceEdit();
    edit.replace(uri, new vscode.Range(doc.positionAt(start), doc.positionAt(end)), newText);
    if (!(await vscode.workspace.applyEdit(edit))) return false;
    // Save only a buffer that had no unsaved work of the user's, so commands
    // the agent runs next see the edit on disk. Undo still works after a save.
    if (!wasDirty) await doc.save();
    return true;
  }

  async writeText(absPath: string, content: string): Promise<boolean> {
    const uri = vscode.Uri.file(absPath);
    let exists = openDocument(absPath) !== undefined;
    if (!exists) {
      try {
        await vscode.workspace.fs.stat(uri);
        exists = true;
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    const edit = new vscode.WorkspaceEdit();
    let wasDirty = false;
    if (exists) {
      const doc = await vscode.workspace.openTextDocument(uri);
      wasDirty = doc.isDirty;
      const whole = new vscode.Range(doc.positionAt(0), doc.positionAt(doc.getText().length));
      edit.replace(uri, whole, content);
    } else {
      edit.createFile(uri, { ignoreIfExists: true });
      edit.insert(uri, new vscode.Position(0, 0), content);
    }
    if (!(await vscode.workspace.applyEdit(edit))) return false;
    if (!wasDirty) await (await vscode.workspace.openTextDocument(uri)).save();
    return true;
  }

  async approve(req: ApprovalRequest, signal: AbortSignal): Promise<ApprovalChoice | undefined> {
    if (req.kind === 'edit' && req.proposed !== undefined && req.path) return this.reviews.review(req, signal);
    const always = req.kind === 'command' ? ALLOW_SESSION_COMMANDS : ALLOW_SESSION_EDITS;
    // Deny is the dialog's close action: VS Code then adds no Cancel button of
    // its own, and Escape answers Deny.
    const items: vscode.MessageItem[] = [{ title: ALLOW_ONCE }, { title: always }, { title: DENY, isCloseAffordance: true }];
    const dialog = Promise.resolve(vscode.window.showWarningMessage(req.title, { modal: true, detail: req.detail }, ...items)).then(
      (item) => item?.title,
    );
    // A cancelled prompt stops waiting for the answer (the dialog itself
    // cannot be closed from an extension; its late answer is ignored).
    const aborted = new Promise<undefined>((resolve) => {
      if (signal.aborted) resolve(undefined);
      signal.addEventListener('abort', () => resolve(undefined), { once: true });
    });
    const choice = await Promise.race([dialog, aborted]);
    if (choice === ALLOW_ONCE) return 'once';
    if (choice === always) return 'session';
    if (choice === DENY) return 'deny';
    return undefined; // dismissed (Escape, Cancel, closed): the caller denies
  }

  runCommand(command: string, cwd: string, signal: AbortSignal): Promise<CommandResult> {
    return this.terminals.run(command, cwd, signal);
  }
}
