// The chat webview: renders ChatEvents from the extension and posts the
// user's actions back. Model text reaches the DOM only through the markdown
// tree (textContent); nothing here assigns innerHTML.

import type { ChatEvent, WebviewMessage } from '../common/messages';
import type { AgentUpdate, MemoryDoc, SessionInfo } from '../protocol/types';
import { parseMarkdown, toDom } from './markdown';

declare function acquireVsCodeApi(): { postMessage(msg: unknown): void };

const vscode = acquireVsCodeApi();
const post = (m: WebviewMessage): void => vscode.postMessage(m);

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const transcript = $<HTMLElement>('transcript');
const promptBox = $<HTMLTextAreaElement>('prompt');
const sendBtn = $<HTMLButtonElement>('btn-send');
const stopBtn = $<HTMLButtonElement>('btn-stop');
const runState = $<HTMLElement>('run-state');
const notices = $<HTMLElement>('notices');
const daemonState = $<HTMLElement>('daemon-state');

function h<K extends keyof HTMLElementTagNameMap>(
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

const basename = (p: string): string => p.split(/[\\/]/).filter(Boolean).pop() ?? p;

/** A link-looking button that asks the extension to open a file (it checks the path). */
function fileLink(path: string, label = basename(path)): HTMLButtonElement {
  const b = h('button', { class: 'link', text: label, title: path, data: { path } });
  b.type = 'button';
  b.addEventListener('click', () => post({ type: 'openFile', path }));
  return b;
}

// --- turns -----------------------------------------------------------------------

interface ToolCard {
  root: HTMLElement;
  status: HTMLElement;
  result: HTMLElement;
}

class TurnView {
  readonly root: HTMLElement;
  private body: HTMLElement;
  private footer: HTMLElement;
  private usage: HTMLElement;
  private textBlock: { el: HTMLElement; src: string } | undefined;
  private thought: { el: HTMLElement; src: string } | undefined;
  private tools = new Map<string, ToolCard>();
  private pendingRender = new Set<{ el: HTMLElement; src: string }>();
  ended = false;

  constructor(
    readonly id: string,
    prompt: string,
    replay: boolean,
  ) {
    this.root = h('section', { class: 'turn', data: { turnId: id, state: replay ? 'replayed' : 'running' } });
    if (prompt) this.root.append(h('div', { class: 'user-msg', text: prompt }));
    this.body = h('div', { class: 'answer' });
    this.usage = h('div', { class: 'usage muted' });
    this.footer = h('div', { class: 'turn-footer' });
    if (!replay) this.footer.append(h('span', { class: 'spinner', text: 'Working…' }));
    this.root.append(this.body, this.usage, this.footer);
  }

  update(u: AgentUpdate): void {
    switch (u.kind) {
      case 'message_chunk':
        this.thought = undefined;
        if (!this.textBlock) {
          this.textBlock = { el: h('div', { class: 'md' }), src: '' };
          this.body.append(this.textBlock.el);
        }
        this.textBlock.src += u.text;
        this.schedule(this.textBlock);
        break;
      case 'thought_chunk': {
        this.textBlock = undefined;
        if (!this.thought) {
          const details = h('details', { class: 'thought' }, h('summary', { text: 'Thinking' }));
          const content = h('div', { class: 'md thought-body' });
          details.append(content);
          this.body.append(details);
          this.thought = { el: content, src: '' };
        }
        this.thought.src += u.text;
        this.schedule(this.thought);
        break;
      }
      case 'tool_call':
        this.textBlock = undefined;
        this.thought = undefined;
        this.addTool(u);
        break;
      case 'tool_call_update': {
        const card = this.tools.get(u.toolCallId);
        if (!card) break;
        setStatus(card, u.status);
        if (u.content !== undefined) card.result.textContent = clip(u.content);
        break;
      }
      case 'memory':
        this.textBlock = undefined;
        this.body.append(memoryNote(u.docs, u.point, u.tier));
        break;
      case 'usage':
        this.usage.textContent = `Tokens: ${u.inputTokens} in, ${u.outputTokens} out (session total ${u.sessionTotalTokens})`;
        break;
      case 'user_message':
        break;
    }
  }

  toolState(toolCallId: string, state: string, detail?: string): void {
    const card = this.tools.get(toolCallId);
    if (!card) return;
    const labels: Record<string, string> = {
      awaiting_approval: 'awaiting approval',
      running: 'running',
      denied: 'denied',
      done: 'completed',
      failed: 'failed',
    };
    setStatus(card, labels[state] ?? state, state);
    if (detail !== undefined && (state === 'done' || state === 'failed')) card.result.textContent = clip(detail);
  }

  end(e: Extract<ChatEvent, { type: 'turnEnd' }>): void {
    this.ended = true;
    this.flush();
    this.root.dataset.state = e.outcome;
    this.footer.textContent = '';
    if (e.outcome === 'cancelled') {
      this.footer.append(h('span', { class: 'badge cancelled', text: 'Cancelled' }));
      for (const card of this.tools.values()) {
        const s = card.root.dataset.status ?? '';
        if (!['completed', 'failed', 'denied', 'done', 'cancelled'].includes(s)) setStatus(card, 'cancelled');
      }
    } else if (e.outcome === 'error') {
      this.footer.append(h('div', { class: 'error', text: e.message ?? 'The prompt failed.' }));
    } else if (e.message) {
      this.footer.append(h('div', { class: 'warning', text: e.message }));
    }
    if (e.usage && !this.usage.textContent) {
      this.usage.textContent = `Tokens: ${e.usage.inputTokens} in, ${e.usage.outputTokens} out`;
    }
  }

  private addTool(u: Extract<AgentUpdate, { kind: 'tool_call' }>): void {
    const args = u.arguments ?? {};
    const summary =
      typeof args.command === 'string' ? args.command : typeof args.path === 'string' ? args.path : typeof args.query === 'string' ? args.query : '';
    const status = h('span', { class: 'badge' });
    const result = h('pre', { class: 'tool-result' });
    const details = h(
      'details',
      {},
      h('summary', { text: 'Details' }),
      h('div', { class: 'muted', text: 'Arguments' }),
      h('pre', { class: 'tool-args', text: clip(JSON.stringify(args, null, 2)) }),
      h('div', { class: 'muted', text: 'Result' }),
      result,
    );
    const head = h(
      'div',
      { class: 'tool-head' },
      h('span', { class: 'tool-name', text: u.name }),
      h('span', { class: 'tool-summary', text: summary, title: summary }),
      status,
    );
    const root = h('div', { class: 'tool-card', data: { toolCallId: u.toolCallId, executor: u.executor } }, head, details);
    const card = { root, status, result };
    setStatus(card, u.executor === 'client' ? 'pending' : 'running');
    this.tools.set(u.toolCallId, card);
    this.body.append(root);
  }

  // Streaming renders coalesce to one markdown parse per frame.
  private schedule(block: { el: HTMLElement; src: string }): void {
    if (this.pendingRender.size === 0) requestAnimationFrame(() => this.flush());
    this.pendingRender.add(block);
  }

  flush(): void {
    for (const b of this.pendingRender) {
      b.el.textContent = '';
      toDom(document, parseMarkdown(b.src), b.el);
    }
    this.pendingRender.clear();
    if (nearBottom) transcript.scrollTop = transcript.scrollHeight;
  }
}

function setStatus(card: ToolCard, label: string, key = label): void {
  card.status.textContent = label;
  card.root.dataset.status = key;
}

function clip(s: string, n = 4000): string {
  return s.length > n ? `${s.slice(0, n)}\n… (${s.length - n} more characters)` : s;
}

function memoryNote(docs: string[], point: string, tier: string): HTMLElement {
  const n = docs.length;
  const where = point === 'tool_result' ? 'at the tool result' : 'at your question';
  const how = tier === 'model' ? ' (chosen by the model)' : '';
  const note = h('div', { class: 'memory-note', text: `${n} ${n === 1 ? 'memory' : 'memories'} recalled ${where}${how}: ` });
  docs.forEach((p, i) => {
    if (i) note.append(', ');
    note.append(fileLink(p));
  });
  return note;
}

// --- state -------------------------------------------------------------------------

const turns = new Map<string, TurnView>();
let running: TurnView | undefined;
let nearBottom = true;
transcript.addEventListener('scroll', () => {
  nearBottom = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
});

function setRunning(turn: TurnView | undefined): void {
  running = turn;
  stopBtn.disabled = !turn;
  sendBtn.disabled = !!turn;
  runState.textContent = turn ? 'Running…' : '';
  document.body.dataset.running = turn ? 'true' : 'false';
}

function notice(level: string, text: string): void {
  const n = h('div', { class: `notice ${level}`, text });
  const close = h('button', { class: 'icon', text: '×', title: 'Dismiss' });
  close.type = 'button';
  close.addEventListener('click', () => n.remove());
  n.append(close);
  notices.append(n);
  while (notices.childElementCount > 3) notices.firstElementChild?.remove();
}

function renderMemory(e: Extract<ChatEvent, { type: 'memory' }>): void {
  const body = $<HTMLElement>('memory-body');
  const count = $<HTMLElement>('memory-count');
  body.textContent = '';
  if (!e.available) {
    count.textContent = '';
    body.append(h('p', { class: 'muted', text: e.message ?? 'Memory is not available.' }));
    return;
  }
  count.textContent = `(${e.docs.length})`;
  const open = h('button', { class: 'link', text: 'Open memory folder', title: e.directory });
  open.type = 'button';
  open.addEventListener('click', () => post({ type: 'openMemoryFolder' }));
  if (e.docs.length === 0) body.append(h('p', { class: 'muted', text: 'No memories yet for this project.' }));
  const list = h('ul', { class: 'memory-list' });
  for (const d of e.docs as MemoryDoc[]) {
    list.append(
      h('li', {}, fileLink(d.path, d.name || basename(d.path)), h('span', { class: 'badge', text: d.type }), h('div', { class: 'muted', text: d.description })),
    );
  }
  body.append(list, open);
}

function renderSessions(sessions: SessionInfo[]): void {
  // The extension shows a quick pick; nothing to render here yet.
  void sessions;
}

function handle(e: ChatEvent): void {
  switch (e.type) {
    case 'turnStart': {
      const t = new TurnView(e.turnId, e.prompt, !!e.replay);
      turns.set(e.turnId, t);
      transcript.append(t.root);
      if (!e.replay) setRunning(t);
      nearBottom = true;
      transcript.scrollTop = transcript.scrollHeight;
      break;
    }
    case 'update':
      turns.get(e.turnId)?.update(e.update);
      break;
    case 'toolState':
      turns.get(e.turnId)?.toolState(e.toolCallId, e.state, e.detail);
      break;
    case 'turnEnd': {
      const t = turns.get(e.turnId);
      t?.end(e);
      if (running && running === t) setRunning(undefined);
      break;
    }
    case 'cleared':
      turns.clear();
      transcript.textContent = '';
      setRunning(undefined);
      break;
    case 'session':
      break;
    case 'notice':
      notice(e.level, e.text);
      break;
    case 'memory':
      renderMemory(e);
      break;
    case 'sessions':
      renderSessions(e.sessions);
      break;
    case 'daemon': {
      daemonState.dataset.state = e.state;
      daemonState.textContent = e.state === 'ready' ? 'agentd ready' : e.state === 'starting' ? 'starting…' : e.state;
      daemonState.title = e.message ?? '';
      if ((e.state === 'failed' || e.state === 'stopped') && e.message) {
        notice('error', e.message);
        const restart = h('button', { class: 'link', text: 'Restart agentd' });
        restart.type = 'button';
        restart.addEventListener('click', () => post({ type: 'restart' }));
        notices.lastElementChild?.append(' ', restart);
      }
      break;
    }
  }
}

window.addEventListener('message', (ev: MessageEvent) => {
  const data = ev.data as ChatEvent | ChatEvent[] | undefined;
  if (!data) return;
  for (const e of Array.isArray(data) ? data : [data]) {
    if (e && typeof e === 'object' && typeof e.type === 'string') handle(e);
  }
});

// --- actions ----------------------------------------------------------------------

function send(): void {
  const text = promptBox.value.trim();
  if (!text || running) return;
  post({ type: 'prompt', text });
  promptBox.value = '';
}

$<HTMLFormElement>('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  send();
});
promptBox.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    send();
  }
});
stopBtn.addEventListener('click', () => {
  const turn = running;
  if (!turn) return;
  post({ type: 'cancel' });
  // Shown as cancelled at once; the extension confirms with its own turnEnd.
  turn.end({ type: 'turnEnd', turnId: turn.id, outcome: 'cancelled' });
  setRunning(undefined);
});
$<HTMLButtonElement>('btn-new').addEventListener('click', () => post({ type: 'newSession' }));
$<HTMLButtonElement>('btn-reset').addEventListener('click', () => post({ type: 'reset' }));
$<HTMLButtonElement>('btn-sessions').addEventListener('click', () => post({ type: 'switchSession' }));
$<HTMLElement>('memory').addEventListener('toggle', () => {
  if (($<HTMLDetailsElement>('memory')).open) post({ type: 'refreshMemory' });
});

setRunning(undefined);
post({ type: 'ready' });
