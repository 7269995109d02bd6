"""ACP next edit suggestions: `nes/*` and the `document/*` notifications.

The editor starts an NES session (`nes/start`, its own ids: not a chat
session), keeps it told of its documents (`document/didOpen`, `didChange`,
`didClose`, `didSave`, `didFocus`) and asks for a prediction at the cursor
(`nes/suggest`); `nes/accept` / `nes/reject` tell what became of one, and
`nes/close` forgets the session. The sessions and their documents are
`agentd.nes.documents`'; the prediction is `agentd.nes.predict`'s.

- Notifications with bad params are dropped with a short log line, never
  answered; those naming an unknown session or a URI outside its folders
  are ignored.
- A `nes/suggest` ends the one of the same NES session still in flight:
  that one answers `suggestions: []` (superseded: the editor asked anew),
  its model stream closed. `$/cancel_request` naming it answers -32800.
- The suggestion is made on the text the editor sent, at the version it
  names: another version (or a document dropped or not open) is
  `suggestions: []`, as is a document changed while the model answered.

Imported before `initialize` is answered (the server routes the document
notifications here): stdlib and agentd's light modules only at import time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from agentd.acp.rpc import RpcError
from agentd.errors import INTERNAL_ERROR, REQUEST_CANCELLED, InvalidParams, SessionNotFound
from agentd.messages import clean_text
from agentd.nes import ENCODINGS, MAX_HISTORY, MAX_RECENT_FILES

if TYPE_CHECKING:
    from agentd.acp.params import (
        NesOutcomeParams,
        NesSessionParams,
        StartNesParams,
        SuggestNesParams,
    )
    from agentd.acp.server import AcpServer, Request
    from agentd.app import App
    from agentd.nes.documents import NesSession, NesSessions

log = logging.getLogger("agentd.acp")

NO_SUGGESTIONS: dict[str, Any] = {"suggestions": []}
# What `initialize` advertises: the events and the context kinds agentd uses.
CONTEXT_USED = ("recentFiles", "editHistory", "openFiles", "diagnostics")


def capabilities() -> dict[str, Any]:
    return {
        "events": {
            "document": {
                "didOpen": {},
                "didChange": {"syncKind": "incremental"},
                "didClose": {},
                "didSave": {},
                "didFocus": {},
            }
        },
        "context": {
            "recentFiles": {"maxCount": MAX_RECENT_FILES},
            "editHistory": {"maxCount": MAX_HISTORY},
            "openFiles": {},
            "diagnostics": {},
        },
    }


def position_encoding(client_caps: Any) -> str:
    """The client's most preferred encoding agentd speaks; UTF-16 when it names none."""
    offered = client_caps.get("positionEncodings") if isinstance(client_caps, dict) else None
    if isinstance(offered, list):
        for name in offered:
            if name in ENCODINGS:
                return str(name)
    return "utf-16"


class NesState:
    """The NES sessions of one connection and the suggestion each has in flight."""

    def __init__(self) -> None:
        self._sessions: NesSessions | None = None
        self.encoding = "utf-16"
        self.running: dict[str, asyncio.Task[Any]] = {}
        # Suggest tasks ended by a newer `nes/suggest`: they answer [].
        self.superseded: set[asyncio.Task[Any]] = set()

    @property
    def sessions(self) -> NesSessions:
        # Made by the first NES message: the connection's start-up imports none of it.
        if self._sessions is None:
            from agentd.nes.documents import NesSessions

            self._sessions = NesSessions()
        return self._sessions

    def session(self, session_id: str) -> NesSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionNotFound(f"NES session not found: {session_id[:100]}")
        return session

    def stop(self, session_id: str, superseded: bool) -> None:
        task = self.running.pop(session_id, None)
        if task is not None and not task.done():
            if superseded:
                self.superseded.add(task)
            task.cancel()


# --- requests -------------------------------------------------------------------------------


async def start(server: AcpServer, app: App, request: Request, p: StartNesParams) -> dict[str, Any]:
    from pathlib import Path

    from agentd.nes.documents import uri_path
    from agentd.params import workspace_path

    given: list[tuple[str, str]] = []
    if p.workspace_uri is not None:
        given.append((p.workspace_uri, "workspaceUri"))
    given += [(f.uri, f"workspaceFolders.{i}.uri") for i, f in enumerate(p.workspace_folders)]
    if not given:
        raise InvalidParams.of("workspaceUri", "Field required (or workspaceFolders)")
    roots: list[Path] = []
    for value, field in given:
        resolved = workspace_path(value, field)
        # Both spellings: the editor's URIs name the folder as it does, and
        # whether they are inside is judged by their text, not the disk.
        as_given = uri_path(value if value.startswith("file:") else Path(value).as_uri())
        for root in (resolved, as_given):
            if root is not None and root not in roots:
                roots.append(root)
    session = server.nes.sessions.start(roots)
    return {"sessionId": session.id}


