// Edit review: before an edit_file / write_file is applied, the proposed text
// is shown in VS Code's diff editor (the file as it is now, with unsaved
// changes, on the left; the proposal, read-only, on the right) with Accept and
// Reject in the editor title and in the chat panel. Several edits of one turn
// queue up and are shown one file at a time. Accepting only answers the
// review: the tool runner then applies the edit as an undoable WorkspaceEdit.

import * as path from 'node:path';
import * as vscode from 'vscode';
import type { ApprovalChoice, ApprovalRequest } from '../tools/clientTools';

export const PROPOSAL_SCHEME = 'agentd-proposal';
const REVIEWING = 'agentd.reviewing';

interface Review {
  id: string;
  /** The right side: the proposal, served by this provider. */
  proposal: vscode.Uri;
  /** The left side: the file (its live buffer), or an empty proposal-scheme document for a new file. */
  current: vscode.Uri;
  title: string;
  text: string;
  resolve(choice: ApprovalChoice | undefined): void;
}

export class EditReviews implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly pending = new Map<string, Review>();
  private shown: string | undefined;
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;
  private readonly registration: vscode.Disposable;

  constructor() {
    this.registration = vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, this);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    if (uri.query === 'empty') return '';
    return this.pending.get(uri.query)?.text ?? '';
  }

  /** Ids of the edits waiting for a decision, oldest first. */
  get waiting(): string[] {
    return [...this.pending.keys()];
  }

  /** Show `req` as a diff and resolve with the user's decision (undefined when `signal` aborts). */
  review(req: ApprovalRequest, signal: AbortSignal): Promise<ApprovalChoice | undefined> {
    const file = req.path ?? '';
    const id = req.toolCallId;
    return new Promise((resolve) => {
      if (signal.aborted) return resolve(undefined);
      const review: Review = {
        id,
        proposal: vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: file, query: id }),
        current:
          req.original === undefined ? vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: file, query: 'empty' }) : vscode.Uri.file(file),
        title: `${path.basename(file)}: agentd's proposed ${req.original === undefined ? 'new file' : 'change'} (review)`,
        text: req.proposed ?? '',
        resolve,
      };
      this.pending.set(id, review);
      signal.addEventListener('abort', () => void this.finish(id, undefined), { once: true });
      if (this.shown === undefined) void this.show(id);
    });
  }

  /**
   * Answer a review: by id (the panel), or by the proposal document the
   * editor title's button was pressed on, or else the one on screen.
   */
  async decide(target: string | vscode.Uri | undefined, choice: ApprovalChoice): Promise<boolean> {
    const id = target instanceof vscode.Uri ? (target.scheme === PROPOSAL_SCHEME ? target.query : undefined) : (target ?? this.shown);
    if (id === undefined || !this.pending.has(id)) return false;
    await this.finish(id, choice);
    return true;
  }

  /** Bring a waiting review's diff (back) on screen. */
  async show(id: string): Promise<void> {
    const review = this.pending.get(id);
    if (!review) return;
    this.shown = id;
    void vscode.commands.executeCommand('setContext', REVIEWING, true);
    await vscode.commands.executeCommand('vscode.diff', review.current, review.proposal, review.title, { preview: false });
  }

  private async finish(id: string, choice: ApprovalChoice | undefined): Promise<void> {
    const review = this.pending.get(id);
    if (!review) return;
    this.pending.delete(id);
    review.resolve(choice);
    await this.closeDiff(review);
    if (this.shown === id) {
      this.shown = undefined;
      const next = this.pending.keys().next();
      if (!next.done) await this.show(next.value);
      else void vscode.commands.executeCommand('setContext', REVIEWING, false);
    }
  }

  private async closeDiff(review: Review): Promise<void> {
    const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs);
    const mine = tabs.filter((t) => t.input instanceof vscode.TabInputTextDiff && t.input.modified.toString() === review.proposal.toString());
    if (mine.length) await vscode.window.tabGroups.close(mine);
  }

  dispose(): void {
    for (const id of [...this.pending.keys()]) void this.finish(id, undefined);
    this.registration.dispose();
    this.changed.dispose();
  }
}
