// Issue 17's session features through the protocol layer, against the REAL
// `agentd serve` and the bundled model server: modes (and what auto-edit does
// to an edit), models, plans, slash commands, images, and a reload that
// brings them back.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import { AgentController } from '../src/protocol/controller';
import { ClientToolRunner } from '../src/tools/clientTools';
import { startDaemon, startModelServer, tmpDir, type Daemon, type ModelServer } from './helpers/agentd';
import { FakeWorkspace } from './helpers/fakeWorkspace';
import { recording, type WireEvent } from './helpers/recorder';

let model: ModelServer;
let daemon: Daemon;
// 1x1 PNG
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

beforeAll(async () => {
  model = await startModelServer();
  // Two models to pick from, the second taking images (settings as a user's config file gives them).
  daemon = await startDaemon(model.url, {}, { models: ['test', { id: 'test-vision', name: 'Test Vision', supportsImages: true }] });
});

afterAll(async () => {
  await daemon?.stop();
  await model?.stop();
});

function harness(root = tmpDir('agentd-ws-'), folders: string[] = []) {
  const ws = new FakeWorkspace();
  const additionalRoots = () => folders;
  const tools = new ClientToolRunner(ws, { workspaceRoot: () => root, additionalRoots, editApproval: () => 'ask' });
  const controller = new AgentController(() => root, tools, { additionalRoots });
  const { conn, events: wire } = recording(daemon.agent);
  controller.attach(conn);
  const events: ChatEvent[] = [];
  controller.onEvent((e) => events.push(e));
  return { controller, ws, root, events, wire };
}

const of = <T extends ChatEvent['type']>(events: ChatEvent[], type: T) => events.filter((e): e is Extract<ChatEvent, { type: T }> => e.type === type);
type Sent = Extract<WireEvent, { dir: 'request' }>;
const requests = (wire: WireEvent[], method: string): Sent[] => wire.filter((w): w is Sent => w.dir === 'request' && w.method === method);

describe('modes and models', () => {
  it('initialize advertises the modes and compaction: the mode picker shows before any session', async () => {
    expect(daemon.caps?.modes?.map((m) => m.id)).toEqual(['ask', 'code', 'auto-edit']);
    expect(daemon.caps?.compaction).toBe(true);
    const h = harness();
    await h.controller.refreshFeatures();
    expect(requests(h.wire, 'agent/newSession')).toEqual([]);
    const setup = of(h.events, 'setup').at(-1)!;
    expect(setup.setup.mode).toBe('code');
    expect(setup.setup.modes?.map((m) => m.id)).toEqual(['ask', 'code', 'auto-edit']);
    expect(of(h.events, 'features').at(-1)!.compaction).toBe(true);
    // Picking a mode then starts the session in it.
    await h.controller.setMode('ask');
    expect(requests(h.wire, 'agent/newSession')).toHaveLength(1);
    expect(of(h.events, 'setup').at(-1)!.setup.mode).toBe('ask');
  });

  it('a new session offers Ask, Code and Auto-edit and the configured models; the pickers change them', async () => {
    const h = harness();
    await h.controller.newSession();
    const setup = of(h.events, 'setup').at(-1)!;
    expect(setup.setup.mode).toBe('code');
    expect(setup.setup.modes?.map((m) => m.id)).toEqual(['ask', 'code', 'auto-edit']);
    expect(setup.setup.models?.map((m) => m.id)).toEqual(['test', 'test-vision']);
    await h.controller.setMode('ask');
    expect(of(h.events, 'setup').at(-1)!.setup.mode).toBe('ask');
    await h.controller.setModel('test-vision');
    expect(of(h.events, 'setup').at(-1)!.setup).toMatchObject({ mode: 'ask', model: 'test-vision' });
    await expect(h.controller.setMode('yolo')).rejects.toMatchObject({ code: -32602 });
    expect(of(h.events, 'setup').at(-1)!.setup.mode).toBe('ask');
  });

  it('in auto-edit the daemon marks edits autoApprove and the panel applies them without asking; commands still ask', async () => {
    const h = harness();
    fs.writeFileSync(path.join(h.root, 'a.txt'), 'hello world\n');
    await h.controller.newSession();
    await h.controller.setMode('auto-edit');
    const res = await h.controller.prompt('!tool edit_file {"path": "a.txt", "old_text": "world", "new_text": "agentd"}');
    expect(res.outcome).toBe('completed');
    const call = h.events.find((e) => e.type === 'update' && e.update.kind === 'tool_call') as Extract<ChatEvent, { type: 'update' }>;
    expect(call.update).toMatchObject({ name: 'edit_file', autoApprove: true });
    expect(h.ws.approvals).toEqual([]);
    expect(fs.readFileSync(path.join(h.root, 'a.txt'), 'utf8')).toBe('hello agentd\n');
    h.ws.answers = ['deny'];
    await h.controller.prompt('!tool run_command {"command": "true"}');
    expect(h.ws.approvals.map((a) => a.kind)).toEqual(['command']);
  });
});

