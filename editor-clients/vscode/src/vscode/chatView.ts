// The chat panel: a webview view in agentd's activity-bar container. It
// forwards the controller's ChatEvents to the webview (and replays them when
// the webview reloads) and turns the webview's messages into actions.

import * as path from 'node:path';
import * as vscode from 'vscode';
import { isWebviewMessage, type ChatEvent, type WebviewMessage } from '../common/messages';
import { AgentController, NotSupportedError, explain } from '../protocol/controller';
import type { SessionInfo } from '../protocol/types';
import { chatHtml, makeNonce } from '../webview/html';
import type { DaemonManager } from './daemon';
import type { EditReviews } from './review';

export const VIEW_ID = 'agentd.chat';
const MAX_HISTORY = 20_000;

export class ChatViewProvider implements vscode.WebviewViewProvider, vscode.Disposable {
  private view: vscode.WebviewView | undefined;
  private ready = false;
  /** Events since the last `cleared`, replayed to a reloaded webview. */
  private history: ChatEvent[] = [];
  private lastDaemon: ChatEvent | undefined;
  private lastMemory: ChatEvent | undefined;
  /**
   * The newest of each state event (features, mode and model, plan, context
   * meter, MCP servers): a reloaded webview gets the state, not its history.
   */
  private latest = new Map<string, ChatEvent>();
  /** Paths the panel may open: recalled memories and listed memory docs. */
  private openable = new Set<string>();
  private memoryDirectory: string | undefined;
  private disposables: vscode.Disposable[] = [];
  private canCompact = false;

