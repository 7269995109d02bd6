// One temporary folder per test run for workspaces and AGENTD_HOMEs, removed
// at the end (workers are not guaranteed to run exit handlers).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    tmpRoot: string;
  }
}

export default function setup(project: TestProject): () => void {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-vscode-test-'));
  project.provide('tmpRoot', root);
  // Retried: a daemon of the code-server suite may still be writing its
  // transcript there while it shuts down (ENOTEMPTY).
  return () => fs.rmSync(root, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
}
