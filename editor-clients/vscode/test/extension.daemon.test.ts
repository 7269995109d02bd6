// Extension logic with a mocked `vscode`: daemon start/failure messages,
// restart, unexpected exits, the chat view's message handling, commands.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { ChatEvent } from '../src/common/messages';
import { AgentController, explain } from '../src/protocol/controller';
import { MAX_DESCRIPTION_CHARS } from '../src/protocol/permission';
import { ClientToolRunner } from '../src/tools/clientTools';
import { activate, commandTimeoutMs } from '../src/vscode/extension';
import { DaemonManager, NOT_FOUND_MESSAGE, type DaemonState } from '../src/vscode/daemon';
import { tmpDir } from './helpers/agentd';
import { FakeDaemon, RpcError, fakeFactory } from './helpers/fakeDaemon';
import { FakeWorkspace } from './helpers/fakeWorkspace';
import { gone, pidsFrom } from './helpers/processes';
import { CancellationSource } from '../src/protocol/connection';
import { __mock, chat, commands, LogLevel, Uri, window, workspace } from './mocks/vscode';
import { TRACE_CHANNEL, TraceChannel } from '../src/vscode/trace';
import { DENIED_EDIT } from '../src/tools/clientTools';

const EXISTING = process.execPath; // any executable stands in for agentd

function waitState(d: DaemonManager, state: DaemonState): Promise<string | undefined> {
  return new Promise((resolve) => {
    const sub = d.onDidChangeState((e) => {
      if (e.state === state) {
        sub.dispose();
        resolve(e.message);
      }
    });
  });
}

function manager(configure?: (d: FakeDaemon) => void) {
  const { factory, made } = fakeFactory(configure);
  const output = __mock.outputChannel('agentd');
  const daemon = new DaemonManager(factory, output as never);
  const root = tmpDir('agentd-ext-');
  const controller = new AgentController(() => root, new ClientToolRunner(new FakeWorkspace(), { workspaceRoot: () => root, editApproval: () => 'ask' }));
  const events: ChatEvent[] = [];
  controller.onEvent((e) => events.push(e));
  daemon.attach(controller);
  return { daemon, made, output, controller, events, root };
}

beforeEach(() => {
  __mock.reset();
  __mock.configuration.set('agentd.command', EXISTING);
  __mock.configuration.set('agentd.args', ['serve', '--stdio']);
});

describe('starting the daemon', () => {
  it('explains a missing agentd with the fix, and spawns nothing', async () => {
    __mock.configuration.set('agentd.command', 'agentd-not-installed-here');
    window.showErrorMessage.mockImplementationOnce(async () => 'Open Settings');
    const { daemon, made, output } = manager();
    expect(await daemon.start()).toBe(false);
    expect(made).toHaveLength(0);
    expect(daemon.state).toBe('failed');
    expect(window.showErrorMessage).toHaveBeenCalledWith(NOT_FOUND_MESSAGE, 'Open Settings', 'Show Output');
    expect(NOT_FOUND_MESSAGE).toBe('agentd was not found: install it with `pipx install agentd-editor` or set agentd.command');
    expect(output.text()).toContain('agentd-not-installed-here');
    await vi.waitFor(() => expect(commands.executeCommand).toHaveBeenCalledWith('workbench.action.openSettings', 'agentd.command'));
  });

  it('passes command, args, env and the client tools to the language client', async () => {
    __mock.configuration.set('agentd.env', { AGENTD_MODEL: 'm1', AGENTD_HOME: '/tmp/h' });
    const { daemon, made } = manager();
    expect(await daemon.start()).toBe(true);
    expect(daemon.state).toBe('ready');
    const cfg = made[0].config;
    expect(cfg.resolvedCommand).toBe(EXISTING);
    expect(cfg.args).toEqual(['serve', '--stdio']);
    expect(cfg.env.AGENTD_MODEL).toBe('m1');
    expect(cfg.env.PATH).toBe(process.env.PATH); // the user's environment is kept
    expect(cfg.initializationOptions).toEqual({ clientTools: ['edit_file', 'write_file', 'run_command', 'read_file'], requestPermission: true, elicitation: { form: true, url: true } });
  });

  it('reports a start failure with its reason and offers a restart that works', async () => {
    let fail = true;
    const { daemon, made } = manager((d) => {
      if (fail) d.startError = new Error('initialize failed: server exited with code 2');
      fail = false;
    });
    window.showErrorMessage.mockImplementationOnce(async () => 'Restart');
    const ready = waitState(daemon, 'ready');
    expect(await daemon.start()).toBe(false);
    const [msg, ...actions] = window.showErrorMessage.mock.calls[0] as string[];
    expect(msg).toContain('agentd could not be started');
    expect(msg).toContain('initialize failed: server exited with code 2');
    expect(actions).toContain('Restart');
    await ready; // the "Restart" button started a fresh client
    expect(made).toHaveLength(2);
    expect(made[1].started).toBe(1);
  });
});

describe('restart', () => {
  it('stops the old daemon, starts a new one, rebinds the chat, and ends a running turn as an error', async () => {
    const { daemon, made, controller, events } = manager((d) => {
      d.handlers.set('agent/prompt', () => new Promise(() => {})); // never answers
    });
    await daemon.start();
    const pending = controller.prompt('long task');
    await vi.waitFor(() => expect(made[0].requests.some((r) => r.method === 'agent/prompt')).toBe(true));
    expect(controller.running).toBe(true);

    expect(await daemon.restart()).toBe(true);
    expect(made).toHaveLength(2);
    expect(made[0].stopped).toBe(1);
    expect(made[1].started).toBe(1);
    const end = events.find((e) => e.type === 'turnEnd');
    expect(end).toMatchObject({ outcome: 'error', message: 'agentd restarted while the prompt was running.' });
    expect(controller.running).toBe(false);
    void pending;

    // The next prompt goes to the new daemon; the old session is restored if it can be (here it cannot: -32601).
    made[1].handlers.set('agent/prompt', () => ({ stopReason: 'end_turn', usage: { inputTokens: 1, outputTokens: 1 } }));
    expect((await controller.prompt('again')).outcome).toBe('completed');
    expect(made[1].requests.map((r) => r.method)).toEqual(['agent/loadSession', 'agent/newSession', 'agent/prompt']);
    expect(made[0].requests.filter((r) => r.method === 'agent/prompt')).toHaveLength(1);
  });

  it('two restarts in a row never run two daemons at once', async () => {
    const { daemon, made } = manager();
    await daemon.start();
    await Promise.all([daemon.restart(), daemon.restart()]);
    expect(made).toHaveLength(3);
    expect(made.slice(0, 2).every((d) => d.stopped === 1)).toBe(true);
    expect(made[2].stopped).toBe(0);
  });

  it('an unexpected exit is explained and can be restarted from the message', async () => {
    const { daemon, made, events, controller } = manager((d) => {
      d.handlers.set('agent/prompt', () => new Promise(() => {}));
    });
    await daemon.start();
    void controller.prompt('work');
    await vi.waitFor(() => expect(controller.running).toBe(true));
    window.showErrorMessage.mockImplementationOnce(async () => 'Restart');
    const stopped = waitState(daemon, 'stopped');
    const ready = waitState(daemon, 'ready');
    made[0].crash();
    expect(await stopped).toBe('agentd exited unexpectedly. Its last messages are in the agentd output.');
    expect(events.find((e) => e.type === 'turnEnd')).toMatchObject({ outcome: 'error', message: 'agentd exited while the prompt was running.' });
    await ready;
    expect(made).toHaveLength(2);
  });

  it('a close caused by our own stop is not reported as a crash', async () => {
    const { daemon, made } = manager();
    await daemon.start();
    await daemon.stop();
    made[0].crash();
    expect(window.showErrorMessage).not.toHaveBeenCalled();
  });
});

