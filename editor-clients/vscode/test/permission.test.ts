// What an agent/requestPermission question shows: the daemon's title and
// description, read defensively (the description is an MCP server's text).

import { describe, expect, it } from 'vitest';
import { MAX_DESCRIPTION_CHARS, MAX_DESCRIPTION_LINES, cleanDescription, permissionQuestion } from '../src/protocol/permission';
import type { RequestPermissionParams } from '../src/protocol/types';

const base: RequestPermissionParams = { sessionId: 's', toolCallId: 'c', tool: 'mcp__db__summarize', title: 'db: summarize', arguments: {}, options: [] };

describe('permissionQuestion', () => {
  it('a sampling request is its own question, with its description; a tool keeps its title', () => {
    const sampling = { ...base, kind: 'sampling', title: 'db asks to use the model', description: 'The MCP server asks.\nLast message: hi' };
    expect(permissionQuestion(sampling)).toEqual({ kind: 'sampling', title: 'db asks to use the model', description: 'The MCP server asks.\nLast message: hi' });
    expect(permissionQuestion({ ...base, description: 'Run SQL.' })).toEqual({ title: 'db: summarize', description: 'Run SQL.' });
    // Another kind the daemon may add later reads as a tool's question.
    expect(permissionQuestion({ ...base, kind: 'something-new' })).toEqual({ title: 'db: summarize' });
  });

  it('without a usable title or description: the tool, or the server asking; no description', () => {
    const hostile = { ...base, title: 7, description: ['<b>x</b>'] } as unknown as RequestPermissionParams;
    expect(permissionQuestion(hostile)).toEqual({ title: 'mcp__db__summarize' });
    expect(permissionQuestion({ ...hostile, kind: 'sampling', server: 'db' })).toEqual({ kind: 'sampling', title: 'db asks to use the model' });
    expect(permissionQuestion({ ...hostile, kind: 'sampling' })).toEqual({ kind: 'sampling', title: 'An MCP server asks to use the model' });
    expect(permissionQuestion({ ...base, description: ' \u0007\n ' })).toEqual({ title: 'db: summarize' });
  });
});

describe('cleanDescription', () => {
  it('keeps text as it is, HTML included (the views show it as text)', () => {
    expect(cleanDescription('System prompt: <img src=x onerror="alert(1)">\n\tindented')).toBe('System prompt: <img src=x onerror="alert(1)">\n\tindented');
  });

  it('drops control and direction-override characters and unifies line ends', () => {
    expect(cleanDescription('a\u0000b\u001bc\u009bd\u202ee\u2066f\r\ng\rh')).toBe('abcdef\ng\nh');
  });

  it(`cuts at ${MAX_DESCRIPTION_LINES} lines and ${MAX_DESCRIPTION_CHARS} characters, saying so`, () => {
    const lines = Array.from({ length: 50 }, (_, i) => `line ${i}`).join('\n');
    const cut = cleanDescription(lines);
    expect(cut.split('\n')).toHaveLength(MAX_DESCRIPTION_LINES);
    expect(cut.endsWith(`line ${MAX_DESCRIPTION_LINES - 1}…`)).toBe(true);
    expect(cleanDescription('y'.repeat(MAX_DESCRIPTION_CHARS))).toBe('y'.repeat(MAX_DESCRIPTION_CHARS));
    const long = cleanDescription('y'.repeat(MAX_DESCRIPTION_CHARS + 1));
    expect(long).toBe(`${'y'.repeat(MAX_DESCRIPTION_CHARS)}…`);
  });

  it('never cuts an emoji in half', () => {
    const text = `${'y'.repeat(MAX_DESCRIPTION_CHARS - 1)}\u{1f600}tail`;
    const cut = cleanDescription(text);
    expect(cut).toBe(`${'y'.repeat(MAX_DESCRIPTION_CHARS - 1)}…`);
    expect(cut).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
  });
});
