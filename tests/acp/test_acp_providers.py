"""ACP `providers/*` and `logout`: the editor routes agentd's model requests
through an endpoint it configures, and takes them back. Two real model
servers (agentd's own endpoint and the editor's "gateway"), the real daemon,
the ACP package's client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from acp import RequestError, text_block

from agentd.testing.daemon import TEST_MODEL, daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import EditorClient, connect_acp
from tests.acp.test_acp_e2e import last_response, main_requests, new_session, start
from tests.acp.test_acp_sessions import bad_field

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

# Header values the editor holds: they must reach the gateway and nothing else.
GATEWAY_TOKEN = "gw-token-5f3a9c1e7b"
BEARER = "editor-bearer-88d0c2a4e6"


@pytest_asyncio.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ModelServer]:
    """The editor's endpoint: a second model server."""
    async with ModelServer(log_path=tmp_path / "gateway.jsonl") as server:
        yield server


async def request(conn: Any, method: str, params: dict[str, Any]) -> Any:
    """A request the ACP package's client has no method for (unstable ones)."""
    return await conn._conn.send_request(method, params)


async def set_provider(conn: Any, base_url: str, api: str = "openai", **headers: str) -> Any:
    params = {"providerId": "main", "apiType": api, "baseUrl": base_url, "headers": headers}
    return await request(conn, "providers/set", params)


async def current(conn: Any) -> dict[str, Any]:
    (provider,) = (await request(conn, "providers/list", {}))["providers"]
    assert provider["providerId"] == "main"
    assert provider["supported"] == ["openai", "anthropic"]
    assert provider["required"] is False
    return {**provider["current"], "setBy": provider["_meta"]["agentd"]["setBy"]}


