// Issue 16 through the protocol layer, against the REAL `agentd serve`, a
// real MCP server (the repository's tests/mcp/server.py, run by the daemon
// over stdio) and the bundled model server: tool cards name the server, the
// daemon's agent/requestPermission is answered from the card (allow, reject,
// Stop), a server's request to use the model (sampling) shows what it sends,
// and mcp/status feeds the panel's MCP section.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it as vitestIt } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import type { PermissionQuestion } from '../src/protocol/permission';
import { AGENTD_BIN, startDaemon, startModelServer, type Daemon, type ModelServer } from './helpers/agentd';
import { panelHarness } from './helpers/panel';
import type { WireEvent } from './helpers/recorder';

let model: ModelServer;
let daemon: Daemon;
/** The test MCP server of the Python suite, and the Python that runs agentd (it has the `mcp` SDK). */
const SERVER = process.env.AGENTD_MCP_TEST_SERVER || path.resolve(__dirname, '../../../tests/mcp/server.py');
const PYTHON = process.env.AGENTD_PYTHON || path.join(path.dirname(AGENTD_BIN), 'python');

beforeAll(async () => {
  model = await startModelServer();
  daemon = await startDaemon(model.url, {}, { mcpServers: { db: { command: PYTHON, args: [SERVER] } }, mcp: { startupWait: 60 } });
  // TEMPORARY until issue 16's daemon side is on main: skip on a daemon without MCP.
  has16 = !!daemon.caps?.mcp && fs.existsSync(SERVER);
});

afterAll(async () => {
  await daemon?.stop();
  await model?.stop();
});

let has16 = false;
const it = (name: string, fn: () => Promise<void>) =>
  vitestIt(name, async (ctx) => {
    if (!has16) return ctx.skip('this agentd has no MCP servers yet (issue 16)');
    await fn();
  });

const harness = () => panelHarness(daemon.agent);

const toolUpdates = (events: ChatEvent[]) =>
  events.flatMap((e) => (e.type === 'update' && (e.update.kind === 'tool_call' || e.update.kind === 'tool_call_update') ? [e.update] : []));
const answers = (wire: WireEvent[]) => wire.filter((w) => w.dir === 'answer' && w.method === 'agent/requestPermission').map((w) => (w as { result: unknown }).result);

