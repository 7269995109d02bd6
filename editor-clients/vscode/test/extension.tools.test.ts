// Client tools on the VS Code adapter (mocked `vscode`): edits reviewed as
// diffs (accept / reject / for the session, file by file, cancel), applied as
// undoable WorkspaceEdits on buffers; commands approved in a modal dialog
// whose close action is Deny, run in a terminal (shell integration, or a
// pseudo-terminal) with their output captured; confinement.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ClientToolRunner, DENIED_COMMAND, DENIED_EDIT, type ToolCall } from '../src/tools/clientTools';
import { EditReviews, PROPOSAL_SCHEME } from '../src/vscode/review';
import { TerminalCommandRunner } from '../src/vscode/terminal';
import { ALLOW_ONCE, ALLOW_SESSION_COMMANDS, ALLOW_SESSION_EDITS, DENY, VscodeWorkspace } from '../src/vscode/workspace';
import { tmpDir } from './helpers/agentd';
import { alive, gone, groupGone, pidsFrom } from './helpers/processes';
import { __mock, Uri, window, workspace, type MockTerminal } from './mocks/vscode';

let root: string;
let runner: ClientToolRunner;
let reviews: EditReviews;
let editApproval: 'ask' | 'always';
let n = 0;

const call = (name: string, args: Record<string, unknown>, sessionId = 's1'): ToolCall => ({
  sessionId,
  toolCallId: `call_${++n}`,
  name,
  arguments: args,
});
const run = (c: ToolCall, signal = new AbortController().signal) => runner.run(c, signal);
/** Answer the next modal dialogs by button title (undefined: dismissed). */
const answer = (...choices: (string | undefined)[]) => {
  for (const c of choices) {
    window.showWarningMessage.mockImplementationOnce(async (...args: unknown[]) =>
      (args.slice(2) as { title: string }[]).find((i) => i.title === c),
    );
  }
};
/** Wait until a diff review is open, then answer it as the editor title's buttons do. */
async function decide(choice: 'once' | 'deny' | 'session'): Promise<void> {
  await vi.waitFor(() => expect(reviews.waiting.length).toBeGreaterThan(0));
  expect(await reviews.decide(undefined, choice)).toBe(true);
}
const diffTabs = () => __mock.tabs.filter((t) => t.input.modified.scheme === PROPOSAL_SCHEME);

beforeEach(() => {
  __mock.reset();
  root = tmpDir('agentd-vsc-');
  editApproval = 'ask';
  reviews = new EditReviews();
  // No wait for shell integration unless a test plays one: the fallback runs at once.
  runner = new ClientToolRunner(new VscodeWorkspace(reviews, new TerminalCommandRunner(0)), {
    workspaceRoot: () => root,
    editApproval: () => editApproval,
  });
});

afterEach(() => reviews.dispose());

