"""MCP elicitation over ACP end to end: an MCP server's `elicitation/create`
during a tool call reaches the editor as ACP `elicitation/create`, and the
editor's answer (checked) goes back to the server. The real daemon, a real
ACP client (the `acp` package, routes added by tests/mcp/elicit_editor.py),
tests/mcp/server.py's `ask` tool over stdio, or served by the editor over
the ACP connection (tests/mcp/acp_bridge.py) where agentd's answer to the
server is seen as it goes."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from acp import text_block
from acp.schema import (
    AcpMcpServer,
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    ElicitationUrlCapabilities,
    EnvVariable,
    FileSystemCapabilities,
    McpServerStdio,
)
from mcp_types import JSONRPCResponse

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, connect_acp
from tests.mcp import server as test_server
from tests.mcp.acp_bridge import EditorMcp
from tests.mcp.conftest import SERVER
from tests.mcp.elicit_editor import EditorElicit, answering, failing, never

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


@pytest.fixture
def editor() -> EditorClient:
    return EditorClient()


@pytest.fixture
def elicit() -> EditorElicit:
    return EditorElicit()


@pytest.fixture
def bridge() -> EditorMcp:
    return EditorMcp()


@pytest.fixture
def init(request: pytest.FixtureRequest) -> dict[str, Any]:
    """How the client initializes (parametrized indirectly): `modes`, the
    elicitation modes it declares; `mcp`, agentd's MCP settings."""
    return {"modes": ("form", "url"), "mcp": {}, **getattr(request, "param", {})}


@pytest_asyncio.fixture
async def acp(
    editor: EditorClient,
    elicit: EditorElicit,
    bridge: EditorMcp,
    model_server: ModelServer,
    tmp_path: Path,
    init: dict[str, Any],
) -> AsyncIterator[Any]:
    env = daemon_env(model_server.openai_base_url, tmp_path)
    modes = init["modes"]
    elicitation = ElicitationCapabilities(
        form=ElicitationFormCapabilities() if "form" in modes else None,
        url=ElicitationUrlCapabilities() if "url" in modes else None,
    )
    caps = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
        terminal=True,
        elicitation=elicitation if modes else None,
    )
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as conn:
        elicit.install(conn)
        bridge.install(conn)
        await conn.initialize(
            protocol_version=1,
            client_capabilities=caps,
            client_info=CLIENT_INFO,
            agentd={"mcp": {"startupWait": 60, **init["mcp"]}},
        )
        yield conn
        await bridge.aclose()
    assert editor.schema_problems == []


def stdio() -> McpServerStdio:
    return McpServerStdio(
        name="acct",
        command=sys.executable,
        args=[str(SERVER)],
        env=[EnvVariable(name="MCP_TEST_NAME", value="acct")],
    )


def ask(kind: str) -> list[Any]:
    return [text_block(f"!tool mcp__acct__ask {json.dumps({'kind': kind})}")]


def server_answer(model_server: ModelServer) -> dict[str, Any]:
    """What the server got, as its `ask` tool returned it to the model."""
    messages = model_server.requests("main")[-1]["body"]["messages"]
    content = next(m for m in reversed(messages) if m["role"] == "tool")["content"]
    return dict(json.loads(content))


