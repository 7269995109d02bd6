"""Thin ACP handlers: validate params, call the core, convert the result.

`HANDLERS` at the bottom is the one table of the methods agentd answers: the
server routes by it and advertises from it (`session/load`, the `_agentd/*`
extension methods), so adding a method is a function here, a line in the
table and a params model in `params.py`.

Each handler takes `(server, app, request, p)`, `p` annotated with its params
model; `dispatch` waits for the App (`server.warmup`), validates the params
against that model (`agentd.params`) and is the one place that maps agentd's
`ProtocolError`s to ACP error codes:

| agentd            | ACP                                   |
| ----------------- | ------------------------------------- |
| `InvalidParams`   | `-32602`, naming the field            |
| `SessionNotFound` | `-32002` (ACP's "resource not found") |
| `SessionBusy`     | `-32003` (agentd's, as over LSP)      |
| `SessionInUse`    | `-32004` (agentd's, as over LSP)      |

`session/new` (in `FROM_SETTINGS`) takes the settings instead of the App: it
is answered as soon as they are loaded, while the warm-up still builds the
App, and the session is created in the core once the App exists
(`Warmup.when_built`), before any request that names it runs.

Some replies are followed by notifications the client needs the reply's
result to read (`available_commands_update` after `session/new`): they are
queued on `request.after_reply`, which the server runs once the reply is
written.

Imported before `initialize` is answered (the server routes by the table),
so at run time this module needs only the stdlib and agentd's light modules:
the params models, pydantic and the App are imported for type checking only
and are in memory by the time a handler runs (the warm-up imports them).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.acp import nes, options, providers
from agentd.acp.rpc import RpcError
from agentd.acp.updates import SESSION_UPDATE, Outgoing, to_acp
from agentd.agent.modes import MODES
from agentd.errors import (
    INTERNAL_ERROR,
    RESOURCE_NOT_FOUND,
    InvalidParams,
    ProtocolError,
    SessionNotFound,
)
from agentd.events import ModeChanged, ToolCallUpdate, Update
from agentd.layout import agentd_folders
from agentd.messages import clean_text
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
    from agentd.acp.params import (
        AuthenticateParams,
        ContentBlock,
        Empty,
        ForkSessionParams,
        ListSessionsParams,
        LoadSessionParams,
        McpMessageParams,
        McpServer,
        NewSessionParams,
        PromptParams,
        ProviderParams,
        RecallParams,
        SessionParams,
        SetConfigOptionParams,
        SetModeParams,
        SetProviderParams,
        StatusParams,
        WorkspaceParams,
    )
    from agentd.acp.server import AcpServer, Request
    from agentd.agent.session import Session
    from agentd.agent.turn import UserInput
    from agentd.app import App
    from agentd.config import McpServerSettings, Settings

log = logging.getLogger("agentd.acp")

# A `serverId` longer than this is refused (it is sent back in `mcp/connect`).
MAX_SERVER_ID = 1024

# The second argument is the App, or the Settings for the methods in `FROM_SETTINGS`.
Handler = Callable[["AcpServer", Any, "Request", Any], Awaitable[Any]]
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


async def dispatch(server: AcpServer, request: Request) -> Any:
    handler = HANDLERS[request.method]
    try:
        target: App | Settings
        if request.method in FROM_SETTINGS:
            target = await server.warmup.wait_settings()
        else:
            # Built long since, as a rule: no coroutine to make and await then.
            target = server.warmup.get() or await server.warmup.wait(request.method)
        p: Any = None
        if request.method == "session/prompt":
            p = text_prompt(request.params, blocks_only=True)
        if p is None:
            model = params_model(handler, importlib.import_module(MODELS))
            p = validate_params(request.method, model, request.params)
        return await handler(server, target, request, p)
    except ProtocolError as exc:
        code = RESOURCE_NOT_FOUND if isinstance(exc, SessionNotFound) else exc.code
        raise RpcError(code, exc.message, exc.data) from None


# --- initialization and sessions --------------------------------------------------------


async def authenticate(
    server: AcpServer, app: App, request: Request, p: AuthenticateParams
) -> dict[str, Any]:
    # No auth methods are advertised: the key comes from the environment or
    # config file, and nothing is held for the connection here.
    return {}


async def logout(server: AcpServer, app: App, request: Request, p: Empty) -> dict[str, Any]:
    """Forgets what this connection holds: the provider the editor set (its
    headers) is dropped, requests go to agentd's own endpoint again
    (`authenticate` holds nothing)."""
    if app.routed_to is not None:
        await app.route_model(None)
    return {}


# --- providers (agentd.acp.providers) ---------------------------------------------------


async def list_providers(server: AcpServer, app: App, request: Request, p: Empty) -> dict[str, Any]:
    return providers.provider_list(app)


async def set_provider(
    server: AcpServer, app: App, request: Request, p: SetProviderParams
) -> dict[str, Any]:
    """The next model request of every session goes to the editor's endpoint."""
    await app.route_model(providers.routed_config(app.settings.provider_config(), p))
    return {}


