"""A session: history, workspace, counters, and the waits it has open.

A session belongs to one workspace root, its working directory, and may
reach into more folders beside it (`additional_roots`: ACP
`additionalDirectories`), which its tools may read too; memory, instruction
files and the transcript stay the workspace root's. Its history is append-only during a
prompt (listeners, such as the transcript writer, see every message once);
`reset()` is the only thing that clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentd.agent.elicitation import Elicitor
from agentd.agent.modes import DEFAULT_MODE
from agentd.agent.permission import PermissionAsker
from agentd.errors import PathOutsideWorkspace
from agentd.events import Note, PlanEntry
from agentd.messages import Message, ReminderPart, ToolCall, ToolResultPart, ToolSpec
from agentd.paths import pin_first, pin_root
from agentd.providers.base import Usage


class ClientToolRunner(Protocol):
    """Runs the tools an editor declared. One per front end connection."""

    @property
    def specs(self) -> list[ToolSpec]: ...

    async def run(self, session: Session, call: ToolCall) -> ToolResultPart: ...


class ExtraTools(Protocol):
    """Tools the daemon runs beyond its own, for one session (its MCP servers).

    Their list may change between model steps (a server finished starting,
    restarted, or said its tools changed); the turn engine asks for it before
    every step.
    """

    async def specs(self, session: Session, first_step: bool) -> list[ToolSpec]:
        """The tools to offer now. At a prompt's first step, may wait a small,
        bounded time for servers still starting; never longer."""
        ...

    def notices(self) -> list[str]:
        """What the chat should tell the user about these tools (a server the
        editor provides that could not be reached), each text once; asked
        after `specs` at every step."""
        ...

    def server_of(self, name: str) -> str | None:
        """The server that runs the tool the model called `name`; None when not one of these."""
        ...

    def spec_of(self, name: str) -> ToolSpec | None:
        """The spec (with its `read_only`) of the tool the model called `name`; None when
        not one of these."""
        ...

    async def run(
        self, session: Session, call: ToolCall, limit: int, started: Callable[[], None]
    ) -> ToolResultPart:
        """Run one call (asking permission first where needed; `started` is
        called when it really runs). Failures are results, never exceptions;
        a cancel propagates."""
        ...

    def close(self, session: Session) -> None:
        """The session is closed: release what it held."""
        ...


class AwaitClientResult:
    """The LSP way: the editor was told about the call through a `tool_call`
    update and answers with an `agent/toolResult` notification, which
    `Session.resolve_tool_result` hands to the waiting future."""

    def __init__(self, specs: list[ToolSpec]) -> None:
        self._specs = specs

    @property
    def specs(self) -> list[ToolSpec]:
        return self._specs

    async def run(self, session: Session, call: ToolCall) -> ToolResultPart:
        fut: asyncio.Future[ToolResultPart] = asyncio.get_running_loop().create_future()
        session.pending_tools[call.id] = fut
        try:
            return await fut
        finally:
            # Withdrawn on cancel too: a late result then finds nothing and is ignored.
            session.pending_tools.pop(call.id, None)


@dataclass(eq=False)
class Session:
    id: str
    workspace_root: Path
    client_tools: ClientToolRunner
    history: list[Message] = field(default_factory=list)
    # What the editor was shown beside the history (memory deliveries, token
    # usage, how prompts ended), each after the first `n` messages: a replay
    # shows them again.
    notes: list[tuple[int, Note]] = field(default_factory=list)
    title: str = ""
    # `agentd.agent.modes`: what the model is offered, what runs without asking.
    mode: str = DEFAULT_MODE
    # The model chosen for this session (`models = [...]`); None: the configured one.
    model: str | None = None
    # The model's plan (`update_plan`), whole; cleared by a reset.
    plan: list[PlanEntry] = field(default_factory=list)
    # The running (or last) prompt's token usage, kept up to date as it goes:
    # a cancelled prompt's reply reports what it had used.
    prompt_usage: Usage = field(default_factory=Usage)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    turns: int = 0
    tokens_used: int = 0
    running: asyncio.Task[Any] | None = None
    pending_tools: dict[str, asyncio.Future[ToolResultPart]] = field(default_factory=dict)
    closed: bool = False
    listeners: list[Callable[[Session, Message], None]] = field(default_factory=list)
    # Called each time one of its prompts' model requests is out (`request_out`):
    # for work that must not delay the request (the transcript's meta file).
    sent_listeners: list[Callable[[Session], None]] = field(default_factory=list)
    # Tools the daemon runs for this session beyond its own (MCP servers).
    extra_tools: ExtraTools | None = None
    # How to ask the user before a daemon-run tool with side effects; None: nobody can be asked.
    permissions: PermissionAsker | None = None
    # How to show the user an MCP server's question (elicitation); None: declined.
    elicitor: Elicitor | None = None
    # Where the history's newest date reminder was last found: (index, message,
    # part), checked by identity before use (`turn._date_reminder`), so that a
    # prompt does not walk the whole history to find it.
    date_note: tuple[int, Message, ReminderPart] | None = None
    # More folders its tools may work in, beside the workspace root (resolved,
    # absolute, neither the root nor one another): ACP `additionalDirectories`.
    additional_roots: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        # The folder the workspace resolves to now is the one its tools stay
        # in (`agentd.paths.real_root`), whatever is put in its way later.
        with contextlib.suppress(PathOutsideWorkspace):  # refused at its tools' first use
            pin_first(self.workspace_root)
        self.set_additional_roots(self.additional_roots)

    @property
    def roots(self) -> list[Path]:
        """Every folder its tools may work in, the workspace root (where
        relative paths start) first."""
        return [self.workspace_root, *self.additional_roots]

    def set_additional_roots(self, roots: list[Path]) -> None:
        """Replace the folders beside the workspace root (a load or resume
        that names them). Each is a real path, resolved when the editor named
        it (a restored session's, when it was first named): it is pinned as
        itself, so one that was replaced by a symlink since is refused, not
        followed (`agentd.paths.real_root`)."""
        self.additional_roots = beside(self.workspace_root, roots)
        for root in self.additional_roots:
            pin_root(root)

    def request_out(self) -> None:
        """A model request of the current prompt has its body written."""
        # A copy: a listener may remove itself (the model tier's start).
        for listener in tuple(self.sent_listeners):
            listener(self)

    def append(self, message: Message) -> None:
        self.history.append(message)
        self.updated_at = time.time()
        for listener in self.listeners:
            listener(self, message)

    def resolve_tool_result(self, tool_call_id: str, content: str, is_error: bool) -> bool:
        """Hand an editor's tool result to the waiting turn. False if nobody waits."""
        fut = self.pending_tools.get(tool_call_id)
        if fut is None or fut.done():
            return False
        fut.set_result(ToolResultPart(tool_call_id, content, is_error))
        return True

    def cancel_running(self) -> bool:
        task = self.running
        if task is None or task.done():
            return False
        task.cancel()
        return True


def beside(root: Path, roots: list[Path]) -> list[Path]:
    """`roots` without `root` and without repeats, in order."""
    out: list[Path] = []
    for r in roots:
        if r != root and r not in out:
            out.append(r)
    return out