describe('error messages', () => {
  it('turns JSON-RPC errors into sentences for the panel', () => {
    expect(explain(new RpcError(-32003, 'busy'))).toMatch(/still running a prompt/);
    expect(explain(new RpcError(-32001, 'unknown'))).toMatch(/no longer knows this session/);
    expect(explain(new RpcError(-32002, 'x'))).toMatch(/still starting/);
    expect(explain(new RpcError(-32602, 'sessionId: field required'))).toBe('agentd rejected the request: sessionId: field required');
    expect(explain(new Error('Pending response rejected since connection got disposed'))).toMatch(/agentd stopped/);
  });
});

describe('activation and the chat view', () => {
  async function activated(configure?: (d: FakeDaemon) => void) {
    const root = tmpDir('agentd-act-');
    workspace.workspaceFolders = [{ uri: Uri.file(root), name: 'ws', index: 0 }];
    const { factory, made } = fakeFactory(configure);
    const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: Uri.file(path.resolve(__dirname, '..')) };
    const api = await activate(context as never, factory);
    await vi.waitFor(() => expect(api.daemon.state).toBe('ready'));
    const posted: unknown[] = [];
    let receive!: (m: unknown) => void;
    const view = {
      webview: {
        options: {},
        html: '',
        cspSource: 'vscode-resource:',
        asWebviewUri: (u: Uri) => u,
        postMessage: vi.fn(async (m: unknown) => {
          posted.push(m);
          return true;
        }),
        onDidReceiveMessage: (fn: (m: unknown) => void) => {
          receive = fn;
          return { dispose() {} };
        },
      },
      onDidDispose: () => ({ dispose() {} }),
      visible: true,
    };
    api.chat.resolveWebviewView(view as never);
    const flat = (): ChatEvent[] => posted.flatMap((m) => (Array.isArray(m) ? m : [m])) as ChatEvent[];
    return { api, made, view, posted, flat, receive: (m: unknown) => receive(m), root, context };
  }

  it('registers the commands and a webview with a strict CSP', async () => {
    const { view } = await activated();
    for (const id of ['agentd.restart', 'agentd.cancel', 'agentd.newSession', 'agentd.resetSession', 'agentd.switchSession', 'agentd.memory.openFolder', 'agentd.memory.list', 'agentd.memory.status']) {
      expect(__mock.commandRegistry.has(id), id).toBe(true);
    }
    const html = view.webview.html;
    const nonce = /script-src 'nonce-([A-Za-z0-9]+)'/.exec(html)?.[1];
    expect(nonce).toBeTruthy();
    expect(html).toContain(`<script nonce="${nonce}"`);
    expect(html).toContain("default-src 'none'");
    expect(html).not.toMatch(/unsafe-inline|unsafe-eval/);
  });

  it('runs a prompt from the webview, forwards events, toggles the running context, and cancels at once', async () => {
    let cancelled!: () => void;
    const { made, receive, flat } = await activated((d) => {
      d.handlers.set('agent/prompt', (p, token) => {
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'message_chunk', text: 'Hello ' } });
        return new Promise((_, reject) => {
          token?.onCancellationRequested(() => {
            cancelled = () => reject(new RpcError(-32800, 'cancelled'));
          });
        });
      });
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'hi there' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'update')).toBe(true));
    expect(commands.executeCommand).toHaveBeenCalledWith('setContext', 'agentd.promptRunning', true);
    expect(flat().find((e) => e.type === 'turnStart')).toMatchObject({ prompt: 'hi there' });

    // The keybinding's command.
    await commands.executeCommand('agentd.cancel');
    expect(flat().at(-1)).toMatchObject({ type: 'turnEnd', outcome: 'cancelled' });
    expect(commands.executeCommand).toHaveBeenCalledWith('setContext', 'agentd.promptRunning', false);
    cancelled(); // the daemon's -32800 arrives later and changes nothing in the view
    await vi.waitFor(() => expect(made[0].requests.filter((r) => r.method === 'agent/prompt')).toHaveLength(1));
    expect(flat().filter((e) => e.type === 'turnEnd')).toHaveLength(1);
  });

  it('shows a model error as the turn\'s error message', async () => {
    const { receive, flat } = await activated((d) => {
      d.handlers.set('agent/prompt', () => ({
        stopReason: 'error',
        usage: { inputTokens: 3, outputTokens: 0 },
        error: { kind: 'auth', message: 'The API key was rejected (401). Check AGENTD_API_KEY.', status: 401 },
      }));
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'x' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'turnEnd')).toBe(true));
    expect(flat().find((e) => e.type === 'turnEnd')).toMatchObject({
      outcome: 'error',
      message: 'The API key was rejected (401). Check AGENTD_API_KEY.',
    });
  });

  it('replays the conversation to a reloaded webview', async () => {
    const { receive, posted, made } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'message_chunk', text: 'answer' } });
        return { stopReason: 'end_turn', usage: { inputTokens: 1, outputTokens: 1 } };
      });
    });
    void made;
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'q' });
    await vi.waitFor(() => expect(posted.some((m) => (m as ChatEvent).type === 'turnEnd')).toBe(true));
    posted.length = 0;
    receive({ type: 'ready' });
    await vi.waitFor(() => expect(posted.length).toBeGreaterThan(0));
    const batch = posted.find(Array.isArray) as ChatEvent[];
    expect(batch.map((e) => e.type)).toEqual(expect.arrayContaining(['daemon', 'turnStart', 'update', 'turnEnd']));
  });

  it('opens only memory files and workspace files from the panel', async () => {
    const { receive, flat, root } = await activated();
    receive({ type: 'ready' });
    receive({ type: 'openFile', path: '/etc/passwd' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'notice')).toBe(true));
    expect(flat().find((e) => e.type === 'notice')).toMatchObject({ level: 'warning' });
    expect(window.showTextDocument).not.toHaveBeenCalled();
    const inside = path.join(root, 'f.txt');
    require('node:fs').writeFileSync(inside, 'x');
    receive({ type: 'openFile', path: inside });
    await vi.waitFor(() => expect(window.showTextDocument).toHaveBeenCalled());
    // A file of another folder of a multi-root workspace opens too.
    const other = tmpDir('agentd-other-');
    const shared = path.join(other, 'g.txt');
    require('node:fs').writeFileSync(shared, 'y');
    receive({ type: 'openFile', path: shared });
    await vi.waitFor(() => expect(flat().filter((e) => e.type === 'notice')).toHaveLength(2));
    workspace.workspaceFolders = [...workspace.workspaceFolders!, { uri: Uri.file(other), name: 'other', index: 1 }];
    receive({ type: 'openFile', path: shared });
    await vi.waitFor(() => expect(window.showTextDocument).toHaveBeenCalledTimes(2));
  });

  it('session switching and memory degrade gracefully on an older daemon (-32601)', async () => {
    const { receive, flat } = await activated();
    receive({ type: 'ready' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'memory')).toBe(true));
    expect(flat().find((e) => e.type === 'memory')).toMatchObject({ available: false, message: 'This version of agentd does not support memory/list.' });
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(window.showInformationMessage).toHaveBeenCalledWith('This version of agentd cannot list saved sessions yet.'));
  });

  it('switches sessions through a quick pick and agent/loadSession, replaying the history', async () => {
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/listSessions', () => ({ sessions: [{ sessionId: 'old1', title: 'Fix the tests', updatedAt: '2026-01-01T00:00:00Z' }] }));
      d.handlers.set('agent/loadSession', (p) => {
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'user_message', text: 'why does it fail?' } });
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'message_chunk', text: 'Because.' } });
        return {};
      });
    });
    window.showQuickPick.mockImplementationOnce(async (items: unknown) => (items as { sessionId: string }[])[0]);
    receive({ type: 'ready' });
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'session' && e.sessionId === 'old1')).toBe(true));
    expect(made[0].requests.find((r) => r.method === 'agent/loadSession')?.params).toMatchObject({ sessionId: 'old1' });
    const replayed = flat().filter((e) => e.type === 'turnStart' || e.type === 'update' || e.type === 'turnEnd');
    expect(replayed).toMatchObject([
      { type: 'turnStart', prompt: 'why does it fail?', replay: true },
      { type: 'update', update: { kind: 'message_chunk', text: 'Because.' } },
      { type: 'turnEnd', outcome: 'replayed' },
    ]);
  });

  it("a listed session's buttons fork it (the fork is opened) and delete it once confirmed", async () => {
    const listed = [
      { sessionId: 'old1', title: 'Fix the tests', updatedAt: '2026-01-01T00:00:00Z' },
      { sessionId: 'old2', title: 'Tidy up', updatedAt: '2026-01-02T00:00:00Z' },
    ];
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/listSessions', () => ({ sessions: listed }));
      d.handlers.set('agent/forkSession', () => ({ sessionId: 'fork1' }));
      d.handlers.set('agent/loadSession', (p) => {
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'user_message', text: 'why does it fail?' } });
        return {};
      });
      d.handlers.set('agent/deleteSession', () => ({ deleted: true }));
    });
    type Offered = { sessionId: string; buttons: { tooltip: string }[] }[];
    const press = (sessionId: string, tooltip: string) => async (items: unknown) => {
      const item = (items as Offered).find((i) => i.sessionId === sessionId)!;
      return { item, button: item.buttons.find((b) => b.tooltip.startsWith(tooltip)) };
    };
    receive({ type: 'ready' });

    window.showQuickPick.mockImplementationOnce(press('old1', 'Fork'));
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'session' && e.sessionId === 'fork1')).toBe(true));
    const requests = made[0].requests;
    expect(requests.find((r) => r.method === 'agent/forkSession')?.params).toMatchObject({ sessionId: 'old1' });
    expect(requests.find((r) => r.method === 'agent/loadSession')?.params).toMatchObject({ sessionId: 'fork1' });

    // Delete asks first: dismissing the dialog deletes nothing.
    window.showQuickPick.mockImplementationOnce(press('old2', 'Delete'));
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(window.showWarningMessage).toHaveBeenCalledTimes(1));
    expect(window.showWarningMessage.mock.calls[0]).toMatchObject(['Delete the agentd session "Tidy up"?', { modal: true }, 'Delete']);
    window.showWarningMessage.mockImplementationOnce(async () => 'Delete');
    window.showQuickPick.mockImplementationOnce(press('old2', 'Delete'));
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(requests.some((r) => r.method === 'agent/deleteSession')).toBe(true));
    expect(requests.filter((r) => r.method === 'agent/deleteSession').map((r) => r.params)).toEqual([{ sessionId: 'old2' }]);
    await vi.waitFor(() => expect(window.showInformationMessage).toHaveBeenCalledWith('Deleted the agentd session "Tidy up".'));
  });

  it('refreshes the memory list on memory/changed for this workspace only', async () => {
    const docs = [{ path: '/m/x.md', name: 'x', description: 'd', type: 'project', mtime: 1 }];
    const { receive, flat, made, root } = await activated((d) => {
      d.handlers.set('memory/list', () => ({ directory: '/m', docs }));
    });
    receive({ type: 'ready' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'memory')).toBe(true));
    const before = made[0].requests.filter((r) => r.method === 'memory/list').length;
    made[0].notify('memory/changed', { workspaceRoot: '/some/other/project', paths: [] });
    made[0].notify('memory/changed', { workspaceRoot: root, paths: ['/m/x.md'] });
    await vi.waitFor(() => expect(made[0].requests.filter((r) => r.method === 'memory/list').length).toBe(before + 1));
  });

  it('the @agentd participant streams into the chat response, on its own session, and its token cancels', async () => {
    let release!: () => void;
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/prompt', (p, token) => {
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'message_chunk', text: `answer for ${p.prompt}` } });
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'memory', point: 'user_query', tier: 'local', docs: ['/m/a.md'] } });
        if (p.prompt !== 'slow') return { stopReason: 'end_turn', usage: { inputTokens: 2, outputTokens: 3 } };
        return new Promise((_, reject) => {
          release = () => reject(new RpcError(-32800, 'cancelled'));
          token?.onCancellationRequested(() => release());
        });
      });
    });
    receive({ type: 'ready' });
    expect(chat.createChatParticipant).toHaveBeenCalledTimes(1);
    const handler = chat.createChatParticipant.mock.calls[0][1] as (...a: unknown[]) => Promise<unknown>;
    const stream = { markdown: vi.fn(), progress: vi.fn(), reference: vi.fn() };
    const res = await handler({ prompt: 'hello' }, {}, stream, new CancellationSource().token);
    expect(res).toEqual({ metadata: { usage: { inputTokens: 2, outputTokens: 3 } } });
    expect(stream.markdown).toHaveBeenCalledWith('answer for hello');
    expect(stream.reference.mock.calls[0][0].fsPath).toBe('/m/a.md');
    // The panel, sharing the daemon connection, still gets its own updates and none of the participant's.
    expect(flat().filter((e) => e.type === 'update')).toEqual([]);
    receive({ type: 'prompt', text: 'panel' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'turnEnd')).toBe(true));
    expect(flat().filter((e) => e.type === 'update').map((e) => (e as { update: { text?: string } }).update.text)).toContain('answer for panel');
    const sessions = new Set(made[0].requests.filter((r) => r.method === 'agent/prompt').map((r) => r.params.sessionId));
    expect(sessions.size).toBe(2);

    const source = new CancellationSource();
    const pending = handler({ prompt: 'slow' }, {}, stream, source.token);
    await vi.waitFor(() => expect(stream.markdown).toHaveBeenCalledWith('answer for slow'));
    source.cancel();
    expect(await pending).toEqual({});
  });

  it('a notice about the daemon being down is marked so the panel clears it when the daemon is back', async () => {
    const { api, receive, flat } = await activated();
    receive({ type: 'ready' });
    await api.daemon.stop();
    receive({ type: 'prompt', text: 'hello?' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'notice')).toBe(true));
    expect(flat().find((e) => e.type === 'notice')).toMatchObject({ level: 'error', scope: 'daemon' });
    await api.daemon.start();
    expect(flat().filter((e) => e.type === 'daemon').at(-1)).toMatchObject({ state: 'ready' });
  });

  it('Accept in the panel answers the diff review; the edit is applied and its result goes to the daemon', async () => {
    const { api, made, receive, flat, root } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'e1', name: 'edit_file', arguments: { path: 'f.txt', old_text: 'old', new_text: 'new' }, executor: 'client' },
        });
        return new Promise(() => {}); // the daemon waits for the tool result
      });
    });
    fs.writeFileSync(path.join(root, 'f.txt'), 'old text\n');
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'edit it' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'toolState' && e.state === 'awaiting_approval')).toBe(true));
    expect(flat().find((e) => e.type === 'toolState')).toMatchObject({ toolCallId: 'e1', review: true });
    expect(api.reviews.waiting).toEqual(['e1']);
    expect(__mock.tabs).toHaveLength(1); // the diff is open
    receive({ type: 'review', toolCallId: 'e1', decision: 'accept' });
    await vi.waitFor(() => expect(made[0].sent.some((m) => m.method === 'agent/toolResult')).toBe(true));
    expect(made[0].sent.find((m) => m.method === 'agent/toolResult')?.params).toMatchObject({ toolCallId: 'e1', isError: false });
    expect(fs.readFileSync(path.join(root, 'f.txt'), 'utf8')).toBe('new text\n');
    expect(__mock.tabs).toHaveLength(0);
    // The editor title's buttons are commands.
    for (const id of ['agentd.acceptEdit', 'agentd.rejectEdit', 'agentd.acceptAllEdits']) expect(__mock.commandRegistry.has(id), id).toBe(true);
  });

  it('deactivation stops a command still running, with the child it started, and sends no result', async () => {
    let pidsFile = '';
    const { made, receive, flat, context } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'r1', name: 'run_command', arguments: { command: `sleep 60 & echo $$ $! > ${pidsFile}; wait` }, executor: 'client' },
        });
        return new Promise(() => {}); // the daemon waits for the tool result
      });
    });
    pidsFile = path.join(workspace.workspaceFolders![0].uri.fsPath, 'pids');
    window.showWarningMessage.mockImplementationOnce(async (...args: unknown[]) => (args.slice(2) as { title: string }[])[0]); // Allow once
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'run it' });
    // (No shell integration in the mock: the command runs as a child process once the wait for it ends.)
    const [sh, child] = await pidsFrom(pidsFile);
    expect(flat().some((e) => e.type === 'toolState' && e.state === 'running')).toBe(true);
    // What VS Code does on deactivation (a window closed or reloaded).
    for (const s of context.subscriptions) await s.dispose();
    await gone([sh, child]);
    expect(made[0].sent.filter((m) => m.method === 'agent/toolResult')).toEqual([]);
  });

  it('a denied edit ends its card as "denied", live and in a replay', async () => {
    const { made, receive, flat, root } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'e2', name: 'write_file', arguments: { path: 'g.txt', content: 'x' }, executor: 'client' },
        });
        return new Promise(() => {});
      });
    });
    void root;
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'write it' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'toolState' && e.state === 'awaiting_approval')).toBe(true));
    receive({ type: 'review', toolCallId: 'e2', decision: 'reject' });
    await vi.waitFor(() => expect(made[0].sent.some((m) => m.method === 'agent/toolResult')).toBe(true));
    const states = flat().filter((e) => e.type === 'toolState').map((e) => (e as { state: string }).state);
    expect(states).toEqual(['awaiting_approval', 'denied', 'denied']);
    expect(made[0].sent.find((m) => m.method === 'agent/toolResult')?.params).toMatchObject({ content: DENIED_EDIT, isError: true });
  });

  it('replays a stored session as the live view showed it: memory, tokens, Cancelled, errors, denials', async () => {
    const { receive, flat } = await activated((d) => {
      d.handlers.set('agent/listSessions', () => ({ sessions: [{ sessionId: 'old2', title: 't', updatedAt: '2026-01-01T00:00:00Z' }] }));
      d.handlers.set('agent/loadSession', (p) => {
        const u = (update: unknown) => d.notify('agent/update', { sessionId: p.sessionId, update });
        u({ kind: 'user_message', text: 'first' });
        u({ kind: 'memory', point: 'user_query', tier: 'local', docs: ['/m/a.md'] });
        u({ kind: 'tool_call', toolCallId: 'w', name: 'write_file', arguments: { path: 'a' }, executor: 'client' });
        u({ kind: 'tool_call_update', toolCallId: 'w', status: 'failed', content: DENIED_EDIT });
        u({ kind: 'message_chunk', text: 'ok' });
        u({ kind: 'usage', inputTokens: 5, outputTokens: 1, sessionTotalTokens: 6 });
        u({ kind: 'prompt_end', stopReason: 'end_turn' });
        u({ kind: 'user_message', text: 'second' });
        u({ kind: 'message_chunk', text: 'partial' });
        u({ kind: 'prompt_end', stopReason: 'cancelled' });
        u({ kind: 'user_message', text: 'third' });
        u({ kind: 'prompt_end', stopReason: 'error', error: { kind: 'http', message: 'The model answered 500.' } });
        return {};
      });
    });
    window.showQuickPick.mockImplementationOnce(async (items: unknown) => (items as { sessionId: string }[])[0]);
    receive({ type: 'ready' });
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'session' && e.sessionId === 'old2')).toBe(true));
    const ends = flat().filter((e) => e.type === 'turnEnd');
    expect(ends).toMatchObject([
      { outcome: 'replayed', replay: true },
      { outcome: 'cancelled', replay: true },
      { outcome: 'error', replay: true, message: 'The model answered 500.' },
    ]);
    expect(flat().filter((e) => e.type === 'turnStart').map((e) => (e as { prompt: string }).prompt)).toEqual(['first', 'second', 'third']);
    expect(flat().some((e) => e.type === 'update' && e.update.kind === 'memory')).toBe(true);
    expect(flat().some((e) => e.type === 'update' && e.update.kind === 'usage' && e.update.sessionTotalTokens === 6)).toBe(true);
    expect(flat().find((e) => e.type === 'toolState')).toMatchObject({ toolCallId: 'w', state: 'denied' });
    // A replayed end does not touch the "prompt running" context of the Stop keybinding.
    expect(commands.executeCommand).not.toHaveBeenCalledWith('setContext', 'agentd.promptRunning', false);
  });
  // --- issues 15-18: recorded daemon messages (the shapes of docs/protocol.md) ---------

  const MODES = [
    { id: 'ask', name: 'Ask', description: 'Read-only' },
    { id: 'code', name: 'Code', description: 'Asks before edits and commands' },
    { id: 'auto-edit', name: 'Auto-edit', description: 'Edits without asking' },
  ];
  const MODELS = [
    { id: 'small', name: 'small', supportsImages: false },
    { id: 'big', name: 'big', supportsImages: true },
  ];
  const PERMISSION_OPTIONS = [
    { optionId: 'allow_once', name: 'Allow once', kind: 'allow_once' },
    { optionId: 'allow_always', name: 'Always allow in this session', kind: 'allow_always' },
    { optionId: 'reject_once', name: 'Reject', kind: 'reject_once' },
  ];

  it('opens a location at its line (clamped to the file) and reveals a folder in the Explorer', async () => {
    const { receive, root } = await activated();
    receive({ type: 'ready' });
    const file = path.join(root, 'src.py');
    fs.writeFileSync(file, 'a\nb\nc\n');
    receive({ type: 'openFile', path: file, line: 3 });
    await vi.waitFor(() => expect(window.showTextDocument).toHaveBeenCalled());
    const opts = window.showTextDocument.mock.calls[0][1] as { selection: { start: { line: number; character: number } } };
    expect(opts.selection.start).toMatchObject({ line: 2, character: 0 });
    receive({ type: 'openFile', path: file, line: 999 }); // the file shrank since the search
    await vi.waitFor(() => expect(window.showTextDocument).toHaveBeenCalledTimes(2));
    expect((window.showTextDocument.mock.calls[1][1] as typeof opts).selection.start.line).toBe(3);
    fs.mkdirSync(path.join(root, 'pkg'));
    receive({ type: 'openFile', path: path.join(root, 'pkg') });
    await vi.waitFor(() => expect(commands.executeCommand).toHaveBeenCalledWith('revealInExplorer', expect.objectContaining({ fsPath: path.join(root, 'pkg') })));
    expect(window.showTextDocument).toHaveBeenCalledTimes(2);
  });

  it('features follow the daemon: images, MCP and commands when it has them, nothing when it does not', async () => {
    const old = await activated();
    old.receive({ type: 'ready' });
    await vi.waitFor(() => expect(old.flat().some((e) => e.type === 'features')).toBe(true));
    expect(old.flat().find((e) => e.type === 'features')).toEqual({ type: 'features', images: false, mcp: false, commands: [] });
    expect(old.made[0].requests.some((r) => r.method === 'mcp/status')).toBe(false);

    __mock.reset();
    __mock.configuration.set('agentd.command', EXISTING);
    const commandsList = [{ name: 'compact', description: 'Compact the conversation', hint: '[what to keep]' }];
    const servers = [{ name: 'db', state: 'ready', transport: 'stdio', toolCount: 2, tools: ['query', 'schema'], restarts: 0, sessions: 1 }];
    const cur = await activated((d) => {
      d.caps = { protocolVersion: 1, promptContent: ['text', 'resource_link', 'resource', 'image'], mcp: true };
      d.handlers.set('agent/listCommands', () => ({ commands: commandsList }));
      d.handlers.set('mcp/status', () => ({ servers, sdkLoaded: true }));
    });
    cur.receive({ type: 'ready' });
    await vi.waitFor(() => expect(cur.flat().some((e) => e.type === 'mcp')).toBe(true));
    expect(cur.flat().find((e) => e.type === 'features')).toEqual({ type: 'features', images: true, mcp: true, commands: commandsList });
    expect(cur.flat().find((e) => e.type === 'mcp')).toEqual({ type: 'mcp', servers });
    // A reloaded webview gets them again (state, not history).
    cur.posted.length = 0;
    cur.receive({ type: 'ready' });
    await vi.waitFor(() => expect(cur.posted.length).toBeGreaterThan(0));
    expect((cur.posted.find(Array.isArray) as ChatEvent[]).map((e) => e.type)).toEqual(expect.arrayContaining(['features', 'mcp']));
  });

  it('mode and model pickers: set from the session, changed through agent/setMode / agent/setModel, and by a mode update', async () => {
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/newSession', () => ({ sessionId: 's-m', mode: 'code', modes: MODES, model: 'small', models: MODELS }));
      d.handlers.set('agent/setMode', (p) => {
        if (!['ask', 'code', 'auto-edit'].includes(p.mode)) throw new RpcError(-32602, "mode: must be 'ask', 'code' or 'auto-edit'");
        return { mode: p.mode };
      });
      d.handlers.set('agent/setModel', (p) => ({ model: p.model }));
    });
    receive({ type: 'ready' });
    receive({ type: 'setMode', mode: 'auto-edit' });
    await vi.waitFor(() => expect(made[0].requests.some((r) => r.method === 'agent/setMode')).toBe(true));
    // No session yet: one is created first, and its setup shown.
    expect(made[0].requests.map((r) => r.method).filter((m) => m.startsWith('agent/'))).toEqual(
      expect.arrayContaining(['agent/newSession', 'agent/setMode']),
    );
    expect(made[0].requests.find((r) => r.method === 'agent/setMode')?.params).toEqual({ sessionId: 's-m', mode: 'auto-edit' });
    await vi.waitFor(() => expect(flat().filter((e) => e.type === 'setup').at(-1)).toMatchObject({ setup: { mode: 'auto-edit', model: 'small' } }));
    receive({ type: 'setModel', model: 'big' });
    await vi.waitFor(() => expect(flat().filter((e) => e.type === 'setup').at(-1)).toMatchObject({ setup: { mode: 'auto-edit', model: 'big' } }));
    // The daemon's own mode update (another client, or a command) moves the picker.
    made[0].notify('agent/update', { sessionId: 's-m', update: { kind: 'mode', mode: 'ask' } });
    expect(flat().filter((e) => e.type === 'setup').at(-1)).toMatchObject({ setup: { mode: 'ask', modes: MODES } });
    // A refused value: the error is shown and the picker goes back to what holds.
    receive({ type: 'setMode', mode: 'yolo' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'notice' && /mode: must be/.test(e.text))).toBe(true));
    expect(flat().filter((e) => e.type === 'setup').at(-1)).toMatchObject({ setup: { mode: 'ask' } });
  });

  it('agent/requestPermission: the card offers the options, the click answers; another session is not ours', async () => {
    let release!: () => void;
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'q1', name: 'mcp__db__query', arguments: { sql: 'delete from t' }, executor: 'daemon', server: 'db' },
        });
        return new Promise((resolve) => (release = () => resolve({ stopReason: 'end_turn', usage: { inputTokens: 1, outputTokens: 1 } })));
      });
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'clean the table' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'update' && e.update.kind === 'tool_call')).toBe(true));
    const sessionId = (flat().find((e) => e.type === 'turnStart') as { sessionId: string }).sessionId;
    const params = {
      sessionId,
      toolCallId: 'q1',
      tool: 'mcp__db__query',
      title: 'db: query',
      arguments: { sql: 'delete from t' },
      server: 'db',
      serverTool: 'query',
      options: PERMISSION_OPTIONS,
    };
    await expect(made[0].request('agent/requestPermission', { ...params, sessionId: 'someone-else' })).rejects.toThrow(/No chat surface/);
    const answer = made[0].request('agent/requestPermission', params);
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'permission' && e.options.length === 3)).toBe(true));
    expect(flat().find((e) => e.type === 'permission')).toMatchObject({ toolCallId: 'q1', title: 'db: query' });
    receive({ type: 'permission', toolCallId: 'q1', optionId: 'allow_always' });
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_always' } });
    expect(flat().filter((e) => e.type === 'permission').at(-1)).toMatchObject({ options: [], answer: 'Always allow in this session' });
    // An answer that names no offered option is no allow.
    const second = made[0].request('agent/requestPermission', { ...params, toolCallId: 'q2' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'permission' && e.toolCallId === 'q2')).toBe(true));
    receive({ type: 'permission', toolCallId: 'q2', optionId: 'allow_forever' });
    expect(await second).toEqual({ outcome: { outcome: 'cancelled' } });
    release();
  });

  it('agent/requestPermission while the panel is not on screen: a modal dialog asks (the card too); dismissing it refuses', async () => {
    const { receive, flat, made, view } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'q1', name: 'mcp__db__query', arguments: {}, executor: 'daemon', server: 'db' },
        });
        return new Promise(() => {});
      });
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'go' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'update' && e.update.kind === 'tool_call')).toBe(true));
    view.visible = false;
    const sessionId = (flat().find((e) => e.type === 'turnStart') as { sessionId: string }).sessionId;
    const params = { sessionId, toolCallId: 'q1', tool: 'mcp__db__query', title: 'db: query', arguments: {}, options: PERMISSION_OPTIONS };
    window.showWarningMessage.mockImplementationOnce(async (...args: unknown[]) => (args.slice(2) as { title: string }[]).find((i) => i.title === 'Allow once'));
    expect(await made[0].request('agent/requestPermission', params)).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
    expect(window.showWarningMessage.mock.calls[0][0]).toBe('agentd wants to run db: query');
    // Dismissed (Escape): no allow.
    expect(await made[0].request('agent/requestPermission', { ...params, toolCallId: 'q2' })).toEqual({ outcome: { outcome: 'cancelled' } });
  });

  it("an MCP server's sampling request: the card and the dialog are its own question with the daemon's description (cut, as text); a tool's description is the dialog's detail", async () => {
    const { receive, flat, made, view } = await activated((d) => {
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 's1', name: 'mcp__calc__summarize', arguments: { text: 'hi' }, executor: 'daemon', server: 'calc' },
        });
        return new Promise(() => {});
      });
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'summarise' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'update' && e.update.kind === 'tool_call')).toBe(true));
    view.visible = false;
    const sessionId = (flat().find((e) => e.type === 'turnStart') as { sessionId: string }).sessionId;
    const preview =
      "The MCP server 'calc' asks to use the model for an answer of at most 200 tokens to 1 message(s); the answer goes to the server.\n" +
      'System prompt: You summarise.\nLast message: <img src=x onerror="alert(1)"> Summarise this.';
    const sampling = {
      sessionId,
      toolCallId: 's1',
      tool: 'mcp__calc__summarize',
      kind: 'sampling',
      title: 'calc asks to use the model',
      server: 'calc',
      serverTool: 'summarize',
      arguments: { systemPrompt: 'You summarise.', lastMessage: 'Summarise this.', messages: 1, maxTokens: 200 },
      description: preview,
      options: PERMISSION_OPTIONS.filter((o) => o.optionId !== 'allow_always'),
    };
    window.showWarningMessage.mockImplementationOnce(async (...args: unknown[]) => (args.slice(2) as { title: string }[]).find((i) => i.title === 'Allow once'));
    expect(await made[0].request('agent/requestPermission', sampling)).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
    // The dialog asks the request itself, not "agentd wants to run ...", and shows what the server sends as its (plain text) detail.
    const [message, opts, ...buttons] = window.showWarningMessage.mock.calls[0] as [string, { modal: boolean; detail?: string }, ...{ title: string }[]];
    expect(message).toBe('calc asks to use the model');
    expect(opts).toEqual({ modal: true, detail: preview });
    expect(buttons.map((b) => b.title)).toEqual(['Allow once', 'Reject']);
    // The card had the same question, and says which answer it got.
    const cards = flat().filter((e) => e.type === 'permission' && e.toolCallId === 's1');
    expect(cards[0]).toMatchObject({ kind: 'sampling', title: 'calc asks to use the model', description: preview });
    expect(cards.at(-1)).toMatchObject({ kind: 'sampling', options: [], answer: 'Allow once' });

    // A hostile description: cut, control and direction-override characters dropped.
    const long = `Runs\u0007 SQL\u202e.\r\n${'x'.repeat(5000)}`;
    window.showWarningMessage.mockImplementationOnce(async () => undefined);
    const tool = { ...sampling, toolCallId: 's2', kind: undefined, title: 'calc: query', description: long, options: PERMISSION_OPTIONS };
    expect(await made[0].request('agent/requestPermission', tool)).toEqual({ outcome: { outcome: 'cancelled' } });
    const [toolMessage, toolOpts] = window.showWarningMessage.mock.calls[1] as [string, { modal: boolean; detail: string }];
    expect(toolMessage).toBe('agentd wants to run calc: query');
    expect(toolOpts.detail.startsWith('Runs SQL.\nxxx')).toBe(true);
    expect(toolOpts.detail.endsWith('x…')).toBe(true);
    expect(toolOpts.detail.length).toBe(MAX_DESCRIPTION_CHARS + 1);
    expect(flat().find((e) => e.type === 'permission' && e.toolCallId === 's2')).toMatchObject({ title: 'calc: query', description: toolOpts.detail });
    expect(flat().find((e) => e.type === 'permission' && e.toolCallId === 's2')).not.toHaveProperty('kind');

    // No description (or not a string): no detail.
    const bare = { ...tool, toolCallId: 's3', description: { html: '<b>x</b>' } };
    await made[0].request('agent/requestPermission', bare);
    expect(window.showWarningMessage.mock.calls[2][1]).toEqual({ modal: true });
  });

  it('agent/requestPermission fails closed: Stop, or the daemon withdrawing it, answers cancelled', async () => {
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/prompt', (p, token) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'q1', name: 'mcp__db__query', arguments: {}, executor: 'daemon', server: 'db' },
        });
        return new Promise((_, reject) => token?.onCancellationRequested(() => reject(new RpcError(-32800, 'cancelled'))));
      });
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'go' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'update' && e.update.kind === 'tool_call')).toBe(true));
    const sessionId = (flat().find((e) => e.type === 'turnStart') as { sessionId: string }).sessionId;
    const params = { sessionId, toolCallId: 'q1', tool: 'mcp__db__query', title: 'db: query', arguments: {}, options: PERMISSION_OPTIONS };
    const withdrawn = new CancellationSource();
    const first = made[0].request('agent/requestPermission', params, withdrawn.token);
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'permission')).toBe(true));
    withdrawn.cancel();
    expect(await first).toEqual({ outcome: { outcome: 'cancelled' } });
    const second = made[0].request('agent/requestPermission', { ...params, toolCallId: 'q3' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'permission' && e.toolCallId === 'q3')).toBe(true));
    await commands.executeCommand('agentd.cancel');
    expect(await second).toEqual({ outcome: { outcome: 'cancelled' } });
    // After the prompt, nothing is asked in its name.
    expect(await made[0].request('agent/requestPermission', { ...params, toolCallId: 'q4' }).catch((e: Error) => e.message)).toMatch(/No chat surface/);
  });

  it('a multi-root workspace: the first folder is the root, the others go as additionalDirectories, read when a session starts', async () => {
    const { receive, flat, made, root } = await activated((d) => {
      d.handlers.set('agent/newSession', () => ({ sessionId: `s-${d.requests.length}` }));
      d.handlers.set('agent/prompt', () => ({ stopReason: 'end_turn', usage: { inputTokens: 1, outputTokens: 1 } }));
    });
    const other = tmpDir('agentd-other-');
    const web = { uri: Uri.from({ scheme: 'vscode-vfs', path: '/remote' }), name: 'remote', index: 2 };
    workspace.workspaceFolders = [{ uri: Uri.file(root), name: 'ws', index: 0 }, { uri: Uri.file(other), name: 'other', index: 1 }, web];
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'hi' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'turnEnd')).toBe(true));
    const sent = () => made[0].requests.filter((r) => r.method === 'agent/newSession').map((r) => r.params);
    expect(sent()).toEqual([{ workspaceRoot: root, additionalDirectories: [other] }]);
    // A folder removed: the next new session has none (the running one keeps its own).
    workspace.workspaceFolders = [{ uri: Uri.file(root), name: 'ws', index: 0 }];
    await commands.executeCommand('agentd.newSession');
    await vi.waitFor(() => expect(sent()).toHaveLength(2));
    expect(sent()[1]).toEqual({ workspaceRoot: root });
  });

  it('compaction and the context meter: live between turns, and a reload of the panel keeps the meter and the plan', async () => {
    const { receive, flat, made, posted } = await activated((d) => {
      d.handlers.set('agent/newSession', () => ({ sessionId: 's-c' }));
      d.handlers.set('agent/prompt', (p) => {
        const u = (update: unknown) => d.notify('agent/update', { sessionId: p.sessionId, update });
        u({ kind: 'plan', entries: [{ content: 'fix add()', priority: 'high', status: 'in_progress' }] });
        u({ kind: 'message_chunk', text: 'ok' });
        u({ kind: 'usage', inputTokens: 25000, outputTokens: 5, sessionTotalTokens: 25005, contextTokens: 26000, contextWindow: 32000 });
        return { stopReason: 'end_turn', usage: { inputTokens: 25000, outputTokens: 5 } };
      });
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'work' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'turnEnd')).toBe(true));
    expect(flat().find((e) => e.type === 'context')).toEqual({ type: 'context', tokens: 26000, window: 32000 });
    expect(flat().find((e) => e.type === 'plan')).toMatchObject({ entries: [{ content: 'fix add()' }] });
    // The plan is not a turn's update.
    expect(flat().some((e) => e.type === 'update' && e.update.kind === 'plan')).toBe(false);
    // A threshold compaction after the reply, with no prompt running.
    const c = { kind: 'compaction', trigger: 'threshold', tokensBefore: 26000, tokensAfter: 5000, cleared: 1, summarized: 8 };
    made[0].notify('agent/update', { sessionId: 's-c', update: { ...c, status: 'started' } });
    made[0].notify('agent/update', { sessionId: 's-c', update: { ...c, status: 'done', summary: 'goals...' } });
    expect(flat().filter((e) => e.type === 'compaction').map((e) => (e as { update: { status: string } }).update.status)).toEqual(['started', 'done']);
    expect(flat().at(-1)).toEqual({ type: 'context', tokens: 5000, window: 32000 });
    // Another session's compaction is not shown here.
    made[0].notify('agent/update', { sessionId: 'other', update: { ...c, status: 'done' } });
    expect(flat().filter((e) => e.type === 'compaction')).toHaveLength(2);
    posted.length = 0;
    receive({ type: 'ready' });
    await vi.waitFor(() => expect(posted.length).toBeGreaterThan(0));
    const batch = posted.find(Array.isArray) as ChatEvent[];
    expect(batch.filter((e) => e.type === 'context')).toEqual([{ type: 'context', tokens: 5000, window: 32000 }]);
    expect(batch.filter((e) => e.type === 'compaction')).toHaveLength(2);
    expect(batch.some((e) => e.type === 'plan')).toBe(true);
  });

  it('"Compact the Conversation…" is offered once the daemon reports a context window, and calls agent/compact', async () => {
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/newSession', () => ({ sessionId: 's-k' }));
      d.handlers.set('agent/prompt', (p) => {
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'usage', inputTokens: 9, outputTokens: 1, sessionTotalTokens: 10, contextTokens: 10, contextWindow: 1000 } });
        return { stopReason: 'end_turn', usage: { inputTokens: 9, outputTokens: 1 } };
      });
      d.handlers.set('agent/compact', (p) => {
        const c = { kind: 'compaction', trigger: 'manual', tokensBefore: 10, tokensAfter: 4, cleared: 0, summarized: 2 };
        d.notify('agent/update', { sessionId: p.sessionId, update: { ...c, status: 'started' } });
        d.notify('agent/update', { sessionId: p.sessionId, update: { ...c, status: 'done' } });
        return { ...c, status: 'done' };
      });
    });
    receive({ type: 'ready' });
    expect(commands.executeCommand).not.toHaveBeenCalledWith('setContext', 'agentd.canCompact', true);
    receive({ type: 'prompt', text: 'hi' });
    await vi.waitFor(() => expect(commands.executeCommand).toHaveBeenCalledWith('setContext', 'agentd.canCompact', true));
    window.showInputBox.mockImplementationOnce(async () => undefined); // Escape: nothing happens
    await commands.executeCommand('agentd.compact');
    expect(made[0].requests.some((r) => r.method === 'agent/compact')).toBe(false);
    window.showInputBox.mockImplementationOnce(async () => '  keep the API decisions ');
    await commands.executeCommand('agentd.compact');
    expect(made[0].requests.find((r) => r.method === 'agent/compact')?.params).toEqual({ sessionId: 's-k', instructions: 'keep the API decisions' });
    expect(flat().filter((e) => e.type === 'compaction').map((e) => (e as { update: { status: string } }).update.status)).toEqual(['started', 'done']);
    expect(flat().filter((e) => e.type === 'context').at(-1)).toEqual({ type: 'context', tokens: 4, window: 1000 });
  });

  it('a reloaded session comes back compacted, with its images, plan, mode and model', async () => {
    const png = 'iVBORw0KGgo=';
    const { receive, flat } = await activated((d) => {
      d.handlers.set('agent/listSessions', () => ({ sessions: [{ sessionId: 'old3', title: 't', updatedAt: '2026-01-01T00:00:00Z' }] }));
      d.handlers.set('agent/loadSession', (p) => {
        const u = (update: unknown) => d.notify('agent/update', { sessionId: p.sessionId, update });
        u({ kind: 'compaction', status: 'done', trigger: 'threshold', tokensBefore: 30000, tokensAfter: 4000, cleared: 0, summarized: 12, summary: 's' });
        u({ kind: 'user_message', text: 'look at this' });
        u({ kind: 'user_image', mimeType: 'image/png', data: png });
        u({ kind: 'usage', inputTokens: 4100, outputTokens: 3, sessionTotalTokens: 40000, contextTokens: 4200, contextWindow: 32000 });
        u({ kind: 'plan', entries: [{ content: 'step 1', priority: 'medium', status: 'pending' }] });
        u({ kind: 'message_chunk', text: 'a cat' });
        u({ kind: 'prompt_end', stopReason: 'end_turn' });
        return { mode: 'ask', modes: MODES, model: 'big', models: MODELS, plan: [{ content: 'step 1', priority: 'medium', status: 'pending' }] };
      });
    });
    window.showQuickPick.mockImplementationOnce(async (items: unknown) => (items as { sessionId: string }[])[0]);
    receive({ type: 'ready' });
    receive({ type: 'switchSession' });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'session' && e.sessionId === 'old3')).toBe(true));
    const shown = flat().filter((e) => ['compaction', 'turnStart', 'update', 'turnEnd', 'plan', 'setup', 'context'].includes(e.type));
    expect(shown.map((e) => (e.type === 'update' ? `update:${e.update.kind}` : e.type))).toEqual([
      'compaction',
      'turnStart',
      'update:user_image',
      'context',
      'update:usage',
      'plan',
      'update:message_chunk',
      'turnEnd',
      'setup',
      'plan',
    ]);
    expect(shown[0]).toMatchObject({ type: 'compaction', replay: true, update: { summarized: 12 } });
    expect(shown.find((e) => e.type === 'setup')).toMatchObject({ sessionId: 'old3', setup: { mode: 'ask', model: 'big' } });
  });

  it('the @agentd participant asks agent/requestPermission in a modal dialog (it has no tool cards); the panel routes it by session', async () => {
    const { made } = await activated((d) => {
      d.handlers.set('agent/prompt', async (p) => {
        d.notify('agent/update', {
          sessionId: p.sessionId,
          update: { kind: 'tool_call', toolCallId: 'q9', name: 'mcp__db__query', arguments: {}, executor: 'daemon', server: 'db' },
        });
        const outcome = await d.request('agent/requestPermission', {
          sessionId: p.sessionId,
          toolCallId: 'q9',
          tool: 'mcp__db__query',
          title: 'db: query',
          arguments: {},
          options: PERMISSION_OPTIONS,
        });
        d.notify('agent/update', { sessionId: p.sessionId, update: { kind: 'message_chunk', text: JSON.stringify(outcome) } });
        return { stopReason: 'end_turn', usage: { inputTokens: 1, outputTokens: 1 } };
      });
    });
    window.showWarningMessage.mockImplementationOnce(async (...args: unknown[]) => (args.slice(2) as { title: string }[]).find((i) => i.title === 'Allow once'));
    const handler = chat.createChatParticipant.mock.calls[0][1] as (...a: unknown[]) => Promise<unknown>;
    const stream = { markdown: vi.fn(), progress: vi.fn(), reference: vi.fn() };
    await handler({ prompt: 'clean up' }, {}, stream, new CancellationSource().token);
    const [message, opts, ...buttons] = window.showWarningMessage.mock.calls[0] as [string, { modal: boolean }, ...{ title: string; isCloseAffordance: boolean }[]];
    expect(message).toBe('agentd wants to run db: query');
    expect(opts).toEqual({ modal: true });
    expect(buttons.map((b) => [b.title, b.isCloseAffordance])).toEqual([
      ['Allow once', false],
      ['Always allow in this session', false],
      ['Reject', true],
    ]);
    expect(stream.markdown).toHaveBeenCalledWith(JSON.stringify({ outcome: { outcome: 'selected', optionId: 'allow_once' } }));
    void made;
  });

  it('a prompt with images goes as content blocks; a text-only prompt stays a string', async () => {
    const { receive, flat, made } = await activated((d) => {
      d.handlers.set('agent/prompt', () => ({ stopReason: 'end_turn', usage: { inputTokens: 1, outputTokens: 1 } }));
    });
    receive({ type: 'ready' });
    receive({ type: 'prompt', text: 'what is this?', images: [{ mimeType: 'image/png', data: 'iVBORw0KGgo=' }] });
    await vi.waitFor(() => expect(flat().some((e) => e.type === 'turnEnd')).toBe(true));
    receive({ type: 'prompt', text: 'plain' });
    await vi.waitFor(() => expect(made[0].requests.filter((r) => r.method === 'agent/prompt')).toHaveLength(2));
    const prompts = made[0].requests.filter((r) => r.method === 'agent/prompt').map((r) => r.params.prompt);
    expect(prompts).toEqual([
      [
        { type: 'text', text: 'what is this?' },
        { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' },
      ],
      'plain',
    ]);
    expect(flat().find((e) => e.type === 'turnStart')).toMatchObject({ images: [{ mimeType: 'image/png' }] });
    // A message from the webview with something that is not an image is dropped whole.
    const before = made[0].requests.length;
    receive({ type: 'prompt', text: 'x', images: [{ mimeType: 'text/html', data: 'PGI+' }] });
    receive({ type: 'prompt', text: 'x', images: [{ mimeType: 'image/png', data: 'not base64!' }] });
    await new Promise((r) => setImmediate(r));
    expect(made[0].requests.length).toBe(before);
  });
});