describe('plans, commands and a reload', () => {
  it('an update_plan shows in the plan view (not as a tool card) and comes back with the mode and model on reload', async () => {
    const h = harness();
    await h.controller.newSession();
    await h.controller.setMode('ask');
    const entries = [
      { content: 'read the test', priority: 'high', status: 'completed' },
      { content: 'fix add()', priority: 'medium', status: 'in_progress' },
    ];
    const res = await h.controller.prompt(`!tool update_plan ${JSON.stringify({ entries })}`);
    expect(res.outcome).toBe('completed');
    expect(of(h.events, 'plan').at(-1)!.entries).toEqual(entries);
    expect(h.events.some((e) => e.type === 'update' && e.update.kind === 'tool_call' && e.update.name === 'update_plan')).toBe(false);
    const other = harness(h.root);
    await other.controller.loadSession(h.controller.currentSessionId!);
    expect(of(other.events, 'plan').at(-1)!.entries).toEqual(entries);
    expect(of(other.events, 'setup').at(-1)!.setup.mode).toBe('ask');
  });

  it('agent/listCommands feeds the completion; /memory runs in the daemon without a model request', async () => {
    const h = harness();
    await h.controller.refreshFeatures();
    const names = of(h.events, 'features').at(-1)!.commands.map((c) => c.name);
    expect(names).toEqual(expect.arrayContaining(['compact', 'init', 'memory', 'reset']));
    // Main requests only: memory extraction of earlier turns may run meanwhile.
    const mainRequests = async () => (await model.log()).filter((e) => e.type === 'request' && e.purpose === 'main').length;
    const before = await mainRequests();
    const res = await h.controller.prompt('/memory');
    expect(res.outcome).toBe('completed');
    const text = h.events.map((e) => (e.type === 'update' && e.update.kind === 'message_chunk' ? e.update.text : '')).join('');
    expect(text).toMatch(/memory/i);
    expect(await mainRequests()).toBe(before);
  });
});

