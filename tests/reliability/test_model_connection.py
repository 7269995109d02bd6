"""The model connection against servers that manage their connections their
own way, end to end: a kept-alive connection closed by the server as the
next prompt's request goes out on it (sent again once, on a new one), a
server that closes idle connections or every connection after its answer,
a proxy in the environment (httpx's own transport), headers held until a
first token that never comes, and a cancel while connecting or while the
head is held."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e

BOUNDS = {"readIdleTimeout": 1, "connectTimeout": 1, "maxRetries": 0}


def host_of(server: ModelServer) -> str:
    return server.base_url.split("//")[1]


async def started(server: ModelServer, tmp_path: Path, **env: str) -> AgentdClient:
    return await start_client(
        daemon_env(server.openai_base_url, tmp_path, AGENTD_MEMORY="off", **env), BOUNDS
    )


async def test_a_kept_alive_connection_closed_unanswered_is_sent_again_once(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The server reads the request on the kept-alive connection and closes
    it without a byte of answer (its keep-alive timeout crossing the
    request): the request goes again on a new connection and the user sees
    the answer; a new connection that does the same is not sent again."""
    client = await started(model_server, tmp_path)
    try:
        sid = await client.new_session(workspace)
        assert (await client.prompt(sid, "one"))["stopReason"] == "end_turn"
        await model_server.wait_answered(model_server.answered)  # back in the pool
        model_server.enqueue({"hangUp": True})
        result: dict[str, Any] = await client.prompt(sid, "two")
        assert result["stopReason"] == "end_turn", result
        assert client.text(sid) == "Echo: oneEcho: two"
        first, hung, again = model_server.requests("main")
        assert hung["connection"] == first["connection"]  # the kept-alive one
        assert again["connection"] > hung["connection"]  # a new one
        assert again["body"] == hung["body"]
        faults = [e["kind"] for e in model_server.log if e["type"] == "fault"]
        assert faults == ["hang_up"]

        # Hung up on the kept-alive connection, then on the new one: once only.
        model_server.enqueue({"hangUp": True})
        model_server.enqueue({"hangUp": True})
        result = await client.prompt(sid, "three")
        assert result["stopReason"] == "error"
        assert result["error"]["message"] == (
            f"connection to {host_of(model_server)} lost: "
            "Server disconnected without sending a response."
        )
        assert len(model_server.requests("main")) == 5
        assert (await client.prompt(sid, "four"))["stopReason"] == "end_turn"
        history = model_server.requests("main")[-1]["body"]["messages"]
        users = [m["content"].rsplit("\n", 1)[-1] for m in history if m["role"] == "user"]
        assert users == ["one", "two", "three", "four"]
    finally:
        await client.lsp.shutdown_session()


@pytest.mark.parametrize("closing", ["idle_timeout", "close_every"])
async def test_a_server_closing_its_connections_costs_the_user_nothing(
    model_server: ModelServer, tmp_path: Path, workspace: Path, closing: str
) -> None:
    """Idle connections closed by the server between prompts, or every
    answer sent with `Connection: close`: each prompt gets a new connection
    and no error."""
    if closing == "idle_timeout":
        model_server.idle_timeout = 0.01
    else:
        model_server.close_every = True
    client = await started(model_server, tmp_path)
    try:
        sid = await client.new_session(workspace)
        for n in range(3):
            result = await client.prompt(sid, f"prompt {n}")
            assert result["stopReason"] == "end_turn", result
            # The connection of that answer is closed before the next prompt.
            await model_server.wait_closed(model_server.accepted)
        assert client.text(sid) == "Echo: prompt 0Echo: prompt 1Echo: prompt 2"
        connections = [r["connection"] for r in model_server.requests("main")]
        assert len(set(connections)) == 3
    finally:
        await client.lsp.shutdown_session()


