// One turn of the chat: the user's prompt, the streamed answer (markdown),
// thoughts, tool cards, memory deliveries, the token line and how it ended.
// Live and replayed turns render through the same code, so a restored
// session looks as it did.

import { isPromptImage, type ChatEvent, type ClientToolState, type PromptImage, type ReviewDecision } from '../common/messages';
import type { AgentUpdate, CompactionUpdate, ToolLocation } from '../protocol/types';
import { button, clip, fileLink, h, post } from './dom';
import { parseMarkdown, toDom } from './markdown';

interface ToolCard {
  root: HTMLElement;
  status: HTMLElement;
  result: HTMLElement;
  actions: HTMLElement;
  locations: HTMLElement;
}

/** Location links shown on a card before "N more" (search may report 500). */
const MAX_LOCATIONS = 20;

/** Statuses after which a card no longer changes with the turn's end. */
const FINAL = ['completed', 'failed', 'denied', 'done', 'cancelled'];

const LABELS: Record<ClientToolState, string> = {
  awaiting_approval: 'awaiting approval',
  running: 'running',
  denied: 'denied',
  done: 'completed',
  failed: 'failed',
};

export class TurnView {
  readonly root: HTMLElement;
  private body: HTMLElement;
  private footer: HTMLElement;
  private usage: HTMLElement;
  private textBlock: { el: HTMLElement; src: string } | undefined;
  private thought: { el: HTMLElement; src: string } | undefined;
  private tools = new Map<string, ToolCard>();
  private userMsg: HTMLElement | undefined;
  private pendingRender = new Set<{ el: HTMLElement; src: string }>();
  ended = false;

