// The real ClientFactory: a vscode-languageclient LanguageClient over stdio.
// The client attaches to no document (empty documentSelector): agentd is an
// agent, not a language server, and must not receive every open file.

import type * as vscode from 'vscode';
import { CloseAction, ErrorAction, LanguageClient, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';
import type { CancellationToken } from '../protocol/connection';
import type { AgentdCapabilities } from '../protocol/types';
import type { ClientFactory, DaemonClient } from './daemon';

export function languageClientFactory(output: vscode.LogOutputChannel, traceOutput: vscode.LogOutputChannel): ClientFactory {
  return (config, hooks) => {
    const serverOptions: ServerOptions = {
      command: config.resolvedCommand,
      args: config.args,
      options: { env: config.env },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [],
      outputChannel: output,
      traceOutputChannel: traceOutput,
      initializationOptions: config.initializationOptions,
      errorHandler: {
        // A bad frame or a failing write is logged; the daemon resynchronises.
        error: () => ({ action: ErrorAction.Continue, handled: true }),
        // Restarting is the user's call: the manager explains and offers it.
        closed: () => {
          hooks.onClosed();
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
    };
    // The id 'agentd' makes the client read the `agentd.trace.server` setting.
    const client = new LanguageClient('agentd', 'agentd', serverOptions, clientOptions);
    const conn: DaemonClient = {
      start: () => client.start(),
      stop: (timeout) => client.stop(timeout),
      // An explicit `undefined` token would be sent as a second positional
      // param by vscode-jsonrpc, so the token is only passed when there is one.
      sendRequest: <R>(method: string, params: unknown, token?: CancellationToken) =>
        token
          ? client.sendRequest<R>(method, params, token as vscode.CancellationToken)
          : client.sendRequest<R>(method, params),
      sendNotification: (method, params) => client.sendNotification(method, params),
      onNotification: (method, handler) => client.onNotification(method, handler),
      onRequest: (method, handler) => client.onRequest(method, (params, token) => handler(params, token)),
      capabilities: () => (client.initializeResult?.capabilities as { experimental?: { agentd?: AgentdCapabilities } } | undefined)?.experimental?.agentd,
    };
    return conn;
  };
}
