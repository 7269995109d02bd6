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

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from agentd.messages import Message, ToolCall, ToolSpec

Purpose = Literal["main", "recall", "extract", "compact"]
StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal"]


@dataclass(slots=True)
class ModelRequest:
    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    purpose: Purpose = "main"
    max_tokens: int = 4096
    # Force the model to call this tool: how side queries get structured output
    # on both APIs (OpenAI `tool_choice`, Anthropic `tool_choice: {type: tool}`).
    tool_choice: str | None = None
    temperature: float | None = None
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
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class StreamEnd:
    stop_reason: StopReason
    usage: Usage


StreamEvent = TextDelta | ThinkingDelta | ToolCallStarted | ToolCallReady | StreamEnd


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
class ReportsContextWindow(Protocol):
    """A provider that can ask its endpoint for a model's context window
    (OpenAI-compatible servers that list `context_length` in `/models`)."""

    async def context_window(self, model: str) -> int | None:
        """The window in tokens, or None when the endpoint does not say.
        Never raises for a failed or odd answer: the window is a hint."""
        ...
