// Client tools on the VS Code adapter (mocked `vscode`): WorkspaceEdits on
// buffers, approvals (allow once / for the session / deny / dismissed) and
// their failure modes, confinement, run_command.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { ClientToolRunner, DENIED_COMMAND, DENIED_EDIT, type ToolCall } from '../src/tools/clientTools';
import { ALLOW_ONCE, ALLOW_SESSION_COMMANDS, ALLOW_SESSION_EDITS, DENY, VscodeWorkspace } from '../src/vscode/workspace';
import { tmpDir } from './helpers/agentd';
import { __mock, window, workspace } from './mocks/vscode';

let root: string;
let runner: ClientToolRunner;
let editApproval: 'ask' | 'always';
let commandOutput: ReturnType<typeof __mock.outputChannel>;
let n = 0;

const call = (name: string, args: Record<string, unknown>, sessionId = 's1'): ToolCall => ({
  sessionId,
  toolCallId: `call_${++n}`,
  name,
  arguments: args,
});
const run = (c: ToolCall, signal = new AbortController().signal) => runner.run(c, signal);
const answer = (...choices: (string | undefined)[]) => {
  for (const c of choices) window.showWarningMessage.mockImplementationOnce(async () => c);
};

beforeEach(() => {
  __mock.reset();
  root = tmpDir('agentd-vsc-');
  editApproval = 'ask';
  commandOutput = __mock.outputChannel('agentd: commands');
  runner = new ClientToolRunner(new VscodeWorkspace(commandOutput as never), {
    workspaceRoot: () => root,
    editApproval: () => editApproval,
  });
});

describe('edit_file', () => {
  it('asks with a modal dialog and applies a WorkspaceEdit after "Allow once"', async () => {
    const file = path.join(root, 'main.py');
    fs.writeFileSync(file, 'print("hi")\nprint("bye")\n');
    answer(ALLOW_ONCE);
    const res = await run(call('edit_file', { path: 'main.py', old_text: 'bye', new_text: 'ciao' }));
    expect(res).toEqual({ content: 'Edited main.py: replaced 1 occurrence.', isError: false });
    const [title, options, ...buttons] = window.showWarningMessage.mock.calls[0] as [string, { modal: boolean; detail: string }, ...string[]];
    expect(title).toBe('agentd wants to edit main.py');
    expect(options.modal).toBe(true);
    expect(options.detail).toContain('bye');
    expect(options.detail).toContain('ciao');
    expect(buttons).toEqual([ALLOW_ONCE, ALLOW_SESSION_EDITS, DENY]);
    // Applied as one undoable WorkspaceEdit replacing exactly the old text.
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
    expect(window.showWarningMessage).not.toHaveBeenCalled();
    expect(doc.getText()).toBe('buffer version, edited\n');
    expect(doc.isDirty).toBe(true);
    expect(doc.saves).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toBe('disk version\n');
  });

  it('"Deny" refuses the edit and tells the model', async () => {
    const file = path.join(root, 'a.txt');
    fs.writeFileSync(file, 'x = 1\n');
    answer(DENY);
    const res = await run(call('edit_file', { path: 'a.txt', old_text: '1', new_text: '2' }));
    expect(res).toEqual({ content: DENIED_EDIT, isError: true });
    expect(workspace.applyEdit).not.toHaveBeenCalled();
    expect(fs.readFileSync(file, 'utf8')).toBe('x = 1\n');
  });

  it('a dismissed dialog is a denial (fail closed)', async () => {
    fs.writeFileSync(path.join(root, 'a.txt'), 'x = 1\n');
    answer(undefined);
    expect(await run(call('edit_file', { path: 'a.txt', old_text: '1', new_text: '2' }))).toEqual({ content: DENIED_EDIT, isError: true });
    window.showWarningMessage.mockImplementationOnce(async () => {
      throw new Error('dialog service unavailable');
    });
    expect(await run(call('edit_file', { path: 'a.txt', old_text: '1', new_text: '2' }))).toEqual({ content: DENIED_EDIT, isError: true });
    expect(workspace.applyEdit).not.toHaveBeenCalled();
  });

  it('"Allow all edits this session" stops asking in that session only', async () => {
    fs.writeFileSync(path.join(root, 'a.txt'), 'one two three\n');
    answer(ALLOW_SESSION_EDITS);
    expect((await run(call('edit_file', { path: 'a.txt', old_text: 'one', new_text: '1' }, 's1'))).isError).toBe(false);
    expect((await run(call('write_file', { path: 'b.txt', content: 'new' }, 's1'))).isError).toBe(false);
    expect(window.showWarningMessage).toHaveBeenCalledTimes(1);
    // Commands are a different permission.
    answer(DENY);
    expect(await run(call('run_command', { command: 'true' }, 's1'))).toEqual({ content: DENIED_COMMAND, isError: true });
    // Another session is asked again.
    answer(DENY);
    expect((await run(call('edit_file', { path: 'a.txt', old_text: 'two', new_text: '2' }, 's2'))).isError).toBe(true);
    expect(window.showWarningMessage).toHaveBeenCalledTimes(3);
    // Reset forgets the permission.
    runner.forgetSession('s1');
    answer(DENY);
    expect((await run(call('edit_file', { path: 'a.txt', old_text: 'three', new_text: '3' }, 's1'))).isError).toBe(true);
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
    expect(window.showWarningMessage).not.toHaveBeenCalled();
  });

  it('re-checks the buffer after the dialog: a change made meanwhile is not overwritten blindly', async () => {
    const file = path.join(root, 'race.txt');
    fs.writeFileSync(file, 'alpha beta\n');
    window.showWarningMessage.mockImplementationOnce(async () => {
      __mock.openBuffer(file, 'the user rewrote everything\n');
      return ALLOW_ONCE;
    });
    const res = await run(call('edit_file', { path: 'race.txt', old_text: 'beta', new_text: 'gamma' }));
    expect(res).toEqual({ content: 'old_text was not found in race.txt.', isError: true });
    expect(__mock.documents.get(file)!.getText()).toBe('the user rewrote everything\n');
  });
});

