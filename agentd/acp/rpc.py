"""Newline-delimited JSON-RPC 2.0, the wire of the Agent Client Protocol.

Stdlib only (and agentd's error codes): this module is imported before
`initialize` is answered, and start-up must stay cheap. It knows nothing of
ACP's methods.

- `LineSplitter` splits a byte stream into messages (one JSON value a line)
  as its bytes arrive, caps a line at `MAX_LINE` and skips the rest of an
  oversized one, so a bad line never desynchronises the stream.
- `Connection` writes replies and notifications, and sends the daemon's own
  requests to the client, matching their responses by id.

Errors, one class with the code it maps to:

    RpcError                 a JSON-RPC error object (code, message, data)
    ConnectionClosed         the client went away before answering a request
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from agentd.answers import answered_request, unreadable, unreadable_error
from agentd.decode import Undecodable, decode_body
from agentd.errors import INTERNAL_ERROR, INVALID_REQUEST, bounded_error
from agentd.jsonenc import compact_utf8

log = logging.getLogger("agentd.acp")

MAX_LINE = 256 * 1024 * 1024
# `parse_message`'s reply id for a message that gets no reply (a notification).
NO_REPLY = object()


class RpcError(Exception):
    """An error reply, sent to the client or received from it."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class ConnectionClosed(RpcError):
    def __init__(self) -> None:
        super().__init__(INTERNAL_ERROR, "the client closed the connection")


class LineSplitter:
    """`feed(chunk)` calls `on_line` with each non-blank line as soon as its
    newline has arrived, `None` for a line over `MAX_LINE` (its rest is
    skipped); `end()` at the end of the input hands over a last line that
    had no newline."""

    def __init__(self, on_line: Callable[[bytes | None], None]) -> None:
        self._on_line = on_line
        self._buf = bytearray()
        # How far the buffer is known to hold no newline.
        self._scanned = 0
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        buf = self._buf
        buf += chunk
        while True:
            nl = buf.find(b"\n", self._scanned)
            if nl < 0:
                self._scanned = len(buf)
                break
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            self._scanned = 0
            if self._skipping:
                self._skipping = False
                continue
            if line.strip():
                self._on_line(line)
        if len(buf) > MAX_LINE:
            # Refuse before the buffer grows further; the line's rest is dropped.
            log.error("a message longer than %d bytes was dropped", MAX_LINE)
            buf.clear()
            self._scanned = 0
            if not self._skipping:
                self._skipping = True
                self._on_line(None)

    def end(self) -> None:
        if self._buf.strip() and not self._skipping:
            self._on_line(bytes(self._buf))
        self._buf.clear()
        self._scanned = 0


class Connection:
    """One JSON-RPC peer over a byte writer (the daemon's stdout)."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._said_string_ids = False
        self.closed = False

    # --- sending -------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        # `stringify`: a stray Path (or other non-JSON value) must not lose a
        # reply; a lone surrogate (a file name the disk gave us) is escaped.
        self._write(compact_utf8(message, stringify=True) + b"\n")

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def cancel_request(self, msg_id: Any) -> None:
        """ACP's `$/cancel_request`: agentd no longer waits for its request `msg_id`."""
        self.notify("$/cancel_request", {"requestId": msg_id})

    def respond(self, msg_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def respond_error(self, msg_id: Any, error: RpcError) -> None:
        # Short, whatever raised it: an exception may carry a request's body.
        self.send({"jsonrpc": "2.0", "id": msg_id, "error": bounded_error(error.to_json())})

    def start_request(self, method: str, params: Any) -> asyncio.Future[Any]:
        """Send a request to the client; the future gets its result or an `RpcError`.

        The future stays registered until the client answers (or the
        connection closes), even if the caller stops waiting for it: a late
        answer then finds its future instead of an unknown id.
        """
        return self.request(method, params)[1]

    def request(self, method: str, params: Any) -> tuple[int | None, asyncio.Future[Any]]:
        """`start_request`, with the id the request went out with (None: not sent)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        msg_id: int | None = None
        if self.closed:
            fut.set_exception(ConnectionClosed())
        else:
            msg_id = self._next_id
            self._next_id += 1
            self._pending[msg_id] = fut
            self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        # Nobody may be left awaiting it (abandoned on cancel): mark errors retrieved.
        fut.add_done_callback(_retrieve)
        return msg_id, fut

    # --- receiving -----------------------------------------------------------------

    def on_response(self, message: dict[str, Any]) -> None:
        msg_id = message.get("id")
        fut = self._take(msg_id)
        if fut is None:
            log.info("response for unknown request id %.200r ignored", msg_id)
            return
        if fut.done():
            return
        why = unreadable_error(message)
        if why is not None:
            fut.set_exception(RpcError(INVALID_REQUEST, unreadable(why)))
            return
        error = message.get("error")
        if isinstance(error, dict):
            fut.set_exception(RpcError(error["code"], error["message"], error.get("data")))
        else:
            fut.set_result(message.get("result"))

    def fail(self, msg_id: Any, error: RpcError) -> bool:
        """End the request `msg_id` with `error` (its answer could not be read);
        False when no request of ours has that id."""
        fut = self._take(msg_id)
        if fut is None:
            return False
        if not fut.done():
            fut.set_exception(error)
        return True

    def _take(self, msg_id: Any) -> asyncio.Future[Any] | None:
        """The pending request the answer id `msg_id` names (`agentd.answers`), unregistered."""
        key = answered_request(msg_id, self._pending)
        if key is None:
            return None
        if key is not msg_id and not self._said_string_ids:
            # Once: a client that stringifies ids does so on every answer.
            self._said_string_ids = True
            log.info(
                "the client answers request ids as strings (%.40r for %d); taken as the same ids",
                msg_id,
                key,
            )
        return self._pending.pop(key)

    def close(self) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed())


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def parse_message(line: bytes) -> tuple[dict[str, Any] | None, RpcError | None, Any]:
    """A line -> (message, None, None), or (None, the error to answer, the id to answer it with).

    The id of an invalid message is echoed when it is itself valid, else `null`.
    A well-formed message that cannot be decoded (too deep, a number too long)
    and has no id is a notification: (None, the error, `NO_REPLY`), logged only.
    """
    try:
        data = decode_body(line)
    except Undecodable as exc:
        return None, RpcError(exc.code, exc.message), exc.reply_id if exc.reply else NO_REPLY
    if not isinstance(data, dict):
        return None, _invalid("a message must be a JSON object"), None
    msg_id = data.get("id")
    if isinstance(msg_id, bool) or not (msg_id is None or isinstance(msg_id, str | int)):
        return None, _invalid('"id" must be a string or an integer'), None
    if data.get("jsonrpc") != "2.0":
        return None, _invalid('"jsonrpc" must be "2.0"'), msg_id
    method = data.get("method")
    if method is not None and not isinstance(method, str):
        return None, _invalid('"method" must be a string'), msg_id
    if method is None and "id" not in data:
        return None, _invalid("neither a request, a notification nor a response"), None
    return data, None, None


def _invalid(why: str) -> RpcError:
    return RpcError(INVALID_REQUEST, f"Invalid request: {why}")
