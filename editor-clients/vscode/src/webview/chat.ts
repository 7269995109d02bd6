// The chat webview: renders ChatEvents from the extension and posts the
// user's actions back. Model text reaches the DOM only through the markdown
// tree (textContent); nothing here assigns innerHTML.
//
// Layout: a status bar (the daemon's state; later issues add more status
// items there), the memory section, the transcript of turns (turn.ts), the
// notices and the composer. Session actions (New, Sessions, Reset) live in
// the view's title bar, contributed by package.json, not in the page.

import type { ChatEvent } from '../common/messages';
import type { MemoryDoc } from '../protocol/types';
import { commandKey, setFeatures, takeImages } from './composer';
import { $, basename, button, fileLink, h, post } from './dom';
import { clearContext, renderContext, renderMcp, renderPlan, renderSetup, showMcp } from './session';
import { TurnView, compactionDivider } from './turn';

const transcript = $<HTMLElement>('transcript');
const promptBox = $<HTMLTextAreaElement>('prompt');
const sendBtn = $<HTMLButtonElement>('btn-send');
const stopBtn = $<HTMLButtonElement>('btn-stop');
const runState = $<HTMLElement>('run-state');
const notices = $<HTMLElement>('notices');
const daemonState = $<HTMLElement>('daemon-state');

// --- state -------------------------------------------------------------------------

const turns = new Map<string, TurnView>();
let running: TurnView | undefined;
let nearBottom = true;
transcript.addEventListener('scroll', () => {
  nearBottom = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
});
/** Keeps the newest text in view while the user has not scrolled up. */
function followBottom(): void {
  if (nearBottom) transcript.scrollTop = transcript.scrollHeight;
}

function setRunning(turn: TurnView | undefined): void {
  running = turn;
  stopBtn.disabled = !turn;
  sendBtn.disabled = !!turn;
  runState.textContent = turn ? 'Running…' : '';
  document.body.dataset.running = turn ? 'true' : 'false';
}

/** `scope: 'daemon'` marks notices about the daemon being unavailable: they go when it is ready again. */
function notice(level: string, text: string, scope?: string): HTMLElement {
  const n = h('div', { class: `notice ${level}`, text, data: scope ? { scope } : {} });
  n.append(button('×', () => n.remove(), { class: 'icon', title: 'Dismiss' }));
  notices.append(n);
  while (notices.childElementCount > 3) notices.firstElementChild?.remove();
  return n;
}

function clearDaemonNotices(): void {
  for (const n of notices.querySelectorAll('[data-scope="daemon"]')) n.remove();
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
  const open = button('Open memory folder', () => post({ type: 'openMemoryFolder' }), { class: 'link', title: e.directory });
  if (e.docs.length === 0) body.append(h('p', { class: 'muted', text: 'No memories yet for this project.' }));
  const list = h('ul', { class: 'memory-list' });
  for (const d of e.docs as MemoryDoc[]) {
    list.append(
      h('li', {}, fileLink(d.path, d.name || basename(d.path)), h('span', { class: 'badge', text: d.type }), h('div', { class: 'muted', text: d.description })),
    );
  }
  body.append(list, open);
}

function handle(e: ChatEvent): void {
  switch (e.type) {
    case 'turnStart': {
      const t = new TurnView(e.turnId, e.prompt, !!e.replay, followBottom);
      if (e.images?.length) t.addImages(e.images);
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
      turns.get(e.turnId)?.toolState(e.toolCallId, e.state, e.detail, e.review);
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
      clearContext();
      break;
    case 'features':
      setFeatures(e.commands, e.images, (text) => notice('warning', text));
      showMcp(e.mcp);
      break;
    case 'setup':
      renderSetup(e);
      break;
    case 'plan':
      renderPlan(e);
      break;
    case 'context':
      renderContext(e);
      break;
    case 'mcp':
      renderMcp(e);
      break;
    case 'permission':
      turns.get(e.turnId)?.permission(e);
      break;
    case 'compaction': {
      // A compaction's later statuses replace its "started" line; one that a
      // running prompt waits for goes inside that turn, where it happened.
      const started = [...transcript.querySelectorAll<HTMLElement>('.compaction[data-status="started"]')].pop();
      const divider = compactionDivider(e.update);
      if (started) started.replaceWith(divider);
      else if (running && !e.replay) running.append(divider);
      else transcript.append(divider);
      followBottom();
      break;
    }
    case 'session':
      break;
    case 'notice':
      notice(e.level, e.text, e.scope);
      break;
    case 'memory':
      renderMemory(e);
      break;
    case 'sessions':
      // The extension shows a quick pick; nothing to render here.
      break;
    case 'daemon': {
      daemonState.dataset.state = e.state;
      daemonState.textContent = e.state === 'ready' ? 'agentd ready' : e.state === 'starting' ? 'starting…' : e.state;
      daemonState.title = e.message ?? '';
      // What was said about the daemon being down no longer holds once it is back.
      if (e.state === 'ready' || e.state === 'starting') clearDaemonNotices();
      if ((e.state === 'failed' || e.state === 'stopped') && e.message) {
        const n = notice('error', e.message, 'daemon');
        n.insertBefore(button('Restart agentd', () => post({ type: 'restart' }), { class: 'link' }), n.lastElementChild);
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
  if (running) return;
  const images = takeImages();
  if (!text && !images.length) return;
  post({ type: 'prompt', text, ...(images.length ? { images } : {}) });
  promptBox.value = '';
  promptBox.dispatchEvent(new Event('input'));
}

$<HTMLFormElement>('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  send();
});
promptBox.addEventListener('keydown', (ev) => {
  if (!ev.isComposing && commandKey(ev)) {
    ev.preventDefault();
    return;
  }
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
$<HTMLElement>('memory').addEventListener('toggle', () => {
  if (($<HTMLDetailsElement>('memory')).open) post({ type: 'refreshMemory' });
});

setRunning(undefined);
post({ type: 'ready' });
