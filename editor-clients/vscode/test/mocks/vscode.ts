// A small in-memory stand-in for the `vscode` module (VS Code cannot be
// downloaded here). It behaves like the editor where the extension depends on
// it: documents are buffers over the real file system with a dirty flag and
// an undo stack, WorkspaceEdits apply to them, dialogs answer from vi.fn()
// mocks the tests program, commands are a registry.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { vi } from 'vitest';

export class Disposable {
  constructor(private readonly fn: () => void = () => {}) {}
  static from(...ds: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => ds.forEach((d) => d.dispose()));
  }
  dispose(): void {
    this.fn();
  }
}

export class EventEmitter<T> {
  private listeners = new Set<(e: T) => unknown>();
  event = (listener: (e: T) => unknown): Disposable => {
    this.listeners.add(listener);
    return new Disposable(() => this.listeners.delete(listener));
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) l(e);
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class ThemeIcon {
  constructor(readonly id: string) {}
}

/**
 * `window.createQuickPick`, answered through the `window.showQuickPick` mock
 * so that tests queue answers the same way for both: an item (accepted),
 * `{ item, button }` (one of the item's buttons pressed), or undefined
 * (dismissed).
 */
function quickPick(): Record<string, unknown> {
  const accepted = new EventEmitter<void>();
  const pressed = new EventEmitter<{ item: unknown; button: unknown }>();
  const hidden = new EventEmitter<void>();
  const qp = {
    items: [] as unknown[],
    placeholder: '',
    selectedItems: [] as unknown[],
    onDidAccept: accepted.event,
    onDidTriggerItemButton: pressed.event,
    onDidHide: hidden.event,
    show(): void {
      void window.showQuickPick(qp.items, { placeHolder: qp.placeholder }).then((answer) => {
        if (answer && typeof answer === 'object' && 'button' in answer) {
          pressed.fire(answer as { item: unknown; button: unknown });
        } else if (answer) {
          qp.selectedItems = [answer];
          accepted.fire();
        } else qp.hide();
      });
    },
    hide(): void {
      hidden.fire();
    },
    dispose(): void {},
  };
  return qp;
}

/** `CancellationTokenSource`: the token dialogs take; cancelling it closes them (the dialog mocks read it). */
export class CancellationTokenSource {
  private readonly cancelled = new EventEmitter<void>();
  private isCancelled = false;
  readonly token: { readonly isCancellationRequested: boolean; onCancellationRequested: EventEmitter<void>['event'] };
  constructor() {
    const state = () => this.isCancelled;
    this.token = {
      get isCancellationRequested(): boolean {
        return state();
      },
      onCancellationRequested: this.cancelled.event,
    };
  }
  cancel(): void {
    if (this.isCancelled) return;
    this.isCancelled = true;
    this.cancelled.fire();
  }
  dispose(): void {
    this.cancelled.dispose();
  }
}

export class Uri {
  constructor(
    readonly scheme: string,
    readonly fsPath: string,
    readonly query = '',
  ) {}
  static file(p: string): Uri {
    return new Uri('file', path.resolve(p));
  }
  /** Keeps the text it was parsed from (what `openExternal` is given). */
  static parse(text: string, _strict?: boolean): Uri {
    const u = new URL(text);
    const uri = new Uri(u.protocol.slice(0, -1), u.pathname, u.search.slice(1));
    uri.toString = () => text;
    return uri;
  }
  static from(c: { scheme: string; path: string; query?: string }): Uri {
    return new Uri(c.scheme, c.path, c.query ?? '');
  }
  static joinPath(base: Uri, ...parts: string[]): Uri {
    return new Uri(base.scheme, path.join(base.fsPath, ...parts));
  }
  get path(): string {
    return this.fsPath;
  }
  toString(): string {
    return `${this.scheme}://${this.fsPath}${this.query ? `?${this.query}` : ''}`;
  }
}

export enum LogLevel {
  Off = 0,
  Trace = 1,
  Debug = 2,
  Info = 3,
  Warning = 4,
  Error = 5,
}

export class TabInputTextDiff {
  constructor(
    readonly original: Uri,
    readonly modified: Uri,
  ) {}
}

/** A tab per `vscode.diff` call, so tests can see which diffs are open and closed. */
const tabs: { input: TabInputTextDiff; label: string }[] = [];
const contentProviders = new Map<string, { provideTextDocumentContent(uri: Uri): string }>();
const configListeners = new Set<(e: { affectsConfiguration(k: string): boolean }) => void>();

/** A terminal as the extension sees it; the test plays the shell through `shell`. */
export class MockTerminal {
  shellIntegration: unknown = undefined;
  disposed = false;
  shown = 0;
  readonly sent: string[] = [];
  /** What a pseudo-terminal wrote, from its creation on. */
  output = '';
  constructor(readonly options: { name?: string; cwd?: string; pty?: { open(): void; onDidWrite(l: (s: string) => void): unknown } }) {
    options.pty?.onDidWrite((s) => (this.output += s));
  }
  show(): void {
    this.shown++;
  }
  sendText(text: string): void {
    this.sent.push(text);
  }
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    terminalEvents.close.fire(this);
  }
}
const terminals: MockTerminal[] = [];

