"""Thin handlers: validate params, call the core, convert the result.

`REQUESTS` and `NOTIFICATIONS` at the bottom are the method tables
`register` installs on the server. Each handler takes `(ls, app, p)`, `p`
annotated with its params model from `ext.py` (the models of the schema,
`ext.REQUESTS`; a test keeps the two in step).

Registered at start-up, but light: the models, pydantic and the core are
imported for type checking only, and are in memory by the time a handler
runs (after `await ls.warmup.wait()`, the warm-up has imported them).
`agent/newSession` (in `FROM_SETTINGS`) takes the settings instead of the
App: it is answered as soon as they are loaded (`ls.warmup.wait_settings()`),
while the warm-up still builds the App, and the session is created in the
core once the App exists (`Warmup.when_built`), before any request that
names it runs.
Each handler is wrapped by `_request` / `_notification`, the one place that
validates params (`agentd.params`), maps validation errors to -32602 naming
the fields, agentd's ProtocolErrors to their codes, and anything unexpected
to -32603 (logged; the daemon keeps serving).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcException, JsonRpcInternalError

from agentd.errors import ProtocolError, internal_error_message
from agentd.layout import agentd_folders
from agentd.params import (
    TextPrompt,
    additional_roots,
    check_choice,
    params_model,
    prompt_input,
    text_prompt,
    validate_params,
    workspace_path,
)
from agentd.paths import pin_root

if TYPE_CHECKING:
    from agentd.agent.session import Session
    from agentd.agent.turn import UserInput
    from agentd.app import App
    from agentd.config import Settings
    from agentd.events import Update
    from agentd.lsp.elicitation import LspElicitor
    from agentd.lsp.ext import (
        CompactParams,
        Empty,
        ForkSessionParams,
        ListCommandsParams,
        LoadSessionParams,
        NewSessionParams,
        PromptParams,
        RecallParams,
        SessionParams,
        SetModelParams,
        SetModeParams,
        ToolResultParams,
        WorkspaceParams,
    )
    from agentd.lsp.permission import LspPermissions
    from agentd.lsp.server import AgentdServer

log = logging.getLogger("agentd.lsp")

# The second argument is the App, or the Settings for the methods in `FROM_SETTINGS`.
Handler = Callable[["AgentdServer", Any, Any], Awaitable[Any]]
# Where the params models live; imported by the warm-up thread.
MODELS = "agentd.lsp.ext"


def _validate(method: str, impl: Handler, params: Any) -> Any:
    return validate_params(method, params_model(impl, importlib.import_module(MODELS)), params)


def _map_error(method: str, exc: Exception) -> JsonRpcException:
    if isinstance(exc, JsonRpcException):
        return exc
    if isinstance(exc, ProtocolError):
        return JsonRpcException(message=exc.message, code=exc.code, data=exc.data)
    log.exception("handler for %s failed", method)
    return JsonRpcInternalError(message=internal_error_message(method, exc))


def _request(server: AgentdServer, method: str, impl: Handler) -> None:
    # A prompt of text only is read without pydantic (`text_prompt`).
    texts_only = method == "agent/prompt"

    async def handler(ls: AgentdServer, params: Any) -> Any:
        try:
            target: App | Settings
            if method in FROM_SETTINGS:
                target = await ls.warmup.wait_settings()
            else:
                # Built long since, as a rule: no coroutine to make and await then.
                target = ls.warmup.get() or await ls.warmup.wait(method)
            p = text_prompt(params, blocks_only=False) if texts_only else None
            return await impl(ls, target, p or _validate(method, impl, params))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _map_error(method, exc) from None

    # Started by the protocol's own dispatch, past pygls' (`_start_direct`).
    server.agentd_protocol.direct_requests[method] = functools.partial(handler, server)


def _notification(server: AgentdServer, method: str, impl: Handler) -> None:
    async def handler(ls: AgentdServer, params: Any) -> None:
        try:
            app = await ls.warmup.wait(method)
            await impl(ls, app, _validate(method, impl, params))
        except Exception as exc:
            # A notification has no reply; say what was wrong in the log.
            log.warning("%s ignored: %.300s", method, getattr(exc, "message", exc))

    server.feature(method)(handler)


# --- agent/* -------------------------------------------------------------------------


async def new_session(ls: AgentdServer, settings: Settings, p: NewSessionParams) -> dict[str, Any]:
    """Answered from the settings; the session is made in the core as soon as
    the App exists (at once if it does), before a request can name it."""
    from agentd.agent.modes import DEFAULT_MODE

    # Pinned now, while the session may be made later (`when_built`): its
    # tools stay in the folder the editor named (`agentd.paths.real_root`).
    root = pin_root(workspace_path(p.workspace_root))
    extra = [
        pin_root(r) for r in additional_roots(p.additional_directories or [], root, agentd_folders)
    ]
    sid = uuid.uuid4().hex

    def create(app: App) -> None:
        from agentd.agent.session import AwaitClientResult

        session = app.core.new_session(root, AwaitClientResult(app.client_specs), sid, extra)
        app.attach_tools(session, _permissions(ls), elicitor=_elicitor(ls))
        app.start_memory(root, ls.warmup.take_memory_ahead(root))

    if settings.memory.enabled:
        ls.warmup.scan_memory_ahead(root)
    ls.warmup.when_built(create)
    ls.agentd_protocol.after_reply(ls.agentd_protocol.msg_id, lambda: _prepare(ls, sid))
    # A new session starts in the default mode on the configured model, as
    # `AgentCore.new_session` makes it.
    return {"sessionId": sid, **_setup(settings, DEFAULT_MODE, settings.effective_model())}


def _prepare(ls: AgentdServer, sid: str) -> None:
    # What its first prompt needs, set up ahead once the reply is out.
    app = ls.warmup.get()
    if app is not None:
        app.core.prepare_session(sid)


def _setup(settings: Settings, mode: str, model: str) -> dict[str, Any]:
    """How the session runs, and the choices: `agent/newSession` and `agent/loadSession`."""
    from agentd.agent.modes import MODES

    return {
        "mode": mode,
        "modes": [
            {"id": m.id, "name": m.name, "description": m.description} for m in MODES.values()
        ],
        "model": model,
        "models": [
            {"id": m, "name": settings.model_name(m), "supportsImages": images}
            for m, images in settings.model_choices()
        ],
    }


def _permissions(ls: AgentdServer) -> LspPermissions | None:
    from agentd.lsp.permission import LspPermissions

    return LspPermissions(ls) if ls.permissions_supported else None


def _elicitor(ls: AgentdServer) -> LspElicitor | None:
    from agentd.lsp.elicitation import LspElicitor

    return LspElicitor(ls, ls.elicitation_modes) if ls.elicitation_modes else None


@functools.cache
def _update_to_wire() -> Callable[[Update], dict[str, Any]]:
    """`agentd.lsp.updates.update_to_wire`, imported at the first prompt (it
    brings the transcript's module, which start-up does without) and kept:
    an import statement in `prompt` cost every prompt 0.045 ms once the
    daemon had idled, the module long loaded."""
    from agentd.lsp.updates import update_to_wire

    return update_to_wire


async def prompt(ls: AgentdServer, app: App, p: PromptParams | TextPrompt) -> dict[str, Any]:
    update_to_wire = _update_to_wire()
    content: UserInput
    if isinstance(p, TextPrompt):  # text only, read without pydantic (`_request`)
        content = p.text
    else:
        content = prompt_input(
            p.prompt
            if isinstance(p.prompt, str)
            else [b.model_dump(by_alias=True) for b in p.prompt],
            app.settings.limits.max_image_bytes,
        )
    sid = p.session_id
    notify = ls.agentd_protocol.notify

    def emit(update: Update) -> None:
        notify("agent/update", {"sessionId": sid, "update": update_to_wire(update)})

    app.core.get(sid)  # unknown session -> -32001 before anything runs
    ls.agentd_protocol.after_reply(ls.agentd_protocol.msg_id, lambda: app.core.after_reply(sid))
    outcome = await app.core.prompt(sid, content, emit)
    result: dict[str, Any] = {
        "stopReason": outcome.stop_reason,
        "usage": outcome.usage.to_json(),
    }
    if outcome.error is not None:
        result["error"] = outcome.error
    return result


async def reset_session(ls: AgentdServer, app: App, p: SessionParams) -> dict[str, Any]:
    await app.core.reset(p.session_id)
    return {}


async def close_session(ls: AgentdServer, app: App, p: SessionParams) -> dict[str, Any]:
    await app.core.close(p.session_id)
    return {}


async def list_sessions(ls: AgentdServer, app: App, p: WorkspaceParams) -> dict[str, Any]:
    return await app.list_sessions(workspace_path(p.workspace_root))


async def load_session(ls: AgentdServer, app: App, p: LoadSessionParams) -> dict[str, Any]:
    from agentd.agent.session import AwaitClientResult
    from agentd.lsp.updates import update_to_wire

    sid = p.session_id
    notify = ls.agentd_protocol.notify

    def emit(update: Update) -> None:
        notify("agent/update", {"sessionId": sid, "update": update_to_wire(update)})

    from agentd.lsp.updates import plan_to_wire

    root = workspace_path(p.workspace_root) if p.workspace_root else None
    # Given, the list replaces the session's; absent, the session keeps its own.
    extra = None
    if p.additional_directories is not None:
        extra = additional_roots(p.additional_directories, root, agentd_folders)
    session = await app.core.load_session(
        sid, AwaitClientResult(app.client_specs), emit, root, additional_roots=extra
    )
    app.attach_tools(session, _permissions(ls), elicitor=_elicitor(ls))
    setup = _setup(app.settings, session.mode, app.core.model_of(session))
    return {**setup, **_roots(session), "plan": plan_to_wire(session.plan)}


def _roots(session: Session) -> dict[str, Any]:
    """The session's folders as the daemon has them (a load's, a fork's
    reply): what an editor checks its own tools' paths against."""
    return {
        "workspaceRoot": str(session.workspace_root),
        "additionalDirectories": [str(r) for r in session.additional_roots],
    }


