"""A real MCP server for the tests and benchmarks, written with the SDK's `MCPServer`.

Run over stdio: `python tests/mcp/server.py` (what a daemon is configured
with); `build()` gives the same server for streamable HTTP in-process.
What it does is told by its environment:

    MCP_TEST_START_AFTER   a file: the server waits until it exists before serving
                           (a server slow to start, released by the test)
    MCP_TEST_NAME          its name (default "test")
    MCP_TEST_PIDFILE       a file the server writes its process id to
    MCP_TEST_STUBBORN      set: the server ignores SIGTERM and stays alive after
                           its stdin ends (only SIGKILL ends it)

The tool `ask` asks the user through the client (MCP elicitation): `kind`
"form" (the form `FORM`), "url" (a sign-in URL, completed at once when
accepted), "nested" (a schema outside the restricted shapes) or "bad_url"
(not http); it returns the answer as JSON.

The tool `summarize` asks the client to run a model completion (MCP
sampling) with the system prompt `SUMMARY_SYSTEM`; `sample_raw` sends
`sampling/createMessage` with params given as JSON, as they are (hostile
ones included). Both return `{"result": ...}` or `{"error": {code,
message}}` as JSON, so a test reads what the server got.

Every tool call and every cancelled call is also written to stderr
(`CALL <tool>`, `CANCELLED <tool>`), which the daemon logs under the
server's name: tests read it from the editor's `window/logMessage`.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    ImageContent,
    JSONRPCRequest,
    ToolAnnotations,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()


# The form `ask` sends: every restricted property shape.
FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "account": {"type": "string", "title": "Account", "enum": ["personal", "work"]},
        "rows": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number"},
        "confirm": {"type": "boolean"},
        "note": {"type": "string", "maxLength": 20},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["account"],
}
NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {"where": {"type": "object", "properties": {"x": {"type": "string"}}}},
}
SIGN_IN = "https://example.com/sign-in?state=1"
SUMMARY_SYSTEM = "You summarise texts for the summarize tool, in one sentence."


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build(name: str = "test", on_cancel: Any = None) -> MCPServer:
    server: MCPServer = MCPServer(name, log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        note("CALL add")
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo a text back (a tool with side effects, as far as agentd knows)."""
        note("CALL echo")
        return f"echo: {text}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def fail(message: str) -> str:
        """Always fails with `message`."""
        note("CALL fail")
        raise ToolError(message)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def crash() -> str:
        """The server process dies in the middle of the call."""
        note("CALL crash")
        os._exit(3)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def hang() -> str:
        """Never answers (until cancelled)."""
        note("CALL hang")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            note("CANCELLED hang")
            if on_cancel is not None:
                on_cancel("hang")
            raise
        return "unreachable"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def huge(chars: int) -> str:
        """Returns `chars` characters."""
        note("CALL huge")
        return "x" * chars

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def grow(ctx: Context) -> str:
        """Adds the tool `extra` and says the tool list changed."""
        note("CALL grow")
        server.add_tool(
            lambda: "extra tool ran",
            name="extra",
            description="Added later.",
            annotations=ToolAnnotations(read_only_hint=True),
        )
        await ctx.session.send_tool_list_changed()
        return "grown"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def environment() -> str:
        """The server's environment, as JSON."""
        note("CALL environment")
        return json.dumps(dict(os.environ))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
    def picture() -> list[Any]:
        """Returns an image and a text."""
        note("CALL picture")
        return [ImageContent(type="image", data=PNG, mime_type="image/png"), "a picture"]

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def weather(city: str) -> dict[str, Any]:
        """Structured output."""
        note("CALL weather")
        return {"city": city, "celsius": 21}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def ask(kind: str, ctx: Context) -> str:
        """Asks the user (elicitation) and returns the answer."""
        note("CALL ask")
        session = ctx.request_context.session
        if kind in ("url", "bad_url"):
            url = SIGN_IN if kind == "url" else "javascript:alert(1)"
            result = await session.elicit_url("Sign in", url, "elic-1", ctx.request_id)
            if result.action == "accept":
                await session.send_elicit_complete("elic-1", ctx.request_id)
        else:
            schema = NESTED if kind == "nested" else FORM
            result = await session.elicit_form("Which account?", schema, ctx.request_id)
        note(f"ELICITED {result.action}")
        return json.dumps({"action": result.action, "content": result.content})

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def summarize(text: str, ctx: Context, max_tokens: int = 200) -> str:
        """Summarises `text` with the client's model (MCP sampling)."""
        note("CALL summarize")
        params = {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": max_tokens,
            "systemPrompt": SUMMARY_SYSTEM,
            "includeContext": "thisServer",
        }
        return await _sample(ctx, params)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def sample_raw(params: str, ctx: Context) -> str:
        """Sends `sampling/createMessage` with these params (JSON), unchecked."""
        note("CALL sample_raw")
        return await _sample(ctx, json.loads(params))

    return server


async def _sample(ctx: Context, params: dict[str, Any]) -> str:
    # Raw, not the SDK's typed (and deprecated) `create_message`: the params
    # go out as they are, hostile ones included.
    outbound = ctx.request_context.session._request_outbound
    try:
        result = await outbound.send_raw_request("sampling/createMessage", params)
    except MCPError as exc:
        note(f"SAMPLED error {exc.error.code}")
        return json.dumps({"error": {"code": exc.error.code, "message": exc.error.message}})
    note("SAMPLED")
    return json.dumps({"result": result})


def _ascii_json(self: JSONRPCRequest, **options: Any) -> str:
    return json.dumps(self.model_dump(mode="json", **options))


def main() -> None:
    # The requests it sends go out as ASCII JSON, so that a hostile one's lone
    # surrogate (`sample_raw`) travels as its escape, as a server in another
    # language would send it: pydantic refuses to encode one at all.
    JSONRPCRequest.model_dump_json = _ascii_json  # type: ignore[method-assign,assignment]
    pidfile = os.environ.get("MCP_TEST_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
    stubborn = bool(os.environ.get("MCP_TEST_STUBBORN"))
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start_after = os.environ.get("MCP_TEST_START_AFTER")
    if start_after:
        note("WAITING to start")
        while not Path(start_after).exists():
            time.sleep(0.05)
    build(os.environ.get("MCP_TEST_NAME", "test")).run()
    if stubborn:
        note("STAYING after the end of stdin")
        while True:
            time.sleep(60)


if __name__ == "__main__":
    main()