  constructor(
    readonly id: string,
    prompt: string,
    replay: boolean,
    private readonly afterRender: () => void,
  ) {
    this.root = h('section', { class: 'turn', data: { turnId: id, state: replay ? 'replayed' : 'running' } });
    if (prompt) this.root.append((this.userMsg = h('div', { class: 'user-msg', text: prompt })));
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
        // The daemon reports a refusal as "failed"; the card already says "denied".
        if (!(card.root.dataset.status === 'denied' && u.status === 'failed')) setStatus(card, u.status);
        if (u.content !== undefined) card.result.textContent = clip(u.content);
        // A finished tool's results (search hits, glob files) replace the call's own file.
        if (Array.isArray(u.locations) && u.locations.length) renderLocations(card.locations, u.locations);
        break;
      }
      case 'user_image':
        this.addImages([{ mimeType: u.mimeType, data: u.data }]);
        break;
      case 'memory':
        this.textBlock = undefined;
        this.body.append(memoryNote(u.docs, u.point, u.tier));
        break;
      case 'usage':
        this.usage.textContent = `Tokens: ${u.inputTokens} in, ${u.outputTokens} out (session total ${u.sessionTotalTokens})`;
        break;
      case 'user_message':
      case 'prompt_end':
      case 'plan':
      case 'mode':
      case 'compaction':
        // Session-wide: the controller shows these outside the turn.
        break;
    }
  }

  /** Something that happened during the turn but is not the model's (a compaction divider). */
  append(el: HTMLElement): void {
    this.textBlock = undefined;
    this.thought = undefined;
    this.body.append(el);
  }

  /** The prompt's images, as thumbnails under its text (only types agentd takes, as data: URLs). */
  addImages(images: PromptImage[]): void {
    const ok = images.filter(isPromptImage);
    if (!ok.length) return;
    if (!this.userMsg) {
      this.userMsg = h('div', { class: 'user-msg' });
      this.root.prepend(this.userMsg);
    }
    let strip = this.userMsg.querySelector<HTMLElement>('.user-images');
    if (!strip) {
      strip = h('div', { class: 'user-images' });
      this.userMsg.append(strip);
    }
    for (const i of ok) {
      const img = document.createElement('img');
      img.className = 'thumb';
      img.alt = 'attached image';
      img.src = `data:${i.mimeType};base64,${i.data}`;
      strip.append(img);
    }
  }

  /**
   * The daemon asks before a tool runs, or before the tool's MCP server uses
   * the model (sampling: the title is the question, "db asks to use the
   * model"): the question, the daemon's description and the options on the
   * card, or how it was answered. The description is a server's text: text
   * only, as every field of the card.
   */
  permission(e: Extract<ChatEvent, { type: 'permission' }>): void {
    const { toolCallId, title, options, answer } = e;
    const sampling = e.kind === 'sampling';
    const card = this.tools.get(toolCallId);
    if (!card) return;
    card.actions.textContent = '';
    card.root.dataset.permission = sampling ? 'sampling' : 'tool';
    if (!options.length) {
      // A tool call may be asked about twice (to run, then to use the model): say which answer this is.
      const said = answer && sampling ? `${title}: ${answer}` : answer;
      if (said) card.actions.append(h('span', { class: 'muted permission-answer', text: said }));
      if (card.root.dataset.status === 'awaiting_approval') setStatus(card, 'running');
      return;
    }
    setStatus(card, LABELS.awaiting_approval, 'awaiting_approval');
    card.actions.append(h('span', { class: 'permission-title', text: sampling ? title : `Allow ${title}?` }));
    if (typeof e.description === 'string' && e.description) {
      card.actions.append(h('div', { class: 'permission-description', text: e.description }));
    }
    for (const o of options) {
      const reject = o.kind.startsWith('reject');
      card.actions.append(
        button(
          o.name,
          () => {
            post({ type: 'permission', toolCallId, optionId: o.optionId });
            for (const b of card.actions.querySelectorAll('button')) b.disabled = true;
          },
          { class: reject ? 'permission-option secondary' : 'permission-option', data: { optionId: o.optionId } },
        ),
      );
    }
  }

  toolState(toolCallId: string, state: ClientToolState, detail?: string, review?: boolean): void {
    const card = this.tools.get(toolCallId);
    if (!card) return;
    setStatus(card, LABELS[state] ?? state, state);
    card.actions.textContent = '';
    if (state === 'awaiting_approval' && review) this.reviewButtons(card, toolCallId);
    if (detail !== undefined && (state === 'done' || state === 'failed' || state === 'denied')) card.result.textContent = clip(detail);
  }

  /** Accept / Reject of a proposed edit, the same answers as the diff editor's title buttons. */
  private reviewButtons(card: ToolCard, toolCallId: string): void {
    const answer = (decision: ReviewDecision) => (): void => {
      post({ type: 'review', toolCallId, decision });
      if (decision !== 'show') for (const b of card.actions.querySelectorAll('button')) b.disabled = true;
    };
    card.actions.append(
      button('Accept', answer('accept'), { class: 'review-accept', title: 'Apply this edit (it stays undoable)' }),
      button('Reject', answer('reject'), { class: 'review-reject secondary', title: 'Do not apply it; the model is told' }),
      button('Accept all this session', answer('acceptSession'), { class: 'review-accept-all secondary' }),
      button('Show diff', answer('show'), { class: 'link review-show' }),
    );
  }

  end(e: Extract<ChatEvent, { type: 'turnEnd' }>): void {
    this.ended = true;
    this.flush();
    this.root.dataset.state = e.outcome;
    this.footer.textContent = '';
    for (const card of this.tools.values()) card.actions.textContent = '';
    if (e.outcome === 'cancelled') {
      this.footer.append(h('span', { class: 'badge cancelled', text: 'Cancelled' }));
      for (const card of this.tools.values()) {
        if (!FINAL.includes(card.root.dataset.status ?? '')) setStatus(card, 'cancelled');
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
    const actions = h('div', { class: 'tool-actions' });
    const details = h(
      'details',
      {},
      h('summary', { text: 'Details' }),
      h('div', { class: 'muted', text: 'Arguments' }),
      h('pre', { class: 'tool-args', text: clip(JSON.stringify(args, null, 2)) }),
      h('div', { class: 'muted', text: 'Result' }),
      result,
    );
    // An MCP tool reads "server: tool" (the model's name, mcp__server__tool, is in the title).
    const server = typeof u.server === 'string' && u.server ? u.server : undefined;
    const prefix = server ? `mcp__${server}__` : '';
    const toolName = server && u.name.startsWith(prefix) ? u.name.slice(prefix.length) : u.name;
    const head = h(
      'div',
      { class: 'tool-head' },
      ...(server ? [h('span', { class: 'tool-server badge', text: server, title: `MCP server ${server}` })] : []),
      h('span', { class: 'tool-name', text: toolName, title: u.name }),
      h('span', { class: 'tool-summary', text: summary, title: summary }),
      status,
    );
    const locations = h('div', { class: 'tool-locations' });
    if (Array.isArray(u.locations)) renderLocations(locations, u.locations);
    const root = h(
      'div',
      { class: 'tool-card', data: { toolCallId: u.toolCallId, executor: u.executor, ...(server ? { server } : {}) } },
      head,
      locations,
      actions,
      details,
    );
    const card = { root, status, result, actions, locations };
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
    this.afterRender();
  }
}

function setStatus(card: ToolCard, label: string, key = label): void {
  card.status.textContent = label;
  card.root.dataset.status = key;
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

/** file:line links; a click asks the extension to open the file at the line (it checks the path). */
function renderLocations(el: HTMLElement, locations: ToolLocation[]): void {
  el.textContent = '';
  const valid = locations.filter((l) => l && typeof l.path === 'string' && l.path);
  valid.slice(0, MAX_LOCATIONS).forEach((l, i) => {
    if (i) el.append(' ');
    const line = Number.isInteger(l.line) && (l.line as number) > 0 ? (l.line as number) : undefined;
    const label = `${l.path.split(/[\\/]/).filter(Boolean).pop() ?? l.path}${line ? `:${line}` : ''}`;
    el.append(
      button(label, () => post({ type: 'openFile', path: l.path, ...(line ? { line } : {}) }), {
        class: 'link location',
        title: `${l.path}${line ? `:${line}` : ''}`,
        data: { path: l.path, ...(line ? { line: String(line) } : {}) },
      }),
    );
  });
  if (valid.length > MAX_LOCATIONS) el.append(h('span', { class: 'muted', text: ` and ${valid.length - MAX_LOCATIONS} more` }));
}

/** A compaction between turns: a "conversation compacted" divider (or why it failed). */
export function compactionDivider(u: CompactionUpdate): HTMLElement {
  const fmt = (n: number): string => (Number.isFinite(n) ? n.toLocaleString('en-US') : '?');
  let text: string;
  switch (u.status) {
    case 'started':
      text = 'Compacting the conversation…';
      break;
    case 'done': {
      const what: string[] = [];
      if (u.summarized) what.push(`${u.summarized} messages summarised`);
      if (u.cleared) what.push(`${u.cleared} tool outputs cleared`);
      text =
        u.tokensAfter < u.tokensBefore
          ? `Conversation compacted: about ${fmt(u.tokensBefore)} → ${fmt(u.tokensAfter)} tokens${what.length ? ` (${what.join(', ')})` : ''}`
          : `Conversation not compacted: ${u.message ?? 'nothing to compact yet'}`;
      break;
    }
    case 'cancelled':
      text = 'Compaction cancelled: the conversation is as it was.';
      break;
    default:
      text = `Compaction failed: ${u.message ?? 'the conversation is as it was'}.`;
  }
  const el = h('div', { class: 'compaction', data: { status: u.status, trigger: u.trigger ?? '' } }, h('span', { class: 'compaction-label', text }));
  if (u.status === 'done' && u.summary) {
    el.append(h('details', { class: 'compaction-summary' }, h('summary', { text: 'Summary' }), h('div', { class: 'muted pre', text: u.summary })));
  }
  return el;
}
