"""Model providers: one `ModelProvider` seam, OpenAI-compatible and Anthropic behind it.

Importing this package is cheap on purpose (the daemon's cold start is
measured): httpx and the provider modules load only when `make_provider`
builds one.
"""

from __future__ import annotations

from agentd.errors import ConfigError
from agentd.providers.base import (
    ModelProvider,
    ModelRequest,
    Purpose,
    RedactedThinking,
    StopReason,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallReady,
    ToolCallStarted,
    Usage,
)
from agentd.providers.config import ProviderConfig

__all__ = [
    "ModelProvider",
    "ModelRequest",
    "ProviderConfig",
    "Purpose",
    "RedactedThinking",
    "StopReason",
    "StreamEnd",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ThinkingEnd",
    "ToolCallReady",
    "ToolCallStarted",
    "Usage",
    "make_provider",
]


def make_provider(config: ProviderConfig) -> ModelProvider:
    if config.kind == "openai":
        from agentd.providers.openai import OpenAIProvider

        return OpenAIProvider(config)
    if config.kind == "anthropic":
        from agentd.providers.anthropic import AnthropicProvider

        return AnthropicProvider(config)
    raise ConfigError(f"unknown provider {config.kind!r}: use 'openai' or 'anthropic'")
