"""The model's context window, and how much of it a session's next request takes.

The window (`ContextWindow`), strongest source first:

1. the setting `contextWindow` (a number, or a table by model name;
   `AGENTD_CONTEXT_WINDOW`), lowered to what the provider said if a
   provider's overflow error named a smaller window;
2. the window an overflow error named (the provider knows best);
3. the endpoint's `/models` answer (vLLM, OpenRouter, LM Studio,
   llama.cpp, agentd's model server), fetched once in the background: the
   first prompt never waits for it;
4. the model family's published window (`FAMILY_WINDOWS`);
5. `FALLBACK_WINDOW`, small on purpose: a model we know nothing about is
   more often a local one with a small window, and compacting early costs
   less than an overflow.

The count (`Meter`): the provider's own `input_tokens` of the last request,
plus an estimate of what was added since, in UTF-8 bytes divided by a
bytes-per-token ratio calibrated from the provider's usage figures
(`Calibration`), and for images what the provider bills for their pixels
(`image_cost`, by its API's count: a session of screenshots is compacted
before it overflows).
No tokenizer is imported: the estimate is only ever asked "is this near the
window", and the provider's count re-anchors it after every request.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Literal

from agentd.agent.image_cost import history_image_tokens
from agentd.image_billing import Formula
from agentd.messages import (
    Message,
    ReminderPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from agentd.providers.base import Usage

# (name prefix, window in tokens), the first match wins: more specific first.
# From the providers' model pages; a provider's own answer overrides these.
FAMILY_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 272_000),  # the input limit (the window is 400k with the output)
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("qwen3-coder", 262_144),
    ("qwen-turbo", 1_000_000),
    ("qwen-plus", 131_072),
    ("qwen-max", 32_768),
    ("qwen2.5-coder", 32_768),
    ("qwen3", 131_072),
    ("qwq", 131_072),
    ("deepseek", 128_000),
    ("llama-3.1", 131_072),
    ("llama3.1", 131_072),
    ("llama-3.3", 131_072),
    ("llama3.3", 131_072),
    ("llama-4", 1_000_000),
    ("codestral", 256_000),
    ("mistral-large", 128_000),
    ("kimi-k2", 131_072),
    ("glm-4.6", 200_000),
    ("glm-4.5", 131_072),
)
FALLBACK_WINDOW = 32_768

WindowSource = Literal["setting", "provider", "endpoint", "family", "fallback"]


# Asked through `ContextWindow.tokens` two to five times before each request
# (compaction's checks, the answer's room): about 6 us a time for a name that
# matches no family, which walks the whole table.
@functools.lru_cache(maxsize=64)
def family_window(model: str) -> int | None:
    """The published window of a model family, by name (`openai/gpt-4o`,
    `llama3.1:8b` and `Qwen/Qwen3-Coder-480B` included)."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix, tokens in FAMILY_WINDOWS:
        if name.startswith(prefix):
            return tokens
    return None


class ContextWindow:
    """The main model's window, from the strongest source that knows it."""

    def __init__(self, model: str, configured: int = 0) -> None:
        self.model = model
        self.configured = configured
        # From the endpoint's /models, and from a provider's overflow error.
        self.endpoint: int | None = None
        self.provider: int | None = None

    def forget_reported(self) -> None:
        """Requests go to another endpoint: what the last one said (its
        /models answer, an overflow error's figure) no longer holds."""
        self.endpoint = None
        self.provider = None

    @property
    def tokens(self) -> int:
        return self.resolve()[0]

    @property
    def source(self) -> WindowSource:
        return self.resolve()[1]

    @property
    def known(self) -> bool:
        """False while the window is only the fallback guess: then a request
        is never held back or refused for it (the provider has the last word)."""
        return self.source != "fallback"

    def resolve(self) -> tuple[int, WindowSource]:
        if self.configured:
            if self.provider and self.provider < self.configured:
                return self.provider, "provider"
            return self.configured, "setting"
        if self.provider:
            return self.provider, "provider"
        if self.endpoint:
            return self.endpoint, "endpoint"
        family = family_window(self.model)
        if family:
            return family, "family"
        return FALLBACK_WINDOW, "fallback"


# --- sizes ------------------------------------------------------------------------------

# Framing per message (role, separators) in the unit we count: bytes.
MESSAGE_OVERHEAD = 16


def _utf8(text: str) -> int:
    # ASCII text (most code) is its own length; only other text is encoded.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def message_bytes(message: Message) -> int:
    """What a message costs in a request, in UTF-8 bytes (thinking is not sent;
    images are counted in tokens, by `image_cost`)."""
    size = MESSAGE_OVERHEAD
    for part in message.parts:
        if isinstance(part, TextPart | ReminderPart):
            size += _utf8(part.text)
        elif isinstance(part, ToolCallPart):
            call = part.call
            size += len(call.name) + _utf8(json.dumps(call.arguments, ensure_ascii=False)) + 32
        elif isinstance(part, ToolResultPart):
            size += _utf8(part.content) + 32
    return size