describe('edit_file', () => {
  it('shows the proposed change in the diff editor and applies it as an undoable WorkspaceEdit on Accept', async () => {
    const file = path.join(root, 'main.py');
    fs.writeFileSync(file, 'print("hi")\nprint("bye")\n');
    const pending = run(call('edit_file', { path: 'main.py', old_text: 'bye', new_text: 'ciao' }));
    await vi.waitFor(() => expect(diffTabs()).toHaveLength(1));
    const [tab] = diffTabs();
    // Left: the file itself (its live buffer); right: the proposal, read-only.
    expect(tab.input.original).toEqual(Uri.file(file));
    expect(tab.input.modified).toMatchObject({ scheme: PROPOSAL_SCHEME, fsPath: file });
    expect(__mock.content(tab.input.modified)).toBe('print("hi")\nprint("ciao")\n');
    expect(tab.label).toBe("main.py: agentd's proposed change (review)");
    expect(window.showWarningMessage).not.toHaveBeenCalled(); // no modal dialog for edits
    expect(workspace.applyEdit).not.toHaveBeenCalled(); // nothing changes before the answer
    await decide('once');
    expect(await pending).toEqual({ content: 'Edited main.py: replaced 1 occurrence.', isError: false });
    expect(diffTabs()).toEqual([]); // the review's diff is closed
    const edit = workspace.applyEdit.mock.calls[0][0];
    expect(edit.ops).toHaveLength(1);
    expect(edit.ops[0]).toMatchObject({ op: 'replace', text: 'ciao', range: { start: { line: 1, character: 7 }, end: { line: 1, character: 10 } } });
    // The buffer was clean, so it is saved: commands see the change on disk.
    expect(fs.readFileSync(file, 'utf8')).toBe('print("hi")\nprint("ciao")\n');
    const doc = __mock.documents.get(file)!;
    doc.undo();
    expect(doc.getText()).toBe('print("hi")\nprint("bye")\n');
  });

  it('edits the unsaved buffer and leaves the user\'s unsaved work unsaved', async () => {
    const file = path.join(root, 'notes.txt');
    fs.writeFileSync(file, 'disk version\n');
    const doc = __mock.openBuffer(file, 'buffer version, unsaved\n');
    editApproval = 'always';
    const res = await run(call('edit_file', { path: 'notes.txt', old_text: 'unsaved', new_text: 'edited' }));
    expect(res.isError).toBe(false);
    expect(diffTabs()).toEqual([]);
    expect(doc.getText()).toBe('buffer version, edited\n');
    expect(doc.isDirty).toBe(true);
    expect(doc.saves).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toBe('disk version\n');
  });

  it('the proposal is computed on the unsaved buffer, which the diff shows on the left', async () => {
    const file = path.join(root, 'u.txt');
    fs.writeFileSync(file, 'disk\n');
    __mock.openBuffer(file, 'unsaved alpha\n');
    const pending = run(call('edit_file', { path: 'u.txt', old_text: 'alpha', new_text: 'beta' }));
    await vi.waitFor(() => expect(diffTabs()).toHaveLength(1));
    expect(__mock.content(diffTabs()[0].input.modified)).toBe('unsaved beta\n');
    await decide('deny');
    await pending;
  });

  it('Reject refuses the edit, says "denied" (not a failure) and tells the model', async () => {
    const file = path.join(root, 'a.txt');
    fs.writeFileSync(file, 'x = 1\n');
    const pending = run(call('edit_file', { path: 'a.txt', old_text: '1', new_text: '2' }));
    await decide('deny');
    expect(await pending).toEqual({ content: DENIED_EDIT, isError: true, denied: true });
    expect(workspace.applyEdit).not.toHaveBeenCalled();
    expect(diffTabs()).toEqual([]);
    expect(fs.readFileSync(file, 'utf8')).toBe('x = 1\n');
  });

  it('a cancel while the review is open closes it, answers "cancelled" and edits nothing', async () => {
    fs.writeFileSync(path.join(root, 'a.txt'), 'x = 1\n');
    const ac = new AbortController();
    const pending = run(call('edit_file', { path: 'a.txt', old_text: '1', new_text: '2' }), ac.signal);
    await vi.waitFor(() => expect(diffTabs()).toHaveLength(1));
    ac.abort();
    expect(await pending).toEqual({ content: 'The tool call was cancelled.', isError: true });
    await vi.waitFor(() => expect(diffTabs()).toEqual([]));
    expect(reviews.waiting).toEqual([]);
    expect(workspace.applyEdit).not.toHaveBeenCalled();
  });

  it('several edits of a turn are reviewed one file at a time, each answerable from the panel by id', async () => {
    fs.writeFileSync(path.join(root, 'a.txt'), 'aaa\n');
    fs.writeFileSync(path.join(root, 'b.txt'), 'bbb\n');
    const first = call('edit_file', { path: 'a.txt', old_text: 'aaa', new_text: 'AAA' });
    const second = call('edit_file', { path: 'b.txt', old_text: 'bbb', new_text: 'BBB' });
    const p1 = run(first);
    const p2 = run(second);
    await vi.waitFor(() => expect(reviews.waiting).toEqual([first.toolCallId, second.toolCallId]));
    expect(diffTabs().map((t) => path.basename(t.input.modified.fsPath))).toEqual(['a.txt']);
    // The panel rejects the second while the first is on screen.
    expect(await reviews.decide(second.toolCallId, 'deny')).toBe(true);
    expect((await p2).denied).toBe(true);
    expect(diffTabs().map((t) => path.basename(t.input.modified.fsPath))).toEqual(['a.txt']);
    // The editor title's Accept, pressed on the first diff (its URI is the argument).
    expect(await reviews.decide(diffTabs()[0].input.modified as never, "once")).toBe(true);
    expect((await p1).isError).toBe(false);
    expect(fs.readFileSync(path.join(root, 'a.txt'), 'utf8')).toBe('AAA\n');
    expect(fs.readFileSync(path.join(root, 'b.txt'), 'utf8')).toBe('bbb\n');
    expect(diffTabs()).toEqual([]);
    expect(await reviews.decide(undefined, 'once')).toBe(false); // nothing left to answer
  });

  it('the next review opens when the one on screen is answered', async () => {
    fs.writeFileSync(path.join(root, 'a.txt'), 'aaa\n');
    fs.writeFileSync(path.join(root, 'b.txt'), 'bbb\n');
    const p1 = run(call('edit_file', { path: 'a.txt', old_text: 'aaa', new_text: 'AAA' }));
    const p2 = run(call('edit_file', { path: 'b.txt', old_text: 'bbb', new_text: 'BBB' }));
    await vi.waitFor(() => expect(reviews.waiting).toHaveLength(2));
    await decide('once');
    await p1;
    await vi.waitFor(() => expect(diffTabs().map((t) => path.basename(t.input.modified.fsPath))).toEqual(['b.txt']));
    await decide('once');
    await p2;
    expect(fs.readFileSync(path.join(root, 'b.txt'), 'utf8')).toBe('BBB\n');
  });

  it('"Accept all this session" stops asking about edits in that session only', async () => {
    fs.writeFileSync(path.join(root, 'a.txt'), 'one two three\n');
    const p = run(call('edit_file', { path: 'a.txt', old_text: 'one', new_text: '1' }, 's1'));
    await decide('session');
    expect((await p).isError).toBe(false);
    expect((await run(call('write_file', { path: 'b.txt', content: 'new' }, 's1'))).isError).toBe(false);
    // Commands are a different permission.
    answer(DENY);
    expect(await run(call('run_command', { command: 'true' }, 's1'))).toEqual({ content: DENIED_COMMAND, isError: true, denied: true });
    // Another session is asked again.
    const other = run(call('edit_file', { path: 'a.txt', old_text: 'two', new_text: '2' }, 's2'));
    await decide('deny');
    expect((await other).isError).toBe(true);
    // Reset forgets the permission.
    runner.forgetSession('s1');
    const again = run(call('edit_file', { path: 'a.txt', old_text: 'three', new_text: '3' }, 's1'));
    await decide('deny');
    expect((await again).isError).toBe(true);
    expect(fs.readFileSync(path.join(root, 'a.txt'), 'utf8')).toBe('1 two three\n');
  });

  it('explains edits that cannot apply, without asking', async () => {
    fs.writeFileSync(path.join(root, 'dup.txt'), 'a a\n');
    expect(await run(call('edit_file', { path: 'dup.txt', old_text: 'a', new_text: 'b' }))).toEqual({
      content: 'old_text occurs 2 times in dup.txt; include more context so it matches exactly once.',
      isError: true,
    });
    expect(await run(call('edit_file', { path: 'dup.txt', old_text: 'zzz', new_text: 'b' }))).toEqual({
      content: 'old_text was not found in dup.txt.',
      isError: true,
    });
    expect((await run(call('edit_file', { path: 'missing.txt', old_text: 'a', new_text: 'b' }))).content).toMatch(/does not exist/);
    expect((await run(call('edit_file', { path: 'dup.txt', new_text: 'b' }))).content).toMatch(/Missing or invalid argument "old_text"/);
    expect(diffTabs()).toEqual([]);
    expect(reviews.waiting).toEqual([]);
  });

  it('re-checks the buffer after the review: a change made meanwhile is not overwritten blindly', async () => {
    const file = path.join(root, 'race.txt');
    fs.writeFileSync(file, 'alpha beta\n');
    const pending = run(call('edit_file', { path: 'race.txt', old_text: 'beta', new_text: 'gamma' }));
    await vi.waitFor(() => expect(diffTabs()).toHaveLength(1));
    __mock.openBuffer(file, 'the user rewrote everything\n');
    await decide('once');
    expect(await pending).toEqual({ content: 'old_text was not found in race.txt.', isError: true });
    expect(__mock.documents.get(file)!.getText()).toBe('the user rewrote everything\n');
  });
});

