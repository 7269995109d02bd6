// The protocol layer (AgentController + ClientToolRunner) against the REAL
// `agentd serve` and the bundled local model server, over vscode-jsonrpc:
// the same code the extension runs over LanguageClient.

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import { AgentController } from '../src/protocol/controller';
import { ErrorCodes } from '../src/protocol/types';
import { ClientToolRunner, DENIED_COMMAND } from '../src/tools/clientTools';
import { AGENTD_BIN, startDaemon, startModelServer, tmpDir, type Daemon, type ModelServer } from './helpers/agentd';
import { FakeWorkspace } from './helpers/fakeWorkspace';
import { alive, gone, pidsFrom } from './helpers/processes';
import { recording, type WireEvent } from './helpers/recorder';

let model: ModelServer;
let daemon: Daemon;

beforeAll(async () => {
  model = await startModelServer();
  daemon = await startDaemon(model.url);
});

afterAll(async () => {
  await daemon?.stop();
  await model?.stop();
});

interface Harness {
  controller: AgentController;
  ws: FakeWorkspace;
  root: string;
  events: ChatEvent[];
  wire: WireEvent[];
  editApproval: 'ask' | 'always';
  /** Resolves with the first event (past or future) matching `pred`. */
  next(pred: (e: ChatEvent) => boolean): Promise<ChatEvent>;
}

function harness(root: string = tmpDir('agentd-ws-')): Harness {
  const ws = new FakeWorkspace();
  const h = { editApproval: 'ask' } as Harness;
  const tools = new ClientToolRunner(ws, { workspaceRoot: () => root, editApproval: () => h.editApproval });
  const controller = new AgentController(() => root, tools);
  const { conn, events: wire } = recording(daemon.agent);
  controller.attach(conn);
  const events: ChatEvent[] = [];
  const waiters: { pred: (e: ChatEvent) => boolean; resolve: (e: ChatEvent) => void }[] = [];
  controller.onEvent((e) => {
    events.push(e);
    for (const w of [...waiters]) {
      if (w.pred(e)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(e);
      }
    }
  });
  return Object.assign(h, {
    controller,
    ws,
    root,
    events,
    wire,
    next(pred: (e: ChatEvent) => boolean) {
      const past = events.find(pred);
      if (past) return Promise.resolve(past);
      return new Promise<ChatEvent>((resolve) => waiters.push({ pred, resolve }));
    },
  });
}

const answerText = (events: ChatEvent[], turnId?: string): string =>
  events
    .filter((e): e is Extract<ChatEvent, { type: 'update' }> => e.type === 'update' && (!turnId || e.turnId === turnId))
    .map((e) => (e.update.kind === 'message_chunk' ? e.update.text : ''))
    .join('');

type Sent = Extract<WireEvent, { dir: 'out-notification' | 'request' }>;
const sent = (wire: WireEvent[], dir: Sent['dir'], method: string): Sent[] =>
  wire.filter((w): w is Sent => w.dir === dir && w.method === method);
const toolResults = (wire: WireEvent[]) => sent(wire, 'out-notification', 'agent/toolResult').map((w) => w.params);

let h: Harness;
beforeEach(() => {
  h = harness();
});

describe('prompt streaming', () => {
  it('streams the answer in chunks and ends the turn with usage', async () => {
    const res = await h.controller.prompt('hello streaming world');
    expect(res.outcome).toBe('completed');
    expect(res.result?.stopReason).toBe('end_turn');
    const chunks = h.events.filter((e) => e.type === 'update' && e.update.kind === 'message_chunk');
    expect(chunks.length).toBeGreaterThan(1); // streamed, not one block
    expect(answerText(h.events)).toBe('Echo: hello streaming world');
    expect(h.events.some((e) => e.type === 'update' && e.update.kind === 'usage')).toBe(true);
    const end = h.events.find((e) => e.type === 'turnEnd');
    expect(end).toMatchObject({ outcome: 'completed', stopReason: 'end_turn' });
    expect((end as { usage?: { outputTokens: number } }).usage?.outputTokens).toBeGreaterThan(0);
    expect(h.events[0]).toMatchObject({ type: 'cleared' }); // a session was created first
  });

  it('explains a model error from the result (stopReason "error")', async () => {
    const res = await h.controller.prompt('!status 400\nthis request fails');
    expect(res.outcome).toBe('error');
    expect(res.result?.stopReason).toBe('error');
    const end = h.events.find((e) => e.type === 'turnEnd') as Extract<ChatEvent, { type: 'turnEnd' }>;
    expect(end.outcome).toBe('error');
    expect(end.message).toBe(res.result?.error?.message);
    expect(end.message).toMatch(/\S/);
    // The session stays usable.
    expect((await h.controller.prompt('still there?')).outcome).toBe('completed');
  });
});

