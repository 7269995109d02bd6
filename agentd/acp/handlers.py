"""Thin ACP handlers: validate params, call the core, convert the result.

`HANDLERS` at the bottom is the one table of the methods agentd answers: the
server routes by it and advertises from it (`session/load`, the `_agentd/*`
extension methods), so adding a method is a function here, a line in the
table and a params model in `params.py`.

Each handler takes `(server, app, request, p)`, `p` annotated with its params
model; `dispatch` validates the params against that model (`agentd.params`)
and is the one place that maps agentd's `ProtocolError`s to ACP error codes:

| agentd            | ACP                                   |
| ----------------- | ------------------------------------- |
| `InvalidParams`   | `-32602`, naming the field            |
| `SessionNotFound` | `-32002` (ACP's "resource not found") |
| `SessionBusy`     | `-32003` (agentd's, as over LSP)      |

Imported before `initialize` is answered (the server routes by the table),
so at run time this module needs only the stdlib and agentd's light modules:
the params models, pydantic and the App are imported for type checking only
and are in memory by the time a handler runs (the warm-up imports them).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.acp.rpc import RpcError
from agentd.acp.updates import to_acp
from agentd.errors import (
    INTERNAL_ERROR,
    RESOURCE_NOT_FOUND,
    InvalidParams,
    ProtocolError,
    SessionNotFound,
)
from agentd.events import ToolCallUpdate, Update
from agentd.params import params_model, prompt_text, validate_params, workspace_path

if TYPE_CHECKING:
    from agentd.acp.params import (
        AuthenticateParams,
        ContentBlock,
        LoadSessionParams,
        NewSessionParams,
        PromptParams,
        RecallParams,
        SessionParams,
        WorkspaceParams,
    )
    from agentd.acp.server import AcpServer, Request
    from agentd.app import App

log = logging.getLogger("agentd.acp")

Handler = Callable[["AcpServer", "App", "Request", Any], Awaitable[Any]]
# Where the params models live; imported by the warm-up thread.
MODELS = "agentd.acp.params"

# agentd's stop reasons -> ACP's (an "error" outcome is an error reply instead).
STOP_REASONS = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "max_turns": "max_turn_requests",
    "token_limit": "max_tokens",
    "refusal": "refusal",
}


async def dispatch(server: AcpServer, app: App, request: Request) -> Any:
    handler = HANDLERS[request.method]
    try:
        model = params_model(handler, importlib.import_module(MODELS))
        p = validate_params(request.method, model, request.params)
        return await handler(server, app, request, p)
    except ProtocolError as exc:
        code = RESOURCE_NOT_FOUND if isinstance(exc, SessionNotFound) else exc.code
        raise RpcError(code, exc.message, exc.data) from None


# --- initialization and sessions --------------------------------------------------------


async def authenticate(
    server: AcpServer, app: App, request: Request, p: AuthenticateParams
) -> dict[str, Any]:
    # No auth methods are advertised: the key comes from the environment or config file.
    return {}


async def new_session(
    server: AcpServer, app: App, request: Request, p: NewSessionParams
) -> dict[str, Any]:
    root = workspace_path(p.cwd, "cwd")
    session = app.core.new_session(root, server.runner)
    app.start_memory(root)
    return {"sessionId": session.id}


async def load_session(
    server: AcpServer, app: App, request: Request, p: LoadSessionParams
) -> dict[str, Any]:
    root = workspace_path(p.cwd, "cwd")

    def emit(update: Update) -> None:
        _send(server, p.session_id, update, root)

    # The core restores the session and replays its history through `emit`.
    app.core.load_session(p.session_id, server.runner, emit, root)
    return {}


async def list_sessions(
    server: AcpServer, app: App, request: Request, p: WorkspaceParams
) -> dict[str, Any]:
    return app.list_sessions(_workspace(p))


async def reset_session(
    server: AcpServer, app: App, request: Request, p: SessionParams
) -> dict[str, Any]:
    await app.core.reset(p.session_id)
    server.runner.forget(p.session_id)
    return {}


async def close_session(
    server: AcpServer, app: App, request: Request, p: SessionParams
) -> dict[str, Any]:
    await app.core.close(p.session_id)
    server.runner.forget(p.session_id)
    return {}


# --- the prompt turn --------------------------------------------------------------------


def _send(server: AcpServer, session_id: str, update: Update, root: Path) -> None:
    runner = server.runner
    message = to_acp(session_id, update, root, runner.display)
    if message is not None:
        server.conn.notify(*message)
    if isinstance(update, ToolCallUpdate) and update.status != "running":
        runner.display.pop(update.tool_call_id, None)


def flatten_prompt(blocks: list[ContentBlock]) -> str:
    for i, block in enumerate(blocks):
        if block.type in ("image", "audio"):
            raise InvalidParams(
                f"Invalid params for session/prompt: prompt.{i}: {block.type} content is not "
                f"supported (promptCapabilities.{block.type} is false)",
                {"fields": [{"field": f"prompt.{i}.type", "message": "not supported"}]},
            )
    return prompt_text([b.model_dump(by_alias=True, exclude_none=True) for b in blocks])


async def prompt(server: AcpServer, app: App, request: Request, p: PromptParams) -> dict[str, Any]:
    text = flatten_prompt(p.prompt)
    sid = p.session_id
    session = app.core.get(sid)
    state = request.prompt
    assert state is not None and state.session_id == sid
    if state.cancel_requested:
        return {"stopReason": "cancelled"}

    def emit(update: Update) -> None:
        _send(server, sid, update, session.workspace_root)

    state.started = True
    request.after_reply.append(lambda: app.core.after_reply(sid))
    try:
        outcome = await app.core.prompt(sid, text, emit)
    except asyncio.CancelledError:
        if server.closing:
            raise  # shutdown, not the user: not an outcome
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        await server.drain(sid)
        return {"stopReason": "cancelled"}
    if outcome.stop_reason == "error":
        # ACP has no "error" stop reason: a failed model request is an error reply,
        # which clients show as such. The partial answer stays in the history.
        error = outcome.error or {"kind": "model_error", "message": "the model request failed"}
        raise RpcError(INTERNAL_ERROR, str(error.get("message")), {"agentd": error})
    usage = {"inputTokens": outcome.usage.input_tokens, "outputTokens": outcome.usage.output_tokens}
    return {
        "stopReason": STOP_REASONS[outcome.stop_reason],
        "_meta": {"agentd": {"stopReason": outcome.stop_reason, "usage": usage}},
    }


# --- memory extension methods ------------------------------------------------------------
#
# The results are those of the LSP `memory/*` requests, built by the App.


def _workspace(p: WorkspaceParams) -> Path:
    value = p.workspace_root if p.workspace_root is not None else p.cwd
    if value is None:
        raise InvalidParams(
            "Invalid params: workspaceRoot: Field required",
            {"fields": [{"field": "workspaceRoot", "message": "Field required"}]},
        )
    return workspace_path(value, "workspaceRoot" if p.workspace_root is not None else "cwd")


async def memory_list(
    server: AcpServer, app: App, request: Request, p: WorkspaceParams
) -> dict[str, Any]:
    return await app.memory_list(_workspace(p))


async def memory_recall(
    server: AcpServer, app: App, request: Request, p: RecallParams
) -> dict[str, Any]:
    return await app.memory_recall(_workspace(p), p.query, p.limit)


async def memory_status(
    server: AcpServer, app: App, request: Request, p: WorkspaceParams
) -> dict[str, Any]:
    return await app.memory_status(_workspace(p))


# Every request agentd answers besides `initialize` (the server's own, as it
# starts the warm-up). Methods starting with `_` are ACP extension methods.
HANDLERS: dict[str, Handler] = {
    "authenticate": authenticate,
    "session/new": new_session,
    "session/load": load_session,
    "session/prompt": prompt,
    "_agentd/session/list": list_sessions,
    "_agentd/session/reset": reset_session,
    "_agentd/session/close": close_session,
    "_agentd/memory/status": memory_status,
    "_agentd/memory/list": memory_list,
    "_agentd/memory/recall": memory_recall,
}