async def disable_provider(
    server: AcpServer, app: App, request: Request, p: ProviderParams
) -> dict[str, Any]:
    """Back to agentd's own endpoint; an unknown id is a success, as ACP asks."""
    if p.provider_id == providers.PROVIDER_ID and app.routed_to is not None:
        await app.route_model(None)
    return {}


def mcp_servers(entries: list[McpServer]) -> dict[str, McpServerSettings]:
    """ACP `mcpServers` -> settings by name; -32602 naming the entry that cannot be used."""
    from pydantic import ValidationError

    from agentd.config import McpServerSettings

    out: dict[str, McpServerSettings] = {}
    for i, entry in enumerate(entries):
        if entry.type not in (None, "stdio", "http", "sse", "acp"):
            log.warning(
                "MCP server %.200r of type %.200r skipped: not supported", entry.name, entry.type
            )
            continue
        if entry.type == "acp":
            out[entry.name] = _acp_server(i, entry)
            continue
        spec: dict[str, Any] = {"type": entry.type}
        if entry.command is not None:
            spec.update(
                command=entry.command, args=entry.args, env={e.name: e.value for e in entry.env}
            )
        if entry.url is not None:
            spec.update(url=entry.url, headers={h.name: h.value for h in entry.headers})
        try:
            out[entry.name] = McpServerSettings.model_validate(spec)
        except ValidationError as exc:
            why = "; ".join(err["msg"] for err in exc.errors())
            raise InvalidParams.of(f"mcpServers.{i}", why) from None
    return out


def _acp_server(i: int, entry: McpServer) -> McpServerSettings:
    """A server the editor provides over this connection: its `serverId` goes
    back to it in `mcp/connect`, so it must be text it can read."""
    from agentd.config import McpServerSettings

    server_id = entry.server_id
    why = None
    if not server_id:
        why = "Field required"
    elif len(server_id) > MAX_SERVER_ID:
        why = f"longer than {MAX_SERVER_ID} characters"
    elif clean_text(server_id) != server_id:
        why = "not valid Unicode (a lone surrogate)"
    if why is not None:
        raise InvalidParams.of(f"mcpServers.{i}.serverId", why)
    return McpServerSettings(type="acp", server_id=server_id)


async def new_session(
    server: AcpServer, settings: Settings, request: Request, p: NewSessionParams
) -> dict[str, Any]:
    """Answered from the settings; the session is made in the core as soon as
    the App exists (at once if it does), before a request can name it."""
    # Pinned now, while the session may be made later (`when_built`): its
    # tools stay in the folder the editor named (`agentd.paths.real_root`).
    root = pin_root(workspace_path(p.cwd, "cwd"))
    extra = [
        pin_root(r) for r in additional_roots(p.additional_directories or [], root, agentd_folders)
    ]
    servers = mcp_servers(p.mcp_servers)
    sid = uuid.uuid4().hex

    def create(app: App) -> None:
        session = app.core.new_session(root, server.runner, sid, extra)
        app.start_memory(root, server.warmup.take_memory_ahead(root))
        app.attach_tools(session, server.runner, servers, server.elicitor)

    if settings.memory.enabled:
        server.warmup.scan_memory_ahead(root)
    server.warmup.when_built(create)
    _after(server, request, options.commands_update(sid))
    request.after_reply.append(lambda: _prepare(server, sid))
    return {"sessionId": sid, **options.new_session_setup(settings)}


