// Confinement of tool paths to the workspace: the same rule the daemon uses
// for its own tools (resolved real paths; `..`, absolute paths outside and
// symlinks pointing out are refused).

import * as fs from 'node:fs';
import * as path from 'node:path';

export class OutsideWorkspaceError extends Error {}

function realpathOrSelf(p: string): string {
  try {
    return fs.realpathSync.native(p);
  } catch {
    return path.resolve(p);
  }
}

function isInside(root: string, p: string): boolean {
  const rel = path.relative(root, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * Resolve `p` (relative to `root`, or absolute) to an absolute path inside
 * the workspace. The deepest existing ancestor is resolved through symlinks,
 * so a link inside the workspace that points out of it is refused, and a new
 * file under an existing folder is allowed.
 */
export function resolveInWorkspace(root: string, p: string): string {
  if (typeof p !== 'string' || p.trim() === '') throw new OutsideWorkspaceError('the path is empty');
  if (p.includes('\0')) throw new OutsideWorkspaceError(`${JSON.stringify(p)} is not a valid path`);
  const realRoot = realpathOrSelf(root);
  const lexical = path.resolve(root, p);
  if (!isInside(path.resolve(root), lexical) && !isInside(realRoot, lexical)) {
    throw new OutsideWorkspaceError(`${p} is outside the workspace`);
  }
  // Walk up to the deepest ancestor that exists, resolve it, re-append the rest.
  let existing = lexical;
  const rest: string[] = [];
  while (!fs.existsSync(existing)) {
    const parent = path.dirname(existing);
    if (parent === existing) break;
    rest.unshift(path.basename(existing));
    existing = parent;
  }
  // A dangling symlink "exists" for lstat but not for existsSync; refuse it
  // rather than let a later write follow it out.
  for (let i = 0, cur = existing; i < rest.length; i++) {
    cur = path.join(cur, rest[i]);
    try {
      if (fs.lstatSync(cur).isSymbolicLink()) throw new OutsideWorkspaceError(`${p} is a dangling symlink`);
    } catch (e) {
      if (e instanceof OutsideWorkspaceError) throw e;
    }
  }
  const resolved = path.join(realpathOrSelf(existing), ...rest);
  if (!isInside(realRoot, resolved)) throw new OutsideWorkspaceError(`${p} is outside the workspace`);
  return resolved;
}

/**
 * `resolveInWorkspace` for a multi-root workspace: `roots[0]` is the folder
 * the session works in (relative paths are its), the others are the
 * window's other folders (the session's `additionalDirectories`). An
 * absolute path may be inside any of them, checked as for one root.
 */
export function resolveInRoots(roots: string[], p: string): string {
  if (roots.length <= 1 || typeof p !== 'string' || !path.isAbsolute(p)) return resolveInWorkspace(roots[0], p);
  for (const root of roots) {
    try {
      return resolveInWorkspace(root, p);
    } catch (err) {
      if (!(err instanceof OutsideWorkspaceError)) throw err;
    }
  }
  throw new OutsideWorkspaceError(`${p} is outside the workspace folders`);
}
