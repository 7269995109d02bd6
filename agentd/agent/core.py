"""The facade every front end (LSP, ACP) drives: sessions and their prompts.

Front ends translate their wire messages into calls on `AgentCore` and its
results and `Update`s back into wire messages. Nothing here knows JSON-RPC.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd.agent.events import Emit, Update
from agentd.agent.hooks import MemoryHooks, NoMemory
from agentd.agent.session import ClientToolRunner, Session
from agentd.agent.turn import PromptOutcome, TurnContext, TurnLimits, run_prompt
from agentd.config import Settings
from agentd.errors import SessionBusy, SessionNotFound
from agentd.providers.base import ModelProvider
from agentd.tasks import Supervisor

log = logging.getLogger(__name__)


class AgentCore:
    def __init__(
        self,
        settings: Settings,
        provider: ModelProvider,
        supervisor: Supervisor,
        memory: MemoryHooks | None = None,
    ) -> None:
        self.settings = settings
        self.provider = provider
        self.supervisor = supervisor
        self.memory: MemoryHooks = memory or NoMemory()
        self.sessions: dict[str, Session] = {}
        self.session_listeners: list[Callable[[Session], None]] = []

    # --- sessions ------------------------------------------------------------

    def new_session(
        self, workspace_root: Path, client_tools: ClientToolRunner, session_id: str | None = None
    ) -> Session:
        sid = session_id or uuid.uuid4().hex
        session = Session(sid, workspace_root, client_tools)
        self.sessions[sid] = session
        for listener in self.session_listeners:
            listener(session)
        return session

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            raise SessionNotFound(f"no session with id {session_id!r}")
        return session

    async def reset(self, session_id: str) -> None:
        session = self.get(session_id)
        await self._stop_running(session)
        self.memory.session_reset(session)
        session.history.clear()
        session.turns = 0
        session.tokens_used = 0
        session.surfaced.clear()
        session.title = ""

    async def close(self, session_id: str) -> None:
        session = self.get(session_id)
        await self._stop_running(session)
        self.memory.session_closed(session)
        session.closed = True
        del self.sessions[session_id]

    async def _stop_running(self, session: Session) -> None:
        task = session.running
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait([task], timeout=5)

    # --- prompts -------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: str, emit: Emit) -> PromptOutcome:
        """Run a prompt in the calling task (so that cancelling it cancels the turn).

        A second prompt while one runs is refused with `SessionBusy`: queueing
        would hide from the user that their first prompt is still working.
        """
        session = self.get(session_id)
        if session.running is not None and not session.running.done():
            raise SessionBusy(f"session {session_id} is already running a prompt")
        session.running = asyncio.current_task()
        closed = False

        def guarded(update: Update) -> None:
            # Nothing is reported for a prompt after it has ended.
            if not closed:
                emit(update)

        try:
            return await run_prompt(self._turn_context(), session, prompt, guarded)
        finally:
            closed = True
            session.running = None

    def cancel(self, session_id: str) -> bool:
        return self.get(session_id).cancel_running()

    def tool_result(self, session_id: str, tool_call_id: str, content: str, is_error: bool) -> bool:
        return self.get(session_id).resolve_tool_result(tool_call_id, content, is_error)

    def after_reply(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            self.memory.after_reply(session)

    def _turn_context(self) -> TurnContext:
        lim = self.settings.limits
        return TurnContext(
            provider=self.provider,
            model=self.settings.effective_model(),
            limits=TurnLimits(
                max_steps_per_prompt=lim.max_steps_per_prompt,
                max_session_turns=lim.max_session_turns,
                session_token_limit=lim.session_token_limit,
                tool_result_max_chars=lim.tool_result_max_chars,
            ),
            memory=self.memory,
        )

    def status(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "running": sum(1 for s in self.sessions.values() if s.running is not None),
        }
