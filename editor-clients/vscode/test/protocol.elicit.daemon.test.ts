// agent/elicit against the REAL `agentd serve`, the repository's test MCP
// server (tests/mcp/server.py, whose `ask` tool elicits a form or a sign-in
// URL) and the bundled model server: the panel's controller answers with
// the extension's dialogs (src/vscode/elicitation.ts), whose VS Code API is
// the test mock's, programmed per test as the permission specs do.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it as vitestIt } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import { NOT_MINE } from '../src/protocol/connection';
import type { ElicitParams } from '../src/protocol/types';
import { askElicitation, problemWith } from '../src/vscode/elicitation';
import { AGENTD_BIN, startDaemon, startModelServer, type Daemon, type ModelServer } from './helpers/agentd';
import { panelHarness } from './helpers/panel';
import type { WireEvent } from './helpers/recorder';
import { __mock, env, window } from './mocks/vscode';

let model: ModelServer;
let daemon: Daemon;
const SERVER = process.env.AGENTD_MCP_TEST_SERVER || path.resolve(__dirname, '../../../tests/mcp/server.py');
const PYTHON = process.env.AGENTD_PYTHON || path.join(path.dirname(AGENTD_BIN), 'python');
const SIGN_IN = 'https://example.com/sign-in?state=1';

let hasElicitation = false;

beforeAll(async () => {
  model = await startModelServer();
  daemon = await startDaemon(model.url, {}, { mcpServers: { db: { command: PYTHON, args: [SERVER] } }, mcp: { startupWait: 60 } });
  hasElicitation = !!daemon.caps?.mcp && fs.existsSync(SERVER) && fs.readFileSync(SERVER, 'utf8').includes('elicit_form');
});

afterAll(async () => {
  await daemon?.stop();
  await model?.stop();
});

beforeEach(() => {
  __mock.reset();
});

const it = (name: string, fn: () => Promise<void>) =>
  vitestIt(name, async (ctx) => {
    if (!hasElicitation) return ctx.skip('this agentd or its test MCP server has no elicitation');
    await fn();
  });

const harness = () => panelHarness(daemon.agent, { elicit: askElicitation });

/** What this harness's controller answered to agent/elicit (another harness's session is NOT_MINE). */
const answers = (wire: WireEvent[]) =>
  wire.filter((w) => w.dir === 'answer' && w.method === 'agent/elicit' && (w as { result: unknown }).result !== NOT_MINE).map((w) => (w as { result: unknown }).result);

/** The `ask` tool's result: what the MCP server received, as JSON. */
function toolResult(events: ChatEvent[]): { action: string; content: unknown } {
  const last = events.flatMap((e) => (e.type === 'update' && e.update.kind === 'tool_call_update' && e.update.status === 'completed' ? [e.update] : [])).at(-1);
  return JSON.parse(String((last as { content?: unknown } | undefined)?.content));
}

type Item = { label: string; value: unknown };

