"""Compaction: keeping a long session inside the model's context window.

Before each model request the turn engine asks `Compactor.before_request`.
Past the threshold (`compaction.threshold` of the input budget: the window
less the room kept for the answer), the cheap step comes first: the output
of tool calls older than the newest few steps is replaced by a one-line stub
("[output of read_file notes.md, 12 KB, cleared]"). If that is not enough,
the older turns are summarised by a side query (the fast model, `X-Agentd-
Purpose: compact`, forced tool `record_summary`, see `summary.py`) while
the newest turns (`compaction.keepRecent` of the budget, never less than the
current prompt and its tool steps) stay verbatim.

Nobody waits for a summary that can be made in the background:

- after a prompt's reply (`after_reply`), or at a request past the
  threshold that still fits, the summariser starts as a background task
  owned by the supervisor, on a snapshot of the older messages;
- its result is swapped in at the next request (usually the next prompt's
  first one), if the history it summarised is still there;
- only a request that would not fit the window waits for it (reported as a
  `compaction` update with status `started`, then `done`); a cancel of that
  prompt cancels the summariser too.

A provider's overflow error (`ContextOverflow`) triggers one compaction and
one retry of the step (`after_overflow`); the window it names is learned.
`compact` is the manual compaction (`agent/compact`, ACP `/compact`).

A compaction that fails or is cancelled changes nothing and is reported
once; the prompt goes on if its request fits, else ends with `token_limit`
(`ContextFull`) and a message saying what to do.

What changes is committed by the core (`Commit`): the history and notes
(`transcript.apply_compaction`, the same function a reload uses), the
transcript's compaction record, and memory's view of what it has shown.
Instruction files never enter the history (they are in the system prompt of
every request), and memory reminders are never summarised (the summariser
does not see them; recall delivers them again when relevant).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

from agentd.agent import summary as summ
from agentd.agent.context import (
    Calibration,
    ContextWindow,
    Meter,
    overhead_bytes,
)
from agentd.agent.history_index import STUB_MIN_BYTES, HistoryIndex, starts_prompt
from agentd.agent.image_cost import formula_for, image_tokens
from agentd.errors import AgentdError, ContextOverflow, ModelError
from agentd.events import CompactionReport, CompactionTrigger, Emit, MemoryDelivered, Note
from agentd.image_billing import Formula
from agentd.messages import Message, ToolCall, ToolSpec, user_text
from agentd.providers.base import ModelProvider, ModelRequest, ReportsContextWindow, ToolCallReady
from agentd.tasks import Supervisor
from agentd.transcript import CompactionRecord, apply_compaction
from agentd.turn_ends import is_summary

if TYPE_CHECKING:
    from agentd.agent.session import Session
    from agentd.providers.base import Usage

log = logging.getLogger(__name__)

# A summary may take at most this share of the budget (its constraints last).
SUMMARY_SHARE = 0.25
# Each summariser request holds at most this share of the budget.
CHUNK_SHARE = 0.5


class ContextFull(AgentdError):
    """The next request does not fit the window, even after compaction."""

    def __init__(self, tokens: int, window: int, why: str = "") -> None:
        detail = f" ({why})" if why else ""
        super().__init__(
            f"The conversation needs about {tokens:,} tokens, more than the model's "
            f"{window:,}-token context window holds, even after compaction{detail}. "
            "Start a new session (or reset this one), or set contextWindow if the model's "
            "window is larger."
        )
        self.message = str(self)
        self.tokens = tokens
        self.window = window


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    enabled: bool = True
    threshold: float = 0.8
    keep_recent: float = 0.3
    keep_tool_results: int = 3
    summary_max_tokens: int = 4096


@dataclass(slots=True)
class _Outcome:
    summary: summ.Summary | None = None
    error: str | None = None


@dataclass(eq=False)
class Pending:
    """A summariser running on a snapshot of `history[:split]`."""

    task: asyncio.Task[_Outcome]
    split: int
    generation: int
    trigger: CompactionTrigger
    summarized: int


@dataclass(eq=False)
class SessionContext:
    """One session's count and compaction state (kept here, by session id)."""

    meter: Meter = field(default_factory=Meter)
    # System prompt and tools of the last request, in bytes, and the two it
    # was counted from (the same objects from step to step while neither
    # changes: `turn._system_prompt`, `turn._tool_specs`).
    overhead: int = 0
    overhead_of: tuple[str, list[ToolSpec]] | None = None
    summary: summ.Summary | None = None
    pending: Pending | None = None
    # Bumped by every summary and reset: a snapshot of another generation is stale.
    generation: int = 0
    # The turn a background summary failed in: no new attempt before the next one.
    failed_turn: int = -1
    # What the checks before each request read of the history, kept per message.
    index: HistoryIndex = field(default_factory=HistoryIndex)
    # The session's model (`Session.model`) and the API its images' formula
    # was chosen for (`Compactor.state`); None: not chosen yet.
    formula_for: tuple[str | None, str] | None = None