async def close(
    server: AcpServer, app: App, request: Request, p: NesSessionParams
) -> dict[str, Any]:
    """Ends the session and all it holds; an unknown id is a success (idempotent)."""
    server.nes.stop(p.session_id, superseded=False)
    server.nes.sessions.close(p.session_id)
    return {}


async def accept(
    server: AcpServer, app: App, request: Request, p: NesOutcomeParams
) -> dict[str, Any]:
    _settle(server, p.session_id, p.id, True, None)
    return {}


async def reject(
    server: AcpServer, app: App, request: Request, p: NesOutcomeParams
) -> dict[str, Any]:
    _settle(server, p.session_id, p.id, False, p.reason)
    return {}


def _settle(
    server: AcpServer, session_id: str, suggestion_id: str, ok: bool, why: str | None
) -> None:
    session = server.nes.sessions.get(session_id)
    if session is not None and not session.settle(suggestion_id, ok, why):
        log.debug("outcome of an unknown suggestion ignored")


async def suggest(
    server: AcpServer, app: App, request: Request, p: SuggestNesParams
) -> dict[str, Any]:
    state = server.nes
    session = state.session(p.session_id)
    if clean_text(p.uri) != p.uri:
        raise InvalidParams.of("uri", "not valid Unicode (a lone surrogate)")
    task = asyncio.current_task()
    assert task is not None
    state.stop(session.id, superseded=True)
    state.running[session.id] = task
    try:
        return await _suggest(server, app, session, p)
    except asyncio.CancelledError:
        if server.closing:
            raise
        task.uncancel()
        if task in state.superseded:
            return NO_SUGGESTIONS
        raise RpcError(REQUEST_CANCELLED, "nes/suggest cancelled") from None
    finally:
        state.superseded.discard(task)
        if state.running.get(session.id) is task:
            del state.running[session.id]


async def _suggest(
    server: AcpServer, app: App, session: NesSession, p: SuggestNesParams
) -> dict[str, Any]:
    from agentd.errors import ModelError
    from agentd.nes import predict
    from agentd.nes.documents import Issued
    from agentd.nes.text import BadPosition, Edit, from_index, line_starts, to_index, width

    encoding = server.nes.encoding
    doc = session.documents.get(p.uri)
    if doc is None or doc.version != p.version or not session.in_workspace(p.uri):
        return NO_SUGGESTIONS
    text = doc.text
    # Once per suggest: a 1 MiB document's line starts take milliseconds.
    starts = line_starts(text)
    try:
        cursor = to_index(text, starts, p.position.line, p.position.character, encoding)
    except BadPosition as exc:
        raise InvalidParams.of("position", str(exc)) from None
    region = predict.region_around(text, starts, cursor)
    focused = None
    focus = session.focus
    if focus is not None and focus.uri != p.uri and focus.uri in session.documents:
        focused = (
            focus.uri,
            predict.focused_excerpt(session.documents[focus.uri].text, focus.line),
        )
    context = p.context.model_dump(by_alias=True, exclude_none=True) if p.context else {}
    prompt = predict.prompt_text(
        p.uri, doc.language_id, text, cursor, region, context, list(session.outcomes), focused
    )
    try:
        reply = await predict.predict(app.provider, predict.SYSTEM, prompt)
    except ModelError as exc:
        message = exc.message if len(exc.message) <= 500 else exc.message[:497] + "..."
        raise RpcError(INTERNAL_ERROR, message, {"agentd": {"kind": exc.kind}}) from None
    # The editor typed on while the model answered: the edits would land on another text.
    current = session.documents.get(p.uri)
    if current is None or current.version != p.version:
        return NO_SUGGESTIONS
    prediction = predict.parse_reply(reply, region)
    if prediction is None or not prediction.edits:
        return NO_SUGGESTIONS
    edits_json = []
    for edit in prediction.edits:
        start = from_index(text, starts, edit.start, encoding)
        end = from_index(text, starts, edit.end, encoding)
        edits_json.append({"range": _range(start, end), "newText": edit.new_text})
    new_text = _applied(text, prediction.edits)
    cursor_after = prediction.cursor
    if cursor_after is None:
        last: Edit = prediction.edits[-1]
        cursor_after = last.start + len(last.new_text) + _shift(prediction.edits[:-1])
    # The cursor's line in the edited text: only the text before it is counted.
    before = new_text[:cursor_after]
    line = before.count("\n") + before.count("\r") - before.count("\r\n")
    character = width(_last_line(before), encoding)
    old_texts = tuple(text[e.start : e.end] for e in prediction.edits)
    suggestion_id = session.issue(Issued(p.uri, tuple(prediction.edits), old_texts))
    suggestion = {
        "kind": "edit",
        "id": suggestion_id,
        "uri": p.uri,
        "edits": edits_json,
        "cursorPosition": {"line": line, "character": character},
    }
    return {"suggestions": [suggestion]}


