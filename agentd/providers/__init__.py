"""Model providers: one `ModelProvider` seam, OpenAI-compatible and Anthropic behind it.

Importing this package is cheap on purpose (the daemon's cold start is
measured): httpx and the provider modules load only when `make_provider`
builds one.
"""

from __future__ import annotations

import sys

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

# httpx imports its command-line client (`httpx._main`: click, pygments and
# more) whenever click is installed, and mcp's uvicorn installs it: about 2 MB
# resident and 15 ms of imports for a command the daemon never runs. A None in
# sys.modules makes that import fail, and httpx then defines a stub `main`
# (its own fallback for installs without its `cli` extra). Here, because every
# provider module (the only importers of httpx in the core) is in this package.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

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