async def fork_session(ls: AgentdServer, app: App, p: ForkSessionParams) -> dict[str, Any]:
    """A new session holding a copy of the source's completed turns
    (`AgentCore.fork_session`); no replay (`agent/loadSession` gives one)."""
    from agentd.agent.modes import MODES
    from agentd.agent.session import AwaitClientResult
    from agentd.lsp.updates import plan_to_wire

    root = pin_root(workspace_path(p.workspace_root)) if p.workspace_root else None
    # Given, the fork's list; absent, the source's.
    extra = None
    if p.additional_directories is not None:
        extra = [
            pin_root(r) for r in additional_roots(p.additional_directories, root, agentd_folders)
        ]
    mode = check_choice(p.mode, list(MODES), "mode") if p.mode is not None else None
    model = None
    if p.model is not None:
        model = check_choice(p.model, [m for m, _ in app.settings.model_choices()], "model")
    session = await app.core.fork_session(
        p.session_id,
        root,
        AwaitClientResult(app.client_specs),
        mode=mode,
        model=model,
        additional_roots=extra,
    )
    app.attach_tools(session, _permissions(ls), elicitor=_elicitor(ls))
    app.start_memory(session.workspace_root)
    setup = _setup(app.settings, session.mode, app.core.model_of(session))
    return {"sessionId": session.id, **setup, **_roots(session), "plan": plan_to_wire(session.plan)}


