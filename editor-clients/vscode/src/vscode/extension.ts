// Extension entry point: wires the daemon, the chat panel, the tools, the
// memory commands and the optional chat participant together.

import * as vscode from 'vscode';
import { AgentController } from '../protocol/controller';
import type { PermissionQuestion } from '../protocol/permission';
import type { PermissionOption } from '../protocol/types';
import { ClientToolRunner } from '../tools/clientTools';
import { ChatViewProvider, VIEW_ID } from './chatView';
import { DaemonManager, type ClientFactory } from './daemon';
import { registerMemoryCommands } from './memory';
import { registerChatParticipant } from './participant';
import { askElicitation } from './elicitation';
import { EditReviews } from './review';
import { TerminalCommandRunner } from './terminal';
import { TraceChannel } from './trace';
import { VscodeWorkspace } from './workspace';

export interface ExtensionApi {
  daemon: DaemonManager;
  chat: ChatViewProvider;
  controller: AgentController;
  reviews: EditReviews;
}

export function workspaceRoot(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.find((f) => f.uri.scheme === 'file');
  return folder?.uri.fsPath;
}

/**
 * The other local folders of a multi-root workspace: a session's
 * `additionalDirectories` (the first stays its workspace root). Read when a
 * session starts and when a tool runs, so a folder added or removed counts
 * from the next new session (and for the editor's own tools at once).
 */
export function additionalRoots(): string[] {
  const root = workspaceRoot();
  const folders = vscode.workspace.workspaceFolders ?? [];
  return folders.filter((f) => f.uri.scheme === 'file' && f.uri.fsPath !== root).map((f) => f.uri.fsPath);
}

/** `factory` is replaceable so tests can drive activation without spawning a LanguageClient. */
export async function activate(context: vscode.ExtensionContext, factory?: ClientFactory): Promise<ExtensionApi> {
  const output = vscode.window.createOutputChannel('agentd', { log: true });
  const trace = new TraceChannel();
  const reviews = new EditReviews();
  context.subscriptions.push(output, trace, reviews);

  // Loaded lazily: only the real editor needs vscode-languageclient (tests pass a factory).
  const clientFactory = factory ?? (await import('./languageClient')).languageClientFactory(output, trace);
  const daemon = new DaemonManager(clientFactory, output);
  // Disposed on deactivation: the commands still running stop, with what they started.
  const commands = new TerminalCommandRunner(undefined, { timeoutMs: commandTimeoutMs });
  context.subscriptions.push(commands);
  const tools = new ClientToolRunner(new VscodeWorkspace(reviews, commands), {
    workspaceRoot,
    additionalRoots,
    editApproval: () => (vscode.workspace.getConfiguration('agentd').get<string>('approval.edits') === 'always' ? 'always' : 'ask'),
  });
  // A permission question goes on the tool card; while the panel is not on
  // screen it is asked in a dialog instead (the card shows it too).
  let chat: ChatViewProvider | undefined;
  const controller = new AgentController(workspaceRoot, tools, {
    additionalRoots,
    askPermission: (question, options, signal) => (chat?.visible ? undefined : askPermissionInDialog(question, options, signal)),
    // MCP servers' questions (agent/elicit) in the editor's dialogs, panel on screen or not.
    elicit: askElicitation,
  });
  chat = new ChatViewProvider(context.extensionUri, controller, daemon, workspaceRoot, reviews);
  context.subscriptions.push(
    daemon,
    chat,
    daemon.attach(controller),
    vscode.window.registerWebviewViewProvider(VIEW_ID, chat, { webviewOptions: { retainContextWhenHidden: true } }),
    vscode.commands.registerCommand('agentd.restart', () => daemon.restart()),
    vscode.commands.registerCommand('agentd.showOutput', () => output.show(true)),
    vscode.commands.registerCommand('agentd.cancel', () => controller.cancel()),
    vscode.commands.registerCommand('agentd.newSession', () => chat.onMessage({ type: 'newSession' })),
    vscode.commands.registerCommand('agentd.resetSession', () => chat.onMessage({ type: 'reset' })),
    vscode.commands.registerCommand('agentd.switchSession', () => chat.onMessage({ type: 'switchSession' })),
    vscode.commands.registerCommand('agentd.compact', () => chat.compact()),
    // From the diff editor's title (the proposal's URI is the argument) or the palette.
    vscode.commands.registerCommand('agentd.acceptEdit', (uri?: vscode.Uri) => reviews.decide(uri, 'once')),
    vscode.commands.registerCommand('agentd.rejectEdit', (uri?: vscode.Uri) => reviews.decide(uri, 'deny')),
    vscode.commands.registerCommand('agentd.acceptAllEdits', (uri?: vscode.Uri) => reviews.decide(uri, 'session')),
    ...registerMemoryCommands(controller, workspaceRoot),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (['agentd.command', 'agentd.args', 'agentd.env'].some((k) => e.affectsConfiguration(k))) {
        const choice = await vscode.window.showInformationMessage('agentd settings changed. Restart agentd to apply them?', 'Restart');
        if (choice === 'Restart') await daemon.restart();
      }
    }),
  );

  // The participant has its own session, so the panel and @agentd do not
  // interleave prompts in one conversation.
  const participantController = new AgentController(workspaceRoot, tools, {
    watchMemory: false,
    additionalRoots,
    askPermission: askPermissionInDialog,
    elicit: askElicitation,
  });
  const participant = registerChatParticipant(participantController, context.extensionUri);
  if (participant) context.subscriptions.push(participant, daemon.attach(participantController));

  void daemon.start();
  return { daemon, chat, controller, reviews };
}

/** agentd.commandTimeout (seconds; 0 or less: no limit) in ms. */
export function commandTimeoutMs(): number {
  const seconds = vscode.workspace.getConfiguration('agentd').get<number>('commandTimeout', 0);
  return typeof seconds === 'number' && Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 0;
}

/**
 * agent/requestPermission for the @agentd participant, which has no tool
 * cards: a modal dialog whose buttons are the daemon's options (closing it
 * answers nothing, which the daemon takes as a refusal). An MCP server's
 * request to use the model is its own question ("db asks to use the
 * model"), not a tool to run; the daemon's description (what the server
 * sends, or what the tool does) is the dialog's detail, which is plain text.
 */
export async function askPermissionInDialog(question: PermissionQuestion, options: PermissionOption[], signal: AbortSignal): Promise<string | undefined> {
  if (signal.aborted) return undefined;
  const items = options.map((o) => ({ title: o.name, optionId: o.optionId, isCloseAffordance: o.kind.startsWith('reject') }));
  const message = question.kind === 'sampling' ? question.title : `agentd wants to run ${question.title}`;
  const dialog = { modal: true, ...(question.description ? { detail: question.description } : {}) };
  const pick = await vscode.window.showWarningMessage(message, dialog, ...items);
  return signal.aborted ? undefined : pick?.optionId;
}

export function deactivate(): void {
  // Disposables in context.subscriptions stop the daemon (shutdown + exit)
  // and the commands still running (TerminalCommandRunner.dispose).
}