describe('cancel', () => {
  it('sends $/cancelRequest, shows the turn cancelled at once, gets -32800, and the next prompt works', async () => {
    const pending = h.controller.prompt('!delay 0.2\n!chunks 50');
    let settled = false;
    void pending.then(() => (settled = true));
    await h.next((e) => e.type === 'update' && e.update.kind === 'message_chunk');

    const wireBefore = h.wire.length;
    expect(h.controller.cancel()).toBe(true);
    // The view hears of the cancel synchronously, before the daemon replies.
    const end = h.events.find((e) => e.type === 'turnEnd');
    expect(end).toMatchObject({ outcome: 'cancelled' });
    expect(settled).toBe(false);
    expect(h.controller.running).toBe(false);

    const res = await pending;
    expect(res.outcome).toBe('cancelled');
    const reply = h.wire.find((w) => w.dir === 'reply' && w.method === 'agent/prompt');
    expect(reply).toMatchObject({ errorCode: ErrorCodes.RequestCancelled });
    // Nothing of that prompt reached the view after its cancelled turnEnd.
    const endIdx = h.events.indexOf(end!);
    expect(h.events.slice(endIdx + 1).filter((e) => e.type === 'update')).toEqual([]);
    // And the daemon sent no agent/update after its -32800 reply.
    const replyIdx = h.wire.indexOf(reply!);
    expect(h.wire.slice(replyIdx + 1).filter((w) => w.dir === 'in' && w.method === 'agent/update')).toEqual([]);
    expect(replyIdx).toBeGreaterThanOrEqual(wireBefore);
    // Only part of the 50 chunks arrived.
    expect(answerText(h.events).split(' ').length).toBeLessThan(50);

    // The model server saw the client go away mid-stream.
    let disconnects: unknown[] = [];
    for (let i = 0; i < 200 && disconnects.length === 0; i++) {
      disconnects = (await model.log()).filter((e) => e.type === 'disconnect');
      if (!disconnects.length) await new Promise((r) => setTimeout(r, 50)); // polling an external log, not a sync point
    }
    expect(disconnects.length).toBeGreaterThan(0);

    const after = await h.controller.prompt('after the cancel');
    expect(after.outcome).toBe('completed');
    const lastTurn = h.events.filter((e) => e.type === 'turnStart').pop() as { turnId: string };
    expect(answerText(h.events, lastTurn.turnId)).toBe('Echo: after the cancel');
  });

  it('aborts a client tool waiting for approval when the prompt is cancelled', async () => {
    fs.writeFileSync(path.join(h.root, 'a.txt'), 'one two\n');
    let approvalSignal: AbortSignal | undefined;
    let approvalAsked!: () => void;
    const asked = new Promise<void>((r) => (approvalAsked = r));
    h.ws.onApprove = (_req, signal) =>
      new Promise((resolve) => {
        approvalSignal = signal;
        approvalAsked();
        signal.addEventListener('abort', () => resolve(undefined));
      });
    const pending = h.controller.prompt('!tool edit_file {"path": "a.txt", "old_text": "one", "new_text": "1"}');
    await asked;
    h.controller.cancel();
    expect(approvalSignal?.aborted).toBe(true);
    expect((await pending).outcome).toBe('cancelled');
    await h.controller.toolsIdle();
    expect(toolResults(h.wire)).toEqual([]); // the withdrawn call gets no result
    expect(fs.readFileSync(path.join(h.root, 'a.txt'), 'utf8')).toBe('one two\n');
    expect((await h.controller.prompt('next')).outcome).toBe('completed');
  });

  it('a running command the daemon withdraws (agent/cancel from another panel) is killed with its background child, and gets no result', async () => {
    h.ws.answers = ['once'];
    const pidsFile = path.join(h.root, 'pids');
    const command = `sleep 60 & echo $$ $! > ${pidsFile}; wait`;
    const pending = h.controller.prompt(`!tool run_command ${JSON.stringify({ command })}`);
    const [sh, child] = await pidsFrom(pidsFile);
    expect(alive(sh) && alive(child)).toBe(true);
    const sessionId = h.controller.currentSessionId!;
    // Not this controller's Stop: the daemon itself withdraws the call.
    await daemon.agent.sendNotification('agent/cancel', { sessionId });
    await h.next((e) => e.type === 'update' && e.update.kind === 'tool_call_update' && e.update.status === 'cancelled');
    await gone([sh, child]);
    expect((await pending).outcome).toBe('cancelled');
    await h.controller.toolsIdle();
    expect(toolResults(h.wire)).toEqual([]); // the withdrawn call gets no result
    expect((await h.controller.prompt('next')).outcome).toBe('completed');
  });
});

