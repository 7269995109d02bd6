"""An ACP client built on the `agent-client-protocol` package, driving the real daemon.

`python -m agentd.acp` is spawned over stdio by the package's own
`spawn_agent_process` (`connect_acp`); its `ClientSideConnection` parses every message agentd
sends into the package's schema models, so a message it cannot read fails the
test. `EditorClient` plays the editor: unsaved buffers, a permission policy,
real terminals. Every raw message agentd sends is kept (`received`), checked
against the published ACP JSON Schema as it arrives, and compared with the
golden files by the tests.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from acp import Agent, RequestError
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateElicitationResponse,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    FileSystemCapabilities,
    Implementation,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from acp.stdio import spawn_agent_process

from agentd.testing.daemon import daemon_command

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
SCHEMA = HERE / "schema" / "schema.json"

# The schema definition each message agentd sends must match.
REQUEST_DEFS = {
    "session/request_permission": "RequestPermissionRequest",
    "fs/read_text_file": "ReadTextFileRequest",
    "fs/write_text_file": "WriteTextFileRequest",
    "terminal/create": "CreateTerminalRequest",
    "terminal/output": "TerminalOutputRequest",
    "terminal/wait_for_exit": "WaitForTerminalExitRequest",
    "terminal/release": "ReleaseTerminalRequest",
    "terminal/kill": "KillTerminalRequest",
}
NOTIFICATION_DEFS = {"session/update": "SessionNotification"}
# MCP over ACP is unstable in ACP, so not in the stable schema file the tests
# hold: these are checked against the `acp` package's models (schema v1.19.0).
UNSTABLE_REQUESTS = {
    "mcp/connect": "ConnectMcpRequest",
    "mcp/message": "MessageMcpRequest",
    "mcp/disconnect": "DisconnectMcpRequest",
    "elicitation/create": "CreateElicitationRequest",
}
UNSTABLE_NOTIFICATIONS = {
    "mcp/message": "MessageMcpNotification",
    "elicitation/complete": "CompleteElicitationNotification",
    "$/cancel_request": "CancelRequestNotification",
}
# The same for the results of the unstable `providers/*` methods.
UNSTABLE_RESULTS = {
    "providers/list": "ListProvidersResponse",
    "providers/set": "SetProviderResponse",
    "providers/disable": "DisableProviderResponse",
    "nes/start": "StartNesResponse",
    "nes/suggest": "SuggestNesResponse",
    "nes/close": "CloseNesResponse",
}
RESPONSE_DEFS = {
    "initialize": "InitializeResponse",
    "authenticate": "AuthenticateResponse",
    "logout": "LogoutResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/close": "CloseSessionResponse",
    "session/delete": "DeleteSessionResponse",
    # Unstable in the schema the tests hold (1.25), so not in it; its
    # response is session/new's shape (ForkSessionResponse in the ACP package).
    "session/fork": "NewSessionResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
    "session/prompt": "PromptResponse",
}


# --- the schema ---------------------------------------------------------------------------


@cache
def schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA.read_text(encoding="utf-8")))


def schema_errors(instance: Any, definition: str) -> list[str]:
    defs = schema()["$defs"]
    assert definition in defs, f"{definition} is not in the ACP schema"
    validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": defs})
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(instance)
    ]


def check_agent_message(message: dict[str, Any], sent_methods: dict[Any, str]) -> None:
    """Validate one message agentd sent against the ACP schema (raises AssertionError)."""
    assert message.get("jsonrpc") == "2.0", message
    method = message.get("method")
    if method is not None and method.startswith("_"):
        assert isinstance(message.get("params"), dict), message  # an extension: any object
        return
    unstable = UNSTABLE_REQUESTS if "id" in message else UNSTABLE_NOTIFICATIONS
    if method in unstable:
        errors = unstable_errors(message.get("params"), unstable[method])
    elif method is not None:
        defs = REQUEST_DEFS if "id" in message else NOTIFICATION_DEFS
        assert method in defs, f"agentd sent {method!r}, which it should not"
        errors = schema_errors(message.get("params"), defs[method])
    elif "error" in message:
        errors = schema_errors(message["error"], "Error")
    else:
        request_method = sent_methods.get(message.get("id"))
        if request_method is None or request_method.startswith("_"):
            return  # an extension method's result, or a reply to a raw line
        if request_method in ("nes/accept", "nes/reject"):
            # Notifications in ACP; agentd answers them as requests too, with nothing.
            assert message.get("result") == {}, message
            return
        if request_method == "mcp/message":
            assert isinstance(message.get("result"), dict), message  # an inner MCP result
            return
        if request_method in UNSTABLE_RESULTS:
            errors = unstable_errors(message.get("result"), UNSTABLE_RESULTS[request_method])
        else:
            errors = schema_errors(message.get("result"), RESPONSE_DEFS[request_method])
    assert not errors, f"{message} does not match the ACP schema: {errors}"


def unstable_errors(params: Any, model: str) -> list[str]:
    from acp import schema as acp_schema
    from pydantic import TypeAdapter, ValidationError

    try:
        # A union of models (CreateElicitationRequest) has no model_validate.
        TypeAdapter(getattr(acp_schema, model)).validate_python(params, strict=True)
    except ValidationError as exc:
        return [str(exc)]
    return []


# --- golden files ----------------------------------------------------------------------------


def normalize(value: Any, workspace: Path | None = None) -> Any:
    """Replace what changes from run to run (ids, temporary paths) with placeholders."""
    # Token counts depend on the prompt's size, which includes the workspace path.
    volatile = {
        "sessionId",
        "toolCallId",
        "terminalId",
        "inputTokens",
        "outputTokens",
        "updatedAt",
        "nextCursor",
        "cacheReadTokens",
        "cacheWriteTokens",
    }
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in volatile and isinstance(item, str | int):
                out[key] = f"<{key}>"
            elif key == "id" and "jsonrpc" in value:
                out[key] = "<id>" if item is not None else None
            else:
                out[key] = normalize(item, workspace)
        return out
    if isinstance(value, list):
        return [normalize(item, workspace) for item in value]
    if isinstance(value, str) and workspace is not None:
        return value.replace(str(workspace), "<workspace>")
    return value


def check_golden(name: str, message: dict[str, Any], workspace: Path | None = None) -> None:
    """The message, normalized, must equal tests/acp/golden/NAME.json (UPDATE_GOLDEN=1 writes)."""
    path = GOLDEN / f"{name}.json"
    actual = normalize(message, workspace)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert actual == expected, f"{name}: {json.dumps(actual, indent=2)}"


# --- the editor ----------------------------------------------------------------------------

Decide = Callable[[dict[str, Any]], Awaitable[str]]


async def allow_once(request: dict[str, Any]) -> str:
    return "allow_once"


@dataclass
class Terminal:
    process: asyncio.subprocess.Process
    output: bytearray = field(default_factory=bytearray)
    reader: asyncio.Task[None] | None = None


class EditorClient:
    """The editor side (`acp.Client`): buffers, permissions, terminals, and a record."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.sent_methods: dict[Any, str] = {}
        self.schema_problems: list[str] = []
        self.buffers: dict[str, str] = {}
        self.writes: list[tuple[str, str]] = []
        self.decide: Decide = allow_once
        self.terminals: dict[str, Terminal] = {}
        # ("in", message) for what agentd sent, ("answered", toolCallId) for permissions.
        self.log: list[tuple[str, Any]] = []
        self._grew = asyncio.Event()
        self._sent = asyncio.Event()

    # The observer sees every raw JSON-RPC message, before the package parses it.
    def observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            if "method" in message and "id" in message:
                self.sent_methods[message["id"]] = message["method"]
                self._sent.set()
                self._sent = asyncio.Event()
            return
        self.received.append(message)
        self.log.append(("in", message))
        try:
            check_agent_message(message, self.sent_methods)
        except AssertionError as exc:
            self.schema_problems.append(str(exc))
        self._grew.set()
        self._grew = asyncio.Event()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first message from agentd, past or future, matching `predicate`."""
        checked = 0
        async with asyncio.timeout(30):  # a hang guard, not a synchronisation
            while True:
                for message in self.received[checked:]:
                    if predicate(message):
                        return message
                checked = len(self.received)
                await self._grew.wait()

    async def wait_sent(self, method: str) -> None:
        """Until a request of `method` was written to agentd (past or future)."""
        async with asyncio.timeout(30):  # a hang guard, not a synchronisation
            while method not in self.sent_methods.values():
                await self._sent.wait()

    # --- views of what was received ---------------------------------------------------

    def updates(self, session_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.received
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session_id
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)
        ]

    def text(self, session_id: str) -> str:
        return "".join(
            u["content"]["text"] for u in self.updates(session_id, "agent_message_chunk")
        )

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.received if m.get("method") == method and "id" in m]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.received if m.get("method") == method and "id" not in m]

    # --- acp.Client -----------------------------------------------------------------------

    def on_connect(self, conn: Agent) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        pass  # recorded raw by `observe`

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        request = self.requests("session/request_permission")[-1]["params"]
        choice = await self.decide(request)
        self.log.append(("answered", request["toolCall"]["toolCallId"]))
        if choice == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        assert choice in {o.option_id for o in options}
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        if path in self.buffers:
            text = self.buffers[path]
        elif Path(path).is_file():
            text = Path(path).read_text(encoding="utf-8")
        else:
            raise RequestError.resource_not_found(path)
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max(1, line or 1) - 1
            text = "".join(lines[start : None if limit is None else start + limit])
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self.buffers[path] = content
        self.writes.append((path, content))
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal = Terminal(process)

        async def pump() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(4096):
                terminal.output += chunk

        terminal.reader = asyncio.create_task(pump())
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = terminal
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        terminal = self.terminals[terminal_id]
        code = await terminal.process.wait()
        assert terminal.reader is not None
        await terminal.reader
        return WaitForTerminalExitResponse(exit_code=code if code >= 0 else None)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        terminal = self.terminals[terminal_id]
        code = terminal.process.returncode
        return TerminalOutputResponse(
            output=terminal.output.decode("utf-8", "replace"),
            truncated=False,
            exit_status=TerminalExitStatus(exit_code=code)
            if code is not None and code >= 0
            else None,
        )

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        terminal = self.terminals[terminal_id]
        if terminal.process.returncode is None:
            terminal.process.kill()
            await terminal.process.wait()
        return ReleaseTerminalResponse()

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        terminal = self.terminals[terminal_id]
        if terminal.process.returncode is None:
            terminal.process.kill()
        return KillTerminalResponse()

    async def create_elicitation(
        self, message: str, mode: Any, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise RequestError.method_not_found("elicitation/create")  # agentd never asks

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        pass

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        pass  # recorded raw by `observe`


# --- the daemon ------------------------------------------------------------------------------


def capabilities(fs: bool = True, terminal: bool = True) -> ClientCapabilities:
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=terminal
    )


CLIENT_INFO = Implementation(name="agentd-tests", title="agentd tests", version="1.0")


@asynccontextmanager
async def connect_acp(
    client: EditorClient, env: dict[str, str], stderr_path: Path
) -> AsyncIterator[Any]:
    """`python -m agentd.acp` with a `ClientSideConnection` to it; yields the connection."""
    with stderr_path.open("ab") as stderr:
        async with spawn_agent_process(
            client,
            *daemon_command(acp=True),
            env=env,
            transport_kwargs={"stderr": stderr.fileno()},
            observers=[client.observe],
        ) as (conn, _process):
            yield conn
