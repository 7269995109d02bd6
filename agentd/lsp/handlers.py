"""Thin handlers: validate params, call the core, convert the result.

Registered at start-up, but light: pydantic models and the core are imported
inside the handlers, after `await ls.app()` has finished the warm-up.
Each handler is wrapped by `_request` / `_notification`, the one place that
maps validation errors to -32602 naming the fields, agentd's ProtocolErrors
to their codes, and anything unexpected to -32603 (logged; the daemon keeps
serving).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcException, JsonRpcInternalError

if TYPE_CHECKING:
    from agentd.app import App
    from agentd.lsp.server import AgentdServer

log = logging.getLogger("agentd.lsp")

Impl = Callable[["AgentdServer", "App", Any], Awaitable[Any]]


def _validate(method: str, model: Any, params: Any) -> Any:
    from agentd.params import validate_params

    return validate_params(method, model, params)


def _map_error(method: str, exc: Exception) -> JsonRpcException:
    from agentd.errors import ProtocolError

    if isinstance(exc, JsonRpcException):
        return exc
    if isinstance(exc, ProtocolError):
        return JsonRpcException(message=exc.message, code=exc.code, data=exc.data)
    log.exception("handler for %s failed", method)
    return JsonRpcInternalError(message=f"Internal error in {method}: {type(exc).__name__}: {exc}")


def _request(server: AgentdServer, method: str, impl: Impl, params_model: str) -> None:
    async def handler(ls: AgentdServer, params: Any) -> Any:
        try:
            app = await ls.app()
            from agentd.lsp import ext

            model = getattr(ext, params_model)
            return await impl(ls, app, _validate(method, model, params))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _map_error(method, exc) from None

    server.feature(method)(handler)


def _notification(server: AgentdServer, method: str, impl: Impl, params_model: str) -> None:
    async def handler(ls: AgentdServer, params: Any) -> None:
        try:
            app = await ls.app()
            from agentd.lsp import ext

            await impl(ls, app, _validate(method, getattr(ext, params_model), params))
        except Exception as exc:
            # A notification has no reply; say what was wrong in the log.
            log.warning("%s ignored: %s", method, getattr(exc, "message", exc))

    server.feature(method)(handler)


def workspace_path(value: str) -> Path:
    from agentd.params import workspace_path as checked

    return checked(value)


# --- agent/* -------------------------------------------------------------------------


async def new_session(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    from agentd.agent.session import AwaitClientResult

    root = workspace_path(p.workspace_root)
    session = app.core.new_session(root, AwaitClientResult(app.client_specs))
    if app.recall is not None:
        # Index the project's memory now, so that it is ready by the first prompt.
        app.supervisor.spawn(_start_memory(ls, app, root), name=f"memory-start:{root.name}")
    return {"sessionId": session.id}


async def _start_memory(ls: AgentdServer, app: App, root: Path) -> None:
    progress = app.progress_factory("agentd: indexing memory") if app.progress_factory else None
    await app.project_memory(root, progress)


async def prompt(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    from agentd.agent.turn import prompt_text
    from agentd.lsp.updates import update_to_wire

    text = prompt_text(
        p.prompt if isinstance(p.prompt, str) else [b.model_dump(by_alias=True) for b in p.prompt]
    )
    sid = p.session_id
    notify = ls.agentd_protocol.notify

    def emit(update: Any) -> None:
        notify("agent/update", {"sessionId": sid, "update": update_to_wire(update)})

    app.core.get(sid)  # unknown session -> -32001 before anything runs
    ls.agentd_protocol.after_reply(ls.agentd_protocol.msg_id, lambda: app.core.after_reply(sid))
    outcome = await app.core.prompt(sid, text, emit)
    result: dict[str, Any] = {
        "stopReason": outcome.stop_reason,
        "usage": {
            "inputTokens": outcome.usage.input_tokens,
            "outputTokens": outcome.usage.output_tokens,
        },
    }
    if outcome.error is not None:
        result["error"] = outcome.error
    return result


async def reset_session(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    await app.core.reset(p.session_id)
    return {}


async def close_session(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    await app.core.close(p.session_id)
    return {}


async def list_sessions(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    return app.list_sessions(workspace_path(p.workspace_root))


async def load_session(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    from agentd.agent.session import AwaitClientResult
    from agentd.lsp.updates import update_to_wire

    sid = p.session_id
    notify = ls.agentd_protocol.notify

    def emit(update: Any) -> None:
        notify("agent/update", {"sessionId": sid, "update": update_to_wire(update)})

    root = workspace_path(p.workspace_root) if p.workspace_root else None
    app.core.load_session(sid, AwaitClientResult(app.client_specs), emit, root)
    return {}


async def cancel(ls: AgentdServer, app: App, p: Any) -> None:
    app.core.cancel(p.session_id)


async def tool_result(ls: AgentdServer, app: App, p: Any) -> None:
    content = p.content if isinstance(p.content, str) else "".join(b.text for b in p.content)
    if not app.core.tool_result(p.session_id, p.tool_call_id, content, p.is_error):
        log.info("late or unknown tool result %s ignored", p.tool_call_id)


# --- memory/* ---------------------------------------------------------------------------


async def memory_list(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    return await app.memory_list(workspace_path(p.workspace_root))


async def memory_recall(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    return await app.memory_recall(workspace_path(p.workspace_root), p.query, p.limit)


async def memory_status(ls: AgentdServer, app: App, p: Any) -> dict[str, Any]:
    return await app.memory_status(workspace_path(p.workspace_root))


async def _test_fail(ls: AgentdServer, app: App, p: Any) -> None:
    raise RuntimeError("injected handler failure")


def register(server: AgentdServer) -> None:
    import os

    if os.environ.get("AGENTD_TEST_FAULTS") == "1":
        # A handler that always raises, so tests can prove -32603 and survival.
        _request(server, "agentd/_fail", _test_fail, "Empty")
    _request(server, "agent/newSession", new_session, "NewSessionParams")
    _request(server, "agent/prompt", prompt, "PromptParams")
    _request(server, "agent/resetSession", reset_session, "SessionParams")
    _request(server, "agent/closeSession", close_session, "SessionParams")
    _request(server, "agent/listSessions", list_sessions, "WorkspaceParams")
    _request(server, "agent/loadSession", load_session, "LoadSessionParams")
    _request(server, "memory/list", memory_list, "WorkspaceParams")
    _request(server, "memory/recall", memory_recall, "RecallParams")
    _request(server, "memory/status", memory_status, "WorkspaceParams")
    _notification(server, "agent/cancel", cancel, "SessionParams")
    _notification(server, "agent/toolResult", tool_result, "ToolResultParams")