describe('client tools round trip', () => {
  it('edit_file: approved once, applied through the workspace adapter, result fed back to the model', async () => {
    const file = path.join(h.root, 'a.txt');
    fs.writeFileSync(file, 'hello world\n');
    h.ws.answers = ['once'];
    const res = await h.controller.prompt('!tool edit_file {"path": "a.txt", "old_text": "world", "new_text": "agentd"}');
    expect(res.outcome).toBe('completed');
    expect(h.ws.approvals).toHaveLength(1);
    expect(h.ws.approvals[0]).toMatchObject({ kind: 'edit', tool: 'edit_file', path: file });
    expect(h.ws.edits).toEqual([{ path: file, start: 6, end: 11, newText: 'agentd' }]);
    expect(fs.readFileSync(file, 'utf8')).toBe('hello agentd\n');
    const [result] = toolResults(h.wire);
    expect(result).toMatchObject({ isError: false, sessionId: h.controller.currentSessionId });
    expect(result.content).toContain('Edited a.txt');
    expect(answerText(h.events)).toContain('Tool result received: Edited a.txt');
    const tool = h.events.find((e) => e.type === 'update' && e.update.kind === 'tool_call');
    expect(tool).toMatchObject({ update: { name: 'edit_file', executor: 'client' } });
    expect(h.events.some((e) => e.type === 'toolState' && e.state === 'awaiting_approval')).toBe(true);
    expect(h.events.some((e) => e.type === 'toolState' && e.state === 'done')).toBe(true);
  });

  it('edit_file applies to an unsaved buffer, without approval when edits are "always"', async () => {
    const file = path.join(h.root, 'b.txt');
    fs.writeFileSync(file, 'on disk\n');
    h.ws.dirty.set(file, 'unsaved buffer text\n');
    h.editApproval = 'always';
    const res = await h.controller.prompt('!tool edit_file {"path": "b.txt", "old_text": "buffer", "new_text": "BUFFER"}');
    expect(res.outcome).toBe('completed');
    expect(h.ws.approvals).toEqual([]);
    expect(h.ws.dirty.get(file)).toBe('unsaved BUFFER text\n');
    expect(fs.readFileSync(file, 'utf8')).toBe('on disk\n'); // the user's unsaved work is not saved for them
    expect(answerText(h.events)).toContain('Tool result received: Edited b.txt');
  });

  it('read_file returns the unsaved buffer', async () => {
    const file = path.join(h.root, 'c.py');
    fs.writeFileSync(file, 'print("disk")\n');
    h.ws.dirty.set(file, 'print("unsaved")\n');
    await h.controller.prompt('!tool read_file {"path": "c.py"}');
    const [result] = toolResults(h.wire);
    expect(result).toMatchObject({ isError: false, content: '1  print("unsaved")' });
    expect(answerText(h.events)).toContain('print("unsaved")');
  });

  it('run_command: denial is sent as an error result the model reads', async () => {
    h.ws.answers = ['deny'];
    await h.controller.prompt('!tool run_command {"command": "touch should-not-exist"}');
    expect(toolResults(h.wire)).toEqual([
      expect.objectContaining({ content: DENIED_COMMAND, isError: true }),
    ]);
    expect(fs.existsSync(path.join(h.root, 'should-not-exist'))).toBe(false);
    expect(answerText(h.events)).toContain(`Tool result received: ${DENIED_COMMAND}`);
  });

  it('run_command: approved, output and exit code returned', async () => {
    h.ws.answers = ['once'];
    await h.controller.prompt('!tool run_command {"command": "echo out-$((6*7)); exit 3"}');
    const [result] = toolResults(h.wire);
    expect(result.content).toContain('out-42');
    expect(result.content).toContain('[exit code: 3]');
    expect(result.isError).toBe(true);
    expect(h.ws.commands).toEqual([{ command: 'echo out-$((6*7)); exit 3', cwd: h.root }]);
  });

  it('a path outside the workspace is refused without asking', async () => {
    await h.controller.prompt('!tool write_file {"path": "../escape.txt", "content": "x"}');
    const [result] = toolResults(h.wire);
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^Refused: .* outside the workspace/);
    expect(h.ws.approvals).toEqual([]);
    expect(fs.existsSync(path.join(path.dirname(h.root), 'escape.txt'))).toBe(false);
  });
});

