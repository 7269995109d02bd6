// The packaged extension in a real VS Code: code-server (VS Code 1.139 with a
// real extension host) serves the workbench over loopback, headless Chromium
// drives it as a user would, and the extension spawns the real `agentd serve`,
// which talks to the bundled model server over loopback HTTP.
//
// One code-server for the whole file; the tests run in order and build on
// each other (the view opened, a session with history, then a killed daemon).
// Screenshots of each step are kept in test-artifacts/code-server/.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { chromium, type Browser, type Frame, type Locator, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AGENTD_BIN, startModelServer, stopChild, tmpDir, type ModelServer } from '../test/helpers/agentd';
import { gone, pidsFrom } from '../test/helpers/processes';

const ROOT = path.resolve(__dirname, '..');
const VSIX = path.join(ROOT, 'dist', 'agentd-vscode.vsix');
const SHOTS = path.join(ROOT, 'test-artifacts', 'code-server');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const CODE_SERVER_HOME = process.env.CODE_SERVER_HOME ?? '';
/** The test MCP server of the Python suite, and the Python that runs agentd (it has the `mcp` SDK). */
const MCP_SERVER = process.env.AGENTD_MCP_TEST_SERVER || path.resolve(ROOT, '../../tests/mcp/server.py');
const PYTHON = process.env.AGENTD_PYTHON || path.join(path.dirname(AGENTD_BIN), 'python');
const NODE_HOME = process.env.NODE_HOME ?? '';

let model: ModelServer;
let server: ChildProcess | undefined;
let browser: Browser;
let page: Page;
let chat: Frame;
let workspaceDir: string;
let home: string;
let userData: string;
/** Uncaught errors of the workbench page (the issue's "no page errors"). */
const pageErrors: string[] = [];

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

async function control(route: string, body: unknown): Promise<void> {
  const res = await fetch(`${model.url}/_agentd/${route}`, { method: 'POST', body: JSON.stringify(body) });
  expect(res.ok, `${route}: ${await res.text()}`).toBe(true);
}

const shot = (name: string): Promise<unknown> => page.screenshot({ path: path.join(SHOTS, `${name}.png`) });

/** The chat webview's frame: VS Code nests it two iframes deep. */
async function findChatFrame(): Promise<Frame> {
  for (;;) {
    for (const f of page.frames()) {
      if (await f.$('#prompt').catch(() => null)) return f;
    }
    await page.waitForTimeout(200); // frames appear without an event we can await per frame
  }
}

/** Send a prompt; resolves with its turn (the turn after those already shown). */
async function ask(text: string): Promise<Locator> {
  const n = await chat.locator('section.turn').count();
  await chat.locator('#prompt').fill(text);
  await chat.locator('#prompt').press('Enter');
  const turn = chat.locator('section.turn').nth(n);
  await turn.waitFor();
  return turn;
}

/** Wait for a turn to end (any outcome), with a generous bound for a loaded machine. */
const ended = (turn: Locator, state = 'completed'): Promise<void> =>
  turn.and(chat.locator(`section.turn[data-state="${state}"]`)).waitFor({ timeout: 60_000 });

const lastTurn = () => chat.locator('section.turn').last();