  constructor(
    private readonly extensionUri: vscode.Uri,
    readonly controller: AgentController,
    private readonly daemon: DaemonManager,
    private readonly workspaceRoot: () => string | undefined,
    private readonly reviews?: Pick<EditReviews, 'decide' | 'show'>,
  ) {
    this.disposables.push(
      controller.onEvent((e) => this.onChatEvent(e)),
      daemon.onDidChangeState(({ state, message }) => {
        this.publish({ type: 'daemon', state, message });
        if (state === 'ready') {
          void this.controller.refreshMemory();
          void this.controller.refreshFeatures();
          void this.controller.refreshMcp();
        }
        // A stopped daemon offers nothing: its controls go until it is back.
        if (state === 'stopped' || state === 'failed') {
          this.publish({ type: 'features', images: false, mcp: false, commands: [] });
          // The pickers come back with the session, at the next prompt.
          this.publish({ type: 'setup', sessionId: this.controller.currentSessionId ?? '', setup: {} });
          this.canCompact = false;
          void vscode.commands.executeCommand('setContext', 'agentd.canCompact', false);
        }
      }),
    );
  }

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    this.ready = false;
    const media = vscode.Uri.joinPath(this.extensionUri, 'media');
    const dist = vscode.Uri.joinPath(this.extensionUri, 'dist');
    view.webview.options = { enableScripts: true, localResourceRoots: [media, dist] };
    view.webview.html = chatHtml({
      cspSource: view.webview.cspSource,
      nonce: makeNonce(),
      scriptUri: view.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.js')).toString(),
      styleUri: view.webview.asWebviewUri(vscode.Uri.joinPath(media, 'chat.css')).toString(),
    });
    view.webview.onDidReceiveMessage((m: unknown) => {
      if (isWebviewMessage(m)) void this.onMessage(m);
    });
    view.onDidDispose(() => {
      if (this.view === view) {
        this.view = undefined;
        this.ready = false;
      }
    });
  }

  /** Whether the panel is on screen (a question on a tool card would be seen). */
  get visible(): boolean {
    return !!this.view?.visible;
  }

  private onChatEvent(e: ChatEvent): void {
    if (e.type === 'turnStart' && !e.replay) void vscode.commands.executeCommand('setContext', 'agentd.promptRunning', true);
    if (e.type === 'turnEnd' && !e.replay) void vscode.commands.executeCommand('setContext', 'agentd.promptRunning', false);
    if (e.type === 'update' && e.update.kind === 'memory') for (const p of e.update.docs) this.openable.add(p);
    // A daemon that reports a context window, or says so at initialize, compacts:
    // "Compact the Conversation…" is offered.
    if ((e.type === 'context' || (e.type === 'features' && e.compaction)) && !this.canCompact) {
      this.canCompact = true;
      void vscode.commands.executeCommand('setContext', 'agentd.canCompact', true);
    }
    if (e.type === 'memory') {
      this.memoryDirectory = e.directory;
      for (const d of e.docs) this.openable.add(d.path);
    }
    this.publish(e);
  }

  private publish(e: ChatEvent): void {
    if (e.type === 'cleared') {
      this.history = [];
      this.latest.delete('plan');
      this.latest.delete('context');
    }
    if (e.type === 'daemon') this.lastDaemon = e;
    else if (e.type === 'memory') this.lastMemory = e;
    else if (['features', 'setup', 'plan', 'context', 'mcp'].includes(e.type)) this.latest.set(e.type, e);
    else if (e.type !== 'notice') {
      this.history.push(e);
      if (this.history.length > MAX_HISTORY) this.history.splice(0, this.history.length - MAX_HISTORY);
    }
    if (this.view && this.ready) void this.view.webview.postMessage(e);
  }

  async onMessage(m: WebviewMessage): Promise<void> {
    try {
      switch (m.type) {
        case 'ready': {
          this.ready = true;
          const replay: ChatEvent[] = [
            this.lastDaemon ?? { type: 'daemon', state: this.daemon.state },
            ...(this.lastMemory ? [this.lastMemory] : []),
            ...this.latest.values(),
            ...this.history,
          ];
          await this.view?.webview.postMessage(replay);
          if (!this.lastMemory && this.controller.connected) void this.controller.refreshMemory();
          if (!this.workspaceRoot()) this.notice('info', 'Open a folder to chat with agentd about it.');
          break;
        }
        case 'prompt':
          if (!this.controller.connected) {
            this.notice('error', 'agentd is not running. Use "agentd: Restart agentd" or fix agentd.command.', 'daemon');
            return;
          }
          await this.controller.prompt(m.text, m.images ?? []);
          break;
        case 'setMode':
          await this.controller.setMode(m.mode);
          break;
        case 'setModel':
          await this.controller.setModel(m.model);
          break;
        case 'permission':
          this.controller.answerPermission(m.toolCallId, m.optionId);
          break;
        case 'refreshMcp':
          await this.controller.refreshMcp();
          break;
        case 'cancel':
          this.controller.cancel();
          break;
        case 'newSession':
          await this.controller.newSession();
          break;
        case 'reset':
          await this.controller.reset();
          break;
        case 'switchSession':
          await this.switchSession();
          break;
        case 'openFile':
          await this.openFile(m.path, m.line);
          break;
        case 'refreshMemory':
          await this.controller.refreshMemory();
          break;
        case 'openMemoryFolder':
          await vscode.commands.executeCommand('agentd.memory.openFolder');
          break;
        case 'restart':
          await this.daemon.restart();
          break;
        case 'review':
          if (m.decision === 'show') await this.reviews?.show(m.toolCallId);
          else await this.reviews?.decide(m.toolCallId, m.decision === 'accept' ? 'once' : m.decision === 'reject' ? 'deny' : 'session');
          break;
      }
    } catch (err) {
      this.notice('error', explain(err));
    }
  }

  /** "Compact the Conversation…": optional instructions for the summary, then agent/compact. */
  async compact(): Promise<void> {
    const instructions = await vscode.window.showInputBox({
      title: 'Compact the conversation',
      prompt: 'What the summary must keep (optional). The newest turns stay as they are.',
      placeHolder: 'e.g. the API decisions',
    });
    if (instructions === undefined) return; // Escape
    try {
      // The outcome shows as the divider (its compaction updates).
      await this.controller.compact(instructions.trim() || undefined);
    } catch (err) {
      this.notice('error', explain(err));
    }
  }

  notice(level: 'info' | 'warning' | 'error', text: string, scope?: 'daemon'): void {
    this.publish({ type: 'notice', level, text, ...(scope ? { scope } : {}) });
  }

  async switchSession(): Promise<void> {
    let sessions;
    try {
      sessions = await this.controller.listSessions();
    } catch (err) {
      if (err instanceof NotSupportedError) {
        void vscode.window.showInformationMessage('This version of agentd cannot list saved sessions yet.');
        return;
      }
      throw err;
    }
    if (sessions.length === 0) {
      void vscode.window.showInformationMessage('No saved agentd sessions for this workspace yet.');
      return;
    }
    const current = this.controller.currentSessionId;
    const pick = await this.pickSession(sessions, current);
    if (!pick) return;
    try {
      if (pick.action === 'fork') await this.controller.forkSession(pick.sessionId);
      else if (pick.action === 'delete') await this.deleteSession(pick.sessionId, pick.title);
      else if (pick.sessionId !== current) await this.controller.loadSession(pick.sessionId);
    } catch (err) {
      if (err instanceof NotSupportedError) {
        void vscode.window.showInformationMessage(`This version of agentd cannot do that yet (${err.message}).`);
        return;
      }
      throw err;
    }
  }

  /**
   * The sessions in a QuickPick: picking one opens it; its buttons fork it or
   * delete it. Resolves with what was asked (undefined: dismissed).
   */
  private pickSession(
    sessions: SessionInfo[],
    current: string | undefined,
  ): Promise<{ action: 'open' | 'fork' | 'delete'; sessionId: string; title: string } | undefined> {
    type Item = vscode.QuickPickItem & { sessionId: string };
    const fork: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('repo-forked'), tooltip: 'Fork: a new session from a copy of it' };
    const remove: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('trash'), tooltip: 'Delete' };
    const quickPick = vscode.window.createQuickPick<Item>();
    quickPick.placeholder = 'Switch to an agentd session (or fork or delete one with its buttons)';
    quickPick.items = sessions.map((s) => ({
      label: s.title || '(untitled)',
      description: s.sessionId === current ? 'current' : new Date(s.updatedAt).toLocaleString(),
      sessionId: s.sessionId,
      buttons: [fork, remove],
    }));
    return new Promise((resolve) => {
      let answer: { action: 'open' | 'fork' | 'delete'; sessionId: string; title: string } | undefined;
      quickPick.onDidAccept(() => {
        const item = quickPick.selectedItems[0];
        if (item) answer = { action: 'open', sessionId: item.sessionId, title: item.label };
        quickPick.hide();
      });
      quickPick.onDidTriggerItemButton((e) => {
        answer = { action: e.button === fork ? 'fork' : 'delete', sessionId: e.item.sessionId, title: e.item.label };
        quickPick.hide();
      });
      quickPick.onDidHide(() => {
        quickPick.dispose();
        resolve(answer);
      });
      quickPick.show();
    });
  }

  /** Delete a session once the user confirms it in a modal dialog. */
  private async deleteSession(sessionId: string, title: string): Promise<void> {
    const confirmed = await vscode.window.showWarningMessage(
      `Delete the agentd session "${title}"?`,
      { modal: true, detail: 'Its transcript is removed; this cannot be undone.' },
      'Delete',
    );
    if (confirmed !== 'Delete') return;
    await this.controller.deleteSession(sessionId);
    void vscode.window.showInformationMessage(`Deleted the agentd session "${title}".`);
  }

  /** Open a file the panel links to: only recalled/listed memories or files in the workspace's folders. */
  async openFile(p: string, line?: number): Promise<void> {
    // Every local folder of a multi-root workspace: a session's tools reach the others too.
    const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath);
    const inside = (dir: string | undefined): boolean => {
      if (!dir) return false;
      const rel = path.relative(dir, p);
      return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
    };
    const inFolders = [this.workspaceRoot(), ...folders].some(inside);
    if (!path.isAbsolute(p) || !(this.openable.has(p) || inFolders || inside(this.memoryDirectory))) {
      this.notice('warning', `Not opening ${p}: it is neither a memory file nor in the workspace.`);
      return;
    }
    const uri = vscode.Uri.file(p);
    // A folder (a list_dir location) is revealed in the Explorer, not opened as text.
    const stat = await vscode.workspace.fs.stat(uri).then(
      (s) => s,
      () => undefined,
    );
    if (stat && stat.type & vscode.FileType.Directory) {
      await vscode.commands.executeCommand('revealInExplorer', uri);
      return;
    }
    const doc = await vscode.workspace.openTextDocument(uri);
    // The line may have changed since the tool ran: clamp to the file.
    const at = line ? Math.min(Math.max(line - 1, 0), Math.max(doc.lineCount - 1, 0)) : undefined;
    const selection = at === undefined ? undefined : new vscode.Range(new vscode.Position(at, 0), new vscode.Position(at, 0));
    await vscode.window.showTextDocument(doc, { preview: true, ...(selection ? { selection } : {}) });
  }

  dispose(): void {
    for (const d of this.disposables) d.dispose();
  }
}