describe('sessions', () => {
  it('reset clears the view and the daemon history; list/load degrade gracefully when missing', async () => {
    await h.controller.prompt('first');
    const id = h.controller.currentSessionId;
    const before = h.events.length;
    await h.controller.reset();
    // Then the session's mode and model again, where the daemon has them. The
    // MCP section's refresh after the prompt may land anywhere in between.
    const shown = h.events.slice(before).filter((e) => e.type !== 'mcp');
    expect(shown.slice(0, 2)).toEqual([{ type: 'cleared' }, { type: 'session', sessionId: id }]);
    expect(h.controller.currentSessionId).toBe(id);
    const [wireReset] = sent(h.wire, 'request', 'agent/resetSession');
    expect(wireReset?.params).toEqual({ sessionId: id });
    let listed: unknown;
    try {
      listed = await h.controller.listSessions();
    } catch (err) {
      listed = err;
    }
    // Either the daemon lists sessions, or the client says plainly that it cannot.
    if (Array.isArray(listed)) expect(listed.every((s) => typeof s.sessionId === 'string')).toBe(true);
    else expect(String((listed as Error).message)).toMatch(/does not support agent\/listSessions/);
  });

  it('a stored session replays as it was shown: memory-less turns with token lines, a Cancelled badge, and denials', async () => {
    h.ws.answers = ['deny'];
    await h.controller.prompt('!tool run_command {"command": "touch nothing"}');
    const pending = h.controller.prompt('!delay 0.2\n!chunks 50');
    await h.next((e) => e.type === 'update' && e.update.kind === 'message_chunk' && e.turnId !== 't1' && !e.update.text.startsWith('Tool'));
    h.controller.cancel();
    await pending;
    const sid = h.controller.currentSessionId!;
    // Another surface of the same workspace (as after a daemon restart) loads the
    // session and shows its replay. A session stays bound to its workspace: the
    // daemon refuses to load a live one under another root (-32602).
    const other = harness(h.root);
    await other.controller.loadSession(sid);
    const ends = other.events.filter((e) => e.type === 'turnEnd');
    expect(ends.map((e) => (e as { outcome: string }).outcome)).toEqual(['replayed', 'cancelled']);
    expect(ends.every((e) => (e as { replay?: boolean }).replay)).toBe(true);
    expect(other.events.some((e) => e.type === 'update' && e.update.kind === 'usage')).toBe(true);
    expect(other.events.find((e) => e.type === 'toolState')).toMatchObject({ state: 'denied' });
  });

  it('fork switches to a copy of the session that goes on from its history; delete removes one and clears the view that showed it', async () => {
    await h.controller.prompt('remember the word heron');
    const source = h.controller.currentSessionId!;
    const fork = await h.controller.forkSession(source);
    expect(fork).not.toBe(source);
    expect(h.controller.currentSessionId).toBe(fork);
    expect(sent(h.wire, 'request', 'agent/forkSession')[0]?.params).toEqual({ sessionId: source, workspaceRoot: h.root });
    // The fork's history was replayed into the view, and the next prompt goes on from it.
    expect(h.events.some((e) => e.type === 'turnStart' && e.replay && e.prompt === 'remember the word heron')).toBe(true);
    expect((await h.controller.prompt('what was the word?')).outcome).toBe('completed');
    const requests = (await model.log()).filter((e) => e.type === 'request' && e.purpose === 'main');
    const body = JSON.stringify(requests[requests.length - 1]?.body);
    expect(body).toContain('what was the word?');
    expect(body).toContain('remember the word heron');

    // Deleting another session leaves the view as it is.
    expect(await h.controller.deleteSession(source)).toBe(true);
    expect(h.controller.currentSessionId).toBe(fork);
    // Deleting the view's session clears it; the next prompt starts a new one.
    const shown = h.events.length;
    expect(await h.controller.deleteSession(fork)).toBe(true);
    expect(h.events.slice(shown).filter((e) => e.type !== 'mcp').slice(0, 2)).toEqual([
      { type: 'cleared' },
      { type: 'session', sessionId: undefined },
    ]);
    expect(h.controller.currentSessionId).toBeUndefined();
    const listed = (await h.controller.listSessions()).map((s) => s.sessionId);
    expect(listed).not.toContain(source);
    expect(listed).not.toContain(fork);
    expect(await h.controller.deleteSession(fork)).toBe(false);
    expect((await h.controller.prompt('a fresh start')).outcome).toBe('completed');
    expect([source, fork]).not.toContain(h.controller.currentSessionId);
  });

  it('a new session starts with an empty history', async () => {
    await h.controller.prompt('remember this');
    const first = h.controller.currentSessionId;
    const second = await h.controller.newSession();
    expect(second).not.toBe(first);
    expect((await h.controller.prompt('hi')).outcome).toBe('completed');
  });
});

