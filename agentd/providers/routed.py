"""The App's model provider: agentd's own, or one a client routed it to.

A front end may let the editor choose where model requests go (ACP
`providers/set`: its gateway, a key it holds). Everything that asks the
model (the turn engine, compaction, recall, extraction) holds the App's one
`RoutedProvider`, so `route(provider)` sends the next request of every
session there, a running prompt's next step included, and `route(None)`
sends it back to agentd's own provider.

A stream already running finishes where it started: a provider routed away
from is closed once its last stream is done (`_close_later`, tasks this
object owns and `aclose` awaits), or when the App closes.

While agentd's own provider is current, `stream` hands out that provider's
generator itself, not a wrapper around it: the usual path pays nothing for
the routing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from agentd.providers.base import (
    ModelProvider,
    ModelRequest,
    Preconnects,
    ReportsContextWindow,
    StreamEvent,
)

log = logging.getLogger(__name__)


class RoutedProvider:
    """A `ModelProvider` that sends each request to the provider current at its start."""

    def __init__(self, own: ModelProvider) -> None:
        self.own = own
        self.name = own.name
        # The provider a client routed requests to; None: agentd's own.
        self.routed: ModelProvider | None = None
        # The streams open on each routed provider, the current one's and
        # those of providers routed away from that are still streaming.
        self._open: dict[ModelProvider, int] = {}
        self._closing: set[asyncio.Task[None]] = set()
        # Set by `aclose`: every provider is closed (or closing) already.
        self._closed = False

    @property
    def current(self) -> ModelProvider:
        return self.routed if self.routed is not None else self.own

    def route(self, provider: ModelProvider | None) -> None:
        """Send the next requests to `provider` (None: agentd's own). The
        provider routed to before is closed once its streams are done."""
        before, self.routed = self.routed, provider
        if provider is not None:
            self._open.setdefault(provider, 0)
        if before is not None and before is not provider and not self._open.get(before):
            self._open.pop(before, None)
            self._close_later(before)

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        routed = self.routed
        if routed is None:
            return self.own.stream(request)
        # Counted now, not when the generator starts: a route changed in
        # between must not close the provider under it.
        self._open[routed] += 1
        return self._counted(routed, request)

    async def _counted(
        self, provider: ModelProvider, request: ModelRequest
    ) -> AsyncGenerator[StreamEvent, None]:
        try:
            async with contextlib.aclosing(provider.stream(request)) as events:
                async for event in events:
                    yield event
        finally:
            self._stream_done(provider)

    def _stream_done(self, provider: ModelProvider) -> None:
        if self._closed:
            return
        left = self._open.get(provider, 0) - 1
        if left > 0 or provider is self.routed:
            self._open[provider] = max(left, 0)
            return
        self._open.pop(provider, None)
        self._close_later(provider)

    def _close_later(self, provider: ModelProvider) -> None:
        try:
            task = asyncio.get_running_loop().create_task(
                provider.aclose(), name="model-provider-close"
            )
        except RuntimeError:
            return  # no loop: the process is ending, and its sockets with it
        self._closing.add(task)
        task.add_done_callback(self._close_done)

    def _close_done(self, task: asyncio.Task[None]) -> None:
        self._closing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("closing a model provider failed: %r", task.exception())

    def warm(self) -> None:
        self.own.warm()

    def preconnect(self) -> Coroutine[Any, Any, None] | None:
        current = self.current
        return current.preconnect() if isinstance(current, Preconnects) else None

    async def context_window(self, model: str) -> int | None:
        current = self.current
        if isinstance(current, ReportsContextWindow):
            return await current.context_window(model)
        return None

    async def aclose(self) -> None:
        self._closed = True
        providers = [self.own, *self._open]
        self.routed = None
        self._open.clear()
        for provider in providers:
            self._close_later(provider)
        if self._closing:
            await asyncio.wait(list(self._closing))
