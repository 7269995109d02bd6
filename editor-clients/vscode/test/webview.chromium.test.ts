// The chat webview's real HTML (with its CSP) and bundled script in headless
// Chromium: events render, model HTML stays text, Stop posts `cancel`, and
// the page raises no errors (CSP violations included). Saves a screenshot.

import * as esbuild from 'esbuild';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import { chatHtml, makeNonce } from '../src/webview/html';

const ROOT = path.resolve(__dirname, '..');
const ARTIFACTS = path.join(ROOT, 'test-artifacts');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

let server: http.Server;
let origin: string;
let browser: Browser;
let page: Page;
let problems: string[];

beforeAll(async () => {
  // Bundle the webview exactly as the extension build does, in memory.
  const bundle = await esbuild.build({
    entryPoints: [path.join(ROOT, 'src/webview/chat.ts')],
    bundle: true,
    write: false,
    format: 'iife',
    platform: 'browser',
    target: 'es2020',
  });
  const script = bundle.outputFiles[0].text;
  const css = fs.readFileSync(path.join(ROOT, 'media/chat.css'), 'utf8');
  server = http.createServer((req, res) => {
    if (req.url === '/webview.js') return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
    if (req.url === '/chat.css') return void res.writeHead(200, { 'content-type': 'text/css' }).end(css);
    if (req.url === '/') {
      const html = chatHtml({ cspSource: origin, nonce: makeNonce(), scriptUri: `${origin}/webview.js`, styleUri: `${origin}/chat.css` });
      return void res.writeHead(200, { 'content-type': 'text/html' }).end(html);
    }
    // Chromium asks for a favicon; VS Code's webview host does not.
    if (req.url === '/favicon.ico') return void res.writeHead(204).end();
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
  fs.mkdirSync(ARTIFACTS, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await new Promise((r) => server?.close(r));
});

beforeEach(async () => {
  problems = [];
  page = await browser.newPage({ viewport: { width: 440, height: 900 } });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`console.${m.type()}: ${m.text()}`);
  });
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  // VS Code injects acquireVsCodeApi; init scripts run before the page's own.
  await page.addInitScript(() => {
    const w = window as unknown as { __posted: unknown[]; acquireVsCodeApi: () => unknown };
    w.__posted = [];
    w.acquireVsCodeApi = () => ({ postMessage: (m: unknown) => w.__posted.push(m), getState: () => undefined, setState: () => {} });
  });
  await page.goto(`${origin}/`);
  await page.waitForFunction(() => (window as unknown as { __posted: { type: string }[] }).__posted.some((m) => m.type === 'ready'));
});

const send = (events: ChatEvent[] | ChatEvent): Promise<void> =>
  page.evaluate((e) => window.postMessage(e, '*'), events as unknown as Record<string, unknown>);
const posted = (): Promise<{ type: string; [k: string]: unknown }[]> =>
  page.evaluate(() => (window as unknown as { __posted: { type: string }[] }).__posted);
const S = 'sess-1';

