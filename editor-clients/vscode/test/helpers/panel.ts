// A panel's controller on a real daemon's connection, as the protocol specs
// of MCP tools and of agent/elicit drive it: a fresh workspace folder, the
// client tools over a FakeWorkspace (edits asked), the wire recorded, and
// the chat events kept with `next`, which waits for the first one matching
// (already seen or still to come).

import type { ChatEvent } from '../../src/common/messages';
import type { AgentConnection } from '../../src/protocol/connection';
import { AgentController } from '../../src/protocol/controller';
import { ClientToolRunner } from '../../src/tools/clientTools';
import { tmpDir } from './agentd';
import { FakeWorkspace } from './fakeWorkspace';
import { recording } from './recorder';

type ControllerOptions = NonNullable<ConstructorParameters<typeof AgentController>[2]>;

/**
 * `elicit`: how the controller answers agent/elicit (absent: it has no way to
 * ask); `askPermission`: the dialog beside the card (absent: the card asks).
 */
export function panelHarness(agent: AgentConnection, options: Pick<ControllerOptions, 'elicit' | 'askPermission'> = {}) {
  const root = tmpDir('agentd-ws-');
  const tools = new ClientToolRunner(new FakeWorkspace(), { workspaceRoot: () => root, editApproval: () => 'ask' });
  const controller = new AgentController(() => root, tools, options);
  const { conn, events: wire } = recording(agent);
  controller.attach(conn);
  const events: ChatEvent[] = [];
  const waiters: { pred: (e: ChatEvent) => boolean; resolve: (e: ChatEvent) => void }[] = [];
  controller.onEvent((e) => {
    events.push(e);
    for (const w of [...waiters]) if (w.pred(e)) waiters.splice(waiters.indexOf(w), 1) && w.resolve(e);
  });
  const next = (pred: (e: ChatEvent) => boolean): Promise<ChatEvent> =>
    events.find(pred) ? Promise.resolve(events.find(pred)!) : new Promise((resolve) => waiters.push({ pred, resolve }));
  return { controller, events, wire, next };
}
