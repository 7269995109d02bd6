"""`RoutedProvider`: requests go to the provider current when they start; a
provider routed away from is closed once its streams are done. And what a
provider set by a client keeps secret (`ProviderConfig.set_by`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from agentd.providers import ProviderConfig, StreamEnd, StreamEvent, TextDelta, Usage
from agentd.providers.base import ModelRequest
from agentd.providers.http import _hint, scrub
from agentd.providers.routed import RoutedProvider


class FakeProvider:
    """Streams its name, then waits for `release` before it ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.release = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        assert not self.closed, f"{self.name} streamed after its close"
        yield TextDelta(self.name)
        await self.release.wait()
        yield StreamEnd("end_turn", Usage())

    def warm(self) -> None:
        pass

    async def aclose(self) -> None:
        self.closed = True


REQUEST = ModelRequest(model="m", system="", messages=[])


async def first_text(provider: RoutedProvider) -> tuple[str, AsyncGenerator[StreamEvent, None]]:
    events = provider.stream(REQUEST)
    event = await anext(events)
    assert isinstance(event, TextDelta)
    return event.text, events


async def test_a_stream_finishes_where_it_started_and_its_provider_closes_after() -> None:
    own, gateway, other = FakeProvider("own"), FakeProvider("gateway"), FakeProvider("other")
    routed = RoutedProvider(own)
    assert routed.stream(REQUEST).__class__.__name__ == "async_generator"
    routed.route(gateway)
    text, running = await first_text(routed)
    assert text == "gateway"
    routed.route(other)
    assert (await first_text(routed))[0] == "other"
    # Routed away from while streaming: still open, and the stream ends well.
    await asyncio.sleep(0)
    assert not gateway.closed
    gateway.release.set()
    assert isinstance(await anext(running), StreamEnd)
    with contextlib.suppress(StopAsyncIteration):
        await anext(running)
    await asyncio.wait(list(routed._closing))
    assert gateway.closed and not other.closed and not own.closed
    routed.route(None)
    assert (await first_text(routed))[0] == "own"
    await routed.aclose()
    assert own.closed and other.closed


async def test_a_stream_ending_after_the_close_closes_nothing_twice() -> None:
    own, gateway = FakeProvider("own"), FakeProvider("gateway")
    routed = RoutedProvider(own)
    routed.route(gateway)
    _, running = await first_text(routed)
    await routed.aclose()
    assert gateway.closed and own.closed
    await running.aclose()
    assert not routed._closing


async def test_a_provider_routed_away_from_while_idle_is_closed_and_close_awaits_it() -> None:
    own, gateway = FakeProvider("own"), FakeProvider("gateway")
    routed = RoutedProvider(own)
    routed.route(gateway)
    routed.route(None)
    await routed.aclose()
    assert gateway.closed and own.closed and not routed._closing


def test_every_header_a_client_set_is_a_secret_and_its_token_alone_too() -> None:
    config = ProviderConfig(
        extra_headers=(("Authorization", "Bearer tok-123456"), ("X-Route", "eu-west-9")),
        set_by="the editor",
    )
    assert scrub("bad tok-123456 for eu-west-9", config.secrets()) == "bad *** for ***"
    assert "tok-123456" not in repr(config) and "eu-west-9" not in repr(config)
    assert _hint(401, config) == " — check the headers the editor set for the provider"
    assert "AGENTD_BASE_URL" not in _hint(404, config)
    # The settings' own headers: only those whose names say they are credentials.
    own = ProviderConfig(extra_headers=(("X-Route", "eu-west-9"),))
    assert own.secrets() == [] and "AGENTD_API_KEY" in _hint(401, own)
