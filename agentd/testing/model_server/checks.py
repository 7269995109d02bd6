"""What the real APIs refuse, checked the way they check it (400 and their words).

OpenAI Chat Completions, by model (`ModelRules`):
- a reasoning model (o-series, gpt-5 family, or any name configured so)
  refuses `max_tokens` ("use max_completion_tokens"), a temperature other
  than 1, and an unknown `reasoning_effort`; any other model refuses
  `reasoning_effort`;
- reasoning text in the history (`reasoning_content`, `reasoning` on an
  assistant message): models that require it back (DeepSeek's and
  Moonshot's thinking models, or configured so) refuse an assistant message
  with tool calls that lacks it; every other model refuses it anywhere, as
  DeepSeek R1 did;
- tool calls and their results pair up: an assistant message with
  `tool_calls` must be followed by `tool` messages answering every call id,
  and a `tool` message must answer a call of the assistant message before it.

Anthropic Messages:
- at most four `cache_control` breakpoints (checked by the cache emulation);
- tool calls and their results pair up: every `tool_use` block of an
  assistant message has its `tool_result` block in the next message, and
  every `tool_result` block answers a `tool_use` of the message before it;
- `thinking`: a budget of at least 1,024 tokens, below `max_tokens`, no
  temperature but 1 and no forced tool; with thinking on, the final assistant
  message, when tool results answer it, must start with a thinking or
  redacted thinking block;
- every thinking block must carry the signature this server gave it, and
  every redacted block the data it gave (`Signer`): a block changed on its
  way back is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from agentd.testing.model_server.replies import BadRequest, JSONDict

OPENAI_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
REASONING_FIELDS = ("reasoning_content", "reasoning")
_REASONING_NAMES = re.compile(r"^(?:o\d+(?:-|$)|gpt-5(?:[.\-]|$))")
_REPLAY_NAMES = ("deepseek", "kimi", "moonshot")
THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


@dataclass(slots=True)
class ModelRules:
    """Which models the server treats as reasoning models, and which require
    their reasoning text back; names set here win over the name patterns."""

    reasoning: dict[str, bool] = field(default_factory=dict)
    replay: dict[str, bool] = field(default_factory=dict)

    def is_reasoning(self, model: str) -> bool:
        if model in self.reasoning:
            return self.reasoning[model]
        name = model.lower()
        return "/" not in name and bool(_REASONING_NAMES.match(name)) and "-chat" not in name

    def requires_reasoning_back(self, model: str) -> bool:
        if model in self.replay:
            return self.replay[model]
        return any(family in model.lower() for family in _REPLAY_NAMES)


def _unsupported(param: str, message: str, code: str = "unsupported_parameter") -> BadRequest:
    return BadRequest(message, param=param, code=code)


def check_openai(body: JSONDict, rules: ModelRules) -> None:
    model = str(body.get("model", ""))
    effort = body.get("reasoning_effort")
    if rules.is_reasoning(model):
        if "max_tokens" in body:
            raise _unsupported(
                "max_tokens",
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
            )
        temperature = body.get("temperature")
        if temperature is not None and temperature != 1:
            raise _unsupported(
                "temperature",
                f"Unsupported value: 'temperature' does not support {temperature} with this "
                "model. Only the default (1) value is supported.",
                "unsupported_value",
            )
        if effort is not None and effort not in OPENAI_EFFORTS:
            raise _unsupported(
                "reasoning_effort",
                f"Invalid value: {effort!r}. Supported values are: "
                + ", ".join(repr(e) for e in OPENAI_EFFORTS)
                + ".",
                "invalid_value",
            )
    elif effort is not None:
        raise _unsupported(
            "reasoning_effort",
            "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
        )
    required = rules.requires_reasoning_back(model)
    for i, msg in enumerate(body.get("messages") or ()):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        present = [f for f in REASONING_FIELDS if f in msg]
        if required and msg.get("tool_calls") and not present:
            raise BadRequest(
                f"Missing `reasoning_content` field in the assistant message at message index "
                f"{i}. The reasoning_content in the thinking mode must be passed back to the API.",
                param=f"messages[{i}].reasoning_content",
            )
        if present and not required:
            raise BadRequest(
                f"messages[{i}]: the {present[0]!r} field of an assistant message is not "
                "accepted as input; remove the model's reasoning from the history.",
                param=f"messages[{i}].{present[0]}",
            )
    _check_openai_tool_pairs([m if isinstance(m, dict) else {} for m in body.get("messages") or ()])


def _check_openai_tool_pairs(messages: list[JSONDict]) -> None:
    """Every call of an assistant message answered by the `tool` messages right
    after it, and no `tool` message without its call: OpenAI's 400s, in its words."""
    asked: list[Any] = []
    since = 0
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in asked:
                raise BadRequest(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            asked.remove(call_id)
            continue
        if asked:
            raise _unanswered(since, asked)
        calls = msg.get("tool_calls") if role == "assistant" else None
        asked = [c.get("id") for c in calls or () if isinstance(c, dict)]
        since = i
    if asked:
        raise _unanswered(since, asked)


def _unanswered(index: int, ids: list[Any]) -> BadRequest:
    return BadRequest(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(str(i) for i in ids),
        param=f"messages.[{index}].role",
    )


class Signer:
    """Signatures of the thinking this server streams, so that it can tell a
    block sent back unchanged from one that was altered or made up."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or os.urandom(32)

    def _mac(self, kind: str, text: str) -> bytes:
        return hmac.new(self._key, f"{kind}\0{text}".encode(), hashlib.sha256).digest()

    def sign(self, thinking: str) -> str:
        return base64.b64encode(self._mac("thinking", thinking)).decode()

    def valid(self, thinking: str, signature: Any) -> bool:
        return isinstance(signature, str) and hmac.compare_digest(signature, self.sign(thinking))

    def redact(self, secret: str) -> str:
        """Opaque data of a redacted thinking block."""
        payload = json.dumps({"r": secret}).encode()
        mac = self._mac("redacted", payload.decode())
        return base64.b64encode(mac + payload).decode()

    def valid_redacted(self, data: Any) -> bool:
        if not isinstance(data, str):
            return False
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            return False
        mac, payload = raw[:32], raw[32:]
        return hmac.compare_digest(mac, self._mac("redacted", payload.decode("utf-8", "replace")))


def thinking_budget(body: JSONDict) -> int | None:
    """The request's thinking budget if thinking is on, else None; BadRequest
    for a thinking setting the API refuses."""
    thinking = body.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        raise BadRequest("thinking: Input tag does not match 'enabled' or 'disabled'")
    if thinking["type"] == "disabled":
        return None
    budget = thinking.get("budget_tokens")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1024:
        raise BadRequest(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        )
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens <= budget:
        raise BadRequest(
            "max_tokens: `max_tokens` must be greater than `thinking.budget_tokens`. "
            f"Please consult our documentation at {THINKING_DOCS}"
        )
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise BadRequest(
            "temperature: `temperature` may only be set to 1 when thinking is enabled. "
            f"Please consult our documentation at {THINKING_DOCS}"
        )
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise BadRequest("Thinking may not be enabled when tool_choice forces tool use.")
    return budget


def check_anthropic(body: JSONDict, signer: Signer) -> int | None:
    """Validate thinking and the thinking blocks sent back; the thinking budget."""
    budget = thinking_budget(body)
    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if msg.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "thinking" and not signer.valid(
                str(block.get("thinking", "")), block.get("signature")
            ):
                raise BadRequest(
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
            if block.get("type") == "redacted_thinking" and not signer.valid_redacted(
                block.get("data")
            ):
                raise BadRequest(
                    f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                )
    _check_anthropic_tool_pairs(messages)
    if budget is not None:
        _check_final_assistant(messages)
    return budget


def _blocks_of(message: JSONDict, kind: str) -> list[tuple[int, JSONDict]]:
    content = message.get("content")
    return [
        (j, b)
        for j, b in enumerate(content if isinstance(content, list) else ())
        if isinstance(b, dict) and b.get("type") == kind
    ]


def _check_anthropic_tool_pairs(messages: list[JSONDict]) -> None:
    """Each `tool_use` answered by a `tool_result` in the next message, and each
    `tool_result` answering a `tool_use` of the message before: the API's 400s."""
    asked: list[Any] = []
    for i, msg in enumerate(messages):
        for j, block in _blocks_of(msg, "tool_result"):
            call_id = block.get("tool_use_id")
            if call_id not in asked:
                raise BadRequest(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {call_id}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
            asked.remove(call_id)
        if asked:
            raise _without_results(i - 1, asked)
        asked = [b.get("id") for _, b in _blocks_of(msg, "tool_use")]
    if asked:
        raise _without_results(len(messages) - 1, asked)


def _without_results(index: int, ids: list[Any]) -> BadRequest:
    return BadRequest(
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(str(i) for i in ids)}. Each `tool_use` block "
        "must have a corresponding `tool_result` block in the next message."
    )


def _check_final_assistant(messages: list[JSONDict]) -> None:
    """With thinking on, the assistant message that the final tool results
    answer must start with its thinking."""
    if len(messages) < 2:
        return
    last, previous = messages[-1], messages[-2]
    content = last.get("content")
    answers_tools = (
        last.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )
    if not answers_tools or previous.get("role") != "assistant":
        return
    blocks = previous.get("content")
    first = blocks[0] if isinstance(blocks, list) and blocks else {"type": "text"}
    kind = first.get("type") if isinstance(first, dict) else "text"
    if kind not in ("thinking", "redacted_thinking"):
        i = len(messages) - 2
        raise BadRequest(
            f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
            f"found `{kind}`. When `thinking` is enabled, a final `assistant` message must "
            "start with a thinking block (preceeding the lastmost set of `tool_use` and "
            "`tool_result` blocks). We recommend you include thinking blocks from previous "
            f"turns. To avoid this requirement, disable `thinking`. Please consult our "
            f"documentation at {THINKING_DOCS}"
        )