describe('a multi-root workspace', () => {
  it('the other folders go as additionalDirectories; the daemon lists them; a folder added counts from the next new session', async () => {
    const other = tmpDir('agentd-other-');
    fs.mkdirSync(path.join(other, 'lib'));
    fs.writeFileSync(path.join(other, 'lib', 'util.py'), 'SHARED = 7\n');
    const folders: string[] = [];
    const h = harness(tmpDir('agentd-ws-'), folders);
    await h.controller.newSession();
    expect(requests(h.wire, 'agent/newSession')[0].params).toEqual({ workspaceRoot: h.root });
    folders.push(other);
    await h.controller.newSession();
    expect(requests(h.wire, 'agent/newSession')[1].params).toEqual({ workspaceRoot: h.root, additionalDirectories: [other] });
    // The daemon's own search reaches the other folder; the editor's read_file too.
    const util = path.join(other, 'lib', 'util.py');
    await h.controller.prompt(`!tool search ${JSON.stringify({ query: 'SHARED', path: other })}`);
    await h.controller.prompt(`!tool read_file ${JSON.stringify({ path: util })}`);
    const results = h.wire.filter((w) => w.dir === 'out-notification' && w.method === 'agent/toolResult') as Array<{ params: { content: string; isError?: boolean } }>;
    expect(results.at(-1)!.params).toMatchObject({ content: '1  SHARED = 7', isError: false });
    const log = await model.log();
    const toolMessages = log
      .filter((e) => e.type === 'request' && e.purpose === 'main')
      .flatMap((e) => ((e.body as { messages: Array<{ role: string; content: unknown }> }).messages ?? []).filter((m) => m.role === 'tool'));
    expect(toolMessages.some((m) => String(m.content).startsWith(`(paths relative to ${fs.realpathSync(other)})`))).toBe(true);
    const listed = await h.controller.listSessions();
    const current = listed.find((s) => s.sessionId === h.controller.currentSessionId)!;
    expect(current.additionalDirectories).toEqual([fs.realpathSync(other)]);
  });

  it("a session loaded from the picker: the editor's tools use its stored folders, not the window's", async () => {
    const other = tmpDir('agentd-other-');
    const third = tmpDir('agentd-third-');
    fs.writeFileSync(path.join(other, 'kept.txt'), 'KEPT\n');
    fs.writeFileSync(path.join(third, 'new.txt'), 'NEW\n');
    const folders = [other];
    const h = harness(tmpDir('agentd-ws-'), folders);
    const sid = await h.controller.newSession();
    await h.controller.prompt('hello');
    // The window's folders change: the stored session still has `other`, not `third`.
    folders.splice(0, 1, third);
    await h.controller.newSession();
    const listed = await h.controller.listSessions();
    expect(listed.find((s) => s.sessionId === sid)!.additionalDirectories).toEqual([fs.realpathSync(other)]);
    await h.controller.loadSession(sid);
    await h.controller.prompt(`!tool read_file ${JSON.stringify({ path: path.join(other, 'kept.txt') })}`);
    await h.controller.prompt(`!tool read_file ${JSON.stringify({ path: path.join(third, 'new.txt') })}`);
    const results = h.wire.filter((w) => w.dir === 'out-notification' && w.method === 'agent/toolResult') as Array<{ params: { content: string; isError?: boolean } }>;
    expect(results.at(-2)!.params).toMatchObject({ content: '1  KEPT', isError: false });
    expect(results.at(-1)!.params).toMatchObject({ isError: true });
    expect(results.at(-1)!.params.content).toMatch(/^Refused: .*outside the workspace folders\.$/);
  });
});

describe('images', () => {
  it('the daemon advertises images; a prompt with one reaches the model on a model that takes images, and a reload shows it', async () => {
    expect(daemon.caps?.promptContent).toContain('image');
    const h = harness();
    await h.controller.refreshFeatures();
    expect(of(h.events, 'features').at(-1)!.images).toBe(true);
    await h.controller.newSession();
    // The main model ('test') takes no images: a clear refusal, never base64 text.
    const refused = await h.controller.prompt('what is this?', [{ mimeType: 'image/png', data: PNG }]);
    expect(refused.outcome).toBe('error');
    expect(refused.message).toMatch(/image/i);
    await h.controller.setModel('test-vision');
    const ok = await h.controller.prompt('what is this?', [{ mimeType: 'image/png', data: PNG }]);
    expect(ok.outcome).toBe('completed');
    expect(requests(h.wire, 'agent/prompt').at(-1)!.params.prompt).toEqual([
      { type: 'text', text: 'what is this?' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
    ]);
    const other = harness(h.root);
    await other.controller.loadSession(h.controller.currentSessionId!);
    const image = other.events.find((e) => e.type === 'update' && e.update.kind === 'user_image') as Extract<ChatEvent, { type: 'update' }>;
    expect(image.update).toMatchObject({ mimeType: 'image/png', data: PNG });
  });
});
