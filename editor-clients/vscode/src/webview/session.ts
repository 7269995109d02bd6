// The session's state in the panel: the mode and model pickers and the
// context meter (status bar), the plan and the MCP servers (sections). Each
// is hidden until the daemon says it has it, so an older daemon shows no
// control that cannot work.

import type { ChatEvent } from '../common/messages';
import { $, h, post } from './dom';

const modeSelect = $<HTMLSelectElement>('mode');
const modelSelect = $<HTMLSelectElement>('model');
const meter = $<HTMLElement>('context-meter');

modeSelect.addEventListener('change', () => post({ type: 'setMode', mode: modeSelect.value }));
modelSelect.addEventListener('change', () => post({ type: 'setModel', model: modelSelect.value }));

function fill(select: HTMLSelectElement, items: { id: string; name: string; title?: string }[], current: string | undefined): void {
  select.textContent = '';
  for (const it of items) {
    const o = h('option', { text: it.name || it.id, title: it.title ?? '' });
    o.value = it.id;
    select.append(o);
  }
  if (current !== undefined) select.value = current;
}

export function renderSetup(e: Extract<ChatEvent, { type: 'setup' }>): void {
  const { mode, modes, model, models } = e.setup;
  const modeList = Array.isArray(modes) ? modes.filter((m) => m && typeof m.id === 'string') : [];
  modeSelect.hidden = modeList.length === 0;
  fill(
    modeSelect,
    modeList.map((m) => ({ id: m.id, name: m.name, title: m.description })),
    mode,
  );
  modeSelect.title = modeList.find((m) => m.id === mode)?.description ?? 'Mode';
  // A picker with one choice is no choice.
  const modelList = Array.isArray(models) ? models.filter((m) => m && typeof m.id === 'string') : [];
  modelSelect.hidden = modelList.length < 2;
  fill(
    modelSelect,
    modelList.map((m) => ({ id: m.id, name: m.name, title: m.supportsImages ? 'takes images' : '' })),
    model,
  );
}

export function renderContext(e: Extract<ChatEvent, { type: 'context' }>): void {
  if (!(e.window > 0)) {
    meter.hidden = true;
    return;
  }
  const pct = Math.min(100, Math.round((100 * e.tokens) / e.window));
  meter.hidden = false;
  meter.textContent = `context ${pct} %`;
  meter.title = `The conversation takes about ${e.tokens.toLocaleString('en-US')} of the model's ${e.window.toLocaleString('en-US')} tokens; agentd compacts it before it is full.`;
  meter.dataset.level = pct >= 80 ? 'high' : 'normal';
}

export function clearContext(): void {
  meter.hidden = true;
  meter.textContent = '';
}

const STATUS_TEXT: Record<string, string> = { pending: 'pending', in_progress: 'in progress', completed: 'done' };

export function renderPlan(e: Extract<ChatEvent, { type: 'plan' }>): void {
  const section = $<HTMLDetailsElement>('plan');
  const body = $<HTMLElement>('plan-body');
  body.textContent = '';
  section.hidden = e.entries.length === 0;
  const done = e.entries.filter((x) => x.status === 'completed').length;
  $<HTMLElement>('plan-count').textContent = e.entries.length ? `(${done}/${e.entries.length})` : '';
  for (const entry of e.entries) {
    body.append(
      h(
        'li',
        { data: { status: String(entry.status), priority: String(entry.priority) } },
        h('span', { class: 'plan-content', text: String(entry.content) }),
        h('span', { class: 'badge', text: STATUS_TEXT[entry.status] ?? String(entry.status) }),
      ),
    );
  }
}

export function renderMcp(e: Extract<ChatEvent, { type: 'mcp' }>): void {
  const body = $<HTMLElement>('mcp-body');
  body.textContent = '';
  $<HTMLElement>('mcp-count').textContent = `(${e.servers.length})`;
  if (!e.servers.length) {
    body.append(h('p', { class: 'muted', text: 'No MCP servers configured ([mcp_servers.NAME] in the config file).' }));
    return;
  }
  const list = h('ul', { class: 'mcp-list' });
  for (const s of e.servers) {
    const li = h(
      'li',
      { data: { server: s.name, state: s.state } },
      h('strong', { text: s.name }),
      ' ',
      h('span', { class: 'badge', text: s.state }),
      h('span', { class: 'muted', text: ` ${s.transport}, ${s.toolCount} ${s.toolCount === 1 ? 'tool' : 'tools'}` }),
    );
    if (s.lastError) li.append(h('div', { class: 'muted mcp-error', text: s.lastError }));
    list.append(li);
  }
  body.append(list);
}

/** The MCP section exists only when the daemon supports MCP. */
export function showMcp(available: boolean): void {
  $<HTMLElement>('mcp').hidden = !available;
}

$<HTMLElement>('mcp').addEventListener('toggle', () => {
  if ($<HTMLDetailsElement>('mcp').open) post({ type: 'refreshMcp' });
});
