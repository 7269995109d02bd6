// The session and turn logic of the chat, independent of VS Code: one
// AgentController per chat surface (the panel, the @agentd participant),
// bound to one workspace root and one AgentConnection at a time.
//
// It turns the daemon's notifications into ChatEvents for a view, runs the
// editor's tools when asked (and always answers with agent/toolResult), and
// implements Stop: the view learns of the cancel at once, the daemon through
// `$/cancelRequest`, and the late -32800 reply is absorbed.

import type { ChatEvent, PromptImage } from '../common/messages';
import { DENIED_COMMAND, DENIED_EDIT, type ClientToolRunner, type ToolCall } from '../tools/clientTools';
import { CancellationSource, NOT_MINE, errorCode, errorMessage, type AgentConnection, type CancellationToken, type Disposable } from './connection';
import { permissionQuestion, type PermissionQuestion } from './permission';
import {
  ErrorCodes,
  type AgentUpdate,
  type AgentUpdateParams,
  type CompactionUpdate,
  type ContentBlock,
  type ElicitParams,
  type ElicitResult,
  type ElicitationCompleteParams,
  type McpStatusResult,
  type PermissionOption,
  type PlanEntry,
  type RequestPermissionParams,
  type RequestPermissionResult,
  type SessionSetup,
  type SlashCommand,
  type MemoryChangedParams,
  type MemoryListResult,
  type MemoryStatusResult,
  type PromptResult,
  type SessionInfo,
  type ToolResultParams,
} from './types';

export class NotSupportedError extends Error {
  constructor(readonly method: string) {
    super(`This version of agentd does not support ${method}.`);
  }
}

export class NoWorkspaceError extends Error {
  constructor() {
    super('Open a folder first: agentd works on a workspace folder.');
  }
}

interface Turn {
  id: string;
  sessionId: string;
  source: CancellationSource;
  tools: AbortController;
  toolAborts: Map<string, AbortController>;
  /** True once the view was told the turn ended (it may end before the reply, on Stop). */
  ended: boolean;
  /** Settles when the daemon has answered the prompt request (whatever the answer). */
  settled: Promise<void>;
  /** Open agent/requestPermission requests of this turn, by toolCallId. */
  permissions: Map<string, (optionId: string | undefined) => void>;
  /** Open agent/elicit requests of this turn: aborted when the turn ends. */
  elicitations: Set<AbortController>;
}

export interface TurnSummary {
  outcome: 'completed' | 'cancelled' | 'error';
  result?: PromptResult;
  message?: string;
}

export type ChatListener = (e: ChatEvent) => void;

export class AgentController {
  private conn: AgentConnection | undefined;
  private subscriptions: Disposable[] = [];
  private listeners = new Set<ChatListener>();
  private sessionId: string | undefined;
  /** A session of a previous daemon process, to restore with agent/loadSession. */
  private staleSessionId: string | undefined;
  private turn: Turn | undefined;
  private lastSettled: Promise<void> = Promise.resolve();
  private replay: { turnId: string | undefined; quiet: boolean; count: number } | undefined;
  private turnCounter = 0;
  /** Between prompt() being called and its turn existing (awaits in between). */
  private starting = false;
  private readonly toolRuns = new Set<Promise<void>>();
  /** The session's mode, model and their choices, as the daemon last said. */
  private setup: SessionSetup | undefined;
  /** The context window the daemon last reported, for a compaction's `tokensAfter`. */
  private contextWindow: number | undefined;
  /** The last agent/listSessions answer, by id: a listed session's folders. */
  private listed = new Map<string, SessionInfo>();

  constructor(
    private readonly workspaceRoot: () => string | undefined,
    private readonly tools: ClientToolRunner,
    private readonly options: {
      /** Refresh the memory list on memory/changed (the panel does; the chat participant has no list). */
      watchMemory?: boolean;
      /**
       * Ask the user about agent/requestPermission outside the view (the chat
       * participant has no tool cards; the panel while it is not visible),
       * with the same title and description as the card: resolves with an
       * optionId or undefined. Returning undefined itself
       * leaves the question to the tool card.
       */
      askPermission?: (question: PermissionQuestion, options: PermissionOption[], signal: AbortSignal) => Promise<string | undefined> | undefined;
      /**
       * The window's other folders (a multi-root workspace), sent as a new
       * session's `additionalDirectories`: read when a session starts, so a
       * folder added or removed counts from the next new session. A loaded
       * or forked session keeps the list it was saved with.
       */
      additionalRoots?: () => string[];
      /**
       * Ask the user an MCP server's agent/elicit question (the editor's
       * dialogs); the signal aborts when the daemon withdraws it or the turn
       * ends. Without it every question is declined.
       */
      elicit?: (p: ElicitParams, signal: AbortSignal) => Promise<ElicitResult>;
    } = {},
  ) {}