describe('write_file', () => {
  it('reviews a new file against an empty side, then creates it through a WorkspaceEdit (createFile + insert) and saves it', async () => {
    const pending = run(call('write_file', { path: 'src/new.ts', content: 'export const x = 1;\n' }));
    await vi.waitFor(() => expect(diffTabs()).toHaveLength(1));
    const [tab] = diffTabs();
    expect(tab.input.original.scheme).toBe(PROPOSAL_SCHEME);
    expect(__mock.content(tab.input.original)).toBe('');
    expect(__mock.content(tab.input.modified)).toBe('export const x = 1;\n');
    expect(tab.label).toBe("new.ts: agentd's proposed new file (review)");
    await decide('once');
    expect(await pending).toEqual({ content: 'Created src/new.ts (20 characters).', isError: false });
    const ops = workspace.applyEdit.mock.calls[0][0].ops.map((o: { op: string }) => o.op);
    expect(ops).toEqual(['createFile', 'insert']);
    expect(fs.readFileSync(path.join(root, 'src/new.ts'), 'utf8')).toBe('export const x = 1;\n');
  });

  it('overwrites an existing file as one replace of the whole buffer', async () => {
    fs.writeFileSync(path.join(root, 'c.txt'), 'old\ncontent\n');
    const pending = run(call('write_file', { path: 'c.txt', content: 'fresh\n' }));
    await vi.waitFor(() => expect(diffTabs()).toHaveLength(1));
    expect(diffTabs()[0].input.original).toEqual(Uri.file(path.join(root, 'c.txt')));
    await decide('once');
    expect((await pending).content).toBe('Overwrote c.txt (6 characters).');
    expect(fs.readFileSync(path.join(root, 'c.txt'), 'utf8')).toBe('fresh\n');
    __mock.documents.get(path.join(root, 'c.txt'))!.undo();
    expect(__mock.documents.get(path.join(root, 'c.txt'))!.getText()).toBe('old\ncontent\n');
  });
});