async def delete_session(ls: AgentdServer, app: App, p: SessionParams) -> dict[str, Any]:
    return {"deleted": await app.delete_session(p.session_id)}


async def set_mode(ls: AgentdServer, app: App, p: SetModeParams) -> dict[str, Any]:
    from agentd.agent.modes import MODES
    from agentd.events import ModeChanged
    from agentd.lsp.updates import update_to_wire

    session = app.core.set_mode(p.session_id, check_choice(p.mode, list(MODES), "mode"))
    update = update_to_wire(ModeChanged(session.mode))
    ls.agentd_protocol.notify("agent/update", {"sessionId": session.id, "update": update})
    return {"mode": session.mode}


async def set_model(ls: AgentdServer, app: App, p: SetModelParams) -> dict[str, Any]:
    choices = [m for m, _ in app.settings.model_choices()]
    session = app.core.set_model(p.session_id, check_choice(p.model, choices, "model"))
    return {"model": app.core.model_of(session)}


async def list_commands(ls: AgentdServer, app: App, p: ListCommandsParams) -> dict[str, Any]:
    if p.session_id is not None:
        app.core.get(p.session_id)  # an unknown session is -32001, as elsewhere
    commands = []
    for c in app.core.commands():
        command = {"name": c.name, "description": c.description}
        if c.hint is not None:
            command["hint"] = c.hint
        commands.append(command)
    return {"commands": commands}