def _prepare(server: AcpServer, sid: str) -> None:
    # What its first prompt needs, set up ahead once the reply is out.
    app = server.warmup.get()
    if app is not None:
        app.core.prepare_session(sid)


async def load_session(
    server: AcpServer, app: App, request: Request, p: LoadSessionParams
) -> dict[str, Any]:
    root = workspace_path(p.cwd, "cwd")
    extra = additional_roots(p.additional_directories or [], root, agentd_folders)

    def emit(update: Update) -> None:
        _send(server, p.session_id, update, root)

    servers = mcp_servers(p.mcp_servers)
    # The core restores the session and replays its history through `emit`;
    # the request's list is the session's from now on (ACP: none when omitted).
    session = await app.core.load_session(
        p.session_id, server.runner, emit, root, root_field="cwd", additional_roots=extra
    )
    app.attach_tools(session, server.runner, servers, server.elicitor)
    _after(server, request, options.commands_update(session.id))
    return options.session_setup(app.core, session)


async def resume_session(
    server: AcpServer, app: App, request: Request, p: LoadSessionParams
) -> dict[str, Any]:
    """`session/load` without the replay: the client still shows the conversation."""
    root = workspace_path(p.cwd, "cwd")
    extra = additional_roots(p.additional_directories or [], root, agentd_folders)
    servers = mcp_servers(p.mcp_servers)
    session = await app.core.load_session(
        p.session_id,
        server.runner,
        lambda update: None,
        root,
        root_field="cwd",
        additional_roots=extra,
    )
    app.attach_tools(session, server.runner, servers, server.elicitor)
    _after(server, request, options.commands_update(session.id))
    return options.session_setup(app.core, session)


async def fork_session(
    server: AcpServer, app: App, request: Request, p: ForkSessionParams
) -> dict[str, Any]:
    """A new session holding a copy of the source's completed turns
    (`AgentCore.fork_session`), set up as `session/new`'s: in `cwd` (confined
    to it as a new session is), with the `mcpServers` given. No replay: the
    client shows the conversation it forked; the title follows the reply.
    Its additional roots are the request's (none when omitted, as ACP says)."""
    root = pin_root(workspace_path(p.cwd, "cwd"))
    extra = [
        pin_root(r) for r in additional_roots(p.additional_directories or [], root, agentd_folders)
    ]
    servers = mcp_servers(p.mcp_servers)
    session = await app.core.fork_session(p.session_id, root, server.runner, additional_roots=extra)
    app.start_memory(root)
    app.attach_tools(session, server.runner, servers, server.elicitor)
    _after(server, request, options.commands_update(session.id))
    if session.title:
        info = {"sessionUpdate": "session_info_update", "title": session.title}
        _after(server, request, (SESSION_UPDATE, {"sessionId": session.id, "update": info}))
    return {"sessionId": session.id, **options.session_setup(app.core, session)}


async def delete_session(
    server: AcpServer, app: App, request: Request, p: SessionParams
) -> dict[str, Any]:
    """Closes the session if it is live (a running prompt ends `cancelled`),
    then removes its transcript. Idempotent, as ACP asks: an id that names
    nothing is answered `{}` too (`_meta.agentd.deleted` says which)."""
    deleted = await app.delete_session(p.session_id)
    server.runner.forget(p.session_id)
    return {"_meta": {"agentd": {"deleted": deleted}}}


