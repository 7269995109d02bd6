// Optional `@agentd` chat participant, for VS Code builds where the Chat API
// exists (it needs Copilot Chat). It reuses the panel's turn code through its
// own AgentController (its own session), and its token cancels the prompt.

import * as vscode from 'vscode';
import type { AgentController } from '../protocol/controller';

type ChatApi = {
  createChatParticipant?: (id: string, handler: vscode.ChatRequestHandler) => vscode.ChatParticipant;
};

export function registerChatParticipant(controller: AgentController, extensionUri: vscode.Uri): vscode.Disposable | undefined {
  // Feature detection: older builds and other editors have no `vscode.chat`.
  const chat = (vscode as unknown as { chat?: ChatApi }).chat;
  if (!chat || typeof chat.createChatParticipant !== 'function') return undefined;

  const handler: vscode.ChatRequestHandler = async (request, _context, stream, token) => {
    const sub = controller.onEvent((e) => {
      if (e.type === 'update') {
        const u = e.update;
        if (u.kind === 'message_chunk') stream.markdown(u.text);
        else if (u.kind === 'tool_call') stream.progress(`Running ${u.name}…`);
        else if (u.kind === 'memory' && u.docs.length) {
          for (const p of u.docs) stream.reference(vscode.Uri.file(p));
        }
      } else if (e.type === 'toolState' && e.state === 'awaiting_approval') {
        stream.progress('Waiting for your approval…');
      }
    });
    const cancelSub = token.onCancellationRequested(() => controller.cancel());
    try {
      if (token.isCancellationRequested) return {};
      const res = await controller.prompt(request.prompt);
      if (res.outcome === 'error') return { errorDetails: { message: res.message ?? 'The prompt failed.' } };
      if (res.result?.usage) {
        return { metadata: { usage: res.result.usage } };
      }
      return {};
    } finally {
      sub.dispose();
      cancelSub.dispose();
    }
  };

  const participant = chat.createChatParticipant('agentd.agent', handler);
  participant.iconPath = vscode.Uri.joinPath(extensionUri, 'media', 'agentd.svg');
  return participant;
}