async def session(conn: Any, workspace: Path, server: Any = None) -> str:
    servers = [server or stdio()]
    return str((await conn.new_session(cwd=str(workspace), mcp_servers=servers)).session_id)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            {"action": "accept", "content": {"account": "work", "rows": 3, "tags": ["a"]}},
            {"action": "accept", "content": {"account": "work", "rows": 3, "tags": ["a"]}},
        ),
        ({"action": "decline"}, {"action": "decline", "content": None}),
        ({"action": "cancel"}, {"action": "cancel", "content": None}),
    ],
)
async def test_a_form_reaches_the_editor_scoped_to_the_tool_call_and_its_answer_the_server(
    acp: Any,
    editor: EditorClient,
    elicit: EditorElicit,
    model_server: ModelServer,
    workspace: Path,
    answer: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    conn = acp
    elicit.decide = answering(answer)
    sid = await session(conn, workspace)
    result = await conn.prompt(session_id=sid, prompt=ask("form"))
    assert result.stop_reason == "end_turn"
    assert server_answer(model_server) == expected
    (asked,) = elicit.asked
    (started,) = editor.updates(sid, "tool_call")
    assert asked["sessionId"] == sid and asked["toolCallId"] == started["toolCallId"]
    assert asked["mode"] == "form" and asked["message"] == "Which account?"
    assert asked["requestedSchema"] == test_server.FORM
    assert asked["_meta"] == {"agentd": {"server": "acct"}}
    assert editor.updates(sid, "tool_call_update")[-1]["status"] == "completed"


async def test_a_url_is_shown_and_the_servers_completion_passed_on(
    acp: Any, elicit: EditorElicit, model_server: ModelServer, workspace: Path
) -> None:
    conn = acp
    elicit.decide = answering({"action": "accept"})
    sid = await session(conn, workspace)
    await conn.prompt(session_id=sid, prompt=ask("url"))
    assert server_answer(model_server) == {"action": "accept", "content": None}
    (asked,) = elicit.asked
    assert asked["mode"] == "url" and asked["url"] == test_server.SIGN_IN
    assert asked["elicitationId"] == "elic-1" and asked["sessionId"] == sid
    # The server completes it before its tool returns: the editor was told by then.
    assert elicit.completed == [{"elicitationId": "elic-1"}]


@pytest.mark.parametrize("kind", ["nested", "bad_url"])
async def test_a_question_outside_the_allowed_shapes_is_declined_without_asking(
    acp: Any, elicit: EditorElicit, model_server: ModelServer, workspace: Path, kind: str
) -> None:
    conn = acp
    elicit.decide = answering({"action": "accept", "content": {}})
    sid = await session(conn, workspace)
    await conn.prompt(session_id=sid, prompt=ask(kind))
    assert server_answer(model_server)["action"] == "decline"
    assert elicit.asked == []


@pytest.mark.parametrize(
    ("init", "kind"),
    [({"modes": ()}, "form"), ({"modes": ("url",)}, "form"), ({"modes": ("form",)}, "url")],
    indirect=["init"],
)
async def test_a_client_without_the_mode_declines_for_the_server(
    acp: Any,
    elicit: EditorElicit,
    model_server: ModelServer,
    workspace: Path,
    kind: str,
) -> None:
    conn = acp
    sid = await session(conn, workspace)
    assert (await conn.prompt(session_id=sid, prompt=ask(kind))).stop_reason == "end_turn"
    assert server_answer(model_server)["action"] == "decline"
    assert elicit.asked == []


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "accept", "content": {"account": "nope"}},  # not a choice
        {"action": "accept", "content": {"account": 5}},  # wrong type
        {"action": "accept", "content": {"rows": 3}},  # required missing
        {"action": "accept", "content": {"account": "work", "rows": 11}},  # above maximum
        {"action": "accept", "content": {"account": "work", "rows": True}},  # a bool is no int
        {"action": "accept", "content": {"account": "work", "extra": "x"}},  # not in the schema
        {"action": "accept", "content": {"account": "work", "tags": ["c"]}},
        {"action": "accept", "content": {"account": "work", "note": "x" * 21}},
        {"action": "accept", "content": {"account": "work", "ratio": deep(200)}},
        {"action": "accept", "content": {"account": "work", "tags": ["a"] * 100_000}},
        {"action": "accept", "content": ["work"]},
        {"action": "maybe"},
        "accept",
        None,
    ],
)
async def test_a_hostile_answer_is_declined_for_the_server_and_the_session_goes_on(
    acp: Any, elicit: EditorElicit, model_server: ModelServer, workspace: Path, answer: Any
) -> None:
    conn = acp
    elicit.decide = answering(answer)
    sid = await session(conn, workspace)
    assert (await conn.prompt(session_id=sid, prompt=ask("form"))).stop_reason == "end_turn"
    assert server_answer(model_server) == {"action": "decline", "content": None}
    elicit.decide = answering({"action": "accept", "content": {"account": "personal"}})
    await conn.prompt(session_id=sid, prompt=ask("form"))
    assert server_answer(model_server)["content"] == {"account": "personal"}


async def test_an_error_reply_is_declined_for_the_server(
    acp: Any, elicit: EditorElicit, model_server: ModelServer, workspace: Path
) -> None:
    elicit.decide = failing
    sid = await session(acp, workspace)
    assert (await acp.prompt(session_id=sid, prompt=ask("url"))).stop_reason == "end_turn"
    assert server_answer(model_server) == {"action": "decline", "content": None}
    assert len(elicit.asked) == 1


@pytest.mark.parametrize("init", [{"mcp": {"permissionTimeout": 0.5}}], indirect=True)
async def test_an_editor_that_never_answers_is_bounded_and_withdrawn(
    acp: Any,
    editor: EditorClient,
    elicit: EditorElicit,
    model_server: ModelServer,
    workspace: Path,
) -> None:
    conn = acp
    elicit.decide = never
    sid = await session(conn, workspace)
    assert (await conn.prompt(session_id=sid, prompt=ask("form"))).stop_reason == "end_turn"
    assert server_answer(model_server) == {"action": "cancel", "content": None}
    (asked,) = editor.requests("elicitation/create")
    withdrawn = await editor.wait_for(lambda m: m.get("method") == "$/cancel_request")
    assert withdrawn["params"] == {"requestId": asked["id"]}


async def test_a_cancelled_prompt_withdraws_the_question_and_the_server_gets_cancel(
    acp: Any,
    editor: EditorClient,
    elicit: EditorElicit,
    bridge: EditorMcp,
    workspace: Path,
) -> None:
    conn = acp
    elicit.decide = never
    # The editor's own server: agentd's answer to its question is seen on the way.
    bridge.servers["srv-1"] = lambda: test_server.build("acct")
    server = AcpMcpServer(type="acp", name="acct", server_id="srv-1")
    sid = await session(conn, workspace, server)
    prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=ask("form")))
    asked = await editor.wait_for(lambda m: m.get("method") == "elicitation/create")
    await conn.cancel(session_id=sid)
    assert (await prompt).stop_reason == "cancelled"
    await editor.wait_for(
        lambda m: m.get("method") == "$/cancel_request" and m["params"]["requestId"] == asked["id"]
    )

    def answered_cancel() -> bool:
        return any(
            isinstance(a, JSONRPCResponse) and a.result.get("action") == "cancel"
            for a in bridge.answers
        )

    await bridge.wait(answered_cancel)
    # The session goes on.
    elicit.decide = answering({"action": "decline"})
    assert (await conn.prompt(session_id=sid, prompt=ask("form"))).stop_reason == "end_turn"