# (session, record, the history and notes after it): the core commits it.
Commit = Callable[["Session", CompactionRecord, list[Message], list[tuple[int, Note]]], None]


# --- planning (pure) --------------------------------------------------------------------


def prompt_starts(history: list[Message]) -> list[int]:
    """Indices of the messages that start a prompt turn (`starts_prompt`):
    the only places a verbatim tail may begin, so no tool call is parted
    from its result."""
    return [i for i, m in enumerate(history) if starts_prompt(m)]


def choose_split(
    history: list[Message],
    keep_tokens: int,
    cal: Calibration,
    index: HistoryIndex | None = None,
) -> int:
    """Where the verbatim tail starts: the latest prompt start such that the
    tail holds at least `keep_tokens`, and never after the last prompt's
    start. 0 when nothing before it could be summarised. `index`: the
    history's, kept up to date by the caller (else one is built)."""
    if index is None:
        index = HistoryIndex.of(history)
    split = index.latest_start_with_tail(
        lambda tail, images: cal.tokens(tail) + images >= keep_tokens
    )
    # Something besides an earlier summary must be before the split.
    if split is None or all(is_summary(m) for m in islice(history, split)):
        return 0
    return split


def stub(call: ToolCall | None, content: str, images: int = 0) -> str:
    size = len(content.encode("utf-8", "surrogatepass"))
    amount = f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} bytes"
    if images:
        amount += f" and {images} image{'s' if images > 1 else ''}"
    if call is None:
        return f"[tool output, {amount}, cleared]"
    target = ""
    for key in ("path", "command", "query", "pattern"):
        value = call.arguments.get(key)
        if isinstance(value, str) and value:
            target = " " + (value if len(value) <= 80 else value[:77] + "...")
            break
    return f"[output of {call.name}{target}, {amount}, cleared]"


def plan_clearing(
    history: list[Message],
    keep_results: int,
    keep_tokens: int,
    cal: Calibration,
    index: HistoryIndex | None = None,
) -> dict[str, str]:
    """Tool results to replace by a stub: all but those of the newest
    `keep_results` tool steps, which are kept while they take at most
    `keep_tokens` (the newest step always). `index`: the history's, kept up
    to date by the caller (else one is built)."""
    if index is None:
        index = HistoryIndex.of(history)
    kept: set[int] = set()
    used = 0
    for i in reversed(index.steps):
        cost = cal.tokens(index.size(i)) + index.image_size(i)
        if kept and (len(kept) >= keep_results or used + cost > keep_tokens):
            break
        kept.add(i)
        used += cost
    clear = [i for i in index.clearable if i not in kept]
    if not clear:
        return {}
    calls = {call.id: call for msg in history for call in msg.tool_calls}
    out: dict[str, str] = {}
    for i in clear:
        for part in history[i].tool_results:
            # An image (an MCP tool's) is worth clearing however short the
            # text beside it: the stub that replaces the result drops it.
            if len(part.content) >= STUB_MIN_BYTES or part.images:
                made = calls.get(part.tool_call_id)
                out[part.tool_call_id] = stub(made, part.content, len(part.images))
    return out


