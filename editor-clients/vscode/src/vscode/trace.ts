// The *agentd (trace)* output channel, driven by the `agentd.trace.server`
// setting alone. vscode-languageclient 11 traces only while its trace
// channel's log level is Trace, and then turns "off" into "messages"
// (`refreshTrace` in lib/common/client.js); a log channel's level is the
// user's to set, not ours. So the client gets this channel instead: it
// reports Trace while the setting is "messages" or "verbose" and Off while it
// is "off", announces changes of the setting as log-level changes (which is
// what makes the client re-read it), and writes what it is given to a plain
// output channel, whatever the editor's log level.

import * as vscode from 'vscode';

export const TRACE_CHANNEL = 'agentd (trace)';
const SETTING = 'agentd.trace.server';

function traceSetting(): string {
  return vscode.workspace.getConfiguration('agentd').get<string>('trace.server') ?? 'off';
}

export class TraceChannel implements vscode.LogOutputChannel {
  readonly name = TRACE_CHANNEL;
  private readonly out: vscode.OutputChannel;
  private readonly levelChanged = new vscode.EventEmitter<vscode.LogLevel>();
  readonly onDidChangeLogLevel = this.levelChanged.event;
  private readonly configSub: vscode.Disposable;

  constructor() {
    this.out = vscode.window.createOutputChannel(TRACE_CHANNEL);
    this.configSub = vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration(SETTING)) this.levelChanged.fire(this.logLevel);
    });
  }

  get logLevel(): vscode.LogLevel {
    return traceSetting() === 'off' ? vscode.LogLevel.Off : vscode.LogLevel.Trace;
  }

  private line(level: string, message: string): void {
    if (this.logLevel === vscode.LogLevel.Off) return;
    this.out.appendLine(`${new Date().toISOString()} [${level}] ${message}`);
  }

  trace(message: string): void {
    this.line('trace', message);
  }
  debug(message: string): void {
    this.line('debug', message);
  }
  info(message: string): void {
    this.line('info', message);
  }
  warn(message: string): void {
    this.line('warning', message);
  }
  error(error: string | Error): void {
    this.line('error', error instanceof Error ? (error.stack ?? error.message) : error);
  }
  append(value: string): void {
    this.out.append(value);
  }
  appendLine(value: string): void {
    this.out.appendLine(value);
  }
  replace(value: string): void {
    this.out.replace(value);
  }
  clear(): void {
    this.out.clear();
  }
  show(columnOrPreserveFocus?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
    if (typeof columnOrPreserveFocus === 'boolean' || columnOrPreserveFocus === undefined) this.out.show(columnOrPreserveFocus);
    else this.out.show(columnOrPreserveFocus, preserveFocus);
  }
  hide(): void {
    this.out.hide();
  }
  dispose(): void {
    this.configSub.dispose();
    this.levelChanged.dispose();
    this.out.dispose();
  }
}
