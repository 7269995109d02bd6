"""MCP sampling's pieces without a daemon: reading a server's request, the
salvage of a request the SDK could not parse, and the bounded permission ask."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
from mcp_types import CreateMessageRequestParams, JSONRPCRequest, jsonrpc_message_adapter

from agentd.agent.permission import (
    ONCE_OPTIONS,
    PermissionAnswer,
    PermissionRequest,
    ask_within,
)
from agentd.agent.session import AwaitClientResult, Session
from agentd.mcp.salvage import salvaged
from agentd.mcp.sampling import INVALID_PARAMS, Refused, read_request
from agentd.messages import ImagePart, TextPart

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()


def params(**fields: Any) -> CreateMessageRequestParams:
    body = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}
    return CreateMessageRequestParams.model_validate({"maxTokens": 10, **body, **fields})


def test_a_request_becomes_agentds_messages() -> None:
    image = {"type": "image", "data": PNG, "mimeType": "image/png"}
    ask = read_request(
        params(
            systemPrompt="sys",
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
                {"role": "assistant", "content": {"type": "text", "text": "ok"}},
            ],
            temperature=0.5,
            stopSequences=["END"],
        ),
        images=True,
        max_image_bytes=1 << 20,
    )
    assert ask.system == "sys" and ask.max_tokens == 10 and ask.temperature == 0.5
    assert ask.stop == ("END",)
    first, second = ask.messages
    assert first.role == "user" and isinstance(first.parts[1], ImagePart)
    assert second.role == "assistant" and second.parts == [TextPart("ok")]
    assert ask.preview(10)["lastMessage"] == "ok"


@pytest.mark.parametrize(
    ("fields", "images", "field"),
    [
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": {"type": "image", "data": PNG, "mimeType": "image/png"},
                    }
                ]
            },
            True,
            "messages.0.content",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": {"type": "image", "data": "!!", "mimeType": "image/png"},
                    }
                ]
            },
            True,
            "messages.0.content.data",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": {"type": "image", "data": PNG, "mimeType": "image/bmp"},
                    }
                ]
            },
            True,
            "messages.0.content.mimeType",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "data": PNG, "mimeType": "image/png"}] * 9,
                    }
                ]
            },
            True,
            "messages.0.content.8",
        ),
        ({"stopSequences": [""]}, False, "stopSequences.0"),
        ({"temperature": float("nan")}, False, "temperature"),
        ({"systemPrompt": "s" * 200_001}, False, "messages.0.content.text"),
        ({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}, False, "tools"),
    ],
)
def test_what_is_not_served_is_refused_naming_the_field(
    fields: dict[str, Any], images: bool, field: str
) -> None:
    with pytest.raises(Refused) as info:
        read_request(params(**fields), images=images, max_image_bytes=1 << 20)
    assert info.value.code == INVALID_PARAMS
    assert info.value.message.startswith(f"{field}:")


def test_the_preview_is_cut_and_valid_unicode() -> None:
    ask = read_request(params(systemPrompt="p" * 1000), images=False, max_image_bytes=1 << 20)
    preview = ask.preview(10)
    assert len(preview["systemPrompt"]) == 300 and preview["systemPrompt"].endswith("…")
    json.dumps(preview).encode()


def test_a_request_with_a_lone_surrogate_escape_is_read_again() -> None:
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "sampling/createMessage",
            "params": {"systemPrompt": "\udc00"},
        }
    )
    with pytest.raises(pydantic.ValidationError) as info:
        jsonrpc_message_adapter.validate_json(line)
    message = salvaged(info.value).message
    assert isinstance(message, JSONRPCRequest) and message.id == 7
    assert message.params == {"systemPrompt": "\udc00"}


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\\udc00"}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"a": "\\udc00"}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"a": "\\udc00", "t": NaN}}',
        "not json",
    ],
    ids=["notification", "response", "nan", "garbage"],
)
def test_anything_else_stays_what_the_sdk_made_of_it(line: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        jsonrpc_message_adapter.validate_json(line)
    assert salvaged(info.value) is info.value
    other = ValueError("x")
    assert salvaged(other) is other


class Asker:
    def __init__(self, answer: PermissionAnswer | None) -> None:
        self.answer = answer

    async def ask_permission(self, session: Session, request: PermissionRequest) -> Any:
        if self.answer is None:
            await asyncio.Event().wait()
        return self.answer


def request() -> PermissionRequest:
    return PermissionRequest("c1", "t", {}, "title", options=ONCE_OPTIONS, kind="sampling")


async def test_an_always_not_offered_counts_once(tmp_path: Path) -> None:
    session = Session("s", tmp_path, AwaitClientResult([]))
    session.permissions = Asker(PermissionAnswer("allow_always"))
    assert (await ask_within(session, request(), 5)).choice == "allow_once"


async def test_no_asker_or_no_answer_in_time_is_unavailable(tmp_path: Path) -> None:
    session = Session("s", tmp_path, AwaitClientResult([]))
    assert (await ask_within(session, request(), 5)).choice == "unavailable"
    session.permissions = Asker(None)
    answer = await ask_within(session, request(), 0.05)
    assert answer.choice == "unavailable" and "no answer within 0.05 s" in answer.detail