describe('confinement', () => {
  it('refuses paths outside the workspace, including through a symlink, without asking', async () => {
    const outside = tmpDir('agentd-outside-');
    fs.writeFileSync(path.join(outside, 'secret.txt'), 'secret');
    fs.symlinkSync(outside, path.join(root, 'link'));
    for (const p of ['../x.txt', path.join(outside, 'secret.txt'), 'link/secret.txt', 'link/new.txt']) {
      const res = await run(call('write_file', { path: p, content: 'pwned' }));
      expect(res.isError).toBe(true);
      expect(res.content).toMatch(/^Refused: .*outside the workspace\.$/);
      const read = await run(call('read_file', { path: p }));
      expect(read.content).toMatch(/^Refused/);
    }
    expect(fs.readFileSync(path.join(outside, 'secret.txt'), 'utf8')).toBe('secret');
    expect(window.showWarningMessage).not.toHaveBeenCalled();
    expect(diffTabs()).toEqual([]);
  });

  it('a multi-root workspace: absolute paths in the other folders are allowed, relative ones stay the first folder\'s', async () => {
    const other = tmpDir('agentd-other-');
    const outside = tmpDir('agentd-outside-');
    fs.writeFileSync(path.join(other, 'shared.txt'), 'shared\n');
    fs.writeFileSync(path.join(outside, 'secret.txt'), 'secret');
    fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(other, 'leak.txt'));
    runner = new ClientToolRunner(new VscodeWorkspace(reviews, new TerminalCommandRunner(0)), {
      workspaceRoot: () => root,
      additionalRoots: () => [other],
      editApproval: () => 'always',
    });
    expect(await run(call('read_file', { path: path.join(other, 'shared.txt') }))).toEqual({ content: '1  shared', isError: false });
    const wrote = await run(call('write_file', { path: path.join(other, 'new.txt'), content: 'made\n' }));
    expect(wrote).toEqual({ content: `Created ${path.join(other, 'new.txt')} (5 characters).`, isError: false });
    expect(__mock.documents.get(path.join(other, 'new.txt'))!.getText()).toBe('made\n');
    // Relative paths are the first folder's; a symlink out of the other folder is refused.
    expect((await run(call('read_file', { path: 'shared.txt' }))).content).toBe('shared.txt does not exist.');
    for (const p of [path.join(other, 'leak.txt'), path.join(outside, 'secret.txt'), `${other}-evil/x.txt`]) {
      const res = await run(call('write_file', { path: p, content: 'pwned' }));
      expect(res.content).toMatch(/^Refused: .*outside the workspace folders\.$/);
    }
    expect(fs.readFileSync(path.join(outside, 'secret.txt'), 'utf8')).toBe('secret');
  });

  it("a loaded session's own folders, as the daemon has them, not the window's", async () => {
    const stored = tmpDir('agentd-stored-');
    const windowOnly = tmpDir('agentd-window-');
    fs.writeFileSync(path.join(stored, 'a.txt'), 'stored\n');
    fs.writeFileSync(path.join(windowOnly, 'b.txt'), 'window\n');
    runner = new ClientToolRunner(new VscodeWorkspace(reviews, new TerminalCommandRunner(0)), {
      workspaceRoot: () => root,
      additionalRoots: () => [windowOnly],
      editApproval: () => 'always',
    });
    runner.setSessionRoots('loaded', [root, stored]);
    const read = async (p: string, sessionId: string) => (await run(call('read_file', { path: p }, sessionId))).content;
    // The loaded session reaches its stored folder, not the window's other one.
    expect(await read(path.join(stored, 'a.txt'), 'loaded')).toBe('1  stored');
    expect(await read(path.join(windowOnly, 'b.txt'), 'loaded')).toMatch(/^Refused: .*outside the workspace folders\.$/);
    const wrote = await run(call('write_file', { path: path.join(windowOnly, 'c.txt'), content: 'x' }, 'loaded'));
    expect(wrote.content).toMatch(/^Refused: /);
    expect(fs.existsSync(path.join(windowOnly, 'c.txt'))).toBe(false);
    // A new session (no roots set) has the window's folders.
    expect(await read(path.join(windowOnly, 'b.txt'), 's1')).toBe('1  window');
    expect(await read(path.join(stored, 'a.txt'), 's1')).toMatch(/^Refused: /);
    // Dropped (a deleted session): the window's folders again.
    runner.setSessionRoots('loaded', undefined);
    expect(await read(path.join(windowOnly, 'b.txt'), 'loaded')).toBe('1  window');
  });

  it('says so when no folder is open', async () => {
    root = '';
    const res = await run(call('read_file', { path: 'a' }));
    expect(res).toEqual({ content: 'No workspace folder is open in the editor.', isError: true });
  });
});