async def compact(ls: AgentdServer, app: App, p: CompactParams) -> dict[str, Any]:
    from agentd.lsp.updates import update_to_wire

    sid = p.session_id
    notify = ls.agentd_protocol.notify

    def emit(update: Update) -> None:
        notify("agent/update", {"sessionId": sid, "update": update_to_wire(update)})

    report = await app.core.compact(sid, p.instructions, emit)
    return update_to_wire(report)


async def cancel(ls: AgentdServer, app: App, p: SessionParams) -> None:
    app.core.cancel(p.session_id)


async def tool_result(ls: AgentdServer, app: App, p: ToolResultParams) -> None:
    content = p.content if isinstance(p.content, str) else "".join(b.text for b in p.content)
    if not app.core.tool_result(p.session_id, p.tool_call_id, content, p.is_error):
        log.info("late or unknown tool result %.200r ignored", p.tool_call_id)


# --- memory/* ---------------------------------------------------------------------------


async def memory_list(ls: AgentdServer, app: App, p: WorkspaceParams) -> dict[str, Any]:
    return await app.memory_list(workspace_path(p.workspace_root))


async def memory_recall(ls: AgentdServer, app: App, p: RecallParams) -> dict[str, Any]:
    return await app.memory_recall(workspace_path(p.workspace_root), p.query, p.limit)


async def memory_status(ls: AgentdServer, app: App, p: WorkspaceParams) -> dict[str, Any]:
    return await app.memory_status(workspace_path(p.workspace_root))


# --- mcp/* -----------------------------------------------------------------------------------


async def mcp_status(ls: AgentdServer, app: App, p: Empty) -> dict[str, Any]:
    return app.mcp.status()


async def _test_fail(ls: AgentdServer, app: App, p: Empty) -> None:
    # As a real bug's exception may, it carries a request body of 1.6 MB.
    raise RuntimeError("injected handler failure: " + "x" * 1_600_000)


REQUESTS: dict[str, Handler] = {
    "agent/newSession": new_session,
    "agent/prompt": prompt,
    "agent/resetSession": reset_session,
    "agent/closeSession": close_session,
    "agent/listSessions": list_sessions,
    "agent/loadSession": load_session,
    "agent/forkSession": fork_session,
    "agent/deleteSession": delete_session,
    "agent/setMode": set_mode,
    "agent/setModel": set_model,
    "agent/listCommands": list_commands,
    "agent/compact": compact,
    "memory/list": memory_list,
    "memory/recall": memory_recall,
    "memory/status": memory_status,
    "mcp/status": mcp_status,
}
# Answered from the settings, before the App is built (see the module docstring).
FROM_SETTINGS = frozenset({"agent/newSession"})
NOTIFICATIONS: dict[str, Handler] = {
    "agent/cancel": cancel,
    "agent/toolResult": tool_result,
}


def register(server: AgentdServer) -> None:
    if os.environ.get("AGENTD_TEST_FAULTS") == "1":
        # A handler that always raises, so tests can prove -32603 and survival.
        _request(server, "agentd/_fail", _test_fail)
    for method, impl in REQUESTS.items():
        _request(server, method, impl)
    for method, impl in NOTIFICATIONS.items():
        _notification(server, method, impl)
