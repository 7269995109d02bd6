// What an agent/requestPermission question shows the user, read from the
// daemon's params: the title, the daemon's `description` (the tool's, or
// for an MCP server's sampling request the preview of what it sends the
// model) and whether it is such a request. The daemon's text is a server's
// text: it is cut and cleaned here, and the views show it as text only.

import type { RequestPermissionParams } from './types';

/** A dialog's `detail` and a card stay readable; the daemon's sampling preview (two 300-character parts) fits whole. */
export const MAX_DESCRIPTION_CHARS = 1200;
export const MAX_DESCRIPTION_LINES = 20;

export interface PermissionQuestion {
  /** The daemon's title ("db: query", "db asks to use the model"). */
  title: string;
  /** The daemon's description, cleaned and cut; absent when it sent none. */
  description?: string;
  /** `sampling`: an MCP server asks to use the model, and the title is the question itself. */
  kind?: 'sampling';
}

export function permissionQuestion(p: RequestPermissionParams): PermissionQuestion {
  const sampling = p.kind === 'sampling';
  const server = typeof p.server === 'string' && p.server ? p.server : 'An MCP server';
  const fallback = sampling ? `${server} asks to use the model` : String(p.tool ?? 'a tool');
  const title = typeof p.title === 'string' && p.title ? p.title : fallback;
  const description = typeof p.description === 'string' ? cleanDescription(p.description) : '';
  return { title, ...(description ? { description } : {}), ...(sampling ? { kind: 'sampling' } : {}) };
}

// Control characters other than newline and tab, and the bidirectional
// overrides and isolates, which can make a server's text read as something
// else in the dialog (the text is shown, never interpreted).
const UNSHOWN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** The description as shown: line ends unified, unshowable characters dropped, at most the limits above. */
export function cleanDescription(text: string): string {
  let out = text.replace(/\r\n?/g, '\n').replace(UNSHOWN, '').trim();
  const lines = out.split('\n');
  let cut = false;
  if (lines.length > MAX_DESCRIPTION_LINES) {
    out = lines.slice(0, MAX_DESCRIPTION_LINES).join('\n');
    cut = true;
  }
  if (out.length > MAX_DESCRIPTION_CHARS) {
    let end = MAX_DESCRIPTION_CHARS;
    // Never half of a surrogate pair (an emoji).
    const code = out.charCodeAt(end - 1);
    if (code >= 0xd800 && code <= 0xdbff) end -= 1;
    out = out.slice(0, end);
    cut = true;
  }
  return cut ? `${out.trimEnd()}…` : out;
}