async def test_a_proxy_in_the_environment_keeps_prompts_working(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """With a proxy set for https, the client keeps httpx's own transport
    (the fallback path); the plain-http endpoint is reached directly."""
    client = await started(model_server, tmp_path, HTTPS_PROXY="http://127.0.0.1:9")
    try:
        sid = await client.new_session(workspace)
        for text in ("one", "two"):
            assert (await client.prompt(sid, text))["stopReason"] == "end_turn"
        model_server.enqueue({"chunks": ["a", "b", "c"], "dropAfter": 2})
        result = await client.prompt(sid, "three")
        assert result["error"]["kind"] == "stream_interrupted"
        assert (await client.prompt(sid, "four"))["stopReason"] == "end_turn"
        assert client.text(sid) == "Echo: oneEcho: twoabEcho: four"
    finally:
        await client.lsp.shutdown_session()


@pytest.mark.parametrize("model_server", [True], indirect=True)
async def test_headers_held_until_a_first_token_that_never_comes_is_a_named_timeout(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    client = await started(model_server, tmp_path)
    try:
        sid = await client.new_session(workspace)
        model_server.enqueue({"text": "never", "ttft": 600})
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["stopReason"] == "error"
        assert result["error"]["kind"] == "timeout"
        assert result["error"]["message"] == f"{host_of(model_server)} sent nothing for 1 s"
        await model_server.wait_for(lambda e: e["type"] == "disconnect")
        assert len(model_server.requests("main")) == 1
        assert (await client.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert client.text(sid) == "Echo: next"
    finally:
        await client.lsp.shutdown_session()


@pytest.mark.parametrize("model_server", [True], indirect=True)
async def test_a_cancel_while_the_head_is_held_ends_the_request_and_the_next_prompt_works(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    client = await start_client(
        daemon_env(model_server.openai_base_url, tmp_path, AGENTD_MEMORY="off")
    )
    try:
        sid = await client.new_session(workspace)
        model_server.enqueue({"text": "never", "ttft": 600})
        task = asyncio.ensure_future(client.prompt(sid, "hello", msg_id="held"))
        request = await model_server.wait_for(lambda e: e["type"] == "request")
        client.cancel("held")
        with pytest.raises(JsonRpcException):
            await task
        # The held request's connection is given up, not left to its 600 s.
        await model_server.wait_for(
            lambda e: e["type"] == "disconnect" and e["id"] == request["id"]
        )
        assert (await client.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert client.text(sid) == "Echo: next"
    finally:
        await client.lsp.shutdown_session()


async def connecting_to(port: int) -> None:
    """Until a connection to `port` on this machine is being opened (SYN sent):
    no event says so but the kernel's table of TCP sockets."""
    while True:
        for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[2].endswith(f":{port:04X}") and fields[3] == "02":  # SYN_SENT
                return
        await asyncio.sleep(0.01)


async def test_a_cancel_while_connecting_ends_the_prompt(
    model_server: ModelServer, tmp_path: Path, workspace: Path, black_hole: str
) -> None:
    """The connect never completes (SYNs dropped) and no connect timeout is
    near: the cancel alone ends the prompt."""
    client = await start_client(
        daemon_env(model_server.openai_base_url, tmp_path, AGENTD_BASE_URL=black_hole),
        {"connectTimeout": 600, "maxRetries": 0},
    )
    try:
        sid = await client.new_session(workspace)
        task = asyncio.ensure_future(client.prompt(sid, "hello", msg_id="connecting"))
        await asyncio.wait_for(connecting_to(int(black_hole.rsplit(":", 1)[1].split("/")[0])), 20)
        client.cancel("connecting")
        with pytest.raises(JsonRpcException):
            await task
        # Still the black hole: the session is free again (a second prompt
        # would wait out the connect), and the daemon answers at once.
        listed = await client.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert isinstance(listed["sessions"], list)
    finally:
        await client.lsp.shutdown_session()


async def test_keep_alive_comments_past_the_idle_timeout_keep_the_stream(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A server that sends only SSE comments for longer than the read idle
    timeout (1 s here) before its first token: no timeout, the answer comes."""
    client = await started(model_server, tmp_path)
    try:
        sid = await client.new_session(workspace)
        model_server.enqueue({"text": "at last", "ttft": 2.5, "pingEvery": 0.2})
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["stopReason"] == "end_turn", result
        assert client.text(sid) == "at last"
    finally:
        await client.lsp.shutdown_session()


async def test_ten_megabytes_in_one_event_line_arrive_whole(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    big = "0123456789" * 1_000_000
    client = await started(model_server, tmp_path)
    try:
        sid = await client.new_session(workspace)
        model_server.enqueue({"chunks": [big]})
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["stopReason"] == "end_turn", result
        assert client.text(sid) == big
        assert (await client.prompt(sid, "next"))["stopReason"] == "end_turn"
        history = model_server.requests("main")[-1]["body"]["messages"]
        assert history[2] == {"role": "assistant", "content": big}
    finally:
        await client.lsp.shutdown_session()


async def test_a_socks_proxy_this_httpx_cannot_use_fails_prompts_clearly_not_the_start(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A SOCKS proxy in the environment needs a package httpx does not bring:
    the daemon still starts (sessions, listings), and each prompt says why it
    cannot reach the model, instead of every request failing the start-up."""
    client = await started(model_server, tmp_path, ALL_PROXY="socks5://127.0.0.1:9")
    try:
        sid = await client.new_session(workspace)
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["stopReason"] == "error"
        assert result["error"]["kind"] == "connection_error"
        message = result["error"]["message"]
        assert message.startswith(
            f"cannot reach {host_of(model_server)} through the proxy set in the environment: "
        ), message
        assert "socksio" in message
        assert model_server.requests() == []
        listed = await client.request("agent/listSessions", {"workspaceRoot": str(workspace)})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    finally:
        await client.lsp.shutdown_session()


async def test_a_proxy_that_cannot_be_reached_is_named_in_the_error(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The model endpoint is fine; the proxy set in the environment (its
    credentials never shown) is what refuses: the error says so."""
    proxy = "http://someone:pass-1234@127.0.0.1:9"
    client = await started(model_server, tmp_path, HTTP_PROXY=proxy)
    try:
        sid = await client.new_session(workspace)
        result: dict[str, Any] = await client.prompt(sid, "hello")
        assert result["error"]["kind"] == "connection_error"
        message = result["error"]["message"]
        assert message.startswith(
            f"cannot connect to {host_of(model_server)} through the proxy 127.0.0.1:9 "
            "set in the environment: "
        ), message
        assert "pass-1234" not in message and model_server.requests() == []
    finally:
        await client.lsp.shutdown_session()
