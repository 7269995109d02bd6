"""The ACP front end's pure parts: framing, parsing, update mapping, tool helpers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentd.acp.caps import ClientCaps
from agentd.acp.providers import shown_url
from agentd.acp.rpc import Connection, LineSplitter, RpcError, parse_message
from agentd.acp.tools import Refused, command_result, number_lines, replace_once
from agentd.acp.updates import to_acp, tool_kind, tool_locations, tool_title
from agentd.events import (
    CompactionReport,
    MemoryDelivered,
    MessageChunk,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdate,
    Update,
    UsageReport,
    UserMessage,
)
from tests.acp.harness import schema_errors

ROOT = Path("/w/project")

# --- framing and parsing ----------------------------------------------------------------------


def reader(*chunks: bytes) -> list[bytes]:
    return list(chunks)


async def collect(chunks: list[bytes]) -> list[bytes | None]:
    lines: list[bytes | None] = []
    splitter = LineSplitter(lines.append)
    for chunk in chunks:
        splitter.feed(chunk)
    splitter.end()
    return lines


@pytest.mark.asyncio
async def test_lines_split_anywhere_and_several_in_one_read() -> None:
    lines = await collect(reader(b'{"a":', b"1}\n\n  \n{", b'"b":2}\n{"c":3}\n{"d"', b":4}"))
    assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}']


@pytest.mark.asyncio
async def test_an_oversized_line_is_dropped_and_reading_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("agentd.acp.rpc.MAX_LINE", 10)
    lines = await collect(reader(b"x" * 8, b"y" * 8, b"z" * 8 + b'\n{"ok":1}\n'))
    assert lines == [None, b'{"ok":1}']


@pytest.mark.parametrize(
    ("line", "code", "reply_id"),
    [
        (b"{not json", -32700, None),
        (b"\xff\xfe", -32700, None),
        (b"[]", -32600, None),
        (b'"text"', -32600, None),
        (b'{"id":1,"method":"x"}', -32600, 1),
        (b'{"jsonrpc":"2.0","id":"7","method":1}', -32600, "7"),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', -32600, None),
        (b'{"jsonrpc":"2.0","id":{},"method":"x"}', -32600, None),
        (b'{"jsonrpc":"2.0"}', -32600, None),
    ],
)
def test_invalid_messages_get_the_right_error(line: bytes, code: int, reply_id: Any) -> None:
    message, error, rid = parse_message(line)
    assert message is None and error is not None
    assert (error.code, rid) == (code, reply_id)


def test_ids_keep_their_type() -> None:
    for raw_id in (0, "0", "7", 7):
        message, error, _ = parse_message(
            json.dumps({"jsonrpc": "2.0", "id": raw_id, "method": "m"}).encode()
        )
        assert error is None and message is not None and message["id"] == raw_id


@pytest.mark.asyncio
async def test_outgoing_requests_are_matched_by_id_even_after_the_caller_gave_up() -> None:
    sent: list[dict[str, Any]] = []
    conn = Connection(lambda data: sent.append(json.loads(data)))
    first = conn.start_request("a", {})
    second = conn.start_request("b", {})
    waiter = asyncio.ensure_future(asyncio.shield(first))
    await asyncio.sleep(0)
    waiter.cancel()  # the caller stops waiting; the request stays registered
    conn.on_response(
        {"jsonrpc": "2.0", "id": sent[1]["id"], "error": {"code": -32601, "message": "no"}}
    )
    conn.on_response({"jsonrpc": "2.0", "id": sent[0]["id"], "result": {"ok": True}})
    assert await first == {"ok": True}
    with pytest.raises(RpcError) as info:
        await second
    assert info.value.code == -32601
    conn.on_response({"jsonrpc": "2.0", "id": 99, "result": None})  # unknown: ignored
    third = conn.start_request("c", {})
    conn.close()
    with pytest.raises(RpcError):
        await third


# --- update mapping ---------------------------------------------------------------------------


def test_each_core_event_has_an_acp_shape_that_the_schema_accepts() -> None:
    display = {"c2": [{"type": "diff", "path": "/w/project/a.py", "oldText": "a", "newText": "b"}]}
    events: list[Update] = [
        MessageChunk("hi"),
        ThoughtChunk("hmm"),
        UserMessage("question"),
        ToolCallStarted("c1", "read_file", {"path": "a.py", "offset": 3}, "daemon"),
        ToolCallUpdate("c1", "running"),
        ToolCallUpdate("c1", "completed", "1  x"),
        ToolCallUpdate("c2", "completed", "Edited a.py"),
        ToolCallUpdate("c3", "failed", "no"),
        ToolCallUpdate("c4", "cancelled"),
    ]
    for event in events:
        out = to_acp("s1", event, ROOT, display)
        assert out is not None
        method, params = out
        assert method == "session/update"
        assert schema_errors(params, "SessionNotification") == [], event
    _, started = to_acp("s1", events[3], ROOT) or ("", {})
    assert started["update"]["locations"] == [{"path": "/w/project/a.py", "line": 3}]
    _, kept = to_acp("s1", events[6], ROOT, display) or ("", {})
    assert kept["update"]["content"] == display["c2"]
    assert kept["update"]["rawOutput"] == "Edited a.py"


def test_memory_usage_and_compaction_go_to_extension_notifications() -> None:
    assert to_acp("s1", MemoryDelivered("user_query", "local", ["/m/a.md"]), ROOT) == (
        "_agentd/memory",
        {"sessionId": "s1", "point": "user_query", "tier": "local", "docs": ["/m/a.md"]},
    )
    assert to_acp("s1", UsageReport(1, 2, 3, 900, 32_000), ROOT) == (
        "_agentd/usage",
        {
            "sessionId": "s1",
            "inputTokens": 1,
            "outputTokens": 2,
            "sessionTotalTokens": 3,
            "contextTokens": 900,
            "contextWindow": 32_000,
        },
    )
    done = CompactionReport("done", "manual", 900, 300, summarized=4, summary="S")
    assert to_acp("s1", done, ROOT) == (
        "_agentd/compaction",
        {
            "sessionId": "s1",
            "status": "done",
            "trigger": "manual",
            "tokensBefore": 900,
            "tokensAfter": 300,
            "cleared": 0,
            "summarized": 4,
            "summary": "S",
        },
    )


def test_tool_kinds_titles_and_locations() -> None:
    assert [
        tool_kind(n) for n in ("read_file", "list_dir", "search", "edit_file", "run_command")
    ] == [
        "read",
        "read",
        "search",
        "edit",
        "execute",
    ]
    assert tool_kind("mystery") == "other"
    assert tool_title("run_command", {"command": "make test"}) == "Run `make test`"
    assert tool_title("search", {"query": "TODO"}) == "Search for 'TODO' in ."
    assert tool_locations("run_command", {"path": "x"}, ROOT) == []
    assert tool_locations("edit_file", {"path": "../x"}, ROOT) == [{"path": "/w/x"}]


# --- tools and capabilities --------------------------------------------------------------------


def test_client_tools_follow_the_client_capabilities() -> None:
    assert ClientCaps.from_json(None).tool_names() == []
    assert ClientCaps.from_json({"fs": {"readTextFile": True}}).tool_names() == ["read_file"]
    assert ClientCaps.from_json({"fs": {"writeTextFile": True}, "terminal": True}).tool_names() == [
        "write_file",
        "run_command",
    ]
    # Only a real `true` counts.
    assert ClientCaps.from_json({"fs": {"readTextFile": "yes"}, "terminal": 1}).tool_names() == []


def test_replace_exactly_one_occurrence() -> None:
    assert replace_once("a b c", "b", "B", "f") == "a B c"
    with pytest.raises(Refused, match="not found"):
        replace_once("a b c", "x", "y", "f")
    with pytest.raises(Refused, match="occurs 2 times"):
        replace_once("b b", "b", "y", "f")


def test_read_and_command_results_are_formatted_for_the_model() -> None:
    assert number_lines("a\nb\n", 9) == " 9  a\n10  b"
    assert number_lines("", 1) == "(empty file)"
    out = {"output": "ok\n", "truncated": True, "exitStatus": {"exitCode": 2}}
    assert (
        command_result(out, {})
        == "[the beginning of the output was cut by the editor]\nok\n[exit code 2]"
    )
    assert command_result({"output": ""}, {"signal": "SIGKILL"}) == "[killed by signal SIGKILL]"


def test_a_provider_url_is_shown_without_credentials_or_query() -> None:
    assert shown_url("https://u:p@Gateway.example:8443/v1?key=k#f") == (
        "https://gateway.example:8443/v1"
    )
    assert shown_url("http://[::1]:9/v1") == "http://[::1]:9/v1"