describe('chat webview in Chromium', () => {
  it('renders a whole turn: markdown, thoughts, tool cards, memory, usage', async () => {
    await send([
      { type: 'daemon', state: 'ready' },
      {
        type: 'memory',
        available: true,
        directory: '/home/me/.local/share/agentd/projects/demo/memory',
        docs: [{ path: '/mem/style.md', name: 'code style', description: 'Use tabs in Go files', type: 'feedback', mtime: 1 }],
      },
      { type: 'turnStart', turnId: 't1', sessionId: S, prompt: 'Why does test_x fail?' },
      { type: 'update', turnId: 't1', update: { kind: 'memory', point: 'user_query', tier: 'local', docs: ['/mem/style.md'] } },
      { type: 'update', turnId: 't1', update: { kind: 'thought_chunk', text: 'Let me look at the test first.' } },
      {
        type: 'update',
        turnId: 't1',
        update: { kind: 'tool_call', toolCallId: 'c1', name: 'read_file', arguments: { path: 'tests/test_x.py' }, executor: 'daemon' },
      },
      { type: 'update', turnId: 't1', update: { kind: 'tool_call_update', toolCallId: 'c1', status: 'completed', content: '1  def test_x(): assert add(1, 1) == 3' } },
      {
        type: 'update',
        turnId: 't1',
        update: { kind: 'memory', point: 'tool_result', tier: 'model', docs: ['/mem/a.md', '/mem/b.md', '/mem/c.md'] },
      },
      {
        type: 'update',
        turnId: 't1',
        update: { kind: 'tool_call', toolCallId: 'c2', name: 'run_command', arguments: { command: 'pytest -q tests/test_x.py' }, executor: 'client' },
      },
      { type: 'toolState', turnId: 't1', toolCallId: 'c2', state: 'awaiting_approval', detail: 'agentd wants to run a command' },
      { type: 'toolState', turnId: 't1', toolCallId: 'c2', state: 'done', detail: '1 failed in 0.02s\n[exit code: 1]' },
      { type: 'update', turnId: 't1', update: { kind: 'message_chunk', text: 'The test expects **3**, but `add(1, 1)` ' } },
      { type: 'update', turnId: 't1', update: { kind: 'message_chunk', text: 'returns 2:\n\n```python\nassert add(1, 1) == 2\n```\n\n- fix the test\n- or the function' } },
      { type: 'update', turnId: 't1', update: { kind: 'usage', inputTokens: 812, outputTokens: 64, sessionTotalTokens: 876 } },
      { type: 'turnEnd', turnId: 't1', outcome: 'completed', stopReason: 'end_turn', usage: { inputTokens: 812, outputTokens: 64 } },
    ]);
    const turn = page.locator('section.turn[data-turn-id="t1"]');
    await turn.locator('[data-state="completed"]').or(page.locator('section.turn[data-state="completed"]')).first().waitFor();
    await page.waitForFunction(() => document.querySelector('.md pre code')?.textContent === 'assert add(1, 1) == 2');
    expect(await turn.locator('.user-msg').textContent()).toBe('Why does test_x fail?');
    expect(await turn.locator('.md strong').first().textContent()).toBe('3');
    expect(await turn.locator('.md li').allTextContents()).toEqual(['fix the test', 'or the function']);
    // Thoughts are collapsed by default.
    expect(await turn.locator('details.thought').evaluate((d) => (d as HTMLDetailsElement).open)).toBe(false);
    expect(await turn.locator('details.thought .thought-body').textContent()).toBe('Let me look at the test first.');
    // Tool cards with their status.
    expect(await turn.locator('.tool-card[data-tool-call-id="c1"] .badge').textContent()).toBe('completed');
    expect(await turn.locator('.tool-card[data-tool-call-id="c2"]').getAttribute('data-status')).toBe('done');
    expect(await turn.locator('.tool-card[data-tool-call-id="c2"] .tool-summary').textContent()).toBe('pytest -q tests/test_x.py');
    expect(await turn.locator('.tool-card[data-tool-call-id="c2"] .tool-result').textContent()).toContain('[exit code: 1]');
    // Memory deliveries, with links that ask the extension to open the file.
    const notes = await turn.locator('.memory-note').allTextContents();
    expect(notes).toEqual([
      '1 memory recalled at your question: style.md',
      '3 memories recalled at the tool result (chosen by the model): a.md, b.md, c.md',
    ]);
    await turn.locator('.memory-note button', { hasText: 'b.md' }).click();
    expect((await posted()).at(-1)).toEqual({ type: 'openFile', path: '/mem/b.md' });
    expect(await turn.locator('.usage').textContent()).toBe('Tokens: 812 in, 64 out (session total 876)');
    // The memory panel lists the project's memories.
    expect(await page.locator('#memory-count').textContent()).toBe('(1)');
    expect(await page.locator('#daemon-state').textContent()).toBe('agentd ready');

    // A second turn ending in a model error, for the screenshot too.
    await send([
      { type: 'turnStart', turnId: 't2', sessionId: S, prompt: 'And now?' },
      { type: 'update', turnId: 't2', update: { kind: 'message_chunk', text: 'Checking' } },
      { type: 'turnEnd', turnId: 't2', outcome: 'error', stopReason: 'error', message: 'The model server answered 429 (rate limited) three times. Try again in a minute.' },
    ]);
    await page.locator('section.turn[data-turn-id="t2"] .error').waitFor();
    expect(await page.locator('section.turn[data-turn-id="t2"] .error').textContent()).toBe(
      'The model server answered 429 (rate limited) three times. Try again in a minute.',
    );
    await page.locator('#memory summary').click();
    await page.screenshot({ path: path.join(ARTIFACTS, 'chat.png'), fullPage: true });
    expect(problems).toEqual([]);
  });

  it('shows model HTML as text and runs none of it', async () => {
    const evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script> [link](javascript:window.pwned=3) <b>bold?</b>';
    await send([
      { type: 'turnStart', turnId: 'e1', sessionId: S, prompt: '<img src=y onerror="window.pwned=4">' },
      { type: 'update', turnId: 'e1', update: { kind: 'message_chunk', text: evil } },
      { type: 'update', turnId: 'e1', update: { kind: 'thought_chunk', text: '<svg onload="window.pwned=5">' } },
      {
        type: 'update',
        turnId: 'e1',
        update: { kind: 'tool_call', toolCallId: 'x', name: '<script>1</script>', arguments: { path: '<img src=z onerror="window.pwned=6">' }, executor: 'client' },
      },
      { type: 'update', turnId: 'e1', update: { kind: 'memory', point: 'user_query', tier: 'local', docs: ['/m/<img src=q onerror="window.pwned=7">.md'] } },
      { type: 'turnEnd', turnId: 'e1', outcome: 'error', message: '<img src=w onerror="window.pwned=8">' },
    ]);
    await page.locator('section.turn[data-turn-id="e1"][data-state="error"]').waitFor();
    await page.waitForFunction(() => document.querySelector('section.turn[data-turn-id="e1"] .md')?.textContent?.includes('bold?'));
    const turn = page.locator('section.turn[data-turn-id="e1"]');
    expect(await turn.locator('.answer > .md').textContent()).toBe(
      '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script> [link](javascript:window.pwned=3) <b>bold?</b>',
    );
    expect(await turn.locator('.user-msg').textContent()).toBe('<img src=y onerror="window.pwned=4">');
    // No element from model text exists: no img, svg, b, or extra script, no javascript: link.
    expect(await page.locator('img, svg, b, iframe').count()).toBe(0);
    expect(await page.locator('script').count()).toBe(1);
    expect(await page.locator('a[href^="javascript"]').count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
    expect(problems).toEqual([]);
  });

  it('Stop posts cancel and shows the turn cancelled at once', async () => {
    await send([
      { type: 'turnStart', turnId: 's1', sessionId: S, prompt: 'write a long essay' },
      { type: 'update', turnId: 's1', update: { kind: 'message_chunk', text: 'Once upon a time' } },
      { type: 'update', turnId: 's1', update: { kind: 'tool_call', toolCallId: 'k', name: 'run_command', arguments: { command: 'sleep 100' }, executor: 'client' } },
    ]);
    const stop = page.locator('#btn-stop');
    await page.waitForFunction(() => !(document.getElementById('btn-stop') as HTMLButtonElement).disabled);
    expect(await page.locator('#btn-send').isDisabled()).toBe(true);
    await stop.click();
    expect((await posted()).filter((m) => m.type === 'cancel')).toHaveLength(1);
    // Without any reply from the extension, the turn already reads as cancelled.
    const turn = page.locator('section.turn[data-turn-id="s1"]');
    expect(await turn.getAttribute('data-state')).toBe('cancelled');
    expect(await turn.locator('.turn-footer').textContent()).toBe('Cancelled');
    expect(await turn.locator('.tool-card').getAttribute('data-status')).toBe('cancelled');
    expect(await stop.isDisabled()).toBe(true);
    expect(await page.locator('#btn-send').isDisabled()).toBe(false);
    // The extension's confirmation changes nothing.
    await send({ type: 'turnEnd', turnId: 's1', outcome: 'cancelled' });
    await page.waitForFunction(() => document.querySelector('section.turn[data-turn-id="s1"] .turn-footer')?.textContent === 'Cancelled');
    expect(problems).toEqual([]);
  });

  it('sends prompts with Enter, keeps Shift+Enter for new lines; session actions are not duplicated in the page', async () => {
    const box = page.locator('#prompt');
    await box.fill('first line');
    await box.press('Shift+Enter');
    await box.type('second line');
    await box.press('Enter');
    expect((await posted()).filter((m) => m.type === 'prompt')).toEqual([{ type: 'prompt', text: 'first line\nsecond line' }]);
    expect(await box.inputValue()).toBe('');
    // New / Sessions / Reset are the view's title-bar actions (package.json), not page buttons.
    expect(await page.locator('button', { hasText: /^(New|Sessions|Reset)$/ }).count()).toBe(0);
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.contributes.menus['view/title'].map((m: { command: string }) => m.command)).toEqual([
      'agentd.newSession',
      'agentd.switchSession',
      'agentd.resetSession',
    ]);
    await send([{ type: 'turnStart', turnId: 'a', sessionId: S, prompt: 'p' }, { type: 'cleared' }]);
    await page.waitForFunction(() => document.getElementById('transcript')!.childElementCount === 0);
    expect(problems).toEqual([]);
  });

  it('notices about the daemon being down go away when it is ready again; others stay', async () => {
    await send([
      { type: 'daemon', state: 'stopped', message: 'agentd exited unexpectedly. Its last messages are in the agentd output.' },
      { type: 'notice', level: 'error', text: 'agentd is not running. Use "agentd: Restart agentd" or fix agentd.command.', scope: 'daemon' },
      { type: 'notice', level: 'warning', text: 'A prompt is still running: press Stop first.' },
    ]);
    await page.locator('.notice').nth(2).waitFor();
    expect(await page.locator('.notice button', { hasText: 'Restart agentd' }).count()).toBe(1);
    await send({ type: 'daemon', state: 'ready' });
    await page.waitForFunction(() => document.querySelectorAll('.notice').length === 1);
    expect(await page.locator('.notice').textContent()).toContain('A prompt is still running');
    expect(await page.locator('#daemon-state').textContent()).toBe('agentd ready');
    expect(problems).toEqual([]);
  });

  it('a proposed edit can be accepted or rejected from its card; a refusal reads "denied", not "failed"', async () => {
    await send([
      { type: 'turnStart', turnId: 'r1', sessionId: S, prompt: 'edit two files' },
      { type: 'update', turnId: 'r1', update: { kind: 'tool_call', toolCallId: 'e1', name: 'edit_file', arguments: { path: 'a.py' }, executor: 'client' } },
      { type: 'update', turnId: 'r1', update: { kind: 'tool_call', toolCallId: 'e2', name: 'edit_file', arguments: { path: 'b.py' }, executor: 'client' } },
      { type: 'toolState', turnId: 'r1', toolCallId: 'e1', state: 'awaiting_approval', detail: 'agentd wants to edit a.py', review: true },
      { type: 'toolState', turnId: 'r1', toolCallId: 'e2', state: 'awaiting_approval', detail: 'agentd wants to edit b.py', review: true },
    ]);
    const e1 = page.locator('.tool-card[data-tool-call-id="e1"]');
    const e2 = page.locator('.tool-card[data-tool-call-id="e2"]');
    await e2.locator('button', { hasText: 'Reject' }).waitFor();
    await e1.locator('button', { hasText: 'Show diff' }).click();
    await e1.locator('button', { hasText: /^Accept$/ }).click();
    await e2.locator('button', { hasText: 'Reject' }).click();
    expect((await posted()).filter((m) => m.type === 'review')).toEqual([
      { type: 'review', toolCallId: 'e1', decision: 'show' },
      { type: 'review', toolCallId: 'e1', decision: 'accept' },
      { type: 'review', toolCallId: 'e2', decision: 'reject' },
    ]);
    expect(await e2.locator('button', { hasText: /^Accept$/ }).isDisabled()).toBe(true);
    await send([
      { type: 'toolState', turnId: 'r1', toolCallId: 'e1', state: 'done', detail: 'Edited a.py: replaced 1 occurrence.' },
      { type: 'toolState', turnId: 'r1', toolCallId: 'e2', state: 'denied', detail: 'The user denied this edit.' },
      // The daemon reports the refusal as a failed tool call.
      { type: 'update', turnId: 'r1', update: { kind: 'tool_call_update', toolCallId: 'e2', status: 'failed', content: 'The user denied this edit.' } },
      { type: 'update', turnId: 'r1', update: { kind: 'tool_call_update', toolCallId: 'e1', status: 'completed', content: 'Edited a.py: replaced 1 occurrence.' } },
    ]);
    await page.waitForFunction(() => document.querySelector('.tool-card[data-tool-call-id="e1"]')?.getAttribute('data-status') === 'completed');
    expect(await e2.getAttribute('data-status')).toBe('denied');
    expect(await e2.locator('.badge').textContent()).toBe('denied');
    expect(await e1.locator('.tool-actions button').count()).toBe(0);
    expect(await e2.locator('.tool-actions button').count()).toBe(0);
    const [failedColour, deniedColour] = await page.evaluate(() => {
      const denied = document.querySelector('.tool-card[data-tool-call-id="e2"] .badge')!;
      const probe = document.createElement('div');
      probe.className = 'tool-card';
      probe.dataset.status = 'failed';
      probe.innerHTML = '<span class="badge">failed</span>';
      document.body.append(probe);
      const failed = getComputedStyle(probe.querySelector('.badge')!).backgroundColor;
      probe.remove();
      return [failed, getComputedStyle(denied).backgroundColor];
    });
    expect(deniedColour).not.toBe(failedColour);
    await page.screenshot({ path: path.join(ARTIFACTS, 'review.png'), fullPage: true });
    expect(problems).toEqual([]);
  });

  it('a replayed session shows its memory lines, token lines and Cancelled badges', async () => {
    await send([
      { type: 'turnStart', turnId: 'p1', sessionId: S, prompt: 'first', replay: true },
      { type: 'update', turnId: 'p1', update: { kind: 'memory', point: 'user_query', tier: 'local', docs: ['/m/a.md'] } },
      { type: 'update', turnId: 'p1', update: { kind: 'message_chunk', text: 'answer' } },
      { type: 'update', turnId: 'p1', update: { kind: 'usage', inputTokens: 5, outputTokens: 1, sessionTotalTokens: 6 } },
      { type: 'turnEnd', turnId: 'p1', outcome: 'replayed', replay: true },
      { type: 'turnStart', turnId: 'p2', sessionId: S, prompt: 'second', replay: true },
      { type: 'update', turnId: 'p2', update: { kind: 'message_chunk', text: 'part' } },
      { type: 'turnEnd', turnId: 'p2', outcome: 'cancelled', replay: true },
    ]);
    await page.locator('section.turn[data-turn-id="p2"][data-state="cancelled"]').waitFor();
    expect(await page.locator('section.turn[data-turn-id="p1"] .memory-note').textContent()).toBe('1 memory recalled at your question: a.md');
    expect(await page.locator('section.turn[data-turn-id="p1"] .usage').textContent()).toBe('Tokens: 5 in, 1 out (session total 6)');
    expect(await page.locator('section.turn[data-turn-id="p2"] .turn-footer').textContent()).toBe('Cancelled');
    // Replayed turns never make the panel look busy.
    expect(await page.locator('#btn-stop').isDisabled()).toBe(true);
    expect(problems).toEqual([]);
  });
});