describe('memory', () => {
  it('delivers a memory file matching the prompt as an agent/update of kind memory, and refreshes on memory/changed', async (ctx) => {
    let dir: string;
    try {
      const { stdout } = await promisify(execFile)(AGENTD_BIN, ['memory', 'dir', h.root], { env: daemon.env });
      dir = stdout.trim().split('\n').pop()!;
    } catch (err) {
      ctx.skip(`\`agentd memory dir\` does not work in this agentd yet: ${String(err).split('\n')[0]}`);
      return;
    }
    try {
      await h.controller.memoryList();
    } catch (err) {
      ctx.skip(`the daemon does not serve memory yet: ${(err as Error).message}`);
      return;
    }
    const changed = h.next((e) => e.type === 'memory' && e.docs.some((d) => d.path.endsWith('x.md')));
    fs.mkdirSync(dir, { recursive: true });
    const doc = path.join(dir, 'x.md');
    fs.writeFileSync(
      doc,
      '---\nname: zebra colours\ndescription: what colour zebras are in this project\ntype: project\n---\nZebras in this project are purple.\n',
    );
    await changed; // memory/changed -> memory/list -> a memory event for the view
    await h.controller.prompt('what colour are zebras here?');
    const delivery = h.events.find((e) => e.type === 'update' && e.update.kind === 'memory');
    expect(delivery).toBeDefined();
    expect((delivery as { update: { docs: string[] } }).update.docs.map((p) => fs.realpathSync(p))).toContain(fs.realpathSync(doc));
  });
});

describe('tool locations (issue 18)', () => {
  it('a daemon search reports file:line locations on its tool_call_update; read_file names its file on the call', async () => {
    fs.mkdirSync(path.join(h.root, 'src'));
    fs.writeFileSync(path.join(h.root, 'src', 'a.py'), 'one\nneedle here\nthree\n');
    fs.writeFileSync(path.join(h.root, 'b.txt'), 'needle\n');
    const res = await h.controller.prompt('!tool search {"query": "needle"}');
    expect(res.outcome).toBe('completed');
    const done = h.events.find(
      (e) => e.type === 'update' && e.update.kind === 'tool_call_update' && e.update.status === 'completed',
    ) as Extract<ChatEvent, { type: 'update' }>;
    expect(done).toBeDefined();
    const locations = (done.update as { locations?: { path: string; line?: number }[] }).locations;
    expect(locations).toEqual(
      expect.arrayContaining([
        { path: path.join(h.root, 'src', 'a.py'), line: 2 },
        { path: path.join(h.root, 'b.txt'), line: 1 },
      ]),
    );
  });
});

describe('what the daemon offers decides which controls show', () => {
  it('features follow the initialize capabilities and agent/listCommands (none on a daemon without them)', async () => {
    await h.controller.refreshFeatures();
    const features = h.events.find((e) => e.type === 'features') as Extract<ChatEvent, { type: 'features' }>;
    expect(features.images).toBe(!!daemon.caps?.promptContent?.includes('image'));
    expect(features.mcp).toBe(!!daemon.caps?.mcp);
    const listed = await h.controller.listCommands().then(
      (c) => c,
      (err: Error) => err,
    );
    if (listed instanceof Error) {
      expect(listed.message).toMatch(/does not support agent\/listCommands/);
      expect(features.commands).toEqual([]);
    } else {
      expect(features.commands.map((c) => c.name)).toEqual(listed.map((c) => c.name));
    }
  });

  it('a session without modes and models (or with them) emits setup only when the daemon has them', async () => {
    await h.controller.newSession();
    const setup = h.events.find((e) => e.type === 'setup') as Extract<ChatEvent, { type: 'setup' }> | undefined;
    const newSession = sent(h.wire, 'request', 'agent/newSession');
    const reply = h.wire.find((w) => w.dir === 'reply' && w.method === 'agent/newSession') as { result: { modes?: unknown } };
    expect(newSession).toHaveLength(1);
    if (reply.result.modes) expect(setup?.setup.modes).toEqual(reply.result.modes);
    else expect(setup).toBeUndefined();
  });
});
