"""The editor's side of MCP elicitation over ACP, for the tests.

`EditorElicit.install(conn)` adds `elicitation/create`, `elicitation/complete`
and `$/cancel_request` to the routes of the `acp` package's client
connection (its 0.12 release routes elicitation only with the unstable
protocol on, and has no `$/cancel_request`). `decide` answers each question
(what a real editor's dialog would: any JSON, hostile or not); `never`
leaves it unanswered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from acp import RequestError
from acp.router import Route

Decide = Callable[[dict[str, Any]], Awaitable[Any]]


async def never(params: dict[str, Any]) -> Any:
    await asyncio.Event().wait()  # until the connection closes


def answering(answer: Any) -> Decide:
    async def decide(params: dict[str, Any]) -> Any:
        return answer

    return decide


async def failing(params: dict[str, Any]) -> Any:
    raise RequestError(-32603, "the dialog could not be shown")


class EditorElicit:
    def __init__(self) -> None:
        self.decide: Decide = answering({"action": "decline"})
        self.asked: list[dict[str, Any]] = []
        self.completed: list[dict[str, Any]] = []

    def install(self, conn: Any) -> None:
        router = conn._conn._handler
        router.add_route(Route("elicitation/create", self._create, "request"))
        router.add_route(Route("elicitation/complete", self._complete, "notification"))
        router.add_route(Route("$/cancel_request", self._cancel, "notification"))

    async def _create(self, params: dict[str, Any]) -> Any:
        self.asked.append(params)
        return await self.decide(params)

    async def _complete(self, params: dict[str, Any]) -> None:
        self.completed.append(params)

    async def _cancel(self, params: dict[str, Any]) -> None:
        pass  # recorded raw by the editor's observer
