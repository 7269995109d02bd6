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
      'agentd.compact', // in the "..." menu, only while the daemon reports a context window
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
  it('tool cards link their locations as file:line (issue 18); a click asks to open the file at the line', async () => {
    const hits = Array.from({ length: 23 }, (_, i) => ({ path: `/ws/src/f${i}.py`, line: i + 1 }));
    await send([
      { type: 'turnStart', turnId: 'l1', sessionId: S, prompt: 'find needle' },
      {
        type: 'update',
        turnId: 'l1',
        update: { kind: 'tool_call', toolCallId: 'r', name: 'read_file', arguments: { path: 'app.py', offset: 7 }, executor: 'daemon', locations: [{ path: '/ws/app.py', line: 7 }] },
      },
      { type: 'update', turnId: 'l1', update: { kind: 'tool_call', toolCallId: 's', name: 'search', arguments: { query: 'needle' }, executor: 'daemon' } },
      { type: 'update', turnId: 'l1', update: { kind: 'tool_call_update', toolCallId: 's', status: 'completed', content: 'src/f0.py\n1:needle', locations: hits } },
      { type: 'update', turnId: 'l1', update: { kind: 'tool_call', toolCallId: 'd', name: 'list_dir', arguments: {}, executor: 'daemon', locations: [{ path: '/ws' }] } },
    ]);
    const search = page.locator('.tool-card[data-tool-call-id="s"]');
    await search.locator('.location').first().waitFor();
    expect(await page.locator('.tool-card[data-tool-call-id="r"] .location').allTextContents()).toEqual(['app.py:7']);
    expect(await search.locator('.location').count()).toBe(20);
    expect(await search.locator('.tool-locations').textContent()).toContain('and 3 more');
    expect(await search.locator('.location').nth(2).getAttribute('title')).toBe('/ws/src/f2.py:3');
    expect(await page.locator('.tool-card[data-tool-call-id="d"] .location').allTextContents()).toEqual(['ws']);
    await search.locator('.location', { hasText: 'f2.py:3' }).click();
    await page.locator('.tool-card[data-tool-call-id="d"] .location').click();
    expect((await posted()).filter((m) => m.type === 'openFile')).toEqual([
      { type: 'openFile', path: '/ws/src/f2.py', line: 3 },
      { type: 'openFile', path: '/ws' },
    ]);
    expect(problems).toEqual([]);
  });

  it('context meter, compaction divider (live and replayed) and the plan view', async () => {
    expect(await page.locator('#context-meter').isHidden()).toBe(true);
    expect(await page.locator('#plan').isHidden()).toBe(true);
    await send([
      { type: 'turnStart', turnId: 'c1', sessionId: S, prompt: 'long work' },
      { type: 'update', turnId: 'c1', update: { kind: 'usage', inputTokens: 20000, outputTokens: 10, sessionTotalTokens: 20010, contextTokens: 20160, contextWindow: 32000 } },
      { type: 'context', tokens: 20160, window: 32000 },
      {
        type: 'plan',
        entries: [
          { content: 'read the failing test', priority: 'high', status: 'completed' },
          { content: 'fix <b>add()</b>', priority: 'high', status: 'in_progress' },
          { content: 'run the suite', priority: 'low', status: 'pending' },
        ],
      },
      { type: 'turnEnd', turnId: 'c1', outcome: 'completed', stopReason: 'end_turn' },
      { type: 'compaction', update: { kind: 'compaction', status: 'started', trigger: 'threshold', tokensBefore: 0, tokensAfter: 0, cleared: 0, summarized: 0 } },
    ]);
    await page.locator('.compaction[data-status="started"]').waitFor();
    expect(await page.locator('#context-meter').textContent()).toBe('context 63 %');
    expect(await page.locator('#plan-count').textContent()).toBe('(1/3)');
    expect(await page.locator('#plan-body li').allTextContents()).toEqual(['read the failing testdone', 'fix <b>add()</b>in progress', 'run the suitepending']);
    expect(await page.locator('#plan-body li').nth(1).getAttribute('data-status')).toBe('in_progress');
    await send([
      {
        type: 'compaction',
        update: { kind: 'compaction', status: 'done', trigger: 'threshold', tokensBefore: 28000, tokensAfter: 6100, cleared: 2, summarized: 14, summary: 'The user wants add() fixed.' },
      },
      { type: 'context', tokens: 6100, window: 32000 },
    ]);
    await page.locator('.compaction[data-status="done"]').waitFor();
    // The "started" line was replaced, not kept beside the result.
    expect(await page.locator('.compaction').count()).toBe(1);
    expect(await page.locator('.compaction-label').textContent()).toBe(
      'Conversation compacted: about 28,000 → 6,100 tokens (14 messages summarised, 2 tool outputs cleared)',
    );
    expect(await page.locator('.compaction-summary').textContent()).toContain('The user wants add() fixed.');
    expect(await page.locator('#context-meter').textContent()).toBe('context 19 %');
    // A failed one says so and that nothing was lost.
    await send({ type: 'compaction', update: { kind: 'compaction', status: 'failed', trigger: 'manual', tokensBefore: 6100, tokensAfter: 6100, cleared: 0, summarized: 0, message: 'the summariser answered 500' } });
    await page.locator('.compaction[data-status="failed"]').waitFor();
    expect(await page.locator('.compaction[data-status="failed"]').textContent()).toBe('Compaction failed: the summariser answered 500.');
    await page.screenshot({ path: path.join(ARTIFACTS, 'compaction.png'), fullPage: true });
    // A replay (a reloaded session) shows the divider before the verbatim tail; the plan goes with a new session.
    await send([
      { type: 'cleared' },
      { type: 'compaction', replay: true, update: { kind: 'compaction', status: 'done', trigger: 'threshold', tokensBefore: 28000, tokensAfter: 6100, cleared: 0, summarized: 14 } },
      { type: 'turnStart', turnId: 'c2', sessionId: S, prompt: 'kept verbatim', replay: true },
      { type: 'turnEnd', turnId: 'c2', outcome: 'replayed', replay: true },
      { type: 'plan', entries: [] },
    ]);
    await page.locator('section.turn[data-turn-id="c2"]').waitFor();
    expect(await page.locator('#transcript > *').evaluateAll((els) => els.map((e) => e.className))).toEqual(['compaction', 'turn']);
    expect(await page.locator('#context-meter').isHidden()).toBe(true);
    await page.waitForFunction(() => document.getElementById('plan')!.hidden);
    expect(problems).toEqual([]);
  });

  it('the mode and model pickers show only when the session has them, and post the choice', async () => {
    expect(await page.locator('#mode').isHidden()).toBe(true);
    expect(await page.locator('#model').isHidden()).toBe(true);
    const modes = [
      { id: 'ask', name: 'Ask', description: 'Read-only: answers questions' },
      { id: 'code', name: 'Code', description: 'Asks before edits and commands' },
      { id: 'auto-edit', name: 'Auto-edit', description: 'Edits without asking' },
    ];
    await send({ type: 'setup', sessionId: S, setup: { mode: 'code', modes, model: 'test', models: [{ id: 'test', name: 'test', supportsImages: false }] } });
    await page.locator('#mode:not([hidden])').waitFor();
    expect(await page.locator('#mode').inputValue()).toBe('code');
    expect(await page.locator('#mode option').allTextContents()).toEqual(['Ask', 'Code', 'Auto-edit']);
    // One model is no choice.
    expect(await page.locator('#model').isHidden()).toBe(true);
    await page.locator('#mode').selectOption('auto-edit');
    await send({
      type: 'setup',
      sessionId: S,
      setup: { mode: 'ask', modes, model: 'big', models: [{ id: 'small', name: 'Small', supportsImages: false }, { id: 'big', name: 'Big', supportsImages: true }] },
    });
    await page.locator('#model:not([hidden])').waitFor();
    expect(await page.locator('#mode').inputValue()).toBe('ask');
    expect(await page.locator('#model').inputValue()).toBe('big');
    await page.locator('#model').selectOption('small');
    expect((await posted()).filter((m) => m.type === 'setMode' || m.type === 'setModel')).toEqual([
      { type: 'setMode', mode: 'auto-edit' },
      { type: 'setModel', model: 'small' },
    ]);
    // A daemon without modes (an empty setup) hides them again.
    await send({ type: 'setup', sessionId: S, setup: {} });
    await page.waitForFunction(() => document.getElementById('mode')!.hidden && document.getElementById('model')!.hidden);
    expect(problems).toEqual([]);
  });

  it('an MCP tool card names its server; a permission request offers its options on the card and posts the answer', async () => {
    await send([
      { type: 'features', images: false, mcp: true, commands: [] },
      {
        type: 'mcp',
        servers: [
          { name: 'db', state: 'ready', transport: 'stdio', toolCount: 3, tools: ['query'], restarts: 0, sessions: 1 },
          { name: 'tickets', state: 'failed', transport: 'http', toolCount: 0, tools: [], restarts: 2, sessions: 1, lastError: 'connection refused' },
        ],
      },
      { type: 'turnStart', turnId: 'm1', sessionId: S, prompt: 'clean the table' },
      {
        type: 'update',
        turnId: 'm1',
        update: { kind: 'tool_call', toolCallId: 'q', name: 'mcp__db__query', arguments: { sql: 'delete from t' }, executor: 'daemon', server: 'db' },
      },
      {
        type: 'permission',
        turnId: 'm1',
        toolCallId: 'q',
        title: 'db: query',
        options: [
          { optionId: 'allow_once', name: 'Allow once', kind: 'allow_once' },
          { optionId: 'allow_always', name: 'Always allow in this session', kind: 'allow_always' },
          { optionId: 'reject_once', name: 'Reject', kind: 'reject_once' },
        ],
      },
    ]);
    const card = page.locator('.tool-card[data-tool-call-id="q"]');
    await card.locator('.permission-option').first().waitFor();
    expect(await card.locator('.tool-server').textContent()).toBe('db');
    expect(await card.locator('.tool-name').textContent()).toBe('query');
    expect(await card.getAttribute('data-status')).toBe('awaiting_approval');
    expect(await card.locator('.permission-title').textContent()).toBe('Allow db: query?');
    expect(await card.locator('.permission-option').allTextContents()).toEqual(['Allow once', 'Always allow in this session', 'Reject']);
    // The MCP section lists the servers with their state.
    expect(await page.locator('#mcp').isHidden()).toBe(false);
    expect(await page.locator('#mcp-count').textContent()).toBe('(2)');
    expect(await page.locator('.mcp-list li[data-server="tickets"]').textContent()).toContain('connection refused');
    await page.locator('#mcp summary').click();
    await card.locator('.permission-option', { hasText: 'Always allow' }).click();
    expect(await card.locator('.permission-option').first().isDisabled()).toBe(true);
    expect((await posted()).filter((m) => m.type === 'permission' || m.type === 'refreshMcp')).toEqual([
      { type: 'refreshMcp' },
      { type: 'permission', toolCallId: 'q', optionId: 'allow_always' },
    ]);
    await send({ type: 'permission', turnId: 'm1', toolCallId: 'q', title: 'db: query', options: [], answer: 'Always allow in this session' });
    await card.locator('.permission-answer').waitFor();
    expect(await card.locator('.permission-option').count()).toBe(0);
    expect(await card.getAttribute('data-status')).toBe('running');
    await page.screenshot({ path: path.join(ARTIFACTS, 'mcp-permission.png'), fullPage: true });
    // Without MCP in the daemon, the section is gone.
    await send({ type: 'features', images: false, mcp: false, commands: [] });
    await page.waitForFunction(() => document.getElementById('mcp')!.hidden);
    expect(problems).toEqual([]);
  });

  it("an MCP server's request to use the model: the card asks it in its own words and shows what it sends, as text", async () => {
    // What a hostile server could put in its system prompt or message: markup, a script.
    const description =
      "The MCP server 'calc' asks to use the model for an answer of at most 200 tokens to 1 message(s); the answer goes to the server.\n" +
      'System prompt: <img src=x onerror="document.title=\'pwned\'"><b>You summarise.</b>\nLast message: <script>document.title="pwned"</script>Summarise this.';
    await send([
      { type: 'turnStart', turnId: 'm2', sessionId: S, prompt: 'summarise' },
      {
        type: 'update',
        turnId: 'm2',
        update: { kind: 'tool_call', toolCallId: 's', name: 'mcp__calc__summarize', arguments: { text: 'hi' }, executor: 'daemon', server: 'calc' },
      },
      {
        type: 'permission',
        turnId: 'm2',
        toolCallId: 's',
        kind: 'sampling',
        title: 'calc asks to use the model',
        description,
        options: [
          { optionId: 'allow_once', name: 'Allow once', kind: 'allow_once' },
          { optionId: 'reject_once', name: 'Reject', kind: 'reject_once' },
        ],
      },
    ]);
    const card = page.locator('.tool-card[data-tool-call-id="s"]');
    await card.locator('.permission-option').first().waitFor();
    expect(await card.getAttribute('data-status')).toBe('awaiting_approval');
    expect(await card.getAttribute('data-permission')).toBe('sampling');
    expect(await card.locator('.permission-title').textContent()).toBe('calc asks to use the model');
    // Line by line, exactly the daemon's text, and nothing of it became an element.
    expect(await card.locator('.permission-description').textContent()).toBe(description);
    expect(await card.locator('.permission-description').innerText()).toContain('\nLast message: <script>');
    expect(await card.locator('.permission-description *').count()).toBe(0);
    expect(await page.locator('.answer img, .answer b, .answer script').count()).toBe(0);
    expect(await page.title()).not.toBe('pwned');
    expect(await card.locator('.permission-option').allTextContents()).toEqual(['Allow once', 'Reject']);
    await page.screenshot({ path: path.join(ARTIFACTS, 'mcp-sampling-permission.png'), fullPage: true });
    await card.locator('.permission-option', { hasText: 'Allow once' }).click();
    expect((await posted()).filter((m) => m.type === 'permission')).toEqual([{ type: 'permission', toolCallId: 's', optionId: 'allow_once' }]);
    await send({ type: 'permission', turnId: 'm2', toolCallId: 's', kind: 'sampling', title: 'calc asks to use the model', options: [], answer: 'Allow once' });
    await card.locator('.permission-answer').waitFor();
    expect(await card.locator('.permission-answer').textContent()).toBe('calc asks to use the model: Allow once');
    expect(await card.locator('.permission-description').count()).toBe(0);
    expect(await card.getAttribute('data-status')).toBe('running');
    expect(problems).toEqual([]);
  });

  it("a tool's permission card shows the daemon's description of the tool under its question", async () => {
    await send([
      { type: 'turnStart', turnId: 'm3', sessionId: S, prompt: 'clean' },
      { type: 'update', turnId: 'm3', update: { kind: 'tool_call', toolCallId: 'q', name: 'mcp__db__query', arguments: {}, executor: 'daemon', server: 'db' } },
      {
        type: 'permission',
        turnId: 'm3',
        toolCallId: 'q',
        title: 'db: query',
        description: 'Run SQL <em>anywhere</em>.',
        options: [{ optionId: 'allow_once', name: 'Allow once', kind: 'allow_once' }],
      },
    ]);
    const card = page.locator('.tool-card[data-tool-call-id="q"]');
    await card.locator('.permission-option').first().waitFor();
    expect(await card.getAttribute('data-permission')).toBe('tool');
    expect(await card.locator('.permission-title').textContent()).toBe('Allow db: query?');
    expect(await card.locator('.permission-description').textContent()).toBe('Run SQL <em>anywhere</em>.');
    expect(await card.locator('em').count()).toBe(0);
    expect(problems).toEqual([]);
  });

  it('slash commands complete in the prompt box when the daemon lists them; none without', async () => {
    const box = page.locator('#prompt');
    await box.fill('/');
    expect(await page.locator('#commands').isHidden()).toBe(true);
    await box.fill('');
    await send({
      type: 'features',
      images: false,
      mcp: false,
      commands: [
        { name: 'compact', description: 'Compact the conversation', hint: '[what to keep]' },
        { name: 'init', description: 'Write AGENTS.md' },
        { name: 'memory', description: "What the project's memory holds" },
        { name: 'reset', description: 'Clear the conversation' },
      ],
    });
    await box.focus();
    await box.type('/');
    await page.locator('#commands:not([hidden])').waitFor();
    expect(await page.locator('#commands li').count()).toBe(4);
    await box.type('m');
    expect(await page.locator('#commands li .cmd-name').allTextContents()).toEqual(['/memory']);
    await box.press('Backspace');
    await box.press('ArrowDown');
    await box.press('Tab');
    expect(await box.inputValue()).toBe('/init ');
    expect(await page.locator('#commands').isHidden()).toBe(true);
    await box.fill('');
    await box.type('/co');
    await box.press('Enter'); // completes, does not send
    expect(await box.inputValue()).toBe('/compact ');
    await box.type('keep the API decisions');
    await box.press('Enter');
    await box.type('/reset');
    await box.press('Enter'); // typed in full: sends
    expect((await posted()).filter((m) => m.type === 'prompt')).toEqual([
      { type: 'prompt', text: '/compact keep the API decisions' },
      { type: 'prompt', text: '/reset' },
    ]);
    expect(problems).toEqual([]);
  });

  it('images: attach and paste only when the daemon takes images; sent with the prompt and shown in the turn', async () => {
    expect(await page.locator('#btn-attach').isHidden()).toBe(true);
    await send({ type: 'features', images: true, mcp: false, commands: [] });
    await page.locator('#btn-attach:not([hidden])').waitFor();
    // 1x1 PNG
    const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
    await page.locator('#file-input').setInputFiles({ name: 'shot.png', mimeType: 'image/png', buffer: Buffer.from(png, 'base64') });
    await page.locator('#attachments img.thumb').waitFor();
    // A pasted image joins it; a pasted text file is not an image.
    await page.evaluate((data) => {
      const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], 'pasted.png', { type: 'image/png' }));
      document.getElementById('prompt')!.dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
    }, png);
    await page.waitForFunction(() => document.querySelectorAll('#attachments img.thumb').length === 2);
    await page.locator('#file-input').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hi') });
    await page.locator('.notice.warning', { hasText: 'agentd takes PNG, JPEG, GIF and WebP' }).waitFor();
    await page.locator('#attachments .attachment button').nth(1).click();
    await page.locator('#prompt').fill('what is in this picture?');
    await page.locator('#prompt').press('Enter');
    const sentPrompt = (await posted()).filter((m) => m.type === 'prompt');
    expect(sentPrompt).toEqual([{ type: 'prompt', text: 'what is in this picture?', images: [{ mimeType: 'image/png', data: png }] }]);
    expect(await page.locator('#attachments').isHidden()).toBe(true);
    await send([
      { type: 'turnStart', turnId: 'i1', sessionId: S, prompt: 'what is in this picture?', images: [{ mimeType: 'image/png', data: png }] },
      { type: 'turnEnd', turnId: 'i1', outcome: 'completed' },
      // A replayed prompt's image (user_image) shows the same way.
      { type: 'turnStart', turnId: 'i2', sessionId: S, prompt: 'and this one', replay: true },
      { type: 'update', turnId: 'i2', update: { kind: 'user_image', mimeType: 'image/png', data: png } },
      // Never a type that is not an image.
      { type: 'update', turnId: 'i2', update: { kind: 'user_image', mimeType: 'text/html', data: 'PGI+' } },
      { type: 'turnEnd', turnId: 'i2', outcome: 'replayed', replay: true },
    ]);
    await page.locator('section.turn[data-turn-id="i2"] img.thumb').waitFor();
    expect(await page.locator('section.turn[data-turn-id="i1"] .user-msg img.thumb').count()).toBe(1);
    expect(await page.locator('section.turn[data-turn-id="i2"] .user-msg img.thumb').count()).toBe(1);
    expect(await page.locator('section.turn[data-turn-id="i2"] img').getAttribute('src')).toMatch(/^data:image\/png;base64,/);
    // A daemon without images: the button goes.
    await send({ type: 'features', images: false, mcp: false, commands: [] });
    await page.waitForFunction(() => document.getElementById('btn-attach')!.hidden);
    expect(problems).toEqual([]);
  });
});