def leaks(root: Path, secrets: list[str], skip: set[str]) -> list[str]:
    """Files under `root` (but those named in `skip`) holding one of `secrets`."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path.name not in skip:
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return found


async def test_requests_go_to_the_editors_endpoint_with_its_headers_then_back(
    editor: EditorClient,
    workspace: Path,
    model_server: ModelServer,
    gateway: ModelServer,
    tmp_path: Path,
) -> None:
    # Logging at its most talkative: still no header value in the log.
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_LOG_LEVEL="debug")
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as daemon:
        await routed_and_back(daemon, editor, workspace, model_server, gateway)
    assert editor.schema_problems == []
    assert "DEBUG" in (tmp_path / "agentd-stderr.log").read_text()
    # The header was a secret: nowhere in what agentd wrote or said.
    assert GATEWAY_TOKEN not in json.dumps(editor.received)
    assert leaks(tmp_path, [GATEWAY_TOKEN], skip={"gateway.jsonl"}) == []


async def routed_and_back(
    daemon: Any,
    editor: EditorClient,
    workspace: Path,
    model_server: ModelServer,
    gateway: ModelServer,
) -> None:
    await start(daemon)
    caps = last_response(editor, "initialize")["result"]["agentCapabilities"]
    assert caps["providers"] == {} and caps["auth"] == {"logout": {}}
    own = {"apiType": "openai", "baseUrl": model_server.openai_base_url, "setBy": "settings"}
    assert await current(daemon) == own
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=[text_block("first")])
    assert len(main_requests(model_server)) == 1

    assert (
        await set_provider(daemon, gateway.openai_base_url, **{"X-Gateway-Token": GATEWAY_TOKEN})
        == {}
    )
    routed = {"apiType": "openai", "baseUrl": gateway.openai_base_url, "setBy": "editor"}
    assert await current(daemon) == routed
    await daemon.prompt(session_id=sid, prompt=[text_block("second")])
    (sent,) = main_requests(gateway)
    assert sent["headers"]["x-gateway-token"] == GATEWAY_TOKEN
    # agentd's own key stays with agentd's endpoint: only the editor's headers go.
    assert "authorization" not in sent["headers"]
    assert sent["body"]["model"] == TEST_MODEL
    assert len(main_requests(model_server)) == 1
    # The model choices and the session's model are agentd's, as before.
    options = await daemon.set_config_option(session_id=sid, config_id="model", value=TEST_MODEL)
    (model,) = [o for o in options.config_options if o.id == "model"]
    assert [c.value for c in model.options] == [TEST_MODEL]

    assert await request(daemon, "providers/disable", {"providerId": "main"}) == {}
    assert await current(daemon) == own
    await daemon.prompt(session_id=sid, prompt=[text_block("third")])
    assert len(main_requests(model_server)) == 2 and len(main_requests(gateway)) == 1
    # An unknown provider is disabled already: a success, as ACP asks.
    assert await request(daemon, "providers/disable", {"providerId": "other"}) == {}


async def test_anthropic_routing_and_logout_forget_the_editors_credentials(
    daemon: Any,
    editor: EditorClient,
    workspace: Path,
    model_server: ModelServer,
    gateway: ModelServer,
    tmp_path: Path,
) -> None:
    await start(daemon)
    sid = await new_session(daemon, workspace)
    await set_provider(
        daemon,
        gateway.base_url,
        "anthropic",
        Authorization=f"Bearer {BEARER}",
        **{"X-Gateway-Token": GATEWAY_TOKEN},
    )
    assert (await current(daemon))["apiType"] == "anthropic"
    await daemon.prompt(session_id=sid, prompt=[text_block("to claude")])
    (sent,) = main_requests(gateway)
    assert (sent["api"], sent["path"]) == ("anthropic", "/v1/messages")
    assert sent["headers"]["authorization"] == "<redacted>"  # the editor's, not agentd's key
    assert "x-api-key" not in sent["headers"]

    # A failure of the editor's endpoint names it, never what its headers hold,
    # even when the endpoint's answer echoes them.
    gateway.enqueue({"status": 401, "errorBody": {"error": {"message": f"bad token {BEARER}"}}})
    with pytest.raises(RequestError) as failed:
        await daemon.prompt(session_id=sid, prompt=[text_block("again")])
    assert "401" in str(failed.value) and "headers the editor set" in str(failed.value)
    assert BEARER not in json.dumps(failed.value.data) + str(failed.value)

    assert await request(daemon, "logout", {}) == {}
    assert (await current(daemon))["setBy"] == "settings"
    await daemon.prompt(session_id=sid, prompt=[text_block("back home")])
    (home,) = main_requests(model_server)
    assert home["headers"]["authorization"] == "<redacted>"  # agentd's own key again
    assert len(main_requests(gateway)) == 2
    secrets = [BEARER, GATEWAY_TOKEN]
    assert not any(s in json.dumps(editor.received) for s in secrets)
    assert leaks(tmp_path, secrets, skip={"gateway.jsonl"}) == []


async def test_a_provider_set_while_a_prompt_streams_takes_its_next_step(
    daemon: Any,
    editor: EditorClient,
    workspace: Path,
    model_server: ModelServer,
    gateway: ModelServer,
) -> None:
    parts = [f"part{i} " for i in range(30)]
    model_server.enqueue(
        {
            "chunks": parts,
            "chunkDelay": 0.1,
            "toolCalls": [{"id": "c1", "name": "list_dir", "arguments": {}}],
        }
    )
    gateway.enqueue({"text": "answered through the gateway"})
    await start(daemon)
    sid = await new_session(daemon, workspace)
    turn = asyncio.create_task(daemon.prompt(session_id=sid, prompt=[text_block("go")]))
    await editor.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        )
    )
    await set_provider(daemon, gateway.openai_base_url, **{"X-Gateway-Token": GATEWAY_TOKEN})
    (streaming,) = main_requests(model_server)
    # The set was answered while the first step still streamed from agentd's endpoint.
    assert not [e for e in model_server.log if e["type"] == "complete"]
    result = await turn
    assert result.stop_reason == "end_turn"
    # That stream was not broken: all of it arrived, and it ended as a stream ends.
    assert editor.text(sid) == "".join(parts) + "answered through the gateway"
    assert [e["type"] for e in model_server.log if e.get("id") == streaming["id"]] == [
        "request",
        "first_chunk",
        "complete",
    ]
    # Its next step (the tool's result) went to the editor's endpoint.
    (step,) = main_requests(gateway)
    assert step["body"]["messages"][-1]["role"] == "tool"
    assert step["headers"]["x-gateway-token"] == GATEWAY_TOKEN


async def window_after_prompts(daemon: Any, editor: EditorClient, sid: str, tokens: int) -> int:
    """Prompt until the context meter shows `tokens` (the endpoint is asked in
    the background after an answer, never before the request): the meter's last
    window."""
    window = 0
    for _ in range(20):
        await daemon.prompt(session_id=sid, prompt=[text_block("again")])
        window = editor.notifications("_agentd/usage")[-1]["params"]["contextWindow"]
        if window == tokens:
            break
    return window


async def test_the_context_window_is_learned_again_from_the_endpoint_routed_to(
    daemon: Any,
    editor: EditorClient,
    workspace: Path,
    model_server: ModelServer,
    gateway: ModelServer,
) -> None:
    """Compaction and the context meter follow the endpoint requests go to:
    the window agentd's own endpoint reported is not kept for the gateway's
    model, and the gateway's is dropped when requests come back."""
    model_server.set_context_window(40_000)
    gateway.set_context_window(20_000)
    await start(daemon)
    sid = await new_session(daemon, workspace)
    assert await window_after_prompts(daemon, editor, sid, 40_000) == 40_000
    await set_provider(daemon, gateway.openai_base_url)
    assert await window_after_prompts(daemon, editor, sid, 20_000) == 20_000
    await request(daemon, "providers/disable", {"providerId": "main"})
    assert await window_after_prompts(daemon, editor, sid, 40_000) == 40_000