async def list_sessions(
    server: AcpServer, app: App, request: Request, p: ListSessionsParams
) -> dict[str, Any]:
    root = workspace_path(p.cwd, "cwd") if p.cwd is not None else None
    return await app.session_page(root, p.cursor)


async def set_mode(
    server: AcpServer, app: App, request: Request, p: SetModeParams
) -> dict[str, Any]:
    mode = check_choice(p.mode_id, list(MODES), "modeId")
    session = app.core.set_mode(p.session_id, mode)
    _mode_changed(server, app, session)
    server.conn.notify(*options.options_update(app.core, session))
    return {}


async def set_config_option(
    server: AcpServer, app: App, request: Request, p: SetConfigOptionParams
) -> dict[str, Any]:
    session = app.core.get(p.session_id)
    if p.config_id == options.MODE_OPTION:
        app.core.set_mode(session.id, check_choice(p.value, list(MODES), "value"))
        _mode_changed(server, app, session)
    elif p.config_id == options.MODEL_OPTION:
        choices = [m for m, _ in app.core.settings.model_choices()]
        app.core.set_model(session.id, check_choice(p.value, choices, "value"))
    else:
        check_choice(p.config_id, [options.MODE_OPTION, options.MODEL_OPTION], "configId")
    return {"configOptions": options.config_options(app.core, session)}


def _mode_changed(server: AcpServer, app: App, session: Session) -> None:
    # For clients of the older modes API; config-option clients read the reply.
    _send(server, session.id, ModeChanged(session.mode), session.workspace_root)


def _after(server: AcpServer, request: Request, message: Outgoing) -> None:
    request.after_reply.append(lambda: server.conn.notify(*message))


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


async def list_sessions_ext(
    server: AcpServer, app: App, request: Request, p: WorkspaceParams
) -> dict[str, Any]:
    """`_agentd/session/list`: every session of a workspace, as `agent/listSessions`."""
    return await app.list_sessions(_workspace(p))


# --- the prompt turn --------------------------------------------------------------------


def _send(server: AcpServer, session_id: str, update: Update, root: Path) -> None:
    runner = server.runner
    message = to_acp(session_id, update, root, runner.display)
    if message is not None:
        server.conn.notify(*message)
    if isinstance(update, ToolCallUpdate) and update.status != "running":
        runner.display.pop(update.tool_call_id, None)


def prompt_content(blocks: list[ContentBlock], max_image_bytes: int) -> UserInput:
    for i, block in enumerate(blocks):
        if block.type == "audio":
            raise InvalidParams(
                f"Invalid params for session/prompt: prompt.{i}: audio content is not "
                "supported (promptCapabilities.audio is false)",
                {"fields": [{"field": f"prompt.{i}.type", "message": "not supported"}]},
            )
    dumped = [b.model_dump(by_alias=True, exclude_none=True) for b in blocks]
    return prompt_input(dumped, max_image_bytes)


async def prompt(
    server: AcpServer, app: App, request: Request, p: PromptParams | TextPrompt
) -> dict[str, Any]:
    content: UserInput
    if isinstance(p, TextPrompt):  # text only, read without pydantic (`dispatch`)
        content = p.text
    else:
        content = prompt_content(p.prompt, app.settings.limits.max_image_bytes)
    sid = p.session_id
    session = app.core.get(sid)
    state = request.prompt
    assert state is not None and state.session_id == sid
    if state.cancel_requested:
        return _cancelled(None)

    def emit(update: Update) -> None:
        _send(server, sid, update, session.workspace_root)

    state.started = True
    request.after_reply.append(lambda: app.core.after_reply(sid))
    title = session.title
    try:
        outcome = await app.core.prompt(sid, content, emit)
    except asyncio.CancelledError:
        if server.closing:
            raise  # shutdown, not the user: not an outcome
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        await server.drain(sid)
        return _cancelled(session)
    finally:
        if session.title and session.title != title:
            # The conversation got its title (its first prompt, or the first after a reset).
            update = {"sessionUpdate": "session_info_update", "title": session.title}
            server.conn.notify("session/update", {"sessionId": sid, "update": update})
    if outcome.stop_reason == "error":
        # ACP has no "error" stop reason: a failed model request is an error reply,
        # which clients show as such. The partial answer stays in the history.
        error = outcome.error or {"kind": "model_error", "message": "the model request failed"}
        raise RpcError(INTERNAL_ERROR, str(error.get("message")), {"agentd": error})
    return {
        "stopReason": STOP_REASONS[outcome.stop_reason],
        "_meta": {"agentd": {"stopReason": outcome.stop_reason, "usage": outcome.usage.to_json()}},
    }