describe('MCP tools in the panel', () => {
  it('a tool with side effects asks first: Allow once runs it, and its card names the server', async () => {
    const h = harness();
    const pending = h.controller.prompt('!tool mcp__db__echo {"text": "hello"}');
    const asked = (await h.next((e) => e.type === 'permission' && e.options.length > 0)) as Extract<ChatEvent, { type: 'permission' }>;
    expect(asked.title).toMatch(/echo/);
    expect(asked.options.map((o) => o.optionId)).toEqual(['allow_once', 'allow_always', 'reject_once']);
    const call = toolUpdates(h.events).find((u) => u.kind === 'tool_call');
    expect(call).toMatchObject({ name: 'mcp__db__echo', server: 'db', executor: 'daemon' });
    expect(h.controller.answerPermission(asked.toolCallId, 'allow_once')).toBe(true);
    expect((await pending).outcome).toBe('completed');
    expect(answers(h.wire)).toEqual([{ outcome: { outcome: 'selected', optionId: 'allow_once' } }]);
    expect(toolUpdates(h.events).at(-1)).toMatchObject({ kind: 'tool_call_update', status: 'completed', content: 'echo: hello' });
  });

  it('Reject refuses the call (the model is told); Stop while asked answers cancelled and the call is not run', async () => {
    const h = harness();
    const first = h.controller.prompt('!tool mcp__db__echo {"text": "no"}');
    const asked = (await h.next((e) => e.type === 'permission' && e.options.length > 0)) as Extract<ChatEvent, { type: 'permission' }>;
    h.controller.answerPermission(asked.toolCallId, 'reject_once');
    expect((await first).outcome).toBe('completed');
    expect(toolUpdates(h.events).at(-1)).toMatchObject({ kind: 'tool_call_update', status: 'failed' });
    const second = h.controller.prompt('!tool mcp__db__echo {"text": "stop"}');
    await h.next((e) => e.type === 'permission' && e.options.length > 0 && e.turnId !== asked.turnId);
    h.controller.cancel();
    expect((await second).outcome).toBe('cancelled');
    await h.controller.prompt('still here?');
    expect(answers(h.wire)).toEqual([{ outcome: { outcome: 'selected', optionId: 'reject_once' } }, { outcome: { outcome: 'cancelled' } }]);
  });

  it("a server's request to use the model shows its title and what it sends on the card and in the dialog; Allow once serves it", async () => {
    // The dialog is asked beside the card (the panel off screen); leaving it open, the card answers.
    const dialogs: PermissionQuestion[] = [];
    const h = panelHarness(daemon.agent, { askPermission: (question) => void dialogs.push(question) });
    // summarize is read-only: running it is not asked, its sampling request is.
    const pending = h.controller.prompt('!tool mcp__db__summarize {"text": "Summarise the <b>release</b> notes."}');
    const asked = (await h.next((e) => e.type === 'permission' && e.options.length > 0)) as Extract<ChatEvent, { type: 'permission' }>;
    expect(asked).toMatchObject({ kind: 'sampling', title: 'db asks to use the model' });
    expect(asked.options.map((o) => o.optionId)).toEqual(['allow_once', 'reject_once']);
    // The daemon's preview in words: the server, its system prompt (tests/mcp/server.py's SUMMARY_SYSTEM), the last message.
    expect(asked.description).toMatch(/^The MCP server 'db' asks to use the model for an answer of at most 200 tokens to 1 message/);
    expect(asked.description).toContain('\nSystem prompt: You summarise texts for the summarize tool');
    expect(asked.description).toContain('\nLast message: Summarise the <b>release</b> notes.');
    expect(dialogs).toEqual([{ kind: 'sampling', title: asked.title, description: asked.description }]);
    const call = toolUpdates(h.events).find((u) => u.kind === 'tool_call');
    expect(call).toMatchObject({ name: 'mcp__db__summarize', toolCallId: asked.toolCallId });
    expect(h.controller.answerPermission(asked.toolCallId, 'allow_once')).toBe(true);
    expect((await pending).outcome).toBe('completed');
    expect(answers(h.wire)).toEqual([{ outcome: { outcome: 'selected', optionId: 'allow_once' } }]);
    expect(h.events.filter((e) => e.type === 'permission').at(-1)).toMatchObject({ kind: 'sampling', options: [], answer: 'Allow once' });
    // The server got the model's answer (the bundled model server echoes the server's message).
    const done = toolUpdates(h.events).at(-1) as { status: string; content: string };
    expect(done.status).toBe('completed');
    expect(JSON.parse(done.content).result).toMatchObject({ role: 'assistant', content: { type: 'text', text: 'Echo: Summarise the <b>release</b> notes.' } });
    const sampled = (await model.log()).filter((e) => e.type === 'request' && e.purpose === 'sampling');
    expect(sampled).toHaveLength(1);
  });

  it('mcp/status lists the server for the MCP section; a read-only tool runs without asking', async () => {
    const h = harness();
    await h.controller.refreshFeatures();
    expect(h.events.find((e) => e.type === 'features')).toMatchObject({ mcp: true });
    expect((await h.controller.prompt('!tool mcp__db__add {"a": 2, "b": 40}')).outcome).toBe('completed');
    expect(h.events.some((e) => e.type === 'permission')).toBe(false);
    expect(toolUpdates(h.events).at(-1)).toMatchObject({ status: 'completed', content: '42' });
    await h.controller.refreshMcp();
    const mcp = h.events.filter((e) => e.type === 'mcp').at(-1) as Extract<ChatEvent, { type: 'mcp' }>;
    expect(mcp.servers).toEqual([expect.objectContaining({ name: 'db', state: 'ready', transport: 'stdio' })]);
    expect(mcp.servers[0].tools).toEqual(expect.arrayContaining(['add', 'echo']));
  });
});
