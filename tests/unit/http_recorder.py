"""A loopback HTTP/1.1 server for the provider's send tests: it keeps each
request's bytes as they came and answers every request the same way."""

from __future__ import annotations

import asyncio


class Recorder:
    """Keeps each request's bytes (head and body, `requests`; heads alone,
    `heads`) and answers each with a 200 of `answer`, `extra` header lines
    first. `base` is its URL with `/v1`, as a provider's base URL has."""

    def __init__(self, answer: bytes, extra: bytes = b"") -> None:
        self.requests: list[bytes] = []
        self.accepted = 0
        self.answer = answer
        self.extra = extra
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Recorder:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def base(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    @property
    def heads(self) -> list[bytes]:
        return [request.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n" for request in self.requests]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.requests.append(head + await reader.readexactly(length))
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + self.extra
                    + b"content-length: %d\r\n\r\n" % len(self.answer)
                    + self.answer
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