def _cancelled(session: Session | None) -> dict[str, Any]:
    """A cancelled prompt's reply, with what it used before the cancel (nothing
    when it was cancelled before it started)."""
    usage = (
        session.prompt_usage.to_json()
        if session is not None
        else {"inputTokens": 0, "outputTokens": 0}
    )
    return {
        "stopReason": "cancelled",
        "_meta": {"agentd": {"stopReason": "cancelled", "usage": usage}},
    }


# --- memory extension methods ------------------------------------------------------------
#
# The results are those of the LSP `memory/*` requests, built by the App.


def _workspace(p: WorkspaceParams) -> Path:
    value = p.workspace_root if p.workspace_root is not None else p.cwd
    if value is None:
        raise InvalidParams.of("workspaceRoot", "Field required")
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


async def mcp_status(
    server: AcpServer, app: App, request: Request, p: StatusParams
) -> dict[str, Any]:
    return app.mcp.status()


async def mcp_message(
    server: AcpServer, app: App, request: Request, p: McpMessageParams
) -> dict[str, Any]:
    """An inner MCP request from the editor's server (a ping, a sampling or
    elicitation request), answered by agentd's MCP client for that connection."""
    return await server.tunnels.on_request(request.id, p.connection_id, p.method, p.params)


async def _test_fail(server: AcpServer, app: App, request: Request, p: Empty) -> None:
    # As a real bug's exception may, it carries a request body of 1.6 MB.
    raise RuntimeError("injected handler failure: " + "x" * 1_600_000)


# Every request agentd answers besides `initialize` (the server's own, as it
# starts the warm-up). Methods starting with `_` are ACP extension methods.
HANDLERS: dict[str, Handler] = {
    "authenticate": authenticate,
    "logout": logout,
    "providers/list": list_providers,
    "providers/set": set_provider,
    "providers/disable": disable_provider,
    "session/new": new_session,
    "session/load": load_session,
    "session/resume": resume_session,
    "session/list": list_sessions,
    "session/close": close_session,
    "session/fork": fork_session,
    "session/delete": delete_session,
    "session/set_mode": set_mode,
    "session/set_config_option": set_config_option,
    "session/prompt": prompt,
    "_agentd/session/list": list_sessions_ext,
    "_agentd/session/reset": reset_session,
    "_agentd/session/close": close_session,
    "_agentd/memory/status": memory_status,
    "_agentd/memory/list": memory_list,
    "_agentd/memory/recall": memory_recall,
    "_agentd/mcp/status": mcp_status,
    # MCP over ACP: what the editor's own MCP servers send (agentd.acp.mcp_tunnels).
    "mcp/message": mcp_message,
    # Next edit suggestions (agentd.acp.nes); accept/reject come as notifications too.
    "nes/start": nes.start,
    "nes/suggest": nes.suggest,
    "nes/accept": nes.accept,
    "nes/reject": nes.reject,
    "nes/close": nes.close,
}

# Answered from the settings, before the App is built (see the module docstring).
FROM_SETTINGS = frozenset({"session/new"})

if os.environ.get("AGENTD_TEST_FAULTS") == "1":
    # A handler that always raises, so tests can prove -32603 and survival.
    HANDLERS["_agentd/_fail"] = _test_fail
