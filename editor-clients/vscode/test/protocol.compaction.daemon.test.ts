// Issue 15 through the protocol layer, against the REAL `agentd serve` and
// the bundled model server: the context meter from usage updates, manual
// compaction (agent/compact) shown as a divider, and a reload that shows the
// divider before the turns kept verbatim.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import { AgentController } from '../src/protocol/controller';
import { ClientToolRunner } from '../src/tools/clientTools';
import { startDaemon, startModelServer, tmpDir, type Daemon, type ModelServer } from './helpers/agentd';
import { FakeWorkspace } from './helpers/fakeWorkspace';

let model: ModelServer;
let daemon: Daemon;
const WINDOW = 12_000;

beforeAll(async () => {
  model = await startModelServer();
  daemon = await startDaemon(model.url, {}, { contextWindow: WINDOW, memory: { enabled: false } });
});

afterAll(async () => {
  await daemon?.stop();
  await model?.stop();
});

function harness(root = tmpDir('agentd-ws-')) {
  const controller = new AgentController(() => root, new ClientToolRunner(new FakeWorkspace(), { workspaceRoot: () => root, editApproval: () => 'ask' }));
  controller.attach(daemon.agent);
  const events: ChatEvent[] = [];
  controller.onEvent((e) => events.push(e));
  return { controller, root, events };
}

const of = <T extends ChatEvent['type']>(events: ChatEvent[], type: T) => events.filter((e): e is Extract<ChatEvent, { type: T }> => e.type === type);
const filler = (n: number) => `Turn ${n}: remember marker-${n}. ${'lorem ipsum dolor sit amet '.repeat(60)}`;

describe('context meter and compaction', () => {
  it('usage updates drive the meter; agent/compact shows started then done outside any turn, and the meter drops', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) expect((await h.controller.prompt(filler(i))).outcome).toBe('completed');
    const meter = of(h.events, 'context').at(-1)!;
    expect(meter.window).toBe(WINDOW);
    expect(meter.tokens).toBeGreaterThan(0);
    const turnsBefore = of(h.events, 'turnStart').length;
    const res = await h.controller.compact('keep the markers');
    expect(res).toMatchObject({ kind: 'compaction', status: 'done', trigger: 'manual' });
    expect(res.tokensAfter).toBeLessThan(res.tokensBefore);
    expect(of(h.events, 'compaction').map((e) => e.update.status)).toEqual(['started', 'done']);
    expect(of(h.events, 'turnStart')).toHaveLength(turnsBefore); // not a turn
    expect(of(h.events, 'context').at(-1)).toEqual({ type: 'context', tokens: res.tokensAfter, window: WINDOW });
    // A reload shows the divider first, then the turns kept verbatim.
    const other = harness(h.root);
    await other.controller.loadSession(h.controller.currentSessionId!);
    const shown = other.events.filter((e) => e.type === 'compaction' || e.type === 'turnStart');
    expect(shown[0]).toMatchObject({ type: 'compaction', replay: true, update: { status: 'done' } });
    expect(shown.slice(1).every((e) => e.type === 'turnStart')).toBe(true);
    expect(shown.length).toBeGreaterThan(1);
  });
  it('/compact typed in the prompt box runs the same compaction inside a turn (the divider goes there)', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) expect((await h.controller.prompt(filler(i))).outcome).toBe('completed');
    const n = h.events.length;
    const res = await h.controller.prompt('/compact keep the markers');
    expect(res.outcome).toBe('completed');
    const during = h.events.slice(n);
    const turnStart = during.findIndex((e) => e.type === 'turnStart');
    const turnEnd = during.findIndex((e) => e.type === 'turnEnd');
    const compactions = during.map((e, i) => (e.type === 'compaction' ? i : -1)).filter((i) => i >= 0);
    expect(compactions.map((i) => (during[i] as Extract<ChatEvent, { type: 'compaction' }>).update.status)).toEqual(['started', 'done']);
    // Between the turn's start and end: the live view puts the divider in the running turn.
    expect(compactions.every((i) => i > turnStart && i < turnEnd)).toBe(true);
    const text = during.map((e) => (e.type === 'update' && e.update.kind === 'message_chunk' ? e.update.text : '')).join('');
    expect(text).toMatch(/compacted/i);
  });
});