# --- the compactor ----------------------------------------------------------------------


class Compactor:
    """Counts each session's context and compacts it (one per core)."""

    def __init__(
        self,
        provider: ModelProvider,
        supervisor: Supervisor,
        window: ContextWindow,
        *,
        options: CompactionOptions | None = None,
        fast_model: str = "",
        max_output: int = 8192,
        commit: Commit | None = None,
        provider_kind: str = "openai",
    ) -> None:
        self.provider = provider
        # The settings' `provider`: with the session's model, whose count
        # images are estimated by (`image_cost.formula_for`).
        self.provider_kind = provider_kind
        self.supervisor = supervisor
        self.window = window
        self.options = options or CompactionOptions()
        self.fast_model = fast_model
        self.max_output = max_output
        self.commit = commit
        self.calibration = Calibration()
        self._sessions: dict[str, SessionContext] = {}
        self._discovery: asyncio.Task[None] | None = None
        # Counts `endpoint_changed` calls: a discovery started before one
        # asked the endpoint requests no longer go to, and its answer is dropped.
        self._endpoint_generation = 0
        # The system prompt and tools last counted (`overhead_bytes`), any
        # session's, with their size.
        self._overhead: tuple[str, list[ToolSpec], int] | None = None

    # --- the window and the count --------------------------------------------------------

    def budget(self) -> int:
        """Input tokens a request may take: the window less the answer's room."""
        window = self.window.tokens
        return window - min(self.max_output, window // 4)

    def discover(self) -> None:
        """Ask the endpoint for the window once, in the background (never awaited)."""
        if self._discovery is not None or self.window.configured:
            return
        if not isinstance(self.provider, ReportsContextWindow):
            return
        try:
            self._discovery = self.supervisor.spawn(self._discover(), name="context-window")
        except RuntimeError:
            pass  # shutting down: the window no longer matters

    def endpoint_changed(self, provider_kind: str) -> None:
        """Model requests go to another endpoint, in the API `provider_kind`,
        from now on (a client routed them, ACP `providers/set`): images are
        counted as that API bills them, and the window it reports is learned
        again after its first answer, as at start; the setting still wins."""
        self.provider_kind = provider_kind
        self._endpoint_generation += 1
        self.window.forget_reported()
        self._discovery = None

    async def _discover(self) -> None:
        assert isinstance(self.provider, ReportsContextWindow)
        generation = self._endpoint_generation
        tokens = await self.provider.context_window(self.window.model)
        if generation != self._endpoint_generation:
            return  # asked the endpoint routed away from meanwhile
        if tokens:
            self.window.endpoint = tokens
            log.info("context window of %s: %d tokens (endpoint)", self.window.model, tokens)

    def state(self, session: Session) -> SessionContext:
        st = self._sessions.get(session.id)
        if st is None:
            st = self._sessions[session.id] = SessionContext()
        # Images are counted as the session's model bills them, which a model
        # switch (a Claude model behind a router, say) or a route to another
        # API may change. Asked several times a request: the formula is
        # looked up when either changed only.
        chosen_for = (session.model, self.provider_kind)
        if st.formula_for != chosen_for:
            st.formula_for = chosen_for
            formula = formula_for(self.provider_kind, session.model or self.window.model)
            if st.meter.formula != formula:
                st.meter.reformulate(session.history, formula)
                st.index = HistoryIndex(formula)
        return st

    def estimate(self, session: Session) -> int:
        st = self.state(session)
        return st.meter.estimate(session.history, st.overhead, self.calibration)

    def observe(self, session: Session, sent: int, usage: Usage) -> tuple[int, int]:
        """A main request of `history[:sent]` took `usage`: re-anchor the
        count. Returns the context meter: (tokens now, window)."""
        st = self.state(session)
        st.meter.observe(session.history, sent, st.overhead, usage, self.calibration)
        # The endpoint is asked for the window once the first answer is in:
        # never before (or beside) the request the user waits on.
        self.discover()
        return self.estimate(session), self.window.tokens

    def answer_room(self, session: Session) -> int:
        """`max_tokens` for the next main request: at most `max_output`, and
        no more than the window leaves after the input (OpenAI-compatible
        servers such as vLLM refuse input plus `max_tokens` over the window).
        The estimate gets a 5 % margin. A guessed window limits nothing."""
        if not self.window.known:
            return self.max_output  # a guessed window never cuts the answer
        left = self.window.tokens - math.ceil(self.estimate(session) * 1.05)
        return max(min(256, self.max_output), min(self.max_output, left))

    def tool_result_cap(self, limit: int) -> int:
        """Tool output is cut at `limit` characters, and at half the budget:
        one result must never be more than a request can hold."""
        room = int(self.budget() * 0.5 * self.calibration.bytes_per_token)
        return max(1_000, min(limit, room))

    def restore(self, session: Session, summary: dict[str, Any] | None) -> None:
        """A reloaded session: its last summary is what the next one builds on."""
        st = self.state(session)
        st.summary = summ.Summary.from_json(summary)
        st.meter.invalidate()

    def summary_json(self, session: Session) -> dict[str, Any] | None:
        """The structured summary the session's next compaction builds on
        (None: none yet), as a transcript keeps it."""
        st = self._sessions.get(session.id)
        if st is None or st.summary is None:
            return None
        return st.summary.to_json()

    def forget(self, session: Session, *, closed: bool = False) -> None:
        """Reset or close: a running summariser is cancelled, the count restarts."""
        st = self._sessions.pop(session.id, None)
        if st is not None and st.pending is not None:
            st.pending.task.cancel()
        if not closed:
            fresh = self.state(session)
            fresh.generation = (st.generation + 1) if st is not None else 1

    # --- the seams -----------------------------------------------------------------------

    async def before_request(
        self, session: Session, system: str, tools: list[ToolSpec], emit: Emit
    ) -> None:
        """Make the next request fit: swap in a finished summary, clear old
        tool output past the threshold, start a summary in the background,
        and wait for one only if the request would not fit otherwise.
        Raises `ContextFull` when even that is not enough."""
        st = self.state(session)
        counted = st.overhead_of
        if counted is None or counted[0] is not system or counted[1] is not tools:
            # A new session's first request sends the objects another
            # session's did (both are kept across sessions): counted once.
            last = self._overhead
            if last is not None and last[0] is system and last[1] is tools:
                st.overhead = last[2]
            else:
                st.overhead = overhead_bytes(system, tools)
                self._overhead = (system, tools, st.overhead)
            st.overhead_of = (system, tools)
        if not self.options.enabled:
            return
        if st.pending is not None and st.pending.task.done():
            self._take(session, st, st.pending, emit)
        budget = self.budget()
        limit = self.options.threshold * budget
        tokens = self.estimate(session)
        if tokens < limit:
            return
        # The index is brought up to date once for both checks: read again
        # only if clearing changed the history.
        index: HistoryIndex | None = self._index(session, st)
        trigger: CompactionTrigger = "threshold" if tokens <= budget else "window"
        if self._clear(session, st, trigger, emit, index) is not None:
            index = None
        tokens = self.estimate(session)
        if tokens < limit:
            return
        if tokens <= budget or not self.window.known:
            # It fits (or the window is a guess): summarise in the background.
            if st.pending is None and st.failed_turn != session.turns:
                self._start(session, st, "threshold", index=index)
            return
        pending = st.pending or self._start(session, st, "window", index=index)
        if pending is not None:
            emit(CompactionReport("started", pending.trigger, tokens_before=tokens))
            await self._wait(session, st, pending, emit)
            tokens = self.estimate(session)
        if tokens > budget:
            raise ContextFull(tokens, self.window.tokens)

    async def after_overflow(self, session: Session, exc: ContextOverflow, emit: Emit) -> bool:
        """The provider said the request did not fit: learn the window it
        named, then compact once (clear, then summarise). True when the
        history changed, so the step may be retried."""
        window = self.window.tokens
        if exc.limit:
            self.window.provider = exc.limit
        st = self.state(session)
        # Our count was wrong by the provider's word: anchor it anew.
        st.meter.invalidate()
        if self.window.tokens != window and self.estimate(session) < (
            self.options.threshold * self.budget()
        ):
            # Only the window was wrong: the retry asks for less room to answer.
            log.info("the provider's context window is %d tokens", self.window.tokens)
            return True
        if not self.options.enabled:
            return False
        changed = self._clear(session, st, "overflow", emit) is not None
        pending = st.pending or self._start(session, st, "overflow")
        if pending is None:
            return changed
        emit(CompactionReport("started", pending.trigger, tokens_before=self.estimate(session)))
        report = await self._wait(session, st, pending, emit)
        return changed or (report is not None and report.status == "done")

    def after_reply(self, session: Session) -> None:
        """Between turns: past the threshold, and with clearing not enough,
        start the summary now so that the next prompt finds it ready."""
        st = self.state(session)
        if not self.options.enabled or st.pending is not None or st.failed_turn == session.turns:
            return
        budget = self.budget()
        limit = self.options.threshold * budget
        tokens = self.estimate(session)
        if tokens < limit:
            return
        index = self._index(session, st)
        cleared = plan_clearing(
            session.history, self.options.keep_tool_results, budget // 2, self.calibration, index
        )
        if tokens - self._saved_tokens(session.history, cleared, st.meter.formula) >= limit:
            self._start(session, st, "threshold", index=index)

    async def compact(
        self, session: Session, instructions: str | None, emit: Emit
    ) -> CompactionReport:
        """Manual compaction: summarise all but the newest turns now (old
        tool output is cleared too, if the request is still long)."""
        st = self.state(session)
        if st.pending is not None:
            # Superseded: the user's own request (with their instructions) wins.
            st.pending.task.cancel()
            st.pending = None
        before = self.estimate(session)
        # Half the conversation at most stays verbatim (the system prompt and
        # the tools, also in `before`, are not the conversation's).
        index = self._index(session, st)
        history = self.calibration.tokens(index.cum[-1]) + index.images[-1]
        keep = min(int(self.options.keep_recent * self.budget()), history // 2)
        pending = self._start(session, st, "manual", keep_tokens=keep, instructions=instructions)
        report: CompactionReport | None
        if pending is None:
            report = self._clear(session, st, "manual", emit)
        else:
            emit(CompactionReport("started", "manual", tokens_before=before))
            report = await self._wait(session, st, pending, emit)
        if report is None:
            report = CompactionReport(
                "done", "manual", before, before, message="There is nothing to compact yet."
            )
            emit(report)
        return report

    # --- doing it --------------------------------------------------------------------------

    def _index(self, session: Session, st: SessionContext) -> HistoryIndex:
        """The session's history index, brought up to date (O(new messages))."""
        st.index.sync(session.history)
        return st.index

    def _saved_tokens(
        self, history: list[Message], cleared: dict[str, str], formula: Formula
    ) -> int:
        if not cleared:
            return 0
        saved = images = 0
        for msg in history:
            for part in msg.tool_results:
                if part.tool_call_id in cleared:
                    saved += len(part.content) - len(cleared[part.tool_call_id])
                    # A cleared result's images go with it.
                    images += sum(image_tokens(i, formula) for i in part.images)
        return self.calibration.tokens(saved) + images

    def _clear(
        self,
        session: Session,
        st: SessionContext,
        trigger: CompactionTrigger,
        emit: Emit,
        index: HistoryIndex | None = None,
    ) -> CompactionReport | None:
        """Replace old tool output by stubs (None: there was none to clear).
        `index`: the history's, already brought up to date."""
        cleared = plan_clearing(
            session.history,
            self.options.keep_tool_results,
            self.budget() // 2,
            self.calibration,
            index if index is not None else self._index(session, st),
        )
        if not cleared:
            return None
        report = CompactionReport("done", trigger, self.estimate(session), cleared=len(cleared))
        self._apply(session, st, CompactionRecord(0, None, None, cleared, report))
        emit(report)
        return report

    def _apply(self, session: Session, st: SessionContext, record: CompactionRecord) -> None:
        history, notes = apply_compaction(session.history, session.notes, record)
        # The count after it goes into the record, which the commit persists.
        st.meter.invalidate()
        record.report.tokens_after = st.meter.estimate(history, st.overhead, self.calibration)
        if self.commit is not None:
            self.commit(session, record, history, notes)
        else:
            session.history[:] = history
            session.notes[:] = notes

    def _start(
        self,
        session: Session,
        st: SessionContext,
        trigger: CompactionTrigger,
        *,
        keep_tokens: int | None = None,
        instructions: str | None = None,
        index: HistoryIndex | None = None,
    ) -> Pending | None:
        keep = int(self.options.keep_recent * self.budget()) if keep_tokens is None else keep_tokens
        if index is None:
            index = self._index(session, st)
        split = choose_split(session.history, keep, self.calibration, index)
        if split <= 0:
            return None
        head = list(session.history[:split])
        task = self.supervisor.spawn(
            self._summarise(head, st.summary, instructions), name=f"compact-{session.id[:8]}"
        )
        summarized = sum(1 for m in head if not is_summary(m))
        st.pending = Pending(task, split, st.generation, trigger, summarized)
        return st.pending

    async def _wait(
        self, session: Session, st: SessionContext, pending: Pending, emit: Emit
    ) -> CompactionReport | None:
        """Wait for a summary and swap it in; cancelling the wait cancels the
        summariser (reported `cancelled`, the history as it was)."""
        try:
            await asyncio.wait([pending.task])
        except asyncio.CancelledError:
            pending.task.cancel()
            if st.pending is pending:
                st.pending = None
            tokens = self.estimate(session)
            emit(CompactionReport("cancelled", pending.trigger, tokens, tokens))
            raise
        return self._take(session, st, pending, emit)

    def _take(
        self, session: Session, st: SessionContext, pending: Pending, emit: Emit
    ) -> CompactionReport | None:
        """Swap a finished summary in, if the history it summarised is still
        there, or report its failure (once). None: a stale snapshot."""
        if st.pending is pending:
            st.pending = None
        tokens = self.estimate(session)
        if pending.task.cancelled():
            report = CompactionReport("cancelled", pending.trigger, tokens, tokens)
            emit(report)
            return report
        outcome = pending.task.result()
        if outcome.summary is None:
            st.failed_turn = session.turns
            log.warning("compaction of session %s failed: %s", session.id, outcome.error)
            report = CompactionReport(
                "failed",
                pending.trigger,
                tokens,
                tokens,
                message=f"The conversation could not be compacted: {outcome.error}",
            )
            emit(report)
            return report
        if pending.generation != st.generation or len(session.history) < pending.split:
            return None  # reset or compacted meanwhile: the snapshot is stale
        summary = self._fit(outcome.summary)
        text = summ.render(summary)
        report = CompactionReport(
            "done", pending.trigger, tokens, summarized=pending.summarized, summary=text
        )
        record = CompactionRecord(pending.split, text, summary.to_json(), {}, report)
        # The tail stays verbatim unless the request would still be too long.
        budget = self.budget()
        after, _ = apply_compaction(session.history, session.notes, record)
        fresh = Meter(formula=st.meter.formula)
        if fresh.estimate(after, st.overhead, self.calibration) >= self.options.threshold * budget:
            record.cleared = plan_clearing(
                after,
                self.options.keep_tool_results,
                budget // 2,
                self.calibration,
                HistoryIndex.of(after, st.meter.formula),
            )
            report.cleared = len(record.cleared)
        st.summary = summary
        st.generation += 1
        self._apply(session, st, record)
        emit(report)
        return report

    def _fit(self, summary: summ.Summary) -> summ.Summary:
        """Keep a summary within its share of the budget: the model's lists
        are trimmed first (oldest items), the user's constraints last."""
        limit = int(SUMMARY_SHARE * self.budget())
        cal = self.calibration
        for name in ("files", "decisions", "errors", "paths"):
            items: list[str] = getattr(summary, name)
            while items and cal.tokens(len(summ.render(summary).encode())) > limit:
                items.pop(0)
        if len(summary.progress) > 4000:
            summary.progress = summary.progress[:4000] + " ..."
        dropped = 0
        while summary.constraints and cal.tokens(len(summ.render(summary).encode())) > limit:
            summary.constraints.pop(0)
            dropped += 1
        if dropped:
            log.warning("the summary was over its budget: %d oldest constraints dropped", dropped)
        return summary

    async def _summarise(
        self, head: list[Message], previous: summ.Summary | None, instructions: str | None
    ) -> _Outcome:
        """Summarise `head` into `previous`, in as many requests as the
        budget needs. Failures are an outcome (reported once by `_take`);
        a cancel propagates."""
        try:
            messages = [m for m in head if not is_summary(m)]
            chunks = self._chunks(summ.turn_texts(messages), previous)
            summary = previous
            for i, chunk in enumerate(chunks):
                answer = await self._ask(summ.request_text(summary, chunk, instructions))
                last = i == len(chunks) - 1
                paths = summ.tool_paths(messages) if last else []
                summary = summ.merge(summary, answer, paths, len(messages) if last else 0)
            if summary is None:
                return _Outcome(error="there was nothing to summarise")
            return _Outcome(summary)
        except ModelError as exc:
            return _Outcome(error=exc.message)
        except Exception as exc:
            log.exception("compaction failed")
            return _Outcome(error=f"{type(exc).__name__}: {exc}")

    def _chunks(self, turns: list[str], previous: summ.Summary | None) -> list[list[str]]:
        room = int(CHUNK_SHARE * self.budget() * self.calibration.bytes_per_token)
        if previous is not None:
            room -= len(summ.render(previous))
        room = max(4_096, room)
        chunks: list[list[str]] = [[]]
        used = 0
        for text in turns:
            if len(text) > room:
                text = text[: room - 40] + "\n[... turn cut]\n</turn>"
            if chunks[-1] and used + len(text) > room:
                chunks.append([])
                used = 0
            chunks[-1].append(text)
            used += len(text)
        return [c for c in chunks if c]

    async def _ask(self, text: str) -> dict[str, object]:
        request = ModelRequest(
            model=self.fast_model,
            system=summ.SYSTEM,
            messages=[user_text(text)],
            tools=[summ.RECORD_TOOL],
            tool_choice=summ.RECORD_TOOL.name,
            purpose="compact",
            # With a chunk at most half the budget, the request fits the
            # window (the fast model's is taken to be at least as large).
            max_tokens=min(self.options.summary_max_tokens, max(256, self.window.tokens // 4)),
        )
        answer: dict[str, object] | None = None
        async with contextlib.aclosing(self.provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, ToolCallReady) and event.call.name == summ.RECORD_TOOL.name:
                    answer = event.call.arguments
        if answer is None:
            raise ModelError("the summariser answered without a summary")
        return answer


def kept_memory(notes: list[tuple[int, Note]]) -> set[str]:
    """Memory docs whose delivery is still in the (compacted) history."""
    return {d for _, n in notes if isinstance(n, MemoryDelivered) for d in n.docs}


def compaction_line(report: CompactionReport) -> str:
    """What the `/compact` command answers in the chat, for clients that do
    not show the `compaction` update (ACP's `_agentd/compaction`)."""
    if report.status == "done" and report.message:
        return report.message
    if report.status == "done":
        return (
            f"Conversation compacted: about {report.tokens_before:,} -> "
            f"{report.tokens_after:,} tokens ({report.summarized} messages summarised, "
            f"{report.cleared} tool outputs cleared)."
        )
    return report.message or f"Compaction {report.status}."