BASE = {"providerId": "main", "apiType": "openai", "baseUrl": "http://127.0.0.1:9/v1"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"providerId": "other"}, "providerId"),
        ({"providerId": "x" * 1_000_000}, "providerId"),
        ({"providerId": 7}, "providerId"),
        ({"apiType": "bedrock"}, "apiType"),
        ({"apiType": {"custom": "x"}}, "apiType"),
        ({"apiType": None}, "apiType"),
        ({"baseUrl": "ftp://example.com/v1"}, "baseUrl"),
        ({"baseUrl": "/v1"}, "baseUrl"),
        ({"baseUrl": "http://"}, "baseUrl"),
        ({"baseUrl": "http://user:pw@example.com/v1"}, "baseUrl"),
        ({"baseUrl": "http://example.com/v1?key=1"}, "baseUrl"),
        ({"baseUrl": "http://example.com/v1\r\nX-Evil: 1"}, "baseUrl"),
        ({"baseUrl": "http://example.com/\ud800"}, "baseUrl"),
        ({"baseUrl": "http://example.com/" + "a" * 100_000}, "baseUrl"),
        ({"baseUrl": "http://example.com:99999/v1"}, "baseUrl"),
        ({"baseUrl": ["http://example.com"]}, "baseUrl"),
        ({"headers": ["X-A", "1"]}, "headers"),
        ({"headers": {"X-Secret": "v1\r\nX-Injected: yes"}}, "headers.X-Secret"),
        ({"headers": {"X-Secret": "v1\nX-Injected: yes"}}, "headers.X-Secret"),
        ({"headers": {"X-Secret": "caf\u00e9"}}, "headers.X-Secret"),
        ({"headers": {"X-Secret": "\ud800"}}, "headers.X-Secret"),
        ({"headers": {"X-Secret": "v" * 100_000}}, "headers.X-Secret"),
        ({"headers": {"X-Secret": 12345}}, "headers.X-Secret"),
        ({"headers": {"Bad Name": "v"}}, "headers"),
        ({"headers": {"X-\ud800": "v"}}, "headers"),
        ({"headers": {"X-Injected\r\nHost": "v"}}, "headers"),
        ({"headers": {"": "v"}}, "headers"),
        ({"headers": {"H" * 10_000: "v"}}, "headers"),
        ({"headers": {f"X-H{i}": "v" for i in range(5000)}}, "headers"),
        ({"headers": {"Host": "evil.example"}}, "headers.Host"),
        ({"headers": {"content-length": "0"}}, "headers.content-length"),
        ({"headers": {"X-Agentd-Purpose": "main"}}, "headers.X-Agentd-Purpose"),
        ({"headers": {"X-A": "1", "x-a": "2"}}, "headers.x-a"),
    ],
)
async def test_hostile_provider_settings_are_refused_naming_the_field(
    daemon: Any,
    editor: EditorClient,
    workspace: Path,
    model_server: ModelServer,
    change: dict[str, Any],
    field: str,
) -> None:
    await start(daemon)
    with pytest.raises(RequestError) as refused:
        await request(daemon, "providers/set", {**BASE, **change})
    assert bad_field(refused.value)["field"] == field
    # Never echoed: a value may be a secret, or megabytes long.
    assert len(str(refused.value)) < 300 and "Injected" not in str(refused.value)
    assert "12345" not in json.dumps(refused.value.data)
    # Nothing changed, and the daemon still answers.
    assert (await current(daemon))["setBy"] == "settings"
    sid = await new_session(daemon, workspace)
    await daemon.prompt(session_id=sid, prompt=[text_block("still here")])
    assert len(main_requests(model_server)) == 1


async def test_provider_requests_of_the_wrong_shape_are_refused(daemon: Any) -> None:
    await start(daemon)
    shapes: list[tuple[str, dict[str, Any]]] = [
        ("providers/set", {"providerId": "main", "apiType": "openai"}),
        ("providers/disable", {}),
        ("providers/disable", {"providerId": ["main"]}),
    ]
    for method, params in shapes:
        with pytest.raises(RequestError) as refused:
            await request(daemon, method, params)
        assert bad_field(refused.value)["field"] in ("baseUrl", "providerId")
    # An omitted header map is an empty one.
    omitted = {"providerId": "main", "apiType": "openai", "baseUrl": "http://127.0.0.1:9/v1"}
    assert await request(daemon, "providers/set", omitted) == {}
    assert (await current(daemon))["setBy"] == "editor"
    assert await request(daemon, "logout", {}) == {}
    assert (await current(daemon))["setBy"] == "settings"
