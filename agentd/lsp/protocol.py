"""pygls' protocol, with the defaults that hurt editors fixed.

- Custom params stay plain dicts (pygls turns them into namedtuples, renames
  keys such as `class` or `_x`, and drops some shapes without a reply).
- Every request is answered: before `initialize` with -32002, after
  `shutdown` with -32600, invalid messages with -32600 / -32700 and id null.
- Errors are logged, never pushed to the editor as pop-ups.
- `exit` stops the read loop and lets `serve()` clean up; the exit code is 0
  after `shutdown` and 1 otherwise (LSP).
- Callbacks can run right after a request's reply was written (`after_reply`),
  which is how extraction is scheduled without delaying the reply.
- agentd's own requests (`direct_requests`, filled by `handlers.register`)
  are started by `dispatch` itself, as pygls starts a request, without its
  generic machinery (see `_start_direct`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from functools import partial
from typing import Any, cast

import attrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
    default_converter,
    lsp_method,
)

from agentd.answers import answered_request, unreadable, unreadable_error
from agentd.errors import INVALID_PARAMS, INVALID_REQUEST, SERVER_NOT_INITIALIZED, bounded_error
from agentd.jsonenc import compact_utf8

log = logging.getLogger(__name__)

# LSP methods pygls knows; everything else is ours and keeps dict params.
_LIFECYCLE_OK_BEFORE_INIT = {types.INITIALIZE, types.EXIT}


def agentd_converter() -> Any:
    converter = default_converter()  # type: ignore[no-untyped-call]

    def keep_request(obj: dict[str, Any], cls: type) -> Any:
        return cls(
            id=obj["id"], method=obj["method"], jsonrpc=obj["jsonrpc"], params=obj.get("params")
        )

    def keep_notification(obj: dict[str, Any], cls: type) -> Any:
        return cls(method=obj["method"], jsonrpc=obj["jsonrpc"], params=obj.get("params"))

    def keep_response(obj: dict[str, Any], cls: type) -> Any:
        return cls(id=obj["id"], jsonrpc=obj["jsonrpc"], result=obj.get("result"))

    converter.register_structure_hook(JsonRPCRequestMessage, keep_request)
    converter.register_structure_hook(JsonRPCNotification, keep_notification)
    converter.register_structure_hook(JsonRPCResponseMessage, keep_response)
    return converter


def _cancels_an_id(params: Any) -> bool:
    """Whether `$/cancelRequest`'s params name an id a request can have."""
    msg_id = params.get("id") if isinstance(params, dict) else None
    return isinstance(msg_id, str | int) and not isinstance(msg_id, bool)


