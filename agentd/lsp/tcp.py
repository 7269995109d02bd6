"""`agentd serve --tcp`: the same protocol over a loopback TCP socket.

Every connection is one independent protocol connection (its own
`initialize` ... `shutdown`/`exit`, its own `AgentdServer` and core), framed
exactly as over stdio by `agentd.lsp.transport.FrameSplitter`. The listener runs
until the process is signalled.

Rules (see docs/protocol.md, "Network transport"):

- loopback only: a host that is not a loopback address is refused at start;
- a token is required: the first frame's header block must carry
  `Authorization: Bearer <token>`, the token being the content of
  `--token-file` (created with a random token and mode 0600 when missing; a
  file readable by others is refused). A wrong or missing token, a header
  block that is not LSP framing (an HTTP request line, say), a `Host` that is
  not loopback or any `Origin` header (a browser) closes the connection before
  a byte of its body is parsed;
- the first header block must arrive within `AUTH_TIMEOUT` seconds and fit in
  `MAX_HEADER` bytes; bodies are capped as over stdio (`MAX_BODY`).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import secrets
import signal
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentd.files import open_regular, read_fd
from agentd.lsp.transport import MAX_HEADER, PipeWriter
from agentd.stdio import read_pump

if TYPE_CHECKING:
    from agentd.lsp.server import AgentdServer

log = logging.getLogger("agentd.lsp.tcp")

AUTH_TIMEOUT = 10.0
DEFAULT_PORT = 7654


class TcpConfigError(Exception):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_token_file() -> Path:
    from agentd.layout import user_config_dir

    return user_config_dir() / "tcp-token"


# A token is a line of a few dozen characters.
MAX_TOKEN_BYTES = 4096


def load_token(path: Path) -> str:
    """The token in `path`; a new random one (file mode 0600) if it does not exist."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    # Opened without blocking and read within a bound: a FIFO there held the
    # start for ever, a link to /dev/zero read without end.
    try:
        fd = open_regular(path, follow=True)
    except OSError as exc:
        raise TcpConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            mode = stat.S_IMODE(st.st_mode)
            raise TcpConfigError(
                f"{path} is accessible by other users (mode {mode:o}); chmod 600 it"
            )
        raw = read_fd(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_TOKEN_BYTES:
        raise TcpConfigError(f"{path}: longer than {MAX_TOKEN_BYTES} bytes: not a token")
    token = raw.decode("utf-8", "replace").strip()
    if len(token) < 16:
        raise TcpConfigError(f"{path}: the token must be at least 16 characters")
    return token


def check_first_header(block: bytes, token: str) -> str | None:
    """None when the header block authenticates the connection, else why not."""
    auth: bytes | None = None
    for line in block.split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            return "not LSP framing"
        key = name.strip().lower()
        value = value.strip()
        if key == b"authorization":
            auth = value
        elif key == b"origin":
            return "an Origin header (browsers may not connect)"
        elif key == b"host":
            host = (
                value.decode("latin-1").rsplit(":", 1)[0]
                if b"]" not in value
                else (value.decode("latin-1").split("]")[0] + "]")
            )
            if not is_loopback(host):
                return "a foreign Host header"
    if auth is None:
        return "no Authorization header"
    scheme, _, given = auth.partition(b" ")
    if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), token.encode()):
        return "a wrong token"
    return None


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, first: bytes) -> None:
        self._reader = reader
        self._pending = first

    async def read(self, n: int) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        try:
            return await self._reader.read(n)
        except ConnectionError:
            return b""


async def _read_first_header(reader: asyncio.StreamReader) -> bytes | None:
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEADER:
            return None
        data = await reader.read(4096)
        if not data:
            return None
        buf.extend(data)
    return bytes(buf)


async def handle_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    token: str,
    live: set[AgentdServer] | None = None,
    auth_timeout: float = AUTH_TIMEOUT,
) -> None:
    peer = writer.get_extra_info("peername")
    try:
        first = await asyncio.wait_for(_read_first_header(reader), auth_timeout)
    except (TimeoutError, ConnectionError):
        first = None
    why = "no header block" if first is None else None
    if first is not None:
        why = check_first_header(first[: first.index(b"\r\n\r\n")], token)
    if why is not None:
        log.warning("connection from %s refused: %s", peer, why)
        writer.close()
        return
    log.info("connection from %s accepted", peer)
    assert first is not None
    from agentd.lsp.server import AgentdServer, EditorLogHandler

    server = AgentdServer()
    if live is not None:
        live.add(server)
    from agentd.lsp import handlers

    handlers.register(server)
    handler = EditorLogHandler(server, asyncio.get_running_loop())
    handler.setLevel(logging.DEBUG)
    logging.getLogger("agentd").addHandler(handler)
    out = PipeWriter(writer.transport)
    try:
        code = await server.serve_stream(read_pump(_Connection(reader, first).read), out)
        log.info("connection from %s ended (%s)", peer, code)
    finally:
        if live is not None:
            live.discard(server)
        logging.getLogger("agentd").removeHandler(handler)
        writer.close()


async def serve_tcp(host: str, port: int, token: str) -> int:
    loop = asyncio.get_running_loop()
    connections: set[asyncio.Task[None]] = set()
    live: set[AgentdServer] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            await handle_connection(reader, writer, token, live)
        except Exception:
            log.exception("connection failed")
        finally:
            connections.discard(task)

    server = await asyncio.start_server(on_connect, host, port, limit=2**20)
    addr = server.sockets[0].getsockname()
    # The one line a launcher reads to learn the port (with --port 0).
    print(f"agentd listening on {addr[0]}:{addr[1]}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
        server.close()
        # Each connection cleans up as on stdin EOF (running prompts cancelled).
        for conn in list(live):
            conn.request_stop(1)
        if connections:
            _, still = await asyncio.wait(list(connections), timeout=15)
            for task in still:
                task.cancel()
    return 0


def run_tcp(host: str, port: int, token_file: str | None) -> int:
    """Entry point of `agentd serve --tcp`."""
    logging.getLogger("pygls").setLevel(logging.CRITICAL)
    if not is_loopback(host):
        print(f"agentd: refusing to listen on {host}: loopback only", file=sys.stderr)
        return 2
    try:
        token = load_token(Path(token_file) if token_file else default_token_file())
    except (OSError, TcpConfigError) as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve_tcp(host, port, token))
