"""Client tools run through the editor, the way ACP defines it.

`AcpToolRunner` is the core's `ClientToolRunner` for an ACP connection. It
offers the model only what the client advertised in `initialize`:

- `read_file` (needs `fs.readTextFile`): `fs/read_text_file`, which sees
  unsaved buffers.
- `edit_file` (needs `fs.readTextFile` and `fs.writeTextFile`): read,
  permission (showing the diff), re-read, replace exactly one occurrence,
  `fs/write_text_file`.
- `write_file` (needs `fs.writeTextFile`): permission (with the diff), write.
- `run_command` (needs `terminal`): permission, `terminal/create` (`/bin/sh
  -c COMMAND`), embedded in the tool call, `terminal/wait_for_exit`,
  `terminal/output`, `terminal/release`.

Edits and commands ask `session/request_permission` first (allow once,
allow always, reject), unless the session's mode says otherwise (edits in
the auto-edit mode; `agentd.agent.modes`). "Always" is remembered per
session and tool kind (`edit`, `execute`). Anything but an explicit allow refuses the tool: a
failed or malformed permission request fails closed.

Cancellation: requests to the client are awaited through `asyncio.shield`,
so cancelling the turn leaves the request registered; the runner hands it
to `ClientChannel.abandon`, and the prompt is answered only after such
requests are answered (ACP wants pending permission requests resolved as
cancelled first). A running command's terminal is released (which kills it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentd.acp.caps import ClientCaps
from agentd.acp.rpc import RpcError
from agentd.acp.updates import SESSION_UPDATE, text_content, tool_locations, tool_title
from agentd.agent.modes import asks_before
from agentd.agent.permission import (
    PERMISSION_OPTIONS,
    PermissionAnswer,
    PermissionRequest,
    read_answer,
)
from agentd.agent.session import Session
from agentd.agent.tools import CLIENT_TOOL_SPECS
from agentd.errors import ToolError
from agentd.layout import agentd_folders
from agentd.messages import ToolCall, ToolResultPart, ToolSpec
from agentd.paths import refuse_agentd_state, resolve_in_roots

log = logging.getLogger("agentd.acp")

# Bytes of command output the client keeps (it truncates from the beginning).
OUTPUT_BYTE_LIMIT = 256 * 1024
SHELL = "/bin/sh"


class ClientChannel(Protocol):
    """What the runner needs of the connection."""

    def start_request(self, method: str, params: dict[str, Any]) -> asyncio.Future[Any]: ...

    def notify(self, method: str, params: dict[str, Any]) -> None: ...

    def abandon(self, session_id: str, fut: asyncio.Future[Any]) -> None:
        """A request the cancelled turn stopped waiting for; drained before its reply."""
        ...


class Refused(Exception):
    """The tool must not run; the message goes to the model."""


@dataclass
class AcpToolRunner:
    channel: ClientChannel
    caps: ClientCaps
    # session id -> tool kinds the user allowed for the rest of the session
    always: dict[str, set[str]] = field(default_factory=dict)
    # tool call id -> ACP content shown while it ran (diff, terminal); see updates.to_acp
    display: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The specs `caps` offers, made once per caps object (frozen): the same
    # list for every prompt, which the turn keeps its tool list by.
    _offered: tuple[ClientCaps, list[ToolSpec]] | None = field(default=None, repr=False)

    @property
    def specs(self) -> list[ToolSpec]:
        offered = self._offered
        if offered is None or offered[0] is not self.caps:
            names = self.caps.tool_names()
            offered = self._offered = (self.caps, [CLIENT_TOOL_SPECS[n] for n in names])
        return offered[1]

    def forget(self, session_id: str) -> None:
        self.always.pop(session_id, None)

    async def ask_permission(
        self, session: Session, request: PermissionRequest
    ) -> PermissionAnswer:
        """The core's `PermissionAsker`: `session/request_permission` for a
        daemon-run tool (an MCP tool). Errors propagate (the caller fails closed)."""
        tool_call: dict[str, Any] = {"toolCallId": request.tool_call_id, "kind": "other"}
        meta: dict[str, Any] = {"server": request.server, "tool": request.tool}
        if request.kind == "sampling":
            # The call is running already (no `pending` status): its server
            # asks to use the model. The request updates the call's card, so
            # its title and input stay the call's own (a title set here would
            # stay after the answer); the question and its preview are the
            # card's content, which the call's result replaces.
            meta["sampling"] = True
            tool_call["content"] = text_content(request.description)
        else:
            tool_call.update(title=request.title, rawInput=request.arguments, status="pending")
        if request.server is not None:
            tool_call["_meta"] = {"agentd": meta}
        result = await self._call(
            session,
            "session/request_permission",
            {"toolCall": tool_call, "options": request.options},
        )
        return read_answer(result)

    async def run(self, session: Session, call: ToolCall) -> ToolResultPart:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        try:
            if call.name == "read_file":
                text = await self._read_file(session, args)
            elif call.name == "edit_file":
                text = await self._edit_file(session, call, args)
            elif call.name == "write_file":
                text = await self._write_file(session, call, args)
            elif call.name == "run_command":
                text = await self._run_command(session, call, args)
            else:
                return ToolResultPart(call.id, f"Unknown tool {call.name!r}.", True)
        except Refused as exc:
            return ToolResultPart(call.id, str(exc), True)
        except ToolError as exc:
            return ToolResultPart(call.id, str(exc), True)
        except RpcError as exc:
            return ToolResultPart(call.id, f"{call.name} failed in the editor: {exc.message}", True)
        except (KeyError, TypeError, ValueError) as exc:
            return ToolResultPart(call.id, f"Bad arguments for {call.name}: {exc}", True)
        return ToolResultPart(call.id, text)

    # --- the tools -----------------------------------------------------------------

    async def _read_file(self, session: Session, args: Mapping[str, Any]) -> str:
        path = _path(session, args)
        offset = _opt_int(args, "offset")
        limit = _opt_int(args, "limit")
        params: dict[str, Any] = {"path": path}
        if offset is not None:
            params["line"] = max(1, offset)
        if limit is not None:
            params["limit"] = max(0, limit)
        text = await self._read(session, params)
        return number_lines(text, max(1, offset or 1))

    async def _edit_file(self, session: Session, call: ToolCall, args: Mapping[str, Any]) -> str:
        path = _write_path(session, args)
        old_text = _str(args, "old_text")
        new_text = _str(args, "new_text")
        if not old_text:
            raise Refused("old_text must not be empty.")
        before = await self._read(session, {"path": path})
        after = replace_once(before, old_text, new_text, args["path"])
        diff = [{"type": "diff", "path": path, "oldText": before, "newText": after}]
        await self._permit(session, call, "edit", diff)
        # The buffer may have changed while the user decided: apply to what is there now.
        current = await self._read(session, {"path": path})
        if current != before:
            after = replace_once(current, old_text, new_text, args["path"])
            diff = [{"type": "diff", "path": path, "oldText": current, "newText": after}]
        self._progress(session, call, diff)
        await self._call(session, "fs/write_text_file", {"path": path, "content": after})
        return f"Edited {args['path']}: replaced 1 occurrence."

    async def _write_file(self, session: Session, call: ToolCall, args: Mapping[str, Any]) -> str:
        path = _write_path(session, args)
        content = _str(args, "content")
        before: str | None = None
        if self.caps.read_text_file:
            try:
                before = await self._read(session, {"path": path})
            except RpcError:
                before = None  # a new file
        diff = [{"type": "diff", "path": path, "oldText": before, "newText": content}]
        await self._permit(session, call, "edit", diff)
        self._progress(session, call, diff)
        await self._call(session, "fs/write_text_file", {"path": path, "content": content})
        return f"Wrote {args['path']} ({len(content)} characters)."

    async def _run_command(self, session: Session, call: ToolCall, args: Mapping[str, Any]) -> str:
        command = _str(args, "command")
        if not command.strip():
            raise Refused("command must not be empty.")
        cwd = str(resolve_in_roots(session.roots, _opt_str(args, "cwd") or "."))
        await self._permit(session, call, "execute", text_content(command))
        created = await self._call(
            session,
            "terminal/create",
            {
                "command": SHELL,
                "args": ["-c", command],
                "cwd": cwd,
                "outputByteLimit": OUTPUT_BYTE_LIMIT,
            },
        )
        terminal_id = created.get("terminalId") if isinstance(created, dict) else None
        if not isinstance(terminal_id, str):
            raise Refused("The editor did not return a terminal id; the command may not have run.")
        ref = {"terminalId": terminal_id}
        self._progress(session, call, [{"type": "terminal", **ref}])
        try:
            status = await self._call(session, "terminal/wait_for_exit", ref)
            output = await self._call(session, "terminal/output", ref)
        except asyncio.CancelledError:
            # Releasing kills the command; the reply to the prompt waits for it.
            release = self.channel.start_request(
                "terminal/release", {"sessionId": session.id, **ref}
            )
            self.channel.abandon(session.id, release)
            raise
        except RpcError:
            await self._release(session, ref)
            raise
        await self._release(session, ref)
        return command_result(output, status)

    # --- helpers -------------------------------------------------------------------

    async def _call(self, session: Session, method: str, params: dict[str, Any]) -> Any:
        fut = self.channel.start_request(method, {"sessionId": session.id, **params})
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            self.channel.abandon(session.id, fut)
            raise

    async def _read(self, session: Session, params: dict[str, Any]) -> str:
        result = await self._call(session, "fs/read_text_file", params)
        content = result.get("content") if isinstance(result, dict) else None
        if not isinstance(content, str):
            raise Refused("The editor answered fs/read_text_file without text content.")
        return content

    async def _release(self, session: Session, ref: dict[str, Any]) -> None:
        try:
            await self._call(session, "terminal/release", ref)
        except RpcError as exc:
            log.info("terminal/release failed: %s", exc.message)

    async def _permit(
        self, session: Session, call: ToolCall, kind: str, content: list[dict[str, Any]]
    ) -> None:
        """Return when the user allowed the call; raise `Refused` otherwise."""
        allowed = self.always.get(session.id, set())
        if kind in allowed or not asks_before(session.mode, call.name):
            return  # "always" earlier, or the session's mode (auto-edit) allows it
        what = "the edit" if kind == "edit" else "the command"
        tool_call: dict[str, Any] = {
            "toolCallId": call.id,
            "title": tool_title(call.name, call.arguments),
            "kind": kind,
            "status": "pending",
            "rawInput": call.arguments,
            "content": content,
        }
        locations = tool_locations(call.name, call.arguments, session.workspace_root)
        if locations:
            tool_call["locations"] = locations
        try:
            result = await self._call(
                session,
                "session/request_permission",
                {"toolCall": tool_call, "options": PERMISSION_OPTIONS},
            )
        except RpcError as exc:
            log.warning("permission request failed: %s", exc.message)
            raise Refused(
                f"The editor could not ask the user for permission ({exc.message}); "
                f"{what} was not made."
            ) from None
        choice = _selected_option(result)
        if choice in ("allow_once", "allow_always"):
            if choice == "allow_always":
                self.always.setdefault(session.id, set()).add(kind)
            return
        if choice == "reject_once":
            raise Refused(f"The user rejected {what}.")
        if choice == "cancelled":
            raise Refused(f"The permission request was cancelled; {what} was not made.")
        raise Refused(f"The editor gave no valid permission answer; {what} was not made.")

    def _progress(self, session: Session, call: ToolCall, content: list[dict[str, Any]]) -> None:
        self.display[call.id] = content
        self.channel.notify(
            SESSION_UPDATE,
            {
                "sessionId": session.id,
                "update": {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call.id,
                    "status": "in_progress",
                    "content": content,
                },
            },
        )


def _selected_option(result: Any) -> str | None:
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict):
        return None
    if outcome.get("outcome") == "cancelled":
        return "cancelled"
    if outcome.get("outcome") == "selected":
        option = outcome.get("optionId")
        if option in {o["optionId"] for o in PERMISSION_OPTIONS}:
            return str(option)
    return None


def _path(session: Session, args: Mapping[str, Any]) -> str:
    # Inside one of the session's roots (an absolute path may be in an additional one).
    return str(resolve_in_roots(session.roots, _str(args, "path")))


def _write_path(session: Session, args: Mapping[str, Any]) -> str:
    # Never into agentd's own folders, even through a root that holds them.
    return str(refuse_agentd_state(Path(_path(session, args)), agentd_folders()))


def _str(args: Mapping[str, Any], name: str) -> str:
    value = args[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    return value


def _opt_str(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    return value if isinstance(value, str) else None


def _opt_int(args: Mapping[str, Any], name: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be an integer")
    return int(value)


def replace_once(text: str, old: str, new: str, path: str) -> str:
    count = text.count(old)
    if count == 0:
        raise Refused(f"old_text was not found in {path}; read the file and copy the text exactly.")
    if count > 1:
        raise Refused(
            f"old_text occurs {count} times in {path}; include more surrounding text "
            "so that it matches exactly once."
        )
    return text.replace(old, new, 1)


def number_lines(text: str, first: int) -> str:
    """The daemon's own read_file format: right-aligned line numbers, two spaces."""
    lines = text.splitlines()
    if not lines:
        return "(empty file)"
    width = len(str(first + len(lines) - 1))
    return "\n".join(f"{first + i:>{width}}  {line}" for i, line in enumerate(lines))


def command_result(output: Any, status: Any) -> str:
    out = output if isinstance(output, dict) else {}
    text = out.get("output") if isinstance(out.get("output"), str) else ""
    parts = [text.rstrip("\n")] if text else []
    if out.get("truncated") is True:
        parts.insert(0, "[the beginning of the output was cut by the editor]")
    exit_status = out.get("exitStatus") if isinstance(out.get("exitStatus"), dict) else status
    code = exit_status.get("exitCode") if isinstance(exit_status, dict) else None
    signal = exit_status.get("signal") if isinstance(exit_status, dict) else None
    if isinstance(signal, str) and signal:
        parts.append(f"[killed by signal {signal}]")
    else:
        parts.append(f"[exit code {code if isinstance(code, int) else 'unknown'}]")
    return "\n".join(parts)
