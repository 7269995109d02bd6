"""The provider seam: one request shape in, one stream of events out.

Every provider (OpenAI-compatible, Anthropic) implements `ModelProvider`.
The turn engine only ever sees `StreamEvent`s; wire formats, retries and
error mapping stay inside `agentd/providers/`.

Cancellation: `stream()` is an async generator. The caller cancels by
cancelling the task that iterates it, or by closing the generator
(`aclose()`); either way the provider must close the HTTP response so the
server sees the disconnect at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agentd.messages import Message, ToolCall, ToolSpec

Purpose = Literal["main", "recall", "extract", "compact", "nes", "sampling"]
StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal"]


@dataclass(slots=True)
class ModelRequest:
    """One model request. The user's model settings (`maxOutputTokens`,
    `reasoningEffort`, `thinking`) apply to purpose "main" only: side queries
    are short and set their own output cap."""

    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    purpose: Purpose = "main"
    # Output token cap; None takes the configured `maxOutputTokens`, else the
    # model family's default (`agentd.providers.models`).
    max_tokens: int | None = None
    # The conversation repeats this request's prefix on its next step: mark
    # it for prompt caching (Anthropic `cache_control` breakpoints).
    cache: bool = False
    # Force the model to call this tool: how side queries get structured output
    # on both APIs (OpenAI `tool_choice`, Anthropic `tool_choice: {type: tool}`).
    tool_choice: str | None = None
    temperature: float | None = None
    # Texts that end the answer where the model writes one (OpenAI `stop`,
    # Anthropic `stop_sequences`): an MCP server's sampling request may set them.
    stop: tuple[str, ...] = ()
    # Called once, when the request body has been written to the connection
    # (at the latest when the response's headers arrive, for transports that
    # cannot tell): lets side queries wait until the main request is out
    # without waiting for the first token.
    on_sent: Callable[[], None] | None = None


# --- stream events ----------------------------------------------------------


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ThinkingDelta:
    text: str
    # The delta field an OpenAI-compatible server used ("reasoning_content",
    # "reasoning"); empty for Anthropic.
    source: str = ""


@dataclass(slots=True)
class ThinkingEnd:
    """The thinking block that was streaming is complete (Anthropic), with the
    signature that must accompany it when it is sent back."""

    signature: str = ""


@dataclass(slots=True)
class RedactedThinking:
    """An Anthropic `redacted_thinking` block: opaque, shown to no one, sent
    back as it came."""

    data: str


@dataclass(slots=True)
class ToolCallStarted:
    """A tool call began streaming (name known, arguments not yet)."""

    id: str
    name: str


@dataclass(slots=True)
class ToolCallReady:
    """A tool call whose arguments were fully received and parsed."""

    call: ToolCall


@dataclass(slots=True)
class Usage:
    # All prompt tokens, the cached ones included.
    input_tokens: int = 0
    output_tokens: int = 0
    # Of input_tokens, those read from / written to the provider's prompt
    # cache; None when the provider did not say.
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, int]:
        """The wire shape of a prompt result's `usage` (both front ends): the
        cache figures only when the provider reported them."""
        out = {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens}
        if self.cache_read_tokens is not None:
            out["cacheReadTokens"] = self.cache_read_tokens
        if self.cache_write_tokens is not None:
            out["cacheWriteTokens"] = self.cache_write_tokens
        return out

    def add(self, other: Usage) -> None:
        """Sum another step's figures into these (a cache figure is known once
        any step reported it)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens = _plus(self.cache_read_tokens, other.cache_read_tokens)
        self.cache_write_tokens = _plus(self.cache_write_tokens, other.cache_write_tokens)


def _plus(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


@dataclass(slots=True)
class StreamEnd:
    stop_reason: StopReason
    usage: Usage


StreamEvent = (
    TextDelta
    | ThinkingDelta
    | ThinkingEnd
    | RedactedThinking
    | ToolCallStarted
    | ToolCallReady
    | StreamEnd
)


class ModelProvider(Protocol):
    """A model endpoint. Implementations are safe to share across sessions."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream one model response.

        Yields deltas as they arrive and exactly one `StreamEnd` last.
        Raises `agentd.errors.ModelError` (or a subclass) on failure; a
        failure after some events were yielded is raised as
        `ModelStreamInterrupted` so the caller can keep the partial text.
        A `ToolCallReady` is only yielded for a call whose JSON arguments
        parsed completely: a call cut off mid-stream is never yielded.
        """
        ...

    def warm(self) -> None:
        """Build the HTTP client now (SSL context etc.); safe off the event loop."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Preconnects(Protocol):
    """A provider that can open its connection to the endpoint ahead of a request."""

    def preconnect(self) -> Coroutine[Any, Any, None] | None:
        """What opens a pooled connection now (it never raises and sends no
        model request), or None when one is not worth opening."""
        ...


@runtime_checkable
class ReportsContextWindow(Protocol):
    """A provider that can ask its endpoint for a model's context window
    (OpenAI-compatible servers that list `context_length` in `/models`)."""

    async def context_window(self, model: str) -> int | None:
        """The window in tokens, or None when the endpoint does not say.
        Never raises for a failed or odd answer: the window is a hint."""
        ...
