"""Recognising "the request does not fit the model's context window".

Each API says it its own way, always as a client error before any output:

- OpenAI: 400, `error.code: "context_length_exceeded"`, "This model's
  maximum context length is N tokens. However, ..." (the Responses API:
  "Your input exceeds the context window of this model.");
- Anthropic: 400 `invalid_request_error`, "prompt is too long: I tokens >
  N maximum" or "input length and `max_tokens` exceed context limit: I + M
  > N"; 413 `request_too_large` when the body is over the byte limit;
- vLLM, OpenRouter: 400, "This model's (endpoint's) maximum context length
  is N tokens ...";
- llama.cpp's server: 400 `exceed_context_size_error`, "the request exceeds
  the available context size", with `n_ctx`;
- DashScope (Qwen): 400, "Range of input length should be [1, N]".

`overflow_limit` reads the window the provider named, when it named one:
the daemon then knows the window even if no setting or model list said it.
"""

from __future__ import annotations

import re

# Phrases (lower case) that mean the input is over the model's window.
_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceed context limit",
    "exceeds the context window",
    "exceeds the maximum context",
    "context window exceeded",
    "exceed_context_size_error",
    "exceeds the available context size",
    "range of input length should be",
    "input is too long",
    "too many input tokens",
    "request_too_large",
)

_LIMITS = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"> ?(\d+) maximum"),
    re.compile(r"context limit: \d+ \+ \d+ > (\d+)"),
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),
    re.compile(r"context window of (\d+)"),
    re.compile(r"range of input length should be \[\d+, ?(\d+)\]"),
)


def is_context_overflow(status: int, body: str) -> bool:
    """True when an error response says the request is longer than the window."""
    if status not in (400, 413, 422):
        return False
    lowered = body.lower()
    return any(phrase in lowered for phrase in _PHRASES)


def overflow_limit(body: str) -> int | None:
    """The context window an overflow error names, if it names one."""
    lowered = body.lower()
    for pattern in _LIMITS:
        match = pattern.search(lowered)
        if match:
            value = int(match.group(1))
            if value > 0:
                return value
    return None
