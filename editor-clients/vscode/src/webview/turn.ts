// One turn of the chat: the user's prompt, the streamed answer (markdown),
// thoughts, tool cards, memory deliveries, the token line and how it ended.
// Live and replayed turns render through the same code, so a restored
// session looks as it did.

import type { ChatEvent, ClientToolState, ReviewDecision } from '../common/messages';
import type { AgentUpdate } from '../protocol/types';
import { button, clip, fileLink, h, post } from './dom';
import { parseMarkdown, toDom } from './markdown';

interface ToolCard {
  root: HTMLElement;
  status: HTMLElement;
  result: HTMLElement;
  actions: HTMLElement;
}

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
  private pendingRender = new Set<{ el: HTMLElement; src: string }>();
  ended = false;

  constructor(
    readonly id: string,
    prompt: string,
    replay: boolean,
    private readonly afterRender: () => void,
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
        // The daemon reports a refusal as "failed"; the card already says "denied".
        if (!(card.root.dataset.status === 'denied' && u.status === 'failed')) setStatus(card, u.status);
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
      case 'prompt_end':
        break;
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
    const head = h(
      'div',
      { class: 'tool-head' },
      h('span', { class: 'tool-name', text: u.name }),
      h('span', { class: 'tool-summary', text: summary, title: summary }),
      status,
    );
    const root = h('div', { class: 'tool-card', data: { toolCallId: u.toolCallId, executor: u.executor } }, head, actions, details);
    const card = { root, status, result, actions };
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
