"""What a model accepts, by family, and the defaults agentd uses for it.

The Chat Completions API has two dialects. OpenAI's reasoning models (the
o-series and the gpt-5 family) reject `max_tokens` and want
`max_completion_tokens`, which also counts their hidden reasoning, and take
`reasoning_effort`; every OpenAI-compatible server (vLLM, Ollama, llama.cpp,
DashScope, DeepSeek) expects `max_tokens`. A model is taken for an OpenAI
reasoning model by its name: a bare name of those families (`o3`,
`gpt-5-mini`), never a routed one (`openai/o3` goes through a router that
speaks the compatible dialect). The user's `reasoningModel` setting
overrides the guess, for a deployment with a name of its own (Azure).

Reasoning text from OpenAI-compatible servers (`reasoning_content`,
`reasoning`) is never sent back by default: OpenAI's API rejects unknown
message fields, and older reasoners (DeepSeek R1) answered 400 to it.
DeepSeek's and Moonshot's thinking models are the opposite: after a tool
call they require it back (400 otherwise), so for those families it is sent
back on assistant messages that called tools. `replayReasoning` overrides.

Pure functions of a model name: cheap to import, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Output cap of the main conversation when `maxOutputTokens` is not set.
DEFAULT_MAX_OUTPUT = 8192
# Reasoning models spend output tokens on thinking first: OpenAI advises
# leaving room for about 25,000 of them.
REASONING_MAX_OUTPUT = 32_000
# Added to a side query's own cap on a reasoning model, for its reasoning.
SIDE_QUERY_REASONING_ALLOWANCE = 8_000
# Anthropic: what `max_tokens` holds beyond the thinking budget by default.
THINKING_ANSWER_ROOM = 8192

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")

_O_SERIES = re.compile(r"^o\d+(?:-|$)")
_GPT5 = re.compile(r"^gpt-5(?:[.\-]|$)")
_REPLAY_FAMILIES = ("deepseek", "kimi", "moonshot")


@dataclass(frozen=True, slots=True)
class ModelTraits:
    """What agentd sends a model, decided from its name and the user's overrides."""

    # OpenAI reasoning dialect: max_completion_tokens and reasoning_effort.
    reasoning: bool
    # Output cap of the main conversation unless `maxOutputTokens` says otherwise.
    max_output_tokens: int
    # Reasoning effort of side queries (recall, extraction): the least that
    # every model of the family takes; None sends none.
    side_effort: str | None
    # Reasoning text goes back on assistant messages that called tools.
    replay_reasoning: bool


def is_openai_reasoning(model: str) -> bool:
    """A bare model name of OpenAI's reasoning families (o1, o3, o4-mini, gpt-5...)."""
    name = model.strip().lower()
    if "/" in name:
        return False
    if _O_SERIES.match(name):
        return True
    # gpt-5-chat-latest is the non-reasoning chat model of the family.
    return bool(_GPT5.match(name)) and "-chat" not in name


def _side_effort(model: str) -> str | None:
    name = model.strip().lower()
    # o1-mini and o1-preview take no effort at all; the -pro models only "high".
    if name.startswith(("o1-mini", "o1-preview")) or "-pro" in name:
        return None
    return "low"


def openai_traits(
    model: str, *, reasoning_model: bool | None = None, replay_reasoning: bool | None = None
) -> ModelTraits:
    reasoning = is_openai_reasoning(model) if reasoning_model is None else reasoning_model
    if replay_reasoning is None:
        lowered = model.lower()
        replay_reasoning = any(family in lowered for family in _REPLAY_FAMILIES)
    return ModelTraits(
        reasoning=reasoning,
        max_output_tokens=REASONING_MAX_OUTPUT if reasoning else DEFAULT_MAX_OUTPUT,
        side_effort=_side_effort(model) if reasoning else None,
        replay_reasoning=replay_reasoning,
    )


def main_output_cap(
    kind: str,
    model: str,
    *,
    max_output_tokens: int | None = None,
    thinking_budget: int | None = None,
    reasoning_model: bool | None = None,
) -> int:
    """The output cap of a main request to `model` when nothing else limits
    it: `maxOutputTokens`, else the family's default (Anthropic with thinking:
    the budget and room for the answer)."""
    if max_output_tokens:
        return max_output_tokens
    if kind == "anthropic":
        return thinking_budget + THINKING_ANSWER_ROOM if thinking_budget else DEFAULT_MAX_OUTPUT
    return openai_traits(model, reasoning_model=reasoning_model).max_output_tokens