export enum FileType {
  Unknown = 0,
  File = 1,
  Directory = 2,
  SymbolicLink = 64,
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

type EditOp =
  | { op: 'replace'; uri: Uri; range: Range; text: string }
  | { op: 'insert'; uri: Uri; pos: Position; text: string }
  | { op: 'createFile'; uri: Uri; options?: { overwrite?: boolean; ignoreIfExists?: boolean } };

export class WorkspaceEdit {
  readonly ops: EditOp[] = [];
  replace(uri: Uri, range: Range, text: string): void {
    this.ops.push({ op: 'replace', uri, range, text });
  }
  insert(uri: Uri, pos: Position, text: string): void {
    this.ops.push({ op: 'insert', uri, pos, text });
  }
  createFile(uri: Uri, options?: { overwrite?: boolean; ignoreIfExists?: boolean }): void {
    this.ops.push({ op: 'createFile', uri, options });
  }
}

export class FileSystemError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
  static FileNotFound(uri?: Uri): FileSystemError {
    return new FileSystemError(`file not found: ${uri?.fsPath}`, 'FileNotFound');
  }
}

export class MockTextDocument {
  isDirty = false;
  readonly isUntitled: boolean;
  readonly undoStack: string[] = [];
  saves = 0;
  constructor(
    readonly uri: Uri,
    public text: string,
    readonly languageId = 'plaintext',
  ) {
    this.isUntitled = uri.scheme === 'untitled';
  }
  getText(): string {
    return this.text;
  }
  get lineCount(): number {
    return this.text.split('\n').length;
  }
  positionAt(offset: number): Position {
    const before = this.text.slice(0, Math.max(0, Math.min(offset, this.text.length)));
    const lines = before.split('\n');
    return new Position(lines.length - 1, lines[lines.length - 1].length);
  }
  offsetAt(pos: Position): number {
    const lines = this.text.split('\n');
    let off = 0;
    for (let i = 0; i < pos.line; i++) off += lines[i].length + 1;
    return off + pos.character;
  }
  async save(): Promise<boolean> {
    fs.writeFileSync(this.uri.fsPath, this.text);
    this.isDirty = false;
    this.saves++;
    return true;
  }
  /** What Ctrl+Z would do: restore the text before the last applied edit. */
  undo(): void {
    const prev = this.undoStack.pop();
    if (prev !== undefined) {
      this.text = prev;
      this.isDirty = true;
    }
  }
}

const documents = new Map<string, MockTextDocument>();

function docFor(uri: Uri): MockTextDocument {
  let doc = documents.get(uri.fsPath);
  if (!doc) {
    if (!fs.existsSync(uri.fsPath)) throw FileSystemError.FileNotFound(uri);
    doc = new MockTextDocument(uri, fs.readFileSync(uri.fsPath, 'utf8'));
    documents.set(uri.fsPath, doc);
  }
  return doc;
}

const configuration = new Map<string, unknown>();
const commandRegistry = new Map<string, (...args: unknown[]) => unknown>();

