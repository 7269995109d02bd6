import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Extension code imports 'vscode', which only exists inside the editor.
    alias: { vscode: fileURLToPath(new URL('./test/mocks/vscode.ts', import.meta.url)) },
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/globalSetup.ts'],
    // Protocol tests spawn Python processes; on 2 cores, start-up can be slow.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Real daemons and a browser per file: keep parallelism modest.
    maxWorkers: 2,
    reporters: ['default', ['json', { outputFile: 'test-artifacts/vitest-results.json' }]],
  },
});
