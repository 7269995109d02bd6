"""Thin ACP handlers: validate params, call the core, convert the result.

Imported by the warm-up thread, after `initialize` has been answered, so it
may import pydantic and the core at module level. `dispatch` is the one place
that maps agentd's `ProtocolError`s to ACP error codes:

| agentd            | ACP                                   |
| ----------------- | ------------------------------------- |
| `InvalidParams`   | `-32602`, naming the field            |
| `SessionNotFound` | `-32002` (ACP's "resource not found") |
| `SessionBusy`     | `-32003` (agentd's, as over LSP)      |
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from agentd.acp import params as wire
from agentd.acp.rpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    RpcError,
)
from agentd.acp.updates import to_acp
from agentd.agent.events import ToolCallUpdate, Update
from agentd.agent.turn import prompt_text
from agentd.app import App
from agentd.errors import InvalidParams, ProtocolError, SessionNotFound
from agentd.params import validate_params, workspace_path

if TYPE_CHECKING:
    from agentd.acp.server import AcpServer, Request

log = logging.getLogger("agentd.acp")

M = TypeVar("M", bound=BaseModel)
Handler = Callable[["AcpServer", App, "Request"], Awaitable[Any]]

# agentd's stop reasons -> ACP's (an "error" outcome is an error reply instead).
STOP_REASONS = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "max_turns": "max_turn_requests",
    "token_limit": "max_tokens",
    "refusal": "refusal",
}


async def dispatch(server: AcpServer, app: App, request: Request) -> Any:
    from agentd.acp.server import REQUESTS

    name, needs = REQUESTS[request.method]
    if needs and not any(_offers(app, n) for n in needs):
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
    handler: Handler = globals()[name]
    try:
        return await handler(server, app, request)
    except ProtocolError as exc:
        code = RESOURCE_NOT_FOUND if isinstance(exc, SessionNotFound) else exc.code
        raise RpcError(code, exc.message, exc.data) from None


def _offers(app: App, name: str) -> bool:
    return callable(getattr(app.core, name, None)) or callable(getattr(app, name, None))


def validate(method: str, model: type[M], params: Any) -> M:
    return validate_params(method, model, params)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


# --- initialization and sessions --------------------------------------------------------


async def authenticate(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    # No auth methods are advertised: the key comes from the environment or config file.
    validate(request.method, wire.AuthenticateParams, request.params)
    return {}


async def new_session(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    p = validate(request.method, wire.NewSessionParams, request.params)
    root = workspace_path(p.cwd, "cwd")
    session = app.core.new_session(root, server.runner)
    if getattr(app, "recall", None) is not None:
        # Index the project's memory now, so that it is ready by the first prompt.
        app.supervisor.spawn(app.project_memory(root), name=f"memory-start:{root.name}")
    return {"sessionId": session.id}


async def load_session(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    p = validate(request.method, wire.LoadSessionParams, request.params)
    root = workspace_path(p.cwd, "cwd")

    def emit(update: Update) -> None:
        _send(server, p.session_id, update, root)

    # The core restores the session and replays its history through `emit`.
    loader = app.core.load_session
    await _maybe_await(loader(p.session_id, server.runner, emit, root))
    return {}


async def list_sessions(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    root = _workspace(validate(request.method, wire.WorkspaceParams, request.params))
    return app.list_sessions(root)


async def reset_session(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    p = validate(request.method, wire.SessionParams, request.params)
    await app.core.reset(p.session_id)
    server.runner.forget(p.session_id)
    return {}


async def close_session(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    p = validate(request.method, wire.SessionParams, request.params)
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


def flatten_prompt(blocks: list[Any]) -> str:
    for i, block in enumerate(blocks):
        if isinstance(block, wire.ImageBlock | wire.AudioBlock):
            raise InvalidParams(
                f"Invalid params for session/prompt: prompt.{i}: {block.type} content is not "
                f"supported (promptCapabilities.{block.type} is false)",
                {"fields": [{"field": f"prompt.{i}.type", "message": "not supported"}]},
            )
    return prompt_text([b.model_dump(by_alias=True, exclude_none=True) for b in blocks])


async def prompt(server: AcpServer, app: App, request: Request) -> dict[str, Any]:
    p = validate(request.method, wire.PromptParams, request.params)
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


def _workspace(p: wire.WorkspaceParams) -> Path:
    value = p.workspace_root if p.workspace_root is not None else p.cwd
    if value is None:
        raise InvalidParams(
            "Invalid params: workspaceRoot: Field required",
            {"fields": [{"field": "workspaceRoot", "message": "Field required"}]},
        )
    return workspace_path(value, "workspaceRoot" if p.workspace_root is not None else "cwd")


async def memory_list(server: AcpServer, app: App, request: Request) -> Any:
    root = _workspace(validate(request.method, wire.WorkspaceParams, request.params))
    return await app.memory_list(root)


async def memory_recall(server: AcpServer, app: App, request: Request) -> Any:
    p = validate(request.method, wire.RecallParams, request.params)
    return await app.memory_recall(_workspace(p), p.query, p.limit)


async def memory_status(server: AcpServer, app: App, request: Request) -> Any:
    root = _workspace(validate(request.method, wire.WorkspaceParams, request.params))
    return await app.memory_status(root)