export const workspace = {
  workspaceFolders: undefined as { uri: Uri; name: string; index: number }[] | undefined,
  registerTextDocumentContentProvider: vi.fn((scheme: string, provider: { provideTextDocumentContent(uri: Uri): string }) => {
    contentProviders.set(scheme, provider);
    return new Disposable(() => contentProviders.delete(scheme));
  }),
  get textDocuments(): MockTextDocument[] {
    return [...documents.values()];
  },
  fs: {
    readFile: vi.fn(async (uri: Uri) => {
      try {
        return new Uint8Array(fs.readFileSync(uri.fsPath));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw FileSystemError.FileNotFound(uri);
        throw e;
      }
    }),
    stat: vi.fn(async (uri: Uri) => {
      try {
        const st = fs.statSync(uri.fsPath);
        return { type: st.isDirectory() ? 2 : 1, size: st.size, ctime: st.ctimeMs, mtime: st.mtimeMs };
      } catch {
        throw FileSystemError.FileNotFound(uri);
      }
    }),
    createDirectory: vi.fn(async (uri: Uri) => {
      fs.mkdirSync(uri.fsPath, { recursive: true });
    }),
  },
  openTextDocument: vi.fn(async (arg: Uri | { language?: string; content?: string }) => {
    if (arg instanceof Uri) return docFor(arg);
    const doc = new MockTextDocument(new Uri('untitled', `/untitled-${documents.size}`), arg.content ?? '', arg.language);
    return doc;
  }),
  applyEdit: vi.fn(async (edit: WorkspaceEdit) => {
    for (const op of edit.ops) {
      if (op.op === 'createFile') {
        const exists = fs.existsSync(op.uri.fsPath);
        if (exists && !op.options?.overwrite && !op.options?.ignoreIfExists) return false;
        if (!exists || op.options?.overwrite) {
          fs.mkdirSync(path.dirname(op.uri.fsPath), { recursive: true });
          fs.writeFileSync(op.uri.fsPath, '');
          documents.delete(op.uri.fsPath);
        }
        continue;
      }
      const doc = docFor(op.uri);
      const start = doc.offsetAt(op.op === 'replace' ? op.range.start : op.pos);
      const end = op.op === 'replace' ? doc.offsetAt(op.range.end) : start;
      doc.undoStack.push(doc.text);
      doc.text = doc.text.slice(0, start) + op.text + doc.text.slice(end);
      doc.isDirty = true;
    }
    return true;
  }),
  getConfiguration: vi.fn((section?: string) => ({
    get: <T>(key: string, dflt?: T): T | undefined => {
      const full = section ? `${section}.${key}` : key;
      return (configuration.has(full) ? configuration.get(full) : dflt) as T | undefined;
    },
  })),
  onDidChangeConfiguration: vi.fn((l: (e: { affectsConfiguration(k: string): boolean }) => void) => {
    configListeners.add(l);
    return new Disposable(() => configListeners.delete(l));
  }),
};

function outputChannel(name: string) {
  const lines: string[] = [];
  return {
    name,
    lines,
    append: vi.fn((s: string) => lines.push(s)),
    appendLine: vi.fn((s: string) => lines.push(s + '\n')),
    show: vi.fn(),
    clear: vi.fn(),
    dispose: vi.fn(),
    trace: vi.fn(),
    debug: vi.fn(),
    info: vi.fn(),
    warn: vi.fn(),
    error: vi.fn(),
    text: () => lines.join(''),
  };
}

const terminalEvents = {
  integration: new EventEmitter<{ terminal: MockTerminal; shellIntegration: unknown }>(),
  end: new EventEmitter<{ terminal: MockTerminal; execution: unknown; exitCode: number | undefined }>(),
  close: new EventEmitter<MockTerminal>(),
};