  // --- wiring ------------------------------------------------------------------

  onEvent(listener: ChatListener): Disposable {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  private emit(e: ChatEvent): void {
    for (const l of [...this.listeners]) {
      try {
        l(e);
      } catch {
        // A broken view must not break the protocol handling.
      }
    }
  }

  /** Bind to a (new) daemon connection; a running turn of the old one ends as an error. */
  attach(conn: AgentConnection): void {
    this.detach('agentd restarted while the prompt was running.');
    this.conn = conn;
    this.subscriptions = [conn.onNotification('agent/update', (p: AgentUpdateParams) => this.onUpdate(p))];
    if (this.options.watchMemory !== false) {
      this.subscriptions.push(conn.onNotification('memory/changed', (p: MemoryChangedParams) => this.onMemoryChanged(p)));
    }
    const perm = conn.onRequest?.('agent/requestPermission', (p: RequestPermissionParams, token: CancellationToken) => this.onPermission(p, token));
    if (perm) this.subscriptions.push(perm);
    const elicit = conn.onRequest?.('agent/elicit', (p: ElicitParams, token: CancellationToken) => this.onElicit(p, token));
    if (elicit) this.subscriptions.push(elicit);
    this.subscriptions.push(conn.onNotification('agent/elicitationComplete', (p: ElicitationCompleteParams) => this.onElicitationComplete(p)));
  }

  /** What the daemon offers, for the view to show only the controls that work. Never throws. */
  async refreshFeatures(): Promise<void> {
    const caps = this.conn?.capabilities?.();
    let commands: SlashCommand[] = [];
    try {
      commands = await this.listCommands();
    } catch {
      // An older daemon has no commands: no completion is offered.
    }
    this.emit({ type: 'features', images: !!caps?.promptContent?.includes('image'), mcp: !!caps?.mcp, commands, ...(caps?.compaction ? { compaction: true } : {}) });
    // Before the first session the mode picker shows what initialize advertised
    // (the session's own setup replaces it once there is one).
    if (!this.sessionId && Array.isArray(caps?.modes) && caps.modes.length > 0) {
      const mode = this.setup?.mode ?? caps.defaultMode;
      this.emit({ type: 'setup', sessionId: this.currentSessionId ?? '', setup: { mode, modes: caps.modes } });
    }
  }

  /** The daemon went away: end the running turn with `reason`. */
  detach(reason = 'agentd stopped while the prompt was running.'): void {
    for (const s of this.subscriptions) s.dispose();
    this.subscriptions = [];
    if (this.turn && !this.turn.ended) this.finishTurn(this.turn, { type: 'turnEnd', turnId: this.turn.id, outcome: 'error', message: reason });
    this.turn?.tools.abort();
    this.turn = undefined;
    this.lastSettled = Promise.resolve();
    if (this.sessionId) this.staleSessionId = this.sessionId;
    this.sessionId = undefined;
    this.conn = undefined;
  }

  get connected(): boolean {
    return this.conn !== undefined;
  }

  get currentSessionId(): string | undefined {
    return this.sessionId ?? this.staleSessionId;
  }

  get running(): boolean {
    return this.turn !== undefined && !this.turn.ended;
  }

  private connection(): AgentConnection {
    if (!this.conn) throw new Error('agentd is not running. Run "agentd: Restart agentd" to start it.');
    return this.conn;
  }

  private root(): string {
    const root = this.workspaceRoot();
    if (!root) throw new NoWorkspaceError();
    return root;
  }

  // --- sessions ----------------------------------------------------------------

  async ensureSession(): Promise<string> {
    if (this.sessionId) return this.sessionId;
    const stale = this.staleSessionId;
    this.staleSessionId = undefined;
    if (stale) {
      // After a daemon restart, continue the same conversation when the daemon
      // can restore it; its replay is not shown again (the view still has it).
      try {
        await this.load(stale, true);
        return stale;
      } catch {
        this.emit({ type: 'notice', level: 'info', text: 'agentd restarted: this is a new session.' });
      }
    }
    return this.newSession();
  }

  async newSession(): Promise<string> {
    await this.stopAndWait();
    const root = this.root();
    const others = (this.options.additionalRoots?.() ?? []).filter((r) => r !== root);
    const res = await this.connection().sendRequest<{ sessionId: string } & SessionSetup>('agent/newSession', {
      workspaceRoot: root,
      // Absent when there are none: a daemon older than the field is not asked about it.
      ...(others.length ? { additionalDirectories: others } : {}),
    });
    const sessionId = res.sessionId;
    this.sessionId = sessionId;
    this.staleSessionId = undefined;
    this.emit({ type: 'cleared' });
    this.emit({ type: 'session', sessionId });
    this.applySetup(sessionId, res);
    this.clearPlan();
    return sessionId;
  }

  async reset(): Promise<void> {
    const id = this.sessionId;
    await this.stopAndWait();
    if (id) {
      await this.connection().sendRequest('agent/resetSession', { sessionId: id });
      this.tools.forgetSession(id);
    }
    this.emit({ type: 'cleared' });
    this.emit({ type: 'session', sessionId: id });
    // A reset keeps the mode and the model and clears the plan.
    if (id && this.setup) this.emit({ type: 'setup', sessionId: id, setup: this.setup });
    this.clearPlan();
  }

  /** A daemon without modes and models (before issue 17) sends no setup: no pickers. */
  private applySetup(sessionId: string, res: SessionSetup | undefined): void {
    if (!res || typeof res !== 'object' || (res.mode === undefined && res.model === undefined)) {
      if (this.setup) this.emit({ type: 'setup', sessionId, setup: {} });
      this.setup = undefined;
      return;
    }
    const { mode, modes, model, models } = res;
    this.setup = { mode, modes, model, models };
    this.emit({ type: 'setup', sessionId, setup: this.setup });
  }

  private planShown = false;

  private showPlan(entries: PlanEntry[]): void {
    this.planShown = entries.length > 0;
    this.emit({ type: 'plan', entries });
  }

  /** Another session's (or a reset session's) plan goes; nothing to say if none was shown. */
  private clearPlan(): void {
    if (this.planShown) this.showPlan([]);
  }

  /** Switch the session's mode (agent/setMode); counts from the next model step. */
  async setMode(mode: string): Promise<void> {
    const sessionId = await this.ensureSession();
    try {
      const res = await this.connection().sendRequest<{ mode: NonNullable<SessionSetup['mode']> }>('agent/setMode', { sessionId, mode });
      this.setup = { ...this.setup, mode: res.mode };
      this.emit({ type: 'setup', sessionId, setup: this.setup });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/setMode');
      // The picker shows what holds again.
      if (this.setup) this.emit({ type: 'setup', sessionId, setup: this.setup });
      throw err;
    }
  }

  /** Switch the session's model (agent/setModel); the next model request uses it. */
  async setModel(model: string): Promise<void> {
    const sessionId = await this.ensureSession();
    try {
      const res = await this.connection().sendRequest<{ model: string }>('agent/setModel', { sessionId, model });
      this.setup = { ...this.setup, model: res.model };
      this.emit({ type: 'setup', sessionId, setup: this.setup });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/setModel');
      if (this.setup) this.emit({ type: 'setup', sessionId, setup: this.setup });
      throw err;
    }
  }

  /**
   * Compact the conversation now (agent/compact); its `compaction` updates
   * show the divider. Refused (-32003) while a prompt runs.
   */
  async compact(instructions?: string): Promise<CompactionUpdate> {
    const sessionId = await this.ensureSession();
    try {
      return await this.connection().sendRequest<CompactionUpdate>('agent/compact', { sessionId, ...(instructions ? { instructions } : {}) });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/compact');
      throw err;
    }
  }

  /** The slash commands a prompt may start with. Throws NotSupportedError on -32601. */
  async listCommands(): Promise<SlashCommand[]> {
    try {
      const res = await this.connection().sendRequest<{ commands: SlashCommand[] }>('agent/listCommands', this.sessionId ? { sessionId: this.sessionId } : {});
      return Array.isArray(res?.commands) ? res.commands : [];
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/listCommands');
      throw err;
    }
  }

  /** The daemon's MCP servers. Throws NotSupportedError on -32601. */
  async mcpStatus(): Promise<McpStatusResult> {
    try {
      return await this.connection().sendRequest<McpStatusResult>('mcp/status', {});
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('mcp/status');
      throw err;
    }
  }

  /** Fetch mcp/status for the view when the daemon has MCP; never throws. */
  async refreshMcp(): Promise<void> {
    if (!this.conn?.capabilities?.()?.mcp) return;
    try {
      const res = await this.mcpStatus();
      this.emit({ type: 'mcp', servers: res.servers ?? [] });
    } catch {
      // Shown again at the next refresh; the panel keeps what it had.
    }
  }

  /** Persisted sessions of the workspace, newest first. Throws NotSupportedError on -32601. */
  async listSessions(): Promise<SessionInfo[]> {
    try {
      const res = await this.connection().sendRequest<{ sessions: SessionInfo[] }>('agent/listSessions', {
        workspaceRoot: this.root(),
      });
      const sessions = res.sessions ?? [];
      this.listed = new Map(sessions.map((s) => [s.sessionId, s]));
      return sessions;
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/listSessions');
      throw err;
    }
  }

  /** Switch to a persisted session; its history is replayed into the view. */
  async loadSession(sessionId: string): Promise<void> {
    await this.stopAndWait();
    this.emit({ type: 'cleared' });
    await this.load(sessionId, false);
    this.emit({ type: 'session', sessionId });
  }

  /**
   * Fork a persisted (or the live) session (agent/forkSession) and switch to
   * the fork: a new session holding a copy of its finished turns, replayed
   * into the view. The source stays as it was. Resolves with the fork's id.
   */
  async forkSession(sessionId: string): Promise<string> {
    let res: { sessionId: string };
    try {
      res = await this.connection().sendRequest<{ sessionId: string }>('agent/forkSession', {
        sessionId,
        workspaceRoot: this.root(),
      });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/forkSession');
      throw err;
    }
    await this.loadSession(res.sessionId);
    return res.sessionId;
  }

  /**
   * Delete a persisted session (agent/deleteSession): its transcript is
   * removed, a prompt it runs is cancelled. When it is the view's session,
   * the view is cleared and the next prompt starts a new one. Resolves with
   * whether there was something to delete.
   */
  async deleteSession(sessionId: string): Promise<boolean> {
    const current = sessionId === this.currentSessionId;
    if (current) await this.stopAndWait();
    let res: { deleted?: boolean } | null;
    try {
      res = await this.connection().sendRequest<{ deleted?: boolean } | null>('agent/deleteSession', { sessionId });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/deleteSession');
      throw err;
    }
    this.tools.forgetSession(sessionId);
    this.tools.setSessionRoots(sessionId, undefined);
    if (current) {
      this.sessionId = undefined;
      this.staleSessionId = undefined;
      this.emit({ type: 'cleared' });
      this.emit({ type: 'session', sessionId: undefined });
      this.clearPlan();
    }
    return res?.deleted === true;
  }

  private async load(sessionId: string, quiet: boolean): Promise<void> {
    this.replay = { turnId: undefined, quiet, count: 0 };
    this.pendingReplaySession = sessionId;
    try {
      const res = await this.connection().sendRequest<SessionSetup | null>('agent/loadSession', { sessionId, workspaceRoot: this.root() });
      this.sessionId = sessionId;
      this.tools.setSessionRoots(sessionId, this.rootsOf(sessionId, res ?? undefined));
      this.applySetup(sessionId, res ?? undefined);
      if (res && Array.isArray(res.plan)) this.showPlan(res.plan);
      else this.clearPlan();
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('agent/loadSession');
      throw err;
    } finally {
      const r = this.replay;
      this.replay = undefined;
      this.pendingReplaySession = undefined;
      if (r?.turnId && !r.quiet) this.emit({ type: 'turnEnd', turnId: r.turnId, outcome: 'replayed', replay: true });
    }
  }
  private pendingReplaySession: string | undefined;

  /**
   * A loaded session's folders as the daemon has them: its load's reply,
   * else its agent/listSessions entry (listed without the field: none
   * beside its root); undefined when neither says (a fork, from a daemon
   * that does not answer them): the window's folders, as for a new session.
   */
  private rootsOf(sessionId: string, res: SessionSetup | undefined): string[] | undefined {
    const root = typeof res?.workspaceRoot === 'string' ? res.workspaceRoot : this.workspaceRoot();
    if (!root) return undefined;
    if (Array.isArray(res?.additionalDirectories)) return [root, ...res.additionalDirectories];
    const listed = this.listed.get(sessionId);
    return listed ? [root, ...(listed.additionalDirectories ?? [])] : undefined;
  }

  // --- prompts -----------------------------------------------------------------

  /**
   * Run one prompt to its end. Resolves with how it ended; cancellation and
   * errors are outcomes, not rejections (they are also emitted as events).
   */
  async prompt(text: string, images: PromptImage[] = []): Promise<TurnSummary> {
    if (this.running || this.starting) {
      const message = 'A prompt is still running: press Stop first.';
      this.emit({ type: 'notice', level: 'warning', text: message });
      return { outcome: 'error', message };
    }
    this.starting = true;
    let sessionId: string;
    try {
      // A cancelled prompt's reply may still be on its way; the daemon would
      // refuse a new prompt (-32003) until it is sent.
      await this.lastSettled;
      sessionId = await this.ensureSession();
    } catch (err) {
      const message = explain(err);
      this.emit({ type: 'notice', level: 'error', text: message });
      return { outcome: 'error', message };
    } finally {
      this.starting = false;
    }
    const conn = this.connection();
    let settle!: () => void;
    const turn: Turn = {
      id: `t${++this.turnCounter}`,
      sessionId,
      source: new CancellationSource(),
      tools: new AbortController(),
      toolAborts: new Map(),
      ended: false,
      settled: new Promise<void>((r) => (settle = r)),
      permissions: new Map(),
      elicitations: new Set(),
    };
    this.turn = turn;
    this.lastSettled = turn.settled;
    this.emit({ type: 'turnStart', turnId: turn.id, sessionId, prompt: text, ...(images.length ? { images } : {}) });
    // Images go as content blocks after the text; a text-only prompt stays a string.
    const prompt: string | ContentBlock[] = images.length
      ? [...(text ? [{ type: 'text' as const, text }] : []), ...images.map((i) => ({ type: 'image' as const, data: i.data, mimeType: i.mimeType }))]
      : text;
    try {
      const result = await conn.sendRequest<PromptResult>('agent/prompt', { sessionId, prompt }, turn.source.token);
      if (!turn.ended) {
        const failed = result.stopReason === 'error';
        this.finishTurn(turn, {
          type: 'turnEnd',
          turnId: turn.id,
          outcome: failed ? 'error' : 'completed',
          stopReason: result.stopReason,
          usage: result.usage,
          message: failed ? result.error?.message ?? 'The model request failed.' : stopReasonText(result.stopReason),
        });
      }
      return { outcome: result.stopReason === 'error' ? 'error' : turn.source.isCancelled ? 'cancelled' : 'completed', result };
    } catch (err) {
      const code = errorCode(err);
      if (code === ErrorCodes.RequestCancelled || turn.source.isCancelled) {
        if (!turn.ended) this.finishTurn(turn, { type: 'turnEnd', turnId: turn.id, outcome: 'cancelled' });
        return { outcome: 'cancelled' };
      }
      if (code === ErrorCodes.UnknownSession) {
        // The daemon forgot the session (e.g. it was closed elsewhere): start
        // afresh on the next prompt.
        if (this.sessionId === sessionId) this.sessionId = undefined;
      }
      const message = explain(err);
      if (!turn.ended) this.finishTurn(turn, { type: 'turnEnd', turnId: turn.id, outcome: 'error', message });
      return { outcome: 'error', message };
    } finally {
      turn.tools.abort(); // nothing the editor runs outlives its prompt
      this.closePermissions(turn);
      if (this.turn === turn) this.turn = undefined;
      settle();
      if (this.conn?.capabilities?.()?.mcp) void this.refreshMcp();
    }
  }

  /**
   * Stop the running prompt. The view is told at once; `$/cancelRequest` goes
   * to the daemon through the request's cancellation token; running tools are
   * aborted (their results are no longer wanted).
   */
  cancel(): boolean {
    const turn = this.turn;
    if (!turn || turn.ended) return false;
    this.finishTurn(turn, { type: 'turnEnd', turnId: turn.id, outcome: 'cancelled' });
    turn.source.cancel();
    turn.tools.abort();
    return true;
  }

  /** Cancel and wait for the daemon's reply, so the session is free again. */
  private async stopAndWait(): Promise<void> {
    this.cancel();
    await this.lastSettled;
  }

  private finishTurn(turn: Turn, e: Extract<ChatEvent, { type: 'turnEnd' }>): void {
    turn.ended = true;
    this.closePermissions(turn);
    this.emit(e);
  }

  // --- permission ------------------------------------------------------------------

  /**
   * agent/requestPermission: the daemon asks before a tool with side effects
   * runs, or before a running MCP tool's server uses the model (`kind:
   * "sampling"`, on the same card). The tool's card shows the title, the
   * daemon's description and the options; the answer is the user's click.
   * A cancelled prompt, a withdrawn request or a closed view answer
   * `cancelled` (the daemon refuses the call: fail closed).
   */
  private async onPermission(p: RequestPermissionParams, token: CancellationToken): Promise<RequestPermissionResult | typeof NOT_MINE> {
    const turn = this.turn;
    if (!p || typeof p !== 'object' || !turn || p.sessionId !== turn.sessionId) return NOT_MINE;
    const cancelled: RequestPermissionResult = { outcome: { outcome: 'cancelled' } };
    if (turn.ended || token.isCancellationRequested) return cancelled;
    const options = Array.isArray(p.options) ? p.options.filter((o) => o && typeof o.optionId === 'string') : [];
    const question = permissionQuestion(p);
    const { title, kind } = question;
    let sub: Disposable | undefined;
    const chosen = await new Promise<string | undefined>((resolve) => {
      turn.permissions.get(p.toolCallId)?.(undefined);
      turn.permissions.set(p.toolCallId, resolve);
      // The daemon withdraws the request ($/cancelRequest) when its prompt is cancelled.
      sub = token.onCancellationRequested(() => resolve(undefined));
      this.emit({ type: 'permission', turnId: turn.id, toolCallId: p.toolCallId, ...question, options });
      const abort = new AbortController();
      const asked = this.options.askPermission?.(question, options, abort.signal);
      if (asked) {
        // Whichever answers first (the dialog or the card) wins; the other is dropped.
        turn.permissions.set(p.toolCallId, (id) => {
          abort.abort();
          resolve(id);
        });
        asked.then(resolve, () => resolve(undefined));
      }
    });
    sub?.dispose();
    turn.permissions.delete(p.toolCallId);
    const option = options.find((o) => o.optionId === chosen);
    if (!turn.ended) {
      const answer = option ? option.name : 'Cancelled';
      this.emit({ type: 'permission', turnId: turn.id, toolCallId: p.toolCallId, title, ...(kind ? { kind } : {}), options: [], answer });
    }
    return option ? { outcome: { outcome: 'selected', optionId: option.optionId } } : cancelled;
  }

  /** The user's answer to a permission request shown on a tool card. */
  answerPermission(toolCallId: string, optionId: string): boolean {
    const resolve = this.turn?.permissions.get(toolCallId);
    if (!resolve) return false;
    resolve(optionId);
    return true;
  }

  private closePermissions(turn: Turn): void {
    for (const resolve of [...turn.permissions.values()]) resolve(undefined);
    turn.permissions.clear();
    for (const abort of [...turn.elicitations]) abort.abort();
    turn.elicitations.clear();
  }

  // --- elicitation -----------------------------------------------------------------

  /**
   * agent/elicit: an MCP server asks the user during a tool call of this
   * turn. The dialogs are the editor's (options.elicit); the daemon's
   * withdrawal ($/cancelRequest) or the turn's end closes them and answers
   * `cancel`. Never throws: anything unexpected answers `decline`.
   */
  private async onElicit(p: ElicitParams, token: CancellationToken): Promise<ElicitResult | typeof NOT_MINE> {
    const turn = this.turn;
    if (!p || typeof p !== 'object' || !turn || p.sessionId !== turn.sessionId) return NOT_MINE;
    if (turn.ended || token.isCancellationRequested) return { action: 'cancel' };
    const ask = this.options.elicit;
    if (!ask || (p.mode !== 'form' && p.mode !== 'url')) return { action: 'decline' };
    const abort = new AbortController();
    turn.elicitations.add(abort);
    const sub = token.onCancellationRequested(() => abort.abort());
    try {
      const cancelled = new Promise<ElicitResult>((resolve) => abort.signal.addEventListener('abort', () => resolve({ action: 'cancel' })));
      return await Promise.race([ask(p, abort.signal), cancelled]);
    } catch {
      return { action: 'decline' };
    } finally {
      sub.dispose();
      turn.elicitations.delete(abort);
      abort.abort(); // a dialog still open for it closes
    }
  }

  /**
   * agent/elicitationComplete: the server says a URL question (a sign-in) is
   * done. Its dialog was modal and is gone by then, so the chat only notes it.
   */
  private onElicitationComplete(p: ElicitationCompleteParams): void {
    if (!p || typeof p !== 'object' || p.sessionId !== this.sessionId) return;
    this.emit({ type: 'notice', level: 'info', text: 'The MCP server says the page you opened for it is done.' });
  }

  /** Resolves when every client tool started so far has answered (for tests and shutdown). */
  async toolsIdle(): Promise<void> {
    while (this.toolRuns.size) await Promise.allSettled([...this.toolRuns]);
  }

  // --- notifications -------------------------------------------------------------

  private onUpdate(p: AgentUpdateParams): void {
    if (!p || typeof p !== 'object' || !p.update) return;
    const replay = this.replay;
    if (replay && p.sessionId === this.pendingReplaySession) {
      this.onReplayUpdate(p.sessionId, p.update, replay);
      return;
    }
    const u = p.update;
    // Session-wide state (mode, plan, context, compaction) is ours whether a
    // prompt runs or not: agent/compact and agent/setMode arrive between turns.
    if (p.sessionId === this.sessionId && this.onSessionUpdate(p.sessionId, u, false)) return;
    const turn = this.turn;
    // Updates of other sessions (another chat surface on the same daemon) and
    // stragglers of a turn already shown as ended are not ours to show.
    if (!turn || turn.ended || p.sessionId !== turn.sessionId) return;
    this.emit({ type: 'update', turnId: turn.id, update: u });
    if (u.kind === 'tool_call' && u.executor === 'client') this.startTool(turn, u);
    if (u.kind === 'tool_call_update' && u.status === 'cancelled') turn.toolAborts.get(u.toolCallId)?.abort();
  }

  /**
   * A stored session replayed as turns, rendered as the live view rendered
   * them: the daemon sends the notes it kept (memory deliveries, usage) in
   * place, and `prompt_end` says how each prompt ended.
   */
  private onReplayUpdate(sessionId: string, u: AgentUpdate, replay: NonNullable<typeof this.replay>): void {
    // The session's state comes back even when the turns are not shown again.
    if (u.kind === 'mode' || u.kind === 'plan' || (u.kind === 'usage' && replay.quiet)) {
      this.onSessionUpdate(sessionId, u, true);
      return;
    }
    if (replay.quiet) return;
    if (u.kind === 'compaction') {
      // A divider between turns: the turn before it (if any) is over.
      if (replay.turnId) this.emit({ type: 'turnEnd', turnId: replay.turnId, outcome: 'replayed', replay: true });
      replay.turnId = undefined;
      this.onSessionUpdate(sessionId, u, true);
      return;
    }
    if (u.kind === 'usage') this.onSessionUpdate(sessionId, u, true);
    if (u.kind === 'user_message') {
      if (replay.turnId) this.emit({ type: 'turnEnd', turnId: replay.turnId, outcome: 'replayed', replay: true });
      replay.turnId = `r${++this.turnCounter}`;
      this.emit({ type: 'turnStart', turnId: replay.turnId, sessionId, prompt: u.text, replay: true });
      return;
    }
    if (!replay.turnId) {
      replay.turnId = `r${++this.turnCounter}`;
      this.emit({ type: 'turnStart', turnId: replay.turnId, sessionId, prompt: '', replay: true });
    }
    const turnId = replay.turnId;
    if (u.kind === 'prompt_end') {
      replay.turnId = undefined;
      if (u.stopReason === 'cancelled') this.emit({ type: 'turnEnd', turnId, outcome: 'cancelled', replay: true });
      else if (u.stopReason === 'error') {
        this.emit({ type: 'turnEnd', turnId, outcome: 'error', replay: true, message: u.error?.message ?? 'The model request failed.' });
      } else this.emit({ type: 'turnEnd', turnId, outcome: 'replayed', replay: true, stopReason: u.stopReason, message: stopReasonText(u.stopReason) });
      return;
    }
    this.emit({ type: 'update', turnId, update: u });
    // The denials this client answered with read as denials again, not failures.
    if (u.kind === 'tool_call_update' && u.status === 'failed' && (u.content === DENIED_EDIT || u.content === DENIED_COMMAND)) {
      this.emit({ type: 'toolState', turnId, toolCallId: u.toolCallId, state: 'denied' });
    }
  }

  /** Handles the session-wide kinds; true when `u` was one (it goes to no turn). */
  private onSessionUpdate(sessionId: string, u: AgentUpdate, replay: boolean): boolean {
    switch (u.kind) {
      case 'mode':
        this.setup = { ...this.setup, mode: u.mode };
        this.emit({ type: 'setup', sessionId, setup: this.setup });
        return true;
      case 'plan':
        this.showPlan(Array.isArray(u.entries) ? u.entries : []);
        return true;
      case 'compaction':
        this.emit({ type: 'compaction', update: u, ...(replay ? { replay } : {}) });
        if (u.status === 'done' && this.contextWindow) this.emit({ type: 'context', tokens: u.tokensAfter, window: this.contextWindow });
        return true;
      case 'usage':
        if (typeof u.contextWindow === 'number' && u.contextWindow > 0 && typeof u.contextTokens === 'number') {
          this.contextWindow = u.contextWindow;
          this.emit({ type: 'context', tokens: u.contextTokens, window: u.contextWindow });
        }
        return false; // the turn's token line shows it too
      default:
        return false;
    }
  }

  private startTool(turn: Turn, u: Extract<AgentUpdate, { kind: 'tool_call' }>): void {
    const abort = new AbortController();
    turn.toolAborts.set(u.toolCallId, abort);
    const onTurnAbort = (): void => abort.abort();
    turn.tools.signal.addEventListener('abort', onTurnAbort, { once: true });
    const call: ToolCall = {
      sessionId: turn.sessionId,
      toolCallId: u.toolCallId,
      name: u.name,
      arguments: u.arguments ?? {},
      ...(u.autoApprove === true ? { autoApprove: true } : {}),
    };
    const conn = this.conn;
    const run = (async () => {
      const outcome = await this.tools.run(call, abort.signal, (state, detail, review) => {
        if (!turn.ended) this.emit({ type: 'toolState', turnId: turn.id, toolCallId: u.toolCallId, state, detail, ...(review ? { review } : {}) });
      });
      turn.tools.signal.removeEventListener('abort', onTurnAbort);
      turn.toolAborts.delete(u.toolCallId);
      if (!turn.ended) {
        this.emit({
          type: 'toolState',
          turnId: turn.id,
          toolCallId: u.toolCallId,
          state: outcome.denied ? 'denied' : outcome.isError ? 'failed' : 'done',
          detail: outcome.content,
        });
      }
      // After a cancel the daemon has withdrawn the call and ignores results;
      // sending one anyway would be harmless, but there is no one to read it.
      if (abort.signal.aborted || !conn || conn !== this.conn) return;
      const params: ToolResultParams = {
        sessionId: turn.sessionId,
        toolCallId: u.toolCallId,
        content: outcome.content,
        isError: outcome.isError,
      };
      await conn.sendNotification('agent/toolResult', params);
    })().catch(() => {
      // sendNotification fails only when the connection is gone; detach() reports that.
    });
    this.toolRuns.add(run);
    void run.finally(() => this.toolRuns.delete(run));
  }

  // --- memory --------------------------------------------------------------------

  private onMemoryChanged(p: MemoryChangedParams): void {
    const root = this.workspaceRoot();
    if (!root || !p || !sameRoot(p.workspaceRoot, root)) return;
    void this.refreshMemory();
  }

  async memoryList(): Promise<MemoryListResult> {
    try {
      return await this.connection().sendRequest<MemoryListResult>('memory/list', { workspaceRoot: this.root() });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('memory/list');
      throw err;
    }
  }

  async memoryStatus(): Promise<MemoryStatusResult> {
    try {
      return await this.connection().sendRequest<MemoryStatusResult>('memory/status', { workspaceRoot: this.root() });
    } catch (err) {
      if (errorCode(err) === ErrorCodes.MethodNotFound) throw new NotSupportedError('memory/status');
      throw err;
    }
  }

  /** Fetch memory/list and emit it for the view; never throws. */
  async refreshMemory(): Promise<void> {
    try {
      const res = await this.memoryList();
      this.emit({ type: 'memory', available: true, directory: res.directory, docs: res.docs ?? [] });
    } catch (err) {
      this.emit({ type: 'memory', available: false, docs: [], message: explain(err) });
    }
  }
}

function sameRoot(a: string, b: string): boolean {
  const norm = (s: string): string => {
    let p = s;
    if (p.startsWith('file://')) {
      try {
        p = decodeURIComponent(new URL(p).pathname);
      } catch {
        /* keep as is */
      }
    }
    return p.replace(/[\\/]+$/, '');
  };
  return norm(a) === norm(b);
}

/** A sentence for the chat panel, for any failure of a request. */
export function explain(err: unknown): string {
  if (err instanceof NotSupportedError || err instanceof NoWorkspaceError) return err.message;
  switch (errorCode(err)) {
    case ErrorCodes.SessionBusy:
      return 'This session is still running a prompt. Press Stop, or wait for it to finish.';
    case ErrorCodes.UnknownSession:
      return 'agentd no longer knows this session. Send the prompt again to start a new one.';
    case ErrorCodes.ServerNotInitialized:
      return 'agentd is still starting. Try again in a moment.';
    case ErrorCodes.InvalidParams:
      return `agentd rejected the request: ${errorMessage(err)}`;
    case ErrorCodes.MethodNotFound:
      return `This version of agentd does not support that: ${errorMessage(err)}`;
  }
  const msg = errorMessage(err);
  if (/connection (got )?disposed|connection is closed|pending response rejected/i.test(msg)) {
    return 'agentd stopped while the request was running. See the agentd output for details, then restart it.';
  }
  return msg;
}

function stopReasonText(reason: PromptResult['stopReason']): string | undefined {
  switch (reason) {
    case 'max_turns':
      return 'Stopped: the step limit for one prompt (or the session turn limit) was reached.';
    case 'token_limit':
      return 'Stopped: this session used its token budget. Reset it or start a new session.';
    case 'refusal':
      return 'The model refused to answer.';
    case 'max_tokens':
      return 'The answer was cut: the model hit its output token limit.';
    default:
      return undefined;
  }
}