def history_bytes(messages: list[Message]) -> int:
    return sum(message_bytes(m) for m in messages)


def overhead_bytes(system: str, tools: list[ToolSpec]) -> int:
    """The system prompt and the tool definitions, sent with every request:
    the UTF-8 size of `json.dumps` of the definitions' list, from each one's
    size (`_tool_bytes`) and the list's brackets and ", " separators."""
    listed = 2 + 2 * (len(tools) - 1) if tools else 2
    return _utf8(system) + listed + sum(_tool_bytes(t) for t in tools)


# A tool definition's size by ToolSpec object: tool sets are built once and
# never changed in place, and encoding them all took about 0.1 ms of every
# step. Holding the spec keeps its id from being reused; cleared whole when full.
_TOOL_BYTES: dict[int, tuple[ToolSpec, int]] = {}


def _tool_bytes(tool: ToolSpec) -> int:
    hit = _TOOL_BYTES.get(id(tool))
    if hit is None:
        if len(_TOOL_BYTES) >= 512:
            _TOOL_BYTES.clear()
        spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        hit = _TOOL_BYTES[id(tool)] = (tool, _utf8(json.dumps(spec, ensure_ascii=False)))
    return hit[1]


def prompt_tokens(usage: Usage) -> int:
    """The input tokens a request held, cached ones included: the providers'
    parsers already count Anthropic's cache reads and writes, which its API
    reports apart, in `input_tokens` (`cache_read_tokens` is a part of it)."""
    return usage.input_tokens


class Calibration:
    """Bytes per token, learned from the provider's usage figures.

    Starts at a value a little below what code and English text take with
    current tokenizers (so that early estimates err high), then follows the
    provider: each request's bytes over its reported input tokens, smoothed.
    """

    DEFAULT = 3.5
    MIN, MAX = 1.0, 8.0

    def __init__(self) -> None:
        self.bytes_per_token = self.DEFAULT
        self.samples = 0

    def observe(self, request_bytes: int, input_tokens: int) -> None:
        if input_tokens < 64 or request_bytes <= 0:
            return  # too small to say anything (and a zero from odd servers)
        sample = min(self.MAX, max(self.MIN, request_bytes / input_tokens))
        if self.samples == 0:
            self.bytes_per_token = sample
        else:
            self.bytes_per_token = 0.7 * self.bytes_per_token + 0.3 * sample
        self.samples += 1

    def tokens(self, size: int) -> int:
        return math.ceil(size / self.bytes_per_token)


@dataclass
class Meter:
    """One session's count: the provider's figure for `history[:mark]` (with
    the system prompt and tools), and an estimate for what follows."""

    base_tokens: int = 0
    mark: int = 0
    # Bytes of what `base_tokens` counted, and the estimated tokens of its
    # images (which the bytes leave out), for calibration.
    mark_bytes: int = 0
    mark_images: int = 0
    valid: bool = False
    # Whose count its images are estimated by (`image_cost.formula_for`);
    # Anthropic's, the higher one for screenshots, until the compactor says.
    formula: Formula = "anthropic"

    def invalidate(self) -> None:
        """The history changed before `mark` (a compaction, a reset, a reload)."""
        self.valid = False

    def reformulate(self, history: list[Message], formula: Formula) -> None:
        """The session's model bills images by another count (a model switch):
        the images of what `base_tokens` counted are estimated anew, so that
        the next calibration leaves out what this provider bills for them."""
        self.formula = formula
        if self.valid and self.mark <= len(history):
            self.mark_images = history_image_tokens(history[: self.mark], formula)

    def estimate(self, history: list[Message], overhead: int, cal: Calibration) -> int:
        """The input tokens of a request made of `history` now."""
        if self.valid and self.mark <= len(history):
            added = history[self.mark :]
            return (
                self.base_tokens
                + cal.tokens(history_bytes(added))
                + history_image_tokens(added, self.formula)
            )
        return cal.tokens(overhead + history_bytes(history)) + history_image_tokens(
            history, self.formula
        )

    def observe(
        self, history: list[Message], sent: int, overhead: int, usage: Usage, cal: Calibration
    ) -> None:
        """A request of `history[:sent]` took `usage`: re-anchor the count."""
        tokens = prompt_tokens(usage)
        if tokens <= 0:
            return  # a server that reports no usage: keep estimating
        if self.valid and self.mark <= sent:
            added = history[self.mark : sent]
            size = self.mark_bytes + history_bytes(added)
            images = self.mark_images + history_image_tokens(added, self.formula)
        else:
            size = overhead + history_bytes(history[:sent])
            images = history_image_tokens(history[:sent], self.formula)
        # The bytes' share of the provider's count: what its images took is not theirs.
        cal.observe(size, tokens - images)
        self.base_tokens, self.mark, self.mark_bytes, self.valid = tokens, sent, size, True
        self.mark_images = images
