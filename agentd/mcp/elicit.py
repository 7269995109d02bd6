"""An MCP server's elicitation during one tool call, carried to the user.

`CallElicitation` lives as long as one MCP tool call (`SessionMcpTools.run`
makes it, `McpConnection.call` registers it). When the server sends
`elicitation/create` while the call runs, the connection hands the SDK's
params here: they are checked (mode declared by the editor, restricted
schema, http(s) URL), sent to the editor through the session's `Elicitor`,
and the editor's answer is checked against the schema before the server
sees it. Every way it can end is an answer for the server, never an error:

- the editor cannot show it, or the request is unusable: `decline`;
- the call ends first (the prompt was cancelled, the call timed out):
  the editor's request is withdrawn and the server gets `cancel`;
- no answer within `mcp.permissionTimeout`: withdrawn, `cancel`.

While the user is being asked, the call's own timeout is paused: a person
filling in a form is not a server that hangs.

The same object stands for the call when its server asks to use the model
(MCP sampling, `agentd.mcp.sampling`): `ended` and `paused()` serve it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from agentd.agent.elicitation import (
    MAX_ELICITATION_ID,
    MAX_MESSAGE,
    ElicitationAnswer,
    ElicitationRequest,
    Elicitor,
    read_answer,
    schema_problem,
    url_problem,
)
from agentd.messages import clean_text

if TYPE_CHECKING:
    from agentd.agent.session import Session

log = logging.getLogger("agentd.mcp")

# Told of each question sent to the editor (the connection keeps URL ones).
Sent = Callable[[Elicitor, "Session", ElicitationRequest], None]


class CallElicitation:
    def __init__(
        self,
        session: Session,
        tool_call_id: str,
        server: str,
        timeout: float,
        tool: str = "",
        server_tool: str = "",
    ) -> None:
        self.session = session
        self.tool_call_id = tool_call_id
        self.server = server
        # The name the model called, and the server's own name for the tool.
        self.tool = tool
        self.server_tool = server_tool
        self._timeout = timeout
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # The call's own timeout, paused while the user is asked.
        self.deadline: asyncio.Timeout | None = None
        self._asking = 0
        self._left: float | None = None
        # A sampling request of this call is being served (one at a time).
        self.sampling = False

    @property
    def ask_timeout(self) -> float:
        """How long the user may take to answer (`mcp.permissionTimeout`)."""
        return self._timeout

    @property
    def ended(self) -> asyncio.Future[None]:
        """Done once the call is over (answered, cancelled, timed out)."""
        return self._ended

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The call's own timeout stands still inside (the user is being asked)."""
        self._pause()
        try:
            yield
        finally:
            self._resume()

    def end(self) -> None:
        """The call is over: questions still open are withdrawn (`cancel`)."""
        if not self._ended.done():
            self._ended.set_result(None)

    async def answer(self, params: Any, sent: Sent | None = None) -> ElicitationAnswer:
        """The answer for the server's `elicitation/create` params (the SDK's
        model); `sent(elicitor, session, request)` is told of each question sent."""
        elicitor = self.session.elicitor
        request, why = self._request(params)
        if request is None:
            return _declined(self.server, why)
        if elicitor is None or not elicitor.supports(request.mode):
            return _declined(self.server, f"the editor did not declare {request.mode} elicitation")
        if self._ended.done():
            return ElicitationAnswer("cancel", detail="the tool call has ended")
        try:
            pending = elicitor.ask(self.session, request)
        except Exception as exc:  # the editor's connection is gone, say
            return _declined(self.server, f"the editor could not be asked: {exc}")
        if sent is not None:
            sent(elicitor, self.session, request)
        self._pause()
        try:
            done, _ = await asyncio.wait(
                [pending.answer, self._ended],
                timeout=self._timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except BaseException:
            pending.withdraw()
            raise
        finally:
            self._resume()
        if pending.answer not in done:
            pending.withdraw()
            why = "the call ended" if self._ended.done() else f"no answer in {self._timeout:g} s"
            log.info("elicitation of MCP server %r withdrawn: %s", self.server, why)
            return ElicitationAnswer("cancel", detail=why)
        try:
            result = pending.answer.result()
        except Exception as exc:
            return _declined(self.server, f"the editor failed to ask: {exc}")
        answer = read_answer(result, request)
        if answer.detail:
            log.warning("elicitation of MCP server %r: %s", self.server, answer.detail)
        return answer

    def _request(self, params: Any) -> tuple[ElicitationRequest | None, str]:
        mode = getattr(params, "mode", None)
        message = clean_text(str(getattr(params, "message", "")))[:MAX_MESSAGE]
        if mode == "form":
            schema = getattr(params, "requested_schema", None)
            why = schema_problem(schema)
            if why is not None:
                return None, why
            request = ElicitationRequest(self.tool_call_id, self.server, "form", message, schema)
            return request, ""
        if mode == "url":
            url = getattr(params, "url", None)
            eid = getattr(params, "elicitation_id", None)
            why = url_problem(url)
            if why is None and (not isinstance(eid, str) or not 0 < len(eid) <= MAX_ELICITATION_ID):
                why = "no usable elicitationId"
            if why is not None:
                return None, why
            request = ElicitationRequest(
                self.tool_call_id, self.server, "url", message, url=url, elicitation_id=eid
            )
            return request, ""
        return None, f"unknown mode {mode!r}"

    def _pause(self) -> None:
        self._asking += 1
        deadline = self.deadline
        when = deadline.when() if deadline is not None else None
        if self._asking == 1 and deadline is not None and when is not None:
            self._left = max(0.0, when - asyncio.get_running_loop().time())
            deadline.reschedule(None)

    def _resume(self) -> None:
        self._asking -= 1
        deadline = self.deadline
        if self._asking == 0 and deadline is not None and self._left is not None:
            left, self._left = self._left, None
            if self._ended.done():
                return  # the call's timeout is gone with the call
            deadline.reschedule(asyncio.get_running_loop().time() + left)


def _declined(server: str, why: str) -> ElicitationAnswer:
    log.warning("elicitation of MCP server %r declined: %s", server, why)
    return ElicitationAnswer("decline", detail=why)
