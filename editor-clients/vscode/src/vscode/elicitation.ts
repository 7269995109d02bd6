// agent/elicit in VS Code's own dialogs: an MCP server's question to the
// user in the middle of a tool call (docs/protocol.md). A form is asked one
// property at a time (a quick pick for choices and booleans, an input box
// checked against the schema for text and numbers); a URL is a modal Open /
// Decline before the browser opens it. Dismissing any step, or the daemon
// withdrawing the request, answers `cancel`; a request this client cannot
// read answers `decline`. Never throws: the daemon checks the answer against
// the schema again, and a mismatch is a `decline` for the server anyway.

import * as vscode from 'vscode';
import type { ElicitParams, ElicitProperty, ElicitResult } from '../protocol/types';

const CANCEL: ElicitResult = { action: 'cancel' };
const DECLINE: ElicitResult = { action: 'decline' };

/** A choice of a quick pick, with the value it stands for. */
interface Choice extends vscode.QuickPickItem {
  value: unknown;
}

export async function askElicitation(p: ElicitParams, signal: AbortSignal): Promise<ElicitResult> {
  try {
    if (signal.aborted) return CANCEL;
    const source = new vscode.CancellationTokenSource();
    const onAbort = () => source.cancel();
    signal.addEventListener('abort', onAbort);
    try {
      const result = p.mode === 'url' ? await askUrl(p, source.token) : p.mode === 'form' ? await askForm(p, source.token) : DECLINE;
      return signal.aborted ? CANCEL : result;
    } finally {
      signal.removeEventListener('abort', onAbort);
      source.dispose();
    }
  } catch {
    return DECLINE;
  }
}

async function askUrl(p: Extract<ElicitParams, { mode: 'url' }>, token: vscode.CancellationToken): Promise<ElicitResult> {
  let uri: vscode.Uri;
  try {
    if (typeof p.url !== 'string' || !/^https?:\/\//i.test(p.url)) return DECLINE;
    uri = vscode.Uri.parse(p.url, true);
  } catch {
    return DECLINE;
  }
  // A modal cannot be closed from code: a withdrawn request is answered
  // `cancel` by the caller, and a late click opens nothing.
  const detail = `${typeof p.message === 'string' ? p.message : ''}\n\n${p.url}`.trim();
  const choice = await vscode.window.showInformationMessage(`${serverName(p)} asks you to open a page`, { modal: true, detail }, 'Open', 'Decline');
  if (token.isCancellationRequested || choice === undefined) return CANCEL;
  if (choice !== 'Open') return DECLINE;
  await vscode.env.openExternal(uri);
  return { action: 'accept' };
}

async function askForm(p: Extract<ElicitParams, { mode: 'form' }>, token: vscode.CancellationToken): Promise<ElicitResult> {
  const schema = p.requestedSchema;
  const properties = schema && typeof schema === 'object' ? schema.properties : undefined;
  if (!properties || typeof properties !== 'object' || Array.isArray(properties)) return DECLINE;
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r) => typeof r === 'string') : []);
  const names = Object.keys(properties);
  const content: Record<string, unknown> = {};
  for (const [i, name] of names.entries()) {
    const prop = properties[name];
    if (!prop || typeof prop !== 'object') return DECLINE;
    const title = `${serverName(p)}: ${typeof p.message === 'string' ? p.message : ''} (${i + 1}/${names.length})`;
    const answer = await askProperty(name, prop, required.has(name), title, token);
    if (answer === undefined || token.isCancellationRequested) return CANCEL;
    if (answer === null) return DECLINE;
    if (answer.skipped) continue;
    content[name] = answer.value;
  }
  return { action: 'accept', content };
}