describe('write_file', () => {
  it('creates a new file through a WorkspaceEdit (createFile + insert) and saves it', async () => {
    answer(ALLOW_ONCE);
    const res = await run(call('write_file', { path: 'src/new.ts', content: 'export const x = 1;\n' }));
    expect(res).toEqual({ content: 'Created src/new.ts (20 characters).', isError: false });
    expect(window.showWarningMessage.mock.calls[0][0]).toBe('agentd wants to create src/new.ts');
    const ops = workspace.applyEdit.mock.calls[0][0].ops.map((o: { op: string }) => o.op);
    expect(ops).toEqual(['createFile', 'insert']);
    expect(fs.readFileSync(path.join(root, 'src/new.ts'), 'utf8')).toBe('export const x = 1;\n');
  });

  it('overwrites an existing file as one replace of the whole buffer', async () => {
    fs.writeFileSync(path.join(root, 'c.txt'), 'old\ncontent\n');
    answer(ALLOW_ONCE);
    const res = await run(call('write_file', { path: 'c.txt', content: 'fresh\n' }));
    expect(res.content).toBe('Overwrote c.txt (6 characters).');
    expect(window.showWarningMessage.mock.calls[0][0]).toBe('agentd wants to overwrite c.txt');
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
  it('is always asked for, even when edits are "always"; output and exit code come back', async () => {
    editApproval = 'always';
    answer(ALLOW_ONCE);
    const res = await run(call('run_command', { command: 'echo hello; echo oops >&2; exit 2' }));
    expect(window.showWarningMessage).toHaveBeenCalledTimes(1);
    const [title, opts, ...buttons] = window.showWarningMessage.mock.calls[0] as [string, { detail: string }, ...string[]];
    expect(title).toBe('agentd wants to run a command');
    expect(opts.detail).toContain('echo hello; echo oops >&2; exit 2');
    expect(buttons).toEqual([ALLOW_ONCE, ALLOW_SESSION_COMMANDS, DENY]);
    expect(res.content).toContain('hello');
    expect(res.content).toContain('oops');
    expect(res.content.endsWith('[exit code: 2]')).toBe(true);
    expect(res.isError).toBe(true);
    expect(commandOutput.text()).toContain('$ echo hello');
    expect(commandOutput.text()).toContain('hello\n');
  });

  it('runs in a cwd inside the workspace only', async () => {
    fs.mkdirSync(path.join(root, 'sub'));
    answer(ALLOW_ONCE);
    const res = await run(call('run_command', { command: 'pwd', cwd: 'sub' }));
    expect(res.content).toContain(path.join(root, 'sub'));
    expect(res.isError).toBe(false);
    const refused = await run(call('run_command', { command: 'pwd', cwd: '..' }));
    expect(refused.content).toMatch(/^Refused/);
  });

  it('deny and dismiss do not run the command', async () => {
    answer(DENY, undefined);
    const marker = path.join(root, 'ran');
    expect(await run(call('run_command', { command: `touch ${marker}` }))).toEqual({ content: DENIED_COMMAND, isError: true });
    expect(await run(call('run_command', { command: `touch ${marker}` }))).toEqual({ content: DENIED_COMMAND, isError: true });
    expect(fs.existsSync(marker)).toBe(false);
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
    window.showWarningMessage.mockImplementationOnce(async () => {
      return ALLOW_ONCE;
    });
    const started = new Promise<void>((resolve) =>
      commandOutput.append.mockImplementation((s: string) => {
        if (s.includes('started')) resolve();
        return commandOutput.lines.push(s);
      }),
    );
    const long = run(call('run_command', { command: 'echo started; sleep 30; echo finished' }), ac2.signal);
    await started;
    ac2.abort();
    const res = await long;
    expect(res.isError).toBe(true);
    expect(res.content).toContain('started');
    expect(res.content).not.toContain('finished');
    expect(res.content).toMatch(/killed by SIGTERM \(cancelled\)/);
  });
});
