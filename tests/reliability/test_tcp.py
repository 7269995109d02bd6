"""`agentd serve --tcp`: loopback only, a token required, foreign Host and
Origin refused, oversized frames refused; the protocol itself as over stdio."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.lsp.tcp import check_first_header, load_token
from agentd.testing.daemon import daemon_command, daemon_env
from agentd.testing.framing import frame, initialize_params, notification, read_frame, request
from agentd.testing.model_server import ModelServerThread

pytestmark = pytest.mark.e2e


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, token: str) -> None:
        self.proc, self.port, self.token = proc, port, token

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    def auth(self) -> bytes:
        return b"Authorization: Bearer %s\r\n" % self.token.encode()


@pytest.fixture(scope="module")
def tcp_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Any]]:
    home = tmp_path_factory.mktemp("tcp")
    token_file = home / "token"
    with ModelServerThread() as model:
        env = daemon_env(
            model.openai_base_url, home, AGENTD_MEMORY="off", AGENTD_LOG_LEVEL="warning"
        )
        proc = subprocess.Popen(
            daemon_command("--tcp", "--port", "0", "--token-file", str(token_file)),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        assert line.startswith("agentd listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        try:
            yield Daemon(proc, port, token_file.read_text().strip()), model
        finally:
            proc.terminate()
            proc.wait(20)
            proc.stderr.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message, skipping window/logMessage (the daemon logs bad frames to the editor)."""

    async def read() -> dict[str, Any]:
        while (msg := await read_frame(reader)).get("method") == "window/logMessage":
            pass
        return msg

    return await asyncio.wait_for(read(), 20)


async def expect_closed(reader: asyncio.StreamReader) -> None:
    """The daemon closes the connection without answering anything."""
    try:
        rest = await asyncio.wait_for(reader.read(), 20)
    except ConnectionResetError:  # closed with our bytes unread: a reset, also fine
        rest = b""
    assert rest == b""


def test_the_token_file_is_created_private_and_a_readable_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "token"
    token = load_token(path)
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_token(path) == token
    path.chmod(0o644)
    out = subprocess.run(
        daemon_command("--tcp", "--port", "0", "--token-file", str(path)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "chmod 600" in out.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_token_file_that_is_no_file_is_refused_not_waited_on(tmp_path: Path, kind: str) -> None:
    """A FIFO as the token file (mode 0600, so the mode check passed) held
    the start for ever in its read; a symlink to /dev/zero read without end."""
    path = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.symlink_to("/dev/zero")
    out = subprocess.run(
        daemon_command("--tcp", "--port", "0", "--token-file", str(path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert f"{path}: not a regular file" in out.stderr, out.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_non_loopback_hosts_are_refused(tmp_path: Path, host: str) -> None:
    out = subprocess.run(
        daemon_command("--tcp", "--host", host, "--port", "0", "--token-file", str(tmp_path / "t")),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "loopback only" in out.stderr


def test_first_header_rules() -> None:
    tok = "t" * 32
    ok = b"Content-Length: 2\r\nAuthorization: Bearer " + tok.encode()
    assert check_first_header(ok, tok) is None
    assert check_first_header(ok + b"\r\nHost: localhost:7654", tok) is None
    assert check_first_header(b"Content-Length: 2", tok) == "no Authorization header"
    assert check_first_header(ok[:-1], tok) == "a wrong token"
    assert check_first_header(ok + b"\r\nOrigin: http://evil.test", tok) is not None
    assert check_first_header(ok + b"\r\nHost: evil.test", tok) == "a foreign Host header"
    assert check_first_header(b"POST / HTTP/1.1\r\n" + ok, tok) == "not LSP framing"


@pytest.mark.parametrize(
    "first",
    [
        frame(request(1, "initialize", initialize_params())),  # no token
        frame(request(1, "initialize", initialize_params()), b"Authorization: Bearer nope\r\n"),
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"Content-Length: 2\r\n" + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n{}",
    ],
    ids=["no-token", "wrong-token", "http", "huge-header"],
)
async def test_connections_without_the_token_are_closed_unanswered(
    tcp_daemon: tuple[Daemon, Any], first: bytes
) -> None:
    daemon, _ = tcp_daemon
    reader, writer = await daemon.connect()
    writer.write(first)
    await expect_closed(reader)
    writer.close()


@pytest.mark.parametrize("header", [b"Origin: http://evil.test\r\n", b"Host: evil.test:7654\r\n"])
async def test_browsers_and_foreign_hosts_are_refused_even_with_the_token(
    tcp_daemon: tuple[Daemon, Any], header: bytes
) -> None:
    daemon, _ = tcp_daemon
    reader, writer = await daemon.connect()
    writer.write(frame(request(1, "initialize", initialize_params()), daemon.auth() + header))
    await expect_closed(reader)
    writer.close()


async def test_an_authenticated_connection_speaks_the_protocol(
    tcp_daemon: tuple[Daemon, Any], workspace: Path
) -> None:
    daemon, model = tcp_daemon
    reader, writer = await daemon.connect()
    writer.write(frame(request(1, "initialize", initialize_params()), daemon.auth()))
    init = await read_message(reader)
    assert init["result"]["serverInfo"]["name"] == "agentd"
    writer.write(frame(notification("initialized", {})))
    # An oversized frame is refused before allocating; the connection keeps serving.
    writer.write(b"Content-Length: 9999999999\r\n\r\n")
    writer.write(frame(request(2, "agent/newSession", {"workspaceRoot": str(workspace)})))
    reply = await read_message(reader)
    sid = reply["result"]["sessionId"]
    model.enqueue({"chunks": ["over ", "tcp"]})
    writer.write(frame(request(3, "agent/prompt", {"sessionId": sid, "prompt": "hi"})))
    chunks = []
    while True:
        msg = await read_message(reader)
        if msg.get("id") == 3:
            break
        if msg.get("method") == "agent/update" and msg["params"]["update"]["kind"] == (
            "message_chunk"
        ):
            chunks.append(msg["params"]["update"]["text"])
    assert msg["result"]["stopReason"] == "end_turn"
    assert "".join(chunks) == "over tcp"
    # A second connection is independent: it must initialize (and authenticate) itself.
    r2, w2 = await daemon.connect()
    w2.write(frame(request(1, "agent/newSession", {"workspaceRoot": "/"}), daemon.auth()))
    assert (await read_message(r2))["error"]["code"] == -32002
    w2.close()
    # shutdown + exit ends this connection only; the listener stays.
    writer.write(frame(request(4, "shutdown")))
    assert (await read_message(reader))["result"] is None
    writer.write(frame(notification("exit")))
    await expect_closed(reader)
    writer.close()
    assert daemon.proc.poll() is None
