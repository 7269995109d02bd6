// The code-server suite (e2e/): the packaged extension in a real VS Code.
// Run by test.sh after the .vsix is built and e2e/install.sh has installed
// code-server; one file, its tests in order, one browser.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['e2e/**/*.e2e.ts'],
    globalSetup: ['test/globalSetup.ts'],
    // A workbench, an extension host and Python daemons on 2 shared cores.
    testTimeout: 120_000,
    hookTimeout: 300_000,
    maxWorkers: 1,
    reporters: ['default', ['json', { outputFile: 'test-artifacts/e2e-results.json' }]],
  },
});