describe('read_file', () => {
  it('reads a dirty buffer, else the disk, with numbered lines and offset/limit', async () => {
    const file = path.join(root, 'r.txt');
    fs.writeFileSync(file, 'l1\nl2\nl3\n');
    expect(await run(call('read_file', { path: 'r.txt' }))).toEqual({ content: '1  l1\n2  l2\n3  l3', isError: false });
    __mock.openBuffer(file, 'u1\nu2\nu3\nu4\n');
    expect((await run(call('read_file', { path: 'r.txt', offset: 2, limit: 2 }))).content).toBe('2  u2\n3  u3');
    expect(await run(call('read_file', { path: 'nope.txt' }))).toEqual({ content: 'nope.txt does not exist.', isError: true });
  });
});

describe('run_command', () => {
  const ptyTerminal = (): MockTerminal | undefined => __mock.terminals.find((t) => t.options.pty);

  it('asks in a modal dialog whose close action is Deny (no extra Cancel), even when edits are "always"', async () => {
    editApproval = 'always';
    answer(ALLOW_ONCE);
    const res = await run(call('run_command', { command: 'echo hello; echo oops >&2; exit 2' }));
    expect(window.showWarningMessage).toHaveBeenCalledTimes(1);
    const [title, opts, ...items] = window.showWarningMessage.mock.calls[0] as [string, { modal: boolean; detail: string }, ...{ title: string; isCloseAffordance?: boolean }[]];
    expect(title).toBe('agentd wants to run a command');
    expect(opts.modal).toBe(true);
    expect(opts.detail).toContain('echo hello; echo oops >&2; exit 2');
    expect(items).toEqual([{ title: ALLOW_ONCE }, { title: ALLOW_SESSION_COMMANDS }, { title: DENY, isCloseAffordance: true }]);
    expect(res.content).toContain('hello');
    expect(res.content).toContain('oops');
    expect(res.content.endsWith('[exit code: 2]')).toBe(true);
    expect(res.isError).toBe(true);
  });

  it('without shell integration runs in a pseudo-terminal in the workspace, showing the output there', async () => {
    fs.mkdirSync(path.join(root, 'sub'));
    answer(ALLOW_ONCE);
    const pending = run(call('run_command', { command: 'pwd; echo done', cwd: 'sub' }));
    const res = await pending;
    const shown = ptyTerminal()!;
    expect(res.content).toBe(`${path.join(root, 'sub')}\ndone\n[exit code: 0]`);
    expect(res.isError).toBe(false);
    // The terminal tried first (for shell integration) got the command's cwd and was closed.
    expect(__mock.terminals[0]).toMatchObject({ options: { cwd: path.join(root, 'sub') }, disposed: true });
    expect(shown.shown).toBeGreaterThan(0);
    expect(shown.output).toContain('done\r\n');
    expect(shown.output).toContain('[exit code 0]');
    const refused = await run(call('run_command', { command: 'pwd', cwd: '..' }));
    expect(refused.content).toMatch(/^Refused/);
  });

  it('with shell integration runs in the user\'s shell and captures the output without escape codes', async () => {
    runner = new ClientToolRunner(new VscodeWorkspace(reviews, new TerminalCommandRunner(60_000)), {
      workspaceRoot: () => root,
      editApproval: () => editApproval,
    });
    const executed: string[] = [];
    const execution = {
      async *read() {
        yield '\x1b]633;C\x07\x1b[32mok\x1b[0m\r\n';
        yield 'line 2\r\n';
      },
    };
    const integration = {
      executeCommand: (cmd: string) => {
        executed.push(cmd);
        queueMicrotask(() => __mock.terminalEvents.end.fire({ terminal: __mock.terminals[0], execution, exitCode: 3 }));
        return execution;
      },
    };
    answer(ALLOW_ONCE);
    const pending = run(call('run_command', { command: 'make test' }));
    await vi.waitFor(() => expect(__mock.terminals).toHaveLength(1));
    __mock.terminalEvents.integration.fire({ terminal: __mock.terminals[0], shellIntegration: integration });
    const res = await pending;
    expect(executed).toEqual(['make test']);
    expect(res).toEqual({ content: 'ok\nline 2\n[exit code: 3]', isError: true });
    expect(__mock.terminals[0].options).toMatchObject({ cwd: root, name: 'agentd: make test' });
    expect(__mock.terminals[0].disposed).toBe(false); // the user can read it afterwards
  });

  it('a cancel while a shell-integrated command runs closes its terminal (which ends the command)', async () => {
    runner = new ClientToolRunner(new VscodeWorkspace(reviews, new TerminalCommandRunner(60_000)), {
      workspaceRoot: () => root,
      editApproval: () => editApproval,
    });
    let release!: () => void;
    const execution = {
      async *read() {
        yield 'started\r\n';
        await new Promise<void>((r) => (release = r));
      },
    };
    answer(ALLOW_ONCE);
    const ac = new AbortController();
    const pending = run(call('run_command', { command: 'sleep 100' }), ac.signal);
    await vi.waitFor(() => expect(__mock.terminals).toHaveLength(1));
    __mock.terminalEvents.integration.fire({ terminal: __mock.terminals[0], shellIntegration: { executeCommand: () => execution } });
    await vi.waitFor(() => expect(release).toBeDefined());
    ac.abort();
    const res = await pending;
    release();
    expect(__mock.terminals[0].disposed).toBe(true);
    expect(res.isError).toBe(true);
    expect(res.content).toContain('started');
    expect(res.content).toMatch(/killed by SIGHUP \(cancelled\)/);
  });

  it('deny and dismiss do not run the command', async () => {
    answer(DENY, undefined);
    const marker = path.join(root, 'ran');
    expect(await run(call('run_command', { command: `touch ${marker}` }))).toEqual({ content: DENIED_COMMAND, isError: true, denied: true });
    expect(await run(call('run_command', { command: `touch ${marker}` }))).toEqual({ content: DENIED_COMMAND, isError: true, denied: true });
    expect(fs.existsSync(marker)).toBe(false);
    expect(__mock.terminals).toEqual([]);
  });

  it('"Allow all commands this session" runs later commands of the session without asking', async () => {
    answer(ALLOW_SESSION_COMMANDS);
    expect((await run(call('run_command', { command: 'true' }))).content).toBe('[exit code: 0]');
    expect((await run(call('run_command', { command: 'echo again' }))).content).toBe('again\n[exit code: 0]');
    expect(window.showWarningMessage).toHaveBeenCalledTimes(1);
  });

  it('a cancel while the dialog is open answers "cancelled" and runs nothing; a cancel while running kills it', async () => {
    const ac = new AbortController();
    window.showWarningMessage.mockImplementationOnce(() => new Promise(() => {})); // the user never answers
    const pending = run(call('run_command', { command: 'touch should-not-exist' }), ac.signal);
    ac.abort();
    expect(await pending).toEqual({ content: 'The tool call was cancelled.', isError: true });
    expect(fs.existsSync(path.join(root, 'should-not-exist'))).toBe(false);

    const ac2 = new AbortController();
    answer(ALLOW_ONCE);
    const long = run(call('run_command', { command: 'echo started; sleep 30; echo finished' }), ac2.signal);
    // The command's own output line: the terminal's first line echoes the
    // command, which names "started" too, before the shell has run anything.
    await vi.waitFor(() => expect(ptyTerminal()?.output).toContain('started\r\n'));
    ac2.abort();
    const res = await long;
    expect(res.isError).toBe(true);
    expect(res.content).toContain('started');
    expect(res.content).not.toContain('finished');
    expect(res.content).toMatch(/killed by SIGTERM \(cancelled\)/);
  });
});