/** undefined: dismissed; null: a property this client cannot ask; else the value (or skipped, when optional). */
async function askProperty(
  name: string,
  prop: ElicitProperty,
  required: boolean,
  title: string,
  token: vscode.CancellationToken,
): Promise<{ value?: unknown; skipped?: boolean } | null | undefined> {
  const label = typeof prop.title === 'string' && prop.title ? prop.title : name;
  const placeHolder = `${label}${typeof prop.description === 'string' ? ` - ${prop.description}` : ''}${required ? '' : ' (optional)'}`;
  const skip: Choice[] = required ? [] : [{ label: '(skip)', value: SKIP }];
  const choices = choicesOf(prop);
  if (prop.type === 'array') {
    const items = prop.items && typeof prop.items === 'object' ? choicesOf(prop.items as ElicitProperty) : undefined;
    if (!items) return null;
    const picked = await vscode.window.showQuickPick(items, { title, placeHolder, canPickMany: true, ignoreFocusOut: true }, token);
    return picked === undefined ? undefined : { value: picked.map((c) => c.value) };
  }
  if (prop.type === 'boolean' || choices) {
    const items: Choice[] = choices ?? [
      { label: 'Yes', value: true },
      { label: 'No', value: false },
    ];
    const picked = await vscode.window.showQuickPick([...items, ...skip], { title, placeHolder, ignoreFocusOut: true }, token);
    if (picked === undefined) return undefined;
    return picked.value === SKIP ? { skipped: true } : { value: picked.value };
  }
  if (prop.type !== 'string' && prop.type !== 'number' && prop.type !== 'integer') return null;
  const value = typeof prop.default === 'string' || typeof prop.default === 'number' ? String(prop.default) : undefined;
  const text = await vscode.window.showInputBox({ title, prompt: placeHolder, value, ignoreFocusOut: true, validateInput: (v) => problemWith(v, prop, required) }, token);
  if (text === undefined) return undefined;
  if (text === '' && !required) return { skipped: true };
  return { value: prop.type === 'string' ? text : Number(text.trim()) };
}

const SKIP = Symbol('skip');

/** The choices of a string property (`enum`, with `enumNames`, or `oneOf` / `anyOf` of `{const, title}`); undefined when it has none. */
function choicesOf(prop: ElicitProperty & { anyOf?: { const?: unknown; title?: unknown }[] }): Choice[] | undefined {
  if (Array.isArray(prop.enum)) {
    const names = Array.isArray(prop.enumNames) ? prop.enumNames : [];
    return prop.enum.map((v, i) => ({ label: typeof names[i] === 'string' ? (names[i] as string) : String(v), value: v }));
  }
  const options = Array.isArray(prop.oneOf) ? prop.oneOf : Array.isArray(prop.anyOf) ? prop.anyOf : undefined;
  if (!options) return undefined;
  return options.filter((o) => o && typeof o === 'object' && 'const' in o).map((o) => ({ label: typeof o.title === 'string' ? o.title : String(o.const), value: o.const }));
}

/** What is wrong with `text` for the property (the input box shows it), or undefined. */
export function problemWith(text: string, prop: ElicitProperty, required: boolean): string | undefined {
  if (text === '') return required ? 'A value is required.' : undefined;
  if (prop.type === 'string') {
    const n = [...text].length;
    if (typeof prop.minLength === 'number' && n < prop.minLength) return `At least ${prop.minLength} characters.`;
    if (typeof prop.maxLength === 'number' && n > prop.maxLength) return `At most ${prop.maxLength} characters.`;
    return undefined;
  }
  const trimmed = text.trim();
  const value = Number(trimmed);
  if (trimmed === '' || !Number.isFinite(value)) return 'A number is required.';
  if (prop.type === 'integer' && !Number.isInteger(value)) return 'A whole number is required.';
  if (typeof prop.minimum === 'number' && value < prop.minimum) return `At least ${prop.minimum}.`;
  if (typeof prop.maximum === 'number' && value > prop.maximum) return `At most ${prop.maximum}.`;
  return undefined;
}

function serverName(p: ElicitParams): string {
  return typeof p.server === 'string' && p.server ? p.server : 'An MCP server';
}