/** The running daemon of this test (its AGENTD_HOME is unique), found through /proc. */
function daemonPid(): number | undefined {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (!cmd.includes('serve') || !cmd.some((c) => c.endsWith('agentd'))) continue;
      if (fs.readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0').includes(`AGENTD_HOME=${home}`)) return Number(entry);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return undefined;
}

beforeAll(async () => {
  if (!fs.existsSync(path.join(CODE_SERVER_HOME, 'node_modules', '.bin', 'code-server'))) {
    throw new Error(`code-server not found in CODE_SERVER_HOME=${CODE_SERVER_HOME}: run e2e/install.sh (test.sh does)`);
  }
  if (!fs.existsSync(VSIX)) throw new Error(`${VSIX} is missing: package the extension first (test.sh does)`);
  fs.rmSync(SHOTS, { recursive: true, force: true });
  fs.mkdirSync(SHOTS, { recursive: true });
  model = await startModelServer();

  const base = tmpDir('agentd-code-server-');
  workspaceDir = path.join(base, 'project');
  home = path.join(base, 'agentd-home');
  userData = path.join(base, 'user-data');
  const extensions = path.join(base, 'extensions');
  const agentdConfig = path.join(base, 'agentd-config');
  for (const d of [workspaceDir, home, path.join(userData, 'User'), extensions, path.join(agentdConfig, 'agentd')]) fs.mkdirSync(d, { recursive: true });
  // The user's agentd config file: two models to pick from and an MCP server
  // (the daemon's own settings; a daemon without these features ignores them).
  fs.writeFileSync(
    path.join(agentdConfig, 'agentd', 'config.toml'),
    [
      'models = ["test", "test-alt"]',
      '[mcp]',
      'startup_wait = 60',
      '[mcp_servers.db]',
      `command = ${JSON.stringify(PYTHON)}`,
      `args = [${JSON.stringify(MCP_SERVER)}]`,
      '',
    ].join('\n'),
  );
  fs.writeFileSync(path.join(workspaceDir, 'app.py'), 'def greet():\n    return "hello"\n');
  // Settings are read at start; the daemon talks to the model server, keeps
  // its data in a private AGENTD_HOME, and traces its JSON-RPC.
  fs.writeFileSync(
    path.join(userData, 'User', 'settings.json'),
    JSON.stringify({
      'agentd.command': AGENTD_BIN,
      'agentd.env': { AGENTD_BASE_URL: `${model.url}/v1`, AGENTD_API_KEY: 'test', AGENTD_MODEL: 'test', AGENTD_HOME: home, XDG_CONFIG_HOME: agentdConfig },
      'agentd.trace.server': 'messages',
      'workbench.startupEditor': 'none',
      'workbench.tips.enabled': false,
      'security.workspace.trust.enabled': false,
      'terminal.integrated.defaultProfile.linux': 'bash',
      'chat.disableAIFeatures': true,
      'workbench.secondarySideBar.defaultVisibility': 'hidden',
      'extensions.autoCheckUpdates': false,
      'extensions.autoUpdate': false,
    }),
  );

  const env = {
    ...process.env,
    PATH: `${path.join(NODE_HOME, 'bin')}:${process.env.PATH}`,
    XDG_CONFIG_HOME: path.join(base, 'xdg-config'),
    XDG_DATA_HOME: path.join(base, 'xdg-data'),
  };
  const bin = path.join(CODE_SERVER_HOME, 'node_modules', '.bin', 'code-server');
  const dirs = ['--extensions-dir', extensions, '--user-data-dir', userData];
  execFileSync(bin, [...dirs, '--install-extension', VSIX], { env, stdio: ['ignore', 'pipe', 'inherit'] });

  const port = await freePort();
  server = spawn(
    bin,
    ['--auth', 'none', '--bind-addr', `127.0.0.1:${port}`, '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust', ...dirs, workspaceDir],
    { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  const log = fs.createWriteStream(path.join(SHOTS, 'code-server.log'));
  server.stderr!.pipe(log);
  await new Promise<void>((resolve, reject) => {
    const rl = readline.createInterface({ input: server!.stdout! });
    rl.on('line', (line) => {
      log.write(`${line}\n`);
      if (line.includes('HTTP server listening on')) resolve();
    });
    server!.once('exit', (code) => reject(new Error(`code-server exited with ${code}; see ${SHOTS}/code-server.log`)));
  });

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspaceDir)}`);
  await page.locator('.monaco-workbench').waitFor({ timeout: 120_000 });
}, 300_000);

afterAll(async () => {
  await browser?.close();
  if (server?.pid) {
    try {
      process.kill(-server.pid, 'SIGTERM'); // its whole group: the extension host and the daemon with it
    } catch {
      // already gone
    }
  }
  if (server) await stopChild(server);
  await model?.stop();
}, 60_000);

afterEach(async (ctx) => {
  // What the screen showed when a step failed, for the CI artifacts.
  if (ctx.task.result?.state === 'fail' && page) await shot(`failed-${ctx.task.name.slice(0, 40).replace(/\W+/g, '-')}`).catch(() => undefined);
});

describe('the extension in code-server', () => {
  it('opens the view and the daemon is ready', async () => {
    // The activity bar's agentd icon opens the view, as a user would.
    await page.locator('.activitybar .action-item a[aria-label^="agentd"], .activitybar .action-item[aria-label^="agentd"]').first().click();
    chat = await findChatFrame();
    await chat.locator('#daemon-state[data-state="ready"]').waitFor({ timeout: 60_000 });
    expect(await chat.locator('#daemon-state').textContent()).toBe('agentd ready');
    // One set of session actions: the view's title bar.
    const titleActions = await page.locator('.pane-header .actions-container a.action-label, .title-actions a.action-label').evaluateAll((as) =>
      as.map((a) => a.getAttribute('aria-label') ?? ''),
    );
    // (VS Code renders the view's actions in more than one toolbar node; count distinct ones.)
    expect(new Set(titleActions.filter((l) => /New Session|Switch Session|Reset Session/.test(l))).size).toBe(3);
    expect(await chat.locator('button', { hasText: /^(New|Sessions|Reset)$/ }).count()).toBe(0);
    await shot('01-ready');
  });

  it('streams a markdown answer', async () => {
    await control('rule', {
      match: 'markdown please',
      times: 1,
      reply: { chunks: ['Here is **bold** ', 'and `code`:\n\n', '- one\n', '- two\n'], chunkDelay: 0.4 },
    });
    const turn = await ask('markdown please');
    // Part of the answer is on screen while the turn still runs: streamed, not dumped at the end.
    await chat.waitForFunction(() => {
      const t = [...document.querySelectorAll('section.turn')].pop() as HTMLElement | undefined;
      return t?.dataset.state === 'running' && (t.querySelector('.md')?.textContent ?? '').includes('bold') && !t.textContent?.includes('two');
    });
    await ended(turn);
    expect(await turn.locator('.md strong').textContent()).toBe('bold');
    expect(await turn.locator('.md code').first().textContent()).toBe('code');
    expect(await turn.locator('.md li').allTextContents()).toEqual(['one', 'two']);
    expect(await turn.locator('.usage').textContent()).toMatch(/session total \d+/);
    // The context meter (issue 15): the daemon reports the model's window with each step.
    expect(await chat.locator('#context-meter').textContent()).toMatch(/^context \d+ %$/);
    await shot('02-markdown');
  });

  it('Stop cancels at once and the model server sees the client leave', async () => {
    await control('rule', { match: 'long essay', times: 1, reply: { chunks: Array.from({ length: 300 }, (_, i) => `w${i} `), chunkDelay: 0.05 } });
    const turn = await ask('write a long essay');
    await turn.locator('.md', { hasText: 'w1' }).waitFor();
    await chat.locator('#btn-stop').click();
    await ended(turn, 'cancelled');
    expect(await turn.locator('.turn-footer').textContent()).toBe('Cancelled');
    await expect.poll(async () => (await model.log()).some((e) => e.type === 'disconnect'), { timeout: 30_000 }).toBe(true);
    expect(await chat.locator('#btn-send').isDisabled()).toBe(false);
    await shot('03-cancelled');
  });

  it('an edit is reviewed as a diff; Accept in the editor title applies it on disk', async () => {
    await control('rule', {
      match: 'fix the greeting',
      times: 1,
      reply: { toolCalls: [{ id: 'edit1', name: 'edit_file', arguments: { path: 'app.py', old_text: '"hello"', new_text: '"hello, world"' } }] },
    });
    const turn = await ask('fix the greeting');
    const card = chat.locator('.tool-card[data-tool-call-id="edit1"]');
    await card.locator('button', { hasText: /^Accept$/ }).waitFor({ timeout: 30_000 });
    // The diff editor is open with the proposal, and its title has Accept / Reject.
    await page.locator('.tab', { hasText: "agentd's proposed change" }).waitFor();
    const accept = page.locator('.editor-actions a.action-label[aria-label^="Accept the Proposed Edit"]');
    await accept.waitFor();
    expect(await page.locator('.editor-actions a.action-label[aria-label^="Reject the Proposed Edit"]').count()).toBe(1);
    await shot('04-diff-review');
    expect(fs.readFileSync(path.join(workspaceDir, 'app.py'), 'utf8')).toContain('"hello"\n'); // nothing applied yet
    await accept.click();
    await expect.poll(() => fs.readFileSync(path.join(workspaceDir, 'app.py'), 'utf8'), { timeout: 30_000 }).toBe('def greet():\n    return "hello, world"\n');
    await chat.locator('.tool-card[data-tool-call-id="edit1"][data-status="completed"]').waitFor();
    await ended(turn);
    expect(await page.locator('.tab', { hasText: "agentd's proposed change" }).count()).toBe(0);
    await shot('05-edit-applied');
  });

  it('the mode picker: in Auto-edit an edit applies without a review; then back to Code (edits reviewed, as the next tests rely on)', async () => {
    const mode = chat.locator('#mode');
    await mode.waitFor();
    expect(await mode.inputValue()).toBe('code');
    expect(await mode.locator('option').allTextContents()).toEqual(expect.arrayContaining(['Ask', 'Code']));
    // Two models are configured: the model picker is there too.
    expect(await chat.locator('#model').isVisible()).toBe(true);
    await mode.selectOption('auto-edit');
    await shot('05b-mode-picker');
    await control('rule', {
      match: 'shout the greeting',
      times: 1,
      reply: { toolCalls: [{ id: 'auto1', name: 'edit_file', arguments: { path: 'app.py', old_text: '"hello, world"', new_text: '"HELLO, WORLD"' } }] },
    });
    const turn = await ask('shout the greeting');
    await ended(turn);
    expect(fs.readFileSync(path.join(workspaceDir, 'app.py'), 'utf8')).toBe('def greet():\n    return "HELLO, WORLD"\n');
    expect(await chat.locator('.tool-card[data-tool-call-id="auto1"]').getAttribute('data-status')).toBe('completed');
    expect(await page.locator('.tab', { hasText: "agentd's proposed change" }).count()).toBe(0); // no review was opened
    await mode.selectOption('code');
    await expect.poll(() => mode.inputValue()).toBe('code');
  });

  it('a command asks in a dialog with Deny as its only "no", runs in a terminal and its output reaches the model', async () => {
    await control('rule', {
      match: 'run the check',
      times: 1,
      reply: { toolCalls: [{ id: 'cmd1', name: 'run_command', arguments: { command: 'echo check-$((6*7))' } }] },
    });
    const turn = await ask('run the check');
    const dialog = page.locator('.monaco-dialog-box');
    await dialog.waitFor({ timeout: 30_000 });
    const buttons = await dialog.locator('.dialog-buttons a.monaco-button, .dialog-buttons .monaco-button').allTextContents();
    expect(buttons.map((b) => b.trim())).toEqual(expect.arrayContaining(['Allow once', 'Deny']));
    expect(buttons.map((b) => b.trim())).not.toContain('Cancel');
    await shot('06-command-dialog');
    await dialog.locator('.monaco-button', { hasText: 'Allow once' }).click();
    const card = chat.locator('.tool-card[data-tool-call-id="cmd1"]');
    await chat.locator('.tool-card[data-tool-call-id="cmd1"][data-status="completed"]').waitFor({ timeout: 60_000 });
    expect(await card.locator('.tool-result').textContent()).toContain('check-42');
    await ended(turn);
    expect(await turn.locator('.md').last().textContent()).toContain('check-42');
    // It ran in a terminal of its own, named after the command, in the panel.
    await page.locator('.part.panel', { hasText: 'agentd: echo check' }).waitFor();
    await shot('07-terminal');
  });

  it('Stop while a command runs in its terminal stops the command and the child it started in the background', async () => {
    const pidsFile = path.join(workspaceDir, 'pids-stop');
    const command = `sh -c 'sleep 600 & echo $$ $! > ${pidsFile}; wait'`;
    await control('rule', { match: 'start the server', times: 1, reply: { toolCalls: [{ id: 'cmd2', name: 'run_command', arguments: { command } }] } });
    const turn = await ask('start the server');
    const dialog = page.locator('.monaco-dialog-box');
    await dialog.waitFor({ timeout: 30_000 });
    await dialog.locator('.monaco-button', { hasText: 'Allow once' }).click();
    const [sh, child] = await pidsFrom(pidsFile);
    // Which runner ran it: the user's shell (shell integration: its parent
    // is bash) or the extension's own child process.
    const parent = fs.readFileSync(`/proc/${fs.readFileSync(`/proc/${sh}/stat`, 'utf8').split(') ')[1].split(' ')[1]}/comm`, 'utf8').trim();
    console.log(`run_command ran under ${parent}`);
    await chat.locator('#btn-stop').click();
    await ended(turn, 'cancelled');
    await gone([sh, child]);
    expect(await chat.locator('.tool-card[data-tool-call-id="cmd2"]').getAttribute('data-status')).toBe('cancelled');
  });

  it('delivers a memory that matches the prompt and lists it', async () => {
    const dir = execFileSync(AGENTD_BIN, ['memory', 'dir', workspaceDir], { env: { ...process.env, AGENTD_HOME: home } }).toString().trim().split('\n').pop()!;
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(
      path.join(dir, 'zebras.md'),
      '---\nname: zebra colours\ndescription: what colour zebras are in this project\ntype: project\n---\nZebras in this project are purple.\n',
    );
    await chat.locator('#memory summary').click();
    await chat.locator('.memory-list li', { hasText: 'zebra colours' }).waitFor({ timeout: 30_000 });
    const turn = await ask('what colour are zebras in this project?');
    await ended(turn);
    expect(await turn.locator('.memory-note').first().textContent()).toMatch(/^1 memory recalled at your question: zebras\.md/);
    await shot('08-memory');
  });

  it('a search card links its hits as file:line; a click opens the file at that line (issue 18)', async () => {
    fs.writeFileSync(path.join(workspaceDir, 'notes.md'), 'one\ntwo\nthe needle is here\nfour\n');
    await control('rule', {
      match: 'find the needle',
      times: 1,
      reply: { toolCalls: [{ id: 'find1', name: 'search', arguments: { query: 'needle is here' } }] },
    });
    const turn = await ask('find the needle');
    await ended(turn);
    const link = turn.locator('.tool-card[data-tool-call-id="find1"] .location', { hasText: 'notes.md:3' });
    await link.waitFor();
    expect(await link.getAttribute('title')).toBe(`${path.join(fs.realpathSync(workspaceDir), 'notes.md')}:3`);
    await link.click();
    await page.locator('.tab.active', { hasText: 'notes.md' }).waitFor({ timeout: 30_000 });
    // The cursor is on the hit's line (VS Code's status bar says where).
    await expect.poll(async () => page.locator('#status\\.editor\\.selection').textContent(), { timeout: 30_000 }).toMatch(/Ln 3, Col 1/);
    await shot('09-location-opened');
  });

  it('an MCP tool asks permission on its card; Allow once runs it on the named server', async (ctx) => {
    // TEMPORARY until issue 16's daemon side is on main: a daemon without MCP shows no MCP section.
    if (await chat.locator('#mcp').isHidden()) return ctx.skip('this agentd has no MCP servers yet (issue 16)');
    await control('rule', {
      match: 'ask the db',
      times: 1,
      reply: { toolCalls: [{ id: 'mcp1', name: 'mcp__db__echo', arguments: { text: 'from code-server' } }] },
    });
    const turn = await ask('ask the db');
    const card = chat.locator('.tool-card[data-tool-call-id="mcp1"]');
    await card.locator('.permission-option', { hasText: 'Allow once' }).waitFor({ timeout: 60_000 });
    expect(await card.locator('.tool-server').textContent()).toBe('db');
    expect(await card.locator('.tool-name').textContent()).toBe('echo');
    await shot('09b-mcp-permission');
    await card.locator('.permission-option', { hasText: 'Allow once' }).click();
    await ended(turn);
    expect(await card.getAttribute('data-status')).toBe('completed');
    expect(await card.locator('.tool-result').textContent()).toBe('echo: from code-server');
    // The MCP section lists the server as ready.
    await chat.locator('#mcp summary').click();
    await chat.locator('.mcp-list li[data-server="db"][data-state="ready"]').waitFor({ timeout: 30_000 });
  });

  it('traces the JSON-RPC traffic in the "agentd (trace)" channel when agentd.trace.server says so', async () => {
    const files: string[] = [];
    const walk = (d: string): void => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        if (e.isDirectory()) walk(path.join(d, e.name));
        else if (e.name.includes('agentd (trace)')) files.push(path.join(d, e.name));
      }
    };
    walk(path.join(userData, 'logs'));
    expect(files.length).toBeGreaterThan(0);
    const text = files.map((f) => fs.readFileSync(f, 'utf8')).join('');
    expect(text).toContain("Sending request 'agent/newSession");
    expect(text).toContain("Received notification 'agent/update'");
  });

  it('a killed daemon is reported, Restart brings it back, the notice goes and the conversation resumes', async () => {
    const before = await lastTurn().locator('.usage').textContent();
    const total = Number(/session total (\d+)/.exec(before ?? '')?.[1]);
    expect(total).toBeGreaterThan(0);
    const pid = daemonPid();
    expect(pid).toBeDefined();
    process.kill(pid!, 'SIGKILL');
    await chat.locator('#daemon-state[data-state="stopped"]').waitFor({ timeout: 30_000 });
    const notice = chat.locator('.notice[data-scope="daemon"]');
    await notice.waitFor();
    expect(await notice.textContent()).toContain('agentd exited unexpectedly');
    await shot('10-daemon-killed');
    await notice.locator('button', { hasText: 'Restart agentd' }).click();
    await chat.locator('#daemon-state[data-state="ready"]').waitFor({ timeout: 60_000 });
    expect(await chat.locator('.notice[data-scope="daemon"]').count()).toBe(0);
    expect(daemonPid()).not.toBe(pid);
    const turn = await ask('are you back?');
    await ended(turn);
    expect(await turn.locator('.md').textContent()).toBe('Echo: are you back?');
    // The same session goes on: its token total did not start again from zero.
    const after = Number(/session total (\d+)/.exec((await turn.locator('.usage').textContent()) ?? '')?.[1]);
    expect(after).toBeGreaterThan(total);
    await shot('11-restarted');
  });

  it('raised no page errors', () => {
    expect(pageErrors).toEqual([]);
  });
});
