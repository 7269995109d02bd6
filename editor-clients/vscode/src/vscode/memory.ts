// Memory commands: open the project's memory folder, list memories, show the
// memory status. When the daemon lacks memory/list, the folder is asked of
// the CLI (`agentd memory dir WORKSPACE`), which every agentd has.

import { execFile } from 'node:child_process';
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { AgentController } from '../protocol/controller';
import { NotSupportedError, explain } from '../protocol/controller';
import { readConfig } from './daemon';

function memoryDirFromCli(root: string): Promise<string> {
  const cfg = readConfig();
  return new Promise((resolve, reject) => {
    execFile(
      cfg.command,
      ['memory', 'dir', root],
      { env: { ...process.env, ...cfg.env }, timeout: 15_000 },
      (err, stdout, stderr) => {
        const dir = String(stdout).trim().split('\n').pop() ?? '';
        if (err || !dir) reject(new Error(`\`${cfg.command} memory dir\` failed: ${String(stderr).trim() || err?.message}`));
        else resolve(dir);
      },
    );
  });
}

export async function memoryDirectory(controller: AgentController, root: string): Promise<string> {
  try {
    return (await controller.memoryList()).directory;
  } catch (err) {
    if (err instanceof NotSupportedError || !controller.connected) return memoryDirFromCli(root);
    throw err;
  }
}

export function registerMemoryCommands(
  controller: AgentController,
  workspaceRoot: () => string | undefined,
): vscode.Disposable[] {
  const needRoot = (): string | undefined => {
    const root = workspaceRoot();
    if (!root) void vscode.window.showWarningMessage('Open a folder first: agentd keeps memory per workspace folder.');
    return root;
  };
  const fail = (err: unknown): void => void vscode.window.showErrorMessage(`agentd memory: ${explain(err)}`);

  return [
    vscode.commands.registerCommand('agentd.memory.openFolder', async () => {
      const root = needRoot();
      if (!root) return;
      try {
        const dir = await memoryDirectory(controller, root);
        await vscode.workspace.fs.createDirectory(vscode.Uri.file(dir));
        const index = vscode.Uri.file(path.join(dir, 'MEMORY.md'));
        try {
          await vscode.workspace.fs.stat(index);
          await vscode.window.showTextDocument(index, { preview: true });
        } catch {
          // No index yet: show the folder itself.
        }
        await vscode.commands.executeCommand('revealFileInOS', vscode.Uri.file(dir));
      } catch (err) {
        fail(err);
      }
    }),
    vscode.commands.registerCommand('agentd.memory.list', async () => {
      if (!needRoot()) return;
      try {
        const res = await controller.memoryList();
        if (res.docs.length === 0) {
          void vscode.window.showInformationMessage(`No memories yet. They will be kept in ${res.directory}.`);
          return;
        }
        const pick = await vscode.window.showQuickPick(
          res.docs.map((d) => ({
            label: d.name || path.basename(d.path),
            description: `${d.type}${d.team ? ' · team' : ''}`,
            detail: d.description,
            path: d.path,
          })),
          { placeHolder: `Memories of this project (${res.docs.length})`, matchOnDetail: true },
        );
        if (pick) await vscode.window.showTextDocument(vscode.Uri.file(pick.path), { preview: true });
      } catch (err) {
        fail(err);
      }
    }),
    vscode.commands.registerCommand('agentd.memory.status', async () => {
      if (!needRoot()) return;
      try {
        const s = await controller.memoryStatus();
        const lines = [
          `# agentd memory status`,
          ``,
          `- Folder: ${s.directory}`,
          `- Memories: ${s.docCount}`,
          `- Watcher: ${s.watcher}`,
          `- Extraction: ${s.extraction.state}${s.extraction.trailingPending ? ' (another run pending)' : ''}`,
          `- Last extraction: ${s.extraction.lastRunAt ?? 'never'}`,
          ...(s.extraction.lastError ? [`- Last error: ${s.extraction.lastError}`] : []),
          `- Deliveries: ${Object.entries(s.deliveries ?? {}).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`,
          ...(s.problems.length ? ['', '## Problems', ...s.problems.map((p) => `- ${p.path}: ${p.problem}`)] : []),
        ];
        const doc = await vscode.workspace.openTextDocument({ language: 'markdown', content: lines.join('\n') + '\n' });
        await vscode.window.showTextDocument(doc, { preview: true });
      } catch (err) {
        fail(err);
      }
    }),
  ];
}