class AgentdProtocol(LanguageServerProtocol):
    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.initialized = False
        self.exit_code: int | None = None
        self.on_exit: Callable[[int], None] | None = None
        self._after_reply: dict[Any, list[Callable[[], None]]] = {}
        # agentd's requests by method: a coroutine function of the raw params.
        self.direct_requests: dict[str, Callable[[Any], Coroutine[Any, Any, Any]]] = {}
        # The ids of agentd's requests to the editor still waiting for an answer.
        self._sent_ids: set[Any] = set()

    # --- incoming ---------------------------------------------------------------

    def dispatch(self, data: Any) -> None:
        """Validate one decoded JSON value as JSON-RPC and hand it to pygls."""
        if not isinstance(data, dict):
            self.reply_error(
                None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object"
            )
            return
        msg_id = data.get("id")
        has_id = "id" in data
        bad_id = isinstance(msg_id, bool) or not isinstance(msg_id, str | int)
        if has_id and bad_id and (msg_id is not None or "method" in data):
            self.reply_error(
                None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer"
            )
            return
        if data.get("jsonrpc") != "2.0":
            if "method" not in data and self.fail_sent(msg_id, 'it has no "jsonrpc": "2.0"'):
                return  # an answer to one of agentd's requests: never answered itself
            self.reply_error(
                msg_id if has_id else None,
                INVALID_REQUEST,
                'Invalid Request: jsonrpc must be "2.0"',
            )
            return
        method = data.get("method")
        if "method" in data and not isinstance(method, str):
            self.reply_error(
                msg_id if has_id else None,
                INVALID_REQUEST,
                "Invalid Request: method must be a string",
            )
            return
        if method is None and has_id:
            self._dispatch_response(data)
            return
        params = data.get("params")
        if params is not None and not isinstance(params, dict | list):
            if has_id and method is not None:
                # Named as every other -32602 names its field (`data.fields`).
                self.reply_error(
                    msg_id,
                    INVALID_PARAMS,
                    f"Invalid params for {method}: params: must be an object or array",
                    {"fields": [{"field": "params", "message": "must be an object or array"}]},
                )
            return
        if method is None:
            self.reply_error(None, INVALID_REQUEST, "Invalid Request: no method")
            return
        if has_id:
            if not self.initialized and method not in _LIFECYCLE_OK_BEFORE_INIT:
                self.reply_error(
                    msg_id,
                    SERVER_NOT_INITIALIZED,
                    f"Server not initialized: {method} before initialize",
                )
                return
            if self._shutdown:
                self.reply_error(
                    msg_id, INVALID_REQUEST, f"Invalid Request: {method} after shutdown"
                )
                return
        elif self._shutdown and method != types.EXIT:
            return
        elif not self.initialized and method not in (types.EXIT, types.INITIALIZED):
            # LSP: notifications before initialize are dropped (exit excepted).
            return
        elif method == types.CANCEL_REQUEST and not _cancels_an_id(params):
            # No request has such an id (they are checked above): nothing to
            # cancel. pygls would look an object or array up in its table of
            # requests and fail the dispatch with a traceback.
            log.warning("$/cancelRequest ignored: id must be a string or an integer")
            return
        if has_id:
            direct = self.direct_requests.get(method)
            if direct is not None:
                self._start_direct(msg_id, direct, params)
                return
        try:
            message = self.structure_message(data)
        except JsonRpcException as exc:
            if has_id:
                self.reply_error(
                    msg_id, INVALID_PARAMS, f"Invalid params for {method}: {exc.message}"
                )
            return
        self.handle_message(message)

    def _start_direct(
        self, msg_id: Any, handler: Callable[[Any], Coroutine[Any, Any, Any]], params: Any
    ) -> None:
        """Start one of agentd's requests as pygls' `_handle_request` would: a
        task, in a copy of the context holding the request's id (`msg_id`,
        which `after_reply` is given), registered under that id (so that
        `$/cancelRequest` cancels it) and answered by `_send_handler_result`
        (its result, its error, or -32800 when cancelled). pygls' way there
        (the message structured into an object, a context run, the handler
        looked up, checked for its kind and called through the wrapper that
        passes the server) took 0.1 ms of a prompt's way after idle; the
        task is made at the same point of the read, so what came before it
        still starts first."""
        context = contextvars.copy_context()
        context.run(self._ctx_msg_id.set, msg_id)
        task = asyncio.get_running_loop().create_task(handler(params), context=context)
        # pygls keeps asyncio tasks here too (`_execute_handler`), though typed otherwise.
        self._request_futures[msg_id] = cast(Future[Any], task)
        task.add_done_callback(partial(self._send_handler_result, msg_id=msg_id))

    def _dispatch_response(self, data: dict[str, Any]) -> None:
        """An answer to one of agentd's requests, matched and read by the rule
        both front ends share (`agentd.answers`). Read here, not by pygls:
        its reading drops an answer whose `error` or `result` does not fit
        its types, and the request would wait for ever; agentd's callers
        read the result as plain JSON."""
        msg_id = data.get("id")
        key = answered_request(msg_id, self._sent_ids)
        future = self._request_futures.pop(key, None) if key is not None else None
        if future is None or future.done():
            # A late answer to a withdrawn request (e.g. after a cancel): ignore it.
            log.debug("ignoring response to unknown or withdrawn request %.200r", msg_id)
            return
        self._result_types.pop(key, None)
        why = unreadable_error(data)
        if why is not None:
            log.warning("answer to request %.200r: %s", msg_id, unreadable(why))
            future.set_exception(JsonRpcException(unreadable(why), INVALID_REQUEST))
            return
        error = data.get("error")
        if isinstance(error, dict):
            future.set_exception(
                JsonRpcException.from_error(
                    types.ResponseError(error["code"], error["message"], error.get("data"))
                )
            )
        else:
            future.set_result(data.get("result"))

    def fail_sent(self, msg_id: Any, why: str) -> bool:
        """End agentd's request `msg_id`, whose answer could not be read;
        False when no pending request of ours has that id."""
        key = answered_request(msg_id, self._sent_ids)
        future = self._request_futures.pop(key, None) if key is not None else None
        if future is None:
            return False
        self._result_types.pop(key, None)
        log.warning("answer to request %.200r: %s", msg_id, unreadable(why))
        if not future.done():
            future.set_exception(JsonRpcException(unreadable(why), INVALID_REQUEST))
        return True

    def handle_message(self, message: Any) -> None:
        # Our dispatch already enforced lifecycle rules; skip pygls' silent drops.
        # (Answers to agentd's requests never come here: `_dispatch_response`.)
        ctx = contextvars.copy_context()
        method = message.method
        if hasattr(message, "id"):
            ctx.run(self._handle_request, message.id, method, message.params)
        else:
            ctx.run(self._handle_notification, method, message.params)

    # --- outgoing ---------------------------------------------------------------

    def send_request(
        self,
        method: str,
        params: Any | None = None,
        callback: Callable[[Any], None] | None = None,
        msg_id: Any = None,
    ) -> Future[Any]:
        # Kept apart from `_request_futures`, which holds the editor's
        # requests too: an answer may only end a request agentd sent.
        sent_id = msg_id if msg_id is not None else str(uuid.uuid4())
        future = super().send_request(method, params, callback, sent_id)
        self._sent_ids.add(sent_id)
        future.add_done_callback(lambda _: self._sent_ids.discard(sent_id))
        return future

    def reply_error(self, msg_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._write({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def _send_data(self, data: Any) -> None:
        if not data:
            return
        if isinstance(data, dict):
            self._write(data)
            return
        if attrs.has(type(data)):
            self._write(self._converter.unstructure(data))
            return
        super()._send_data(data)

    def _write(self, payload: dict[str, Any]) -> None:
        if self.writer is None:
            return
        error = payload.get("error")
        if isinstance(error, dict):
            # Short, whatever raised it: an exception may carry a request's body.
            payload = {**payload, "error": bounded_error(error)}
        body = compact_utf8(payload)  # a lone surrogate escaped, still JSON
        self.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def notify(self, method: str, params: Any | None = None) -> None:
        # Dict params (ours, and LSP ones we build as JSON such as
        # window/logMessage) go out as they are, straight to the writer.
        if params is None or isinstance(params, dict) or self.get_message_type(method) is None:
            self._write({"jsonrpc": "2.0", "method": method, "params": params})
            return
        super().notify(method, params)

    def after_reply(self, msg_id: Any, fn: Callable[[], None]) -> None:
        self._after_reply.setdefault(msg_id, []).append(fn)

    def _send_handler_result(self, future: Future[Any], *, msg_id: Any) -> None:
        try:
            super()._send_handler_result(future, msg_id=msg_id)
        finally:
            for fn in self._after_reply.pop(msg_id, []):
                try:
                    fn()
                except Exception:
                    log.exception("after-reply callback failed")

    # --- lifecycle ----------------------------------------------------------------

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> None:  # type: ignore[override]
        code = 0 if self._shutdown else 1
        self.exit_code = code
        if self.on_exit is not None:
            self.on_exit(code)