def _range(start: tuple[int, int], end: tuple[int, int]) -> dict[str, Any]:
    return {
        "start": {"line": start[0], "character": start[1]},
        "end": {"line": end[0], "character": end[1]},
    }


def _applied(text: str, edits: list[Any]) -> str:
    for edit in reversed(edits):
        text = text[: edit.start] + edit.new_text + text[edit.end :]
    return text


def _last_line(text: str) -> str:
    """What follows the last line break of `text` (all of it when it has none)."""
    cut = max(text.rfind("\n"), text.rfind("\r"))
    return text[cut + 1 :]


def _shift(edits: list[Any]) -> int:
    return sum(len(e.new_text) - (e.end - e.start) for e in edits)


# --- notifications --------------------------------------------------------------------------


class _Bad(Exception):
    """A notification's params that cannot be used: it is dropped."""


def on_notification(server: AcpServer, method: str, params: Any) -> None:
    """`document/*`, `nes/accept`, `nes/reject`: applied, ignored or dropped."""
    try:
        if not isinstance(params, dict):
            raise _Bad("params must be an object")
        session = server.nes.sessions.get(_text(params, "sessionId"))
        if session is None:
            log.info("%s for an unknown NES session ignored", method)
            return
        if method in ("nes/accept", "nes/reject"):
            reason = params.get("reason")
            reason = reason if isinstance(reason, str) else None
            _settle(server, session.id, _text(params, "id"), method == "nes/accept", reason)
            return
        from agentd.nes.documents import MAX_URI

        uri = _text(params, "uri", MAX_URI)
        if not session.in_workspace(uri):
            log.info("%s: a URI outside the NES session's folders ignored", method)
            return
        _on_document(server, session, method, uri, params)
    except _Bad as exc:
        log.warning("%s dropped: %s", method, exc)


def _on_document(
    server: AcpServer, session: NesSession, method: str, uri: str, params: dict[str, Any]
) -> None:
    if method in ("document/didOpen", "document/didChange"):
        try:
            _on_text(server, session, method, uri, params)
        except _Bad:
            # The text the editor holds now is not known: keeping the old one
            # would make the next change land on a wrong text.
            session.drop(uri)
            raise
    elif method == "document/didClose":
        session.drop(uri)
    elif method == "document/didSave":
        session.save(uri)
    elif method == "document/didFocus":
        version = _version(params)
        line, character = _position(params.get("position"), "position")
        session.set_focus(uri, version, line, character)
    else:
        log.info("unknown notification %.200r ignored", method)


def _on_text(
    server: AcpServer, session: NesSession, method: str, uri: str, params: dict[str, Any]
) -> None:
    from agentd.nes.documents import MAX_CHANGES

    if method == "document/didOpen":
        language = _text(params, "languageId", 200)
        session.open(uri, language, _version(params), _text(params, "text", None))
    elif method == "document/didChange":
        version = _version(params)
        changes = params.get("contentChanges")
        if not isinstance(changes, list):
            raise _Bad("contentChanges must be a list")
        if len(changes) > MAX_CHANGES:
            raise _Bad(f"more than {MAX_CHANGES} contentChanges")
        checked = [_change(c, i) for i, c in enumerate(changes)]
        session.change(uri, version, checked, server.nes.encoding)


def _text(params: dict[str, Any], name: str, limit: int | None = 1024) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise _Bad(f"{name} must be a string")
    if limit is not None and len(value) > limit:
        raise _Bad(f"{name} longer than {limit} characters")
    if clean_text(value) != value:
        raise _Bad(f"{name} is not valid Unicode (a lone surrogate)")
    return value


def _version(params: dict[str, Any]) -> int:
    value = params.get("version")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise _Bad("version must be a non-negative integer")
    return value


def _position(value: Any, name: str) -> tuple[int, int]:
    if not isinstance(value, dict):
        raise _Bad(f"{name} must be an object")
    out = []
    for key in ("line", "character"):
        item = value.get(key)
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 2**31:
            raise _Bad(f"{name}.{key} must be a non-negative integer")
        out.append(item)
    return out[0], out[1]


def _change(change: Any, i: int) -> dict[str, Any]:
    if not isinstance(change, dict):
        raise _Bad(f"contentChanges.{i} must be an object")
    text = _text(change, "text", None)
    rng = change.get("range")
    if rng is None:
        return {"text": text}
    if not isinstance(rng, dict):
        raise _Bad(f"contentChanges.{i}.range must be an object")
    start = _position(rng.get("start"), f"contentChanges.{i}.range.start")
    end = _position(rng.get("end"), f"contentChanges.{i}.range.end")
    return {
        "text": text,
        "range": {
            "start": {"line": start[0], "character": start[1]},
            "end": {"line": end[0], "character": end[1]},
        },
    }