describe('agentd.commandTimeout', () => {
  it('is read in seconds as each command starts; 0, a negative number or a non-number is no limit', () => {
    expect(commandTimeoutMs()).toBe(0); // the default
    for (const [value, ms] of [[2.5, 2500], [0, 0], [-1, 0], ['60', 0]] as const) {
      __mock.configuration.set('agentd.commandTimeout', value);
      expect(commandTimeoutMs(), String(value)).toBe(ms);
    }
    const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../package.json'), 'utf8'));
    expect(pkg.contributes.configuration.properties['agentd.commandTimeout']).toMatchObject({ type: 'number', default: 0 });
  });
});

describe('agentd.trace.server', () => {
  it('the trace channel reports Trace only while the setting traces, and follows changes of it', () => {
    __mock.configuration.set('agentd.trace.server', 'off');
    const channel = new TraceChannel();
    const out = (window.createOutputChannel.mock.results.at(-1)!.value as { text(): string; name: string });
    expect(out.name).toBe(TRACE_CHANNEL);
    // A plain output channel: VS Code's log level does not filter what it shows.
    expect(window.createOutputChannel.mock.calls.at(-1)).toEqual([TRACE_CHANNEL]);
    expect(channel.logLevel).toBe(LogLevel.Off);
    channel.trace('not shown');
    const levels: LogLevel[] = [];
    channel.onDidChangeLogLevel((l) => levels.push(l));
    __mock.setConfiguration('agentd.trace.server', 'messages');
    expect(channel.logLevel).toBe(LogLevel.Trace);
    channel.trace("Sending request 'agent/newSession - (1)'.");
    __mock.setConfiguration('agentd.trace.server', 'off');
    __mock.setConfiguration('agentd.env', {});
    expect(levels).toEqual([LogLevel.Trace, LogLevel.Off]);
    expect(out.text()).not.toContain('not shown');
    expect(out.text()).toContain("[trace] Sending request 'agent/newSession - (1)'.");
    channel.dispose();
  });

  it('package.json, the README and the code name the same channel', () => {
    const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../package.json'), 'utf8'));
    expect(pkg.contributes.configuration.properties['agentd.trace.server'].description).toContain(`"${TRACE_CHANNEL}"`);
    expect(fs.readFileSync(path.resolve(__dirname, '../README.md'), 'utf8')).toContain(`*${TRACE_CHANNEL}*`);
  });
});
