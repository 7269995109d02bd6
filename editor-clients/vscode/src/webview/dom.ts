// DOM helpers shared by the chat webview's parts. Text reaches the DOM only
// as textContent: nothing here assigns innerHTML.

import type { WebviewMessage } from '../common/messages';

declare function acquireVsCodeApi(): { postMessage(msg: unknown): void };

const vscodeApi = acquireVsCodeApi();
export const post = (m: WebviewMessage): void => vscodeApi.postMessage(m);

export const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: { class?: string; text?: string; title?: string; data?: Record<string, string> } = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (props.class) e.className = props.class;
  if (props.text !== undefined) e.textContent = props.text;
  if (props.title) e.title = props.title;
  for (const [k, v] of Object.entries(props.data ?? {})) e.dataset[k] = v;
  for (const c of children) e.append(c);
  return e;
}

export function button(label: string, onClick: () => void, props: { class?: string; title?: string; data?: Record<string, string> } = {}): HTMLButtonElement {
  const b = h('button', { ...props, text: label });
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

export const basename = (p: string): string => p.split(/[\\/]/).filter(Boolean).pop() ?? p;

/** A link-looking button that asks the extension to open a file (it checks the path). */
export function fileLink(path: string, label = basename(path)): HTMLButtonElement {
  return button(label, () => post({ type: 'openFile', path }), { class: 'link', title: path, data: { path } });
}

export function clip(s: string, n = 4000): string {
  return s.length > n ? `${s.slice(0, n)}\n… (${s.length - n} more characters)` : s;
}