describe('agent/elicit in the editor', () => {
  it('a form is asked property by property, checked against the schema, and reaches the server typed', async () => {
    const h = harness();
    const rowsChecks: (string | undefined)[] = [];
    // account (choices), confirm (boolean) and tags (multi-select) are picks; rows, ratio and note are typed.
    window.showQuickPick
      .mockImplementationOnce(async (items: unknown) => (items as Item[]).find((i) => i.label === 'work'))
      .mockImplementationOnce(async (items: unknown) => (items as Item[]).find((i) => i.label === 'Yes'))
      .mockImplementationOnce(async (items: unknown, opts: unknown) => {
        expect(opts).toMatchObject({ canPickMany: true });
        return items as Item[];
      });
    window.showInputBox
      .mockImplementationOnce(async (opts?: unknown) => {
        const validate = (opts as { validateInput: (v: string) => string | undefined }).validateInput;
        rowsChecks.push(validate('0'), validate('2.5'), validate('x'), validate(''), validate('3'));
        return '3';
      })
      .mockImplementationOnce(async () => '') // ratio: optional, left empty
      .mockImplementationOnce(async (opts?: unknown) => {
        const validate = (opts as { validateInput: (v: string) => string | undefined }).validateInput;
        expect(validate('x'.repeat(21))).toBe('At most 20 characters.');
        return 'hi';
      });
    expect((await h.controller.prompt('!tool mcp__db__ask {"kind": "form"}')).outcome).toBe('completed');
    expect(rowsChecks).toEqual(['At least 1.', 'A whole number is required.', 'A number is required.', undefined, undefined]);
    // The account question comes first and names the server; an enum's choices are its values.
    const [firstItems, firstOpts] = window.showQuickPick.mock.calls[0] as [Item[], { title: string; placeHolder: string }];
    expect(firstItems.map((i) => i.label)).toEqual(['personal', 'work']); // required: no "(skip)"
    expect(firstOpts.title).toMatch(/^db: Which account\?/);
    expect(firstOpts.placeHolder).toBe('Account');
    const expected = { account: 'work', rows: 3, confirm: true, note: 'hi', tags: ['a', 'b'] };
    expect(answers(h.wire)).toEqual([{ action: 'accept', content: expected }]);
    expect(toolResult(h.events)).toEqual({ action: 'accept', content: expected });
  });

  it('dismissing a step answers cancel, and the server is told so', async () => {
    const h = harness();
    window.showQuickPick.mockImplementationOnce(async (items: unknown) => (items as Item[])[0]);
    window.showInputBox.mockImplementationOnce(async () => undefined); // Escape on "rows"
    expect((await h.controller.prompt('!tool mcp__db__ask {"kind": "form"}')).outcome).toBe('completed');
    expect(window.showQuickPick).toHaveBeenCalledTimes(1);
    expect(window.showInputBox).toHaveBeenCalledTimes(1); // nothing asked after the dismissal
    expect(answers(h.wire)).toEqual([{ action: 'cancel' }]);
    expect(toolResult(h.events)).toEqual({ action: 'cancel', content: null });
  });

  it('a sign-in URL opens in the browser after Open; the completion is noted in the chat', async () => {
    const h = harness();
    window.showInformationMessage.mockImplementationOnce(async () => 'Open');
    expect((await h.controller.prompt('!tool mcp__db__ask {"kind": "url"}')).outcome).toBe('completed');
    const [message, opts, ...buttons] = window.showInformationMessage.mock.calls[0] as [string, { modal: boolean; detail: string }, ...string[]];
    expect(message).toBe('db asks you to open a page');
    expect(opts).toMatchObject({ modal: true });
    expect(opts.detail).toContain(SIGN_IN);
    expect(buttons).toEqual(['Open', 'Decline']);
    expect(env.openExternal).toHaveBeenCalledTimes(1);
    expect(String((env.openExternal.mock.calls[0] as unknown[])[0])).toBe(SIGN_IN);
    expect(answers(h.wire)).toEqual([{ action: 'accept' }]);
    await h.next((e) => e.type === 'notice' && /done/.test(e.text));
    expect(toolResult(h.events)).toEqual({ action: 'accept', content: null });
  });

  it('Decline on the URL answers decline and opens nothing', async () => {
    const h = harness();
    window.showInformationMessage.mockImplementationOnce(async () => 'Decline');
    expect((await h.controller.prompt('!tool mcp__db__ask {"kind": "url"}')).outcome).toBe('completed');
    expect(env.openExternal).not.toHaveBeenCalled();
    expect(answers(h.wire)).toEqual([{ action: 'decline' }]);
    expect(toolResult(h.events).action).toBe('decline');
    expect(h.events.some((e) => e.type === 'notice')).toBe(false);
  });

  it('Stop while the form is open closes the dialog and answers cancel; the session goes on', async () => {
    const h = harness();
    let shown!: () => void;
    const opened = new Promise<void>((resolve) => (shown = resolve));
    let closedByToken = false;
    // As VS Code does: the pick stays open until its token is cancelled, then resolves undefined.
    window.showQuickPick.mockImplementationOnce(
      (_items: unknown, _opts: unknown, token: unknown) =>
        new Promise((resolve) => {
          (token as { onCancellationRequested: (l: () => void) => void }).onCancellationRequested(() => {
            closedByToken = true;
            resolve(undefined);
          });
          shown();
        }),
    );
    const pending = h.controller.prompt('!tool mcp__db__ask {"kind": "form"}');
    await opened;
    h.controller.cancel();
    expect((await pending).outcome).toBe('cancelled');
    expect(closedByToken).toBe(true);
    expect(answers(h.wire)).toEqual([{ action: 'cancel' }]);
    expect((await h.controller.prompt('still here?')).outcome).toBe('completed');
  });
});

describe('askElicitation on requests it cannot read', () => {
  const live = () => new AbortController().signal;
  vitestIt('declines a malformed form or a URL that is not http(s), asking nothing', async () => {
    __mock.reset();
    const base = { sessionId: 's', toolCallId: 't', message: 'm' };
    expect(await askElicitation({ ...base, mode: 'form', requestedSchema: 5 } as unknown as ElicitParams, live())).toEqual({ action: 'decline' });
    expect(await askElicitation({ ...base, mode: 'form', requestedSchema: { properties: { x: { type: 'object' } } } } as unknown as ElicitParams, live())).toEqual({
      action: 'decline',
    });
    expect(await askElicitation({ ...base, mode: 'url', url: 'javascript:alert(1)', elicitationId: 'e' }, live())).toEqual({ action: 'decline' });
    expect(await askElicitation({ ...base, mode: 'other' } as unknown as ElicitParams, live())).toEqual({ action: 'decline' });
    expect(await askElicitation(null as unknown as ElicitParams, live())).toEqual({ action: 'decline' });
    expect(window.showQuickPick).not.toHaveBeenCalled();
    expect(window.showInputBox).not.toHaveBeenCalled();
    expect(window.showInformationMessage).not.toHaveBeenCalled();
  });

  vitestIt('checks text against the schema the way the daemon will', () => {
    expect(problemWith('', { type: 'string' }, true)).toBe('A value is required.');
    expect(problemWith('', { type: 'string' }, false)).toBeUndefined();
    expect(problemWith('ab', { type: 'string', minLength: 3 }, true)).toBe('At least 3 characters.');
    expect(problemWith('1e3', { type: 'number', maximum: 100 }, true)).toBe('At most 100.');
    expect(problemWith('-0.5', { type: 'number', minimum: -1 }, true)).toBeUndefined();
  });
});