export const window = {
  tabGroups: {
    get all() {
      return [{ tabs: [...tabs] }];
    },
    close: vi.fn(async (t: unknown) => {
      for (const tab of Array.isArray(t) ? t : [t]) {
        const i = tabs.indexOf(tab as (typeof tabs)[number]);
        if (i >= 0) tabs.splice(i, 1);
      }
      return true;
    }),
  },
  createTerminal: vi.fn((options: ConstructorParameters<typeof MockTerminal>[0]) => {
    const t = new MockTerminal(options);
    terminals.push(t);
    // VS Code opens an extension's pseudo-terminal once it is created.
    if (options.pty) queueMicrotask(() => options.pty!.open());
    return t;
  }),
  onDidChangeTerminalShellIntegration: terminalEvents.integration.event,
  onDidEndTerminalShellExecution: terminalEvents.end.event,
  onDidCloseTerminal: terminalEvents.close.event,
  showWarningMessage: vi.fn(async (..._args: unknown[]): Promise<unknown> => undefined),
  showErrorMessage: vi.fn(async (..._args: unknown[]): Promise<string | undefined> => undefined),
  showInformationMessage: vi.fn(async (..._args: unknown[]): Promise<string | undefined> => undefined),
  showQuickPick: vi.fn(async (..._args: unknown[]): Promise<unknown> => undefined),
  createQuickPick: vi.fn(() => quickPick()),
  showTextDocument: vi.fn(async (doc: unknown, _options?: unknown) => doc),
  showInputBox: vi.fn(async (_options?: unknown): Promise<string | undefined> => undefined),
  createOutputChannel: vi.fn((name: string) => outputChannel(name)),
  registerWebviewViewProvider: vi.fn(() => new Disposable()),
};

export const commands = {
  registerCommand: vi.fn((id: string, fn: (...args: unknown[]) => unknown) => {
    commandRegistry.set(id, fn);
    return new Disposable(() => commandRegistry.delete(id));
  }),
  executeCommand: vi.fn(async (id: string, ...args: unknown[]) => {
    if (id === 'vscode.diff') {
      tabs.push({ input: new TabInputTextDiff(args[0] as Uri, args[1] as Uri), label: args[2] as string });
      return undefined;
    }
    return commandRegistry.get(id)?.(...args);
  }),
};

export const chat = {
  createChatParticipant: vi.fn((id: string, handler: (...args: any[]) => unknown) => ({ id, handler, iconPath: undefined as unknown, dispose: vi.fn() })),
};

export const env = { openExternal: vi.fn(async () => true) };

/** Test helpers (not part of the real API). */
export const __mock = {
  documents,
  configuration,
  commandRegistry,
  outputChannel,
  tabs,
  terminals,
  terminalEvents,
  /** The text a registered content provider serves for `uri` (what the diff's right side shows). */
  content(uri: Uri): string | undefined {
    return contentProviders.get(uri.scheme)?.provideTextDocumentContent(uri);
  },
  /** Change a setting as the Settings UI would, firing onDidChangeConfiguration. */
  setConfiguration(key: string, value: unknown): void {
    configuration.set(key, value);
    for (const l of [...configListeners]) l({ affectsConfiguration: (k: string) => key === k || key.startsWith(`${k}.`) });
  },
  /** Open a file as an editor buffer, optionally with unsaved text. */
  openBuffer(p: string, unsaved?: string): MockTextDocument {
    const doc = docFor(Uri.file(p));
    if (unsaved !== undefined) {
      doc.text = unsaved;
      doc.isDirty = true;
    }
    return doc;
  },
  reset(): void {
    documents.clear();
    configuration.clear();
    commandRegistry.clear();
    tabs.length = 0;
    terminals.length = 0;
    workspace.workspaceFolders = undefined;
    vi.clearAllMocks();
    // Answers a test queued but did not use must not leak into the next test.
    for (const m of [window.showWarningMessage, window.showErrorMessage, window.showInformationMessage, window.showQuickPick, window.showInputBox]) m.mockReset();
    window.showWarningMessage.mockImplementation(async () => undefined);
    window.showErrorMessage.mockImplementation(async () => undefined);
    window.showInformationMessage.mockImplementation(async () => undefined);
    window.showQuickPick.mockImplementation(async () => undefined);
    window.showInputBox.mockImplementation(async () => undefined);
  },
};