describe('the session mode (autoApprove on the tool call)', () => {
  it('an edit the mode runs without asking (auto-edit) applies with no review; a command still asks', async () => {
    const file = path.join(root, 'm.txt');
    fs.writeFileSync(file, 'one\n');
    const res = await run({ ...call('edit_file', { path: 'm.txt', old_text: 'one', new_text: 'two' }), autoApprove: true });
    expect(res).toMatchObject({ isError: false });
    expect(reviews.waiting).toHaveLength(0);
    expect(diffTabs()).toHaveLength(0);
    expect(workspace.textDocuments.find((d) => d.uri.fsPath === file)?.getText()).toBe('two\n');
    answer('Deny');
    const cmd = await run({ ...call('run_command', { command: 'true' }), autoApprove: true });
    expect(cmd).toMatchObject({ content: DENIED_COMMAND, isError: true, denied: true });
    expect(window.showWarningMessage).toHaveBeenCalledTimes(1);
  });
});

describe('stopping a running command stops what it started', () => {
  // The shell starts a child in the background and waits for it: killing
  // the shell alone would leave the child running.
  const BACKGROUND = (pids: string) => `sleep 60 & echo $$ $! > ${pids}; wait`;
  let spawned: number[];
  const commandRunner = (options: ConstructorParameters<typeof TerminalCommandRunner>[1] = {}) => {
    const terminals = new TerminalCommandRunner(0, { onSpawn: (pid) => spawned.push(pid), ...options });
    runner = new ClientToolRunner(new VscodeWorkspace(reviews, terminals), { workspaceRoot: () => root, editApproval: () => editApproval });
    return terminals;
  };
  beforeEach(() => {
    spawned = [];
  });

  it('a withdrawn call (Stop, or the daemon cancelling it) kills the shell and its background child', async () => {
    commandRunner();
    const pids = path.join(root, 'pids');
    answer(ALLOW_ONCE);
    const ac = new AbortController();
    const pending = run(call('run_command', { command: BACKGROUND(pids) }), ac.signal);
    const [sh, child] = await pidsFrom(pids);
    expect(spawned).toEqual([sh]); // the shell leads the group that is signalled
    expect(alive(sh) && alive(child)).toBe(true);
    ac.abort();
    const res = await pending;
    expect(res.content).toMatch(/\[killed by SIGTERM \(cancelled\)\]$/);
    await gone([sh, child]);
    await groupGone(sh);
  });

  it('a shell that already exited, leaving a child holding its output: the cancel still kills the child and the call ends', async () => {
    commandRunner();
    const pids = path.join(root, 'pids');
    answer(ALLOW_ONCE);
    const ac = new AbortController();
    // The child keeps the output pipe open: no result until it is gone.
    const pending = run(call('run_command', { command: `sleep 60 & echo $$ $! > ${pids}` }), ac.signal);
    const [sh, child] = await pidsFrom(pids);
    await gone([sh]);
    expect(alive(child)).toBe(true);
    ac.abort();
    expect((await pending).content).toMatch(/\[killed by SIGTERM \(cancelled\)\]$/);
    await gone([child]);
  });

  it('what ignores SIGTERM gets SIGKILL after the grace', async () => {
    commandRunner({ killGraceMs: 200 });
    const pids = path.join(root, 'pids');
    answer(ALLOW_ONCE);
    const ac = new AbortController();
    // An ignored signal stays ignored in the child the shell starts.
    const pending = run(call('run_command', { command: `trap '' TERM; ${BACKGROUND(pids)}` }), ac.signal);
    const [sh, child] = await pidsFrom(pids);
    ac.abort();
    expect((await pending).content).toMatch(/\[killed by SIGKILL \(cancelled\)\]$/);
    await gone([sh, child]);
  });

  it('a command past agentd.commandTimeout is stopped with what it started, and reported timed out', async () => {
    commandRunner({ timeoutMs: () => 1500 });
    const pids = path.join(root, 'pids');
    answer(ALLOW_ONCE);
    const res = await run(call('run_command', { command: BACKGROUND(pids) }));
    expect(res.isError).toBe(true);
    expect(res.content).toMatch(/\[timed out after 1\.5 s, killed by SIGTERM\]$/);
    // Whether or not the shell had started its child by then, its group is empty.
    expect(spawned).toHaveLength(1);
    await groupGone(spawned[0]);
    if (fs.existsSync(pids)) await gone(await pidsFrom(pids));
  });

  it('deactivation (dispose) stops the commands still running', async () => {
    const terminals = commandRunner();
    const pids = path.join(root, 'pids');
    answer(ALLOW_ONCE);
    const pending = run(call('run_command', { command: BACKGROUND(pids) }));
    const [sh, child] = await pidsFrom(pids);
    terminals.dispose();
    expect((await pending).content).toMatch(/\[killed by SIGTERM\]$/);
    await gone([sh, child]);
    // A disposed runner starts nothing.
    answer(ALLOW_ONCE);
    expect((await run(call('run_command', { command: `touch ${path.join(root, 'late')}` }))).isError).toBe(true);
    expect(fs.existsSync(path.join(root, 'late'))).toBe(false);
  });

  it('with shell integration, the time limit closes the terminal (its shell hangs up the command\'s job)', async () => {
    const terminals = new TerminalCommandRunner(60_000, { timeoutMs: () => 50 });
    runner = new ClientToolRunner(new VscodeWorkspace(reviews, terminals), { workspaceRoot: () => root, editApproval: () => editApproval });
    const execution = {
      async *read() {
        yield 'started\r\n';
        await new Promise(() => {}); // runs until stopped
      },
    };
    answer(ALLOW_ONCE);
    const pending = run(call('run_command', { command: 'make serve' }));
    await vi.waitFor(() => expect(__mock.terminals).toHaveLength(1));
    __mock.terminalEvents.integration.fire({ terminal: __mock.terminals[0], shellIntegration: { executeCommand: () => execution } });
    const res = await pending;
    expect(__mock.terminals[0].disposed).toBe(true);
    expect(res).toEqual({ content: 'started\n[timed out after 0.05 s, killed by SIGHUP]', isError: true });
  });
});
