"""An MCP server's request to use agentd's model (MCP sampling), with the user's yes.

A server may ask its client for a model completion (`sampling/createMessage`)
instead of holding a key of its own. agentd serves it during one of that
server's tool calls (the call's `CallElicitation` says whose session it
is; `McpConnection` refuses a request with no call or several in flight),
in this order, each step able to refuse with an MCP error for the server:

1. The request is read and bounded (`read_request`): at most
   `MAX_MESSAGES` messages and `MAX_TEXT_CHARS` characters of text (system
   prompt included), text that is valid Unicode, images only for a model
   that takes them (each as a prompt's image is checked), no audio, no
   tools, `maxTokens` from 1 to the wire's int32 (cut to agentd's own
   output cap), a temperature in [0, 2], at most `MAX_STOP_SEQUENCES` stop
   sequences. Anything else is `-32602` naming the field.
2. The user is asked, every time, through the session's permission path
   (LSP `agent/requestPermission`, ACP `session/request_permission`, with
   `kind` "sampling", a preview of the system prompt and the last message,
   and no "always" option). The `ask` mode refuses without asking (it runs
   nothing that needs permission); no other mode allows it unasked, nor
   does a trusted server: a server's text spends the user's tokens and the
   answer goes to the server, which is not what approving edits or a tool
   says. A denial, no answer within `mcp.permissionTimeout`, an editor that
   cannot be asked: "the user declined" (`USER_DECLINED`, the code MCP's
   specification shows for it). The call's own timeout is paused meanwhile.
3. One model request through the App's provider: agentd's model for the
   session (`modelPreferences` ignored), the server's system prompt and
   messages, no tools, `includeContext` taken as "none" (nothing of the
   session's conversation reaches the server). The answer's text goes to
   the server only: nothing of it is streamed to the chat or added to the
   history. Its tokens count in the prompt's usage and the session's token
   limit. The call's timeout runs on while the model does.

The call ending (the prompt cancelled, the call timed out) withdraws the
permission request or closes the model stream, and the server gets an
error. Plain asyncio: the connection turns the outcome into the SDK's types.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import math
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from agentd.agent.modes import ASK
from agentd.agent.permission import ONCE_OPTIONS, PermissionRequest, ask_within
from agentd.errors import ModelError, short_text
from agentd.messages import ImagePart, Message, Part, TextPart, clean_text
from agentd.params import IMAGE_TYPES
from agentd.providers.base import ModelProvider, ModelRequest, StreamEnd, TextDelta, Usage

if TYPE_CHECKING:
    from agentd.agent.session import Session
    from agentd.mcp.elicit import CallElicitation

log = logging.getLogger("agentd.mcp")

T = TypeVar("T")

# Bounds on what a server may ask.
MAX_MESSAGES = 1000
MAX_TEXT_CHARS = 200_000
MAX_IMAGES = 8
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 256
# Both APIs take the output cap as an int32; a larger one is not a token count.
MAX_TOKENS_WIRE = 2**31 - 1
# How much of the system prompt and of the last message the user is shown.
PREVIEW_CHARS = 300

# MCP error codes: JSON-RPC's, and the one MCP's specification shows for a
# sampling request the user rejected.
USER_DECLINED = -1
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_SURROGATE = re.compile("[\ud800-\udfff]")

McpStopReason = Literal["endTurn", "maxTokens"]


class Refused(Exception):
    """The request is not served: the MCP error the server gets."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _bad(field: str, why: str) -> Refused:
    return Refused(INVALID_PARAMS, f"{field}: {why}")


@dataclass(slots=True)
class SamplingAsk:
    """A server's sampling request, checked, in agentd's vocabulary."""

    system: str
    messages: list[Message]
    max_tokens: int
    temperature: float | None = None
    stop: tuple[str, ...] = ()

    def preview(self, max_tokens: int) -> dict[str, Any]:
        """What the user is shown (the permission request's `arguments`)."""
        out: dict[str, Any] = {}
        if self.system:
            out["systemPrompt"] = _cut(self.system)
        out["lastMessage"] = _cut(_shown(self.messages[-1]))
        out["messages"] = len(self.messages)
        out["maxTokens"] = max_tokens
        return out


@dataclass(slots=True)
class SamplingAnswer:
    text: str
    model: str
    stop_reason: McpStopReason


def _cut(text: str) -> str:
    text = clean_text(text)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _shown(message: Message) -> str:
    return "".join(
        p.text if isinstance(p, TextPart) else "[image]"
        for p in message.parts
        if isinstance(p, TextPart | ImagePart)
    )


# --- reading the request ------------------------------------------------------------------


def read_request(params: Any, *, images: bool, max_image_bytes: int) -> SamplingAsk:
    """The SDK's `CreateMessageRequestParams`, checked; `Refused` (`-32602`
    naming the field) for anything agentd does not serve. `images`: whether
    the model takes them."""
    if getattr(params, "tools", None) or getattr(params, "tool_choice", None):
        raise _bad("tools", "agentd offers no tools to a server's sampling request")
    raw = getattr(params, "messages", None)
    if not isinstance(raw, list) or not raw:
        raise _bad("messages", "must be a non-empty list")
    if len(raw) > MAX_MESSAGES:
        raise _bad("messages", f"{len(raw)} messages; at most {MAX_MESSAGES}")
    system = getattr(params, "system_prompt", None) or ""
    if not isinstance(system, str):
        raise _bad("systemPrompt", "must be a string")
    _check_text("systemPrompt", system)
    budget = _Budget(len(system))
    messages = [
        _message(f"messages.{i}", m, images, max_image_bytes, budget) for i, m in enumerate(raw)
    ]
    return SamplingAsk(
        system,
        messages,
        _max_tokens(getattr(params, "max_tokens", None)),
        _temperature(getattr(params, "temperature", None)),
        _stop(getattr(params, "stop_sequences", None)),
    )


class _Budget:
    """The characters of text and the images the request has used so far."""

    def __init__(self, chars: int) -> None:
        self.chars = chars
        self.images = 0

    def text(self, field: str, size: int) -> None:
        self.chars += size
        if self.chars > MAX_TEXT_CHARS:
            raise _bad(field, f"the request's text is over {MAX_TEXT_CHARS} characters")


def _message(
    field: str, message: Any, images: bool, max_image_bytes: int, budget: _Budget
) -> Message:
    role = getattr(message, "role", None)
    if role not in ("user", "assistant"):
        raise _bad(f"{field}.role", "must be user or assistant")
    content = getattr(message, "content", None)
    blocks = content if isinstance(content, list) else [content]
    if not blocks:
        raise _bad(f"{field}.content", "is empty")
    parts: list[Part] = []
    for j, block in enumerate(blocks):
        where = f"{field}.content" if not isinstance(content, list) else f"{field}.content.{j}"
        kind = getattr(block, "type", None)
        if kind == "text":
            text = getattr(block, "text", None)
            if not isinstance(text, str):
                raise _bad(f"{where}.text", "must be a string")
            _check_text(f"{where}.text", text)
            budget.text(f"{where}.text", len(text))
            parts.append(TextPart(text))
        elif kind == "image":
            if not images:
                raise _bad(where, "the model agentd uses does not take images")
            if role != "user":
                raise _bad(where, "an image must be in a user message")
            budget.images += 1
            if budget.images > MAX_IMAGES:
                raise _bad(where, f"more than {MAX_IMAGES} images")
            parts.append(_image(where, block, max_image_bytes))
        else:
            raise _bad(where, f"content of type {kind!r} is not served (text and images are)")
    return Message(role, parts)


def _image(field: str, block: Any, limit: int) -> ImagePart:
    mime = getattr(block, "mime_type", None)
    if mime not in IMAGE_TYPES:
        raise _bad(f"{field}.mimeType", f"use one of {', '.join(IMAGE_TYPES)}")
    data = getattr(block, "data", None)
    if not isinstance(data, str) or not data:
        raise _bad(f"{field}.data", "must be the image's bytes in base64")
    # Checked before decoding: a huge image is refused without the work.
    if len(data) * 3 // 4 > limit:
        raise _bad(f"{field}.data", f"the image is over {limit} bytes (limits.maxImageBytes)")
    try:
        binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error:
        raise _bad(f"{field}.data", "is not valid base64") from None
    return ImagePart(str(mime), data)


def _check_text(field: str, text: str) -> None:
    # Refused, not repaired: a server that sends half a character has sent
    # something else than it meant, and the model would answer that.
    if not text.isascii() and _SURROGATE.search(text) is not None:
        raise _bad(field, "not valid Unicode (a lone surrogate)")


def _max_tokens(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad("maxTokens", "must be an integer")
    if value < 1:
        raise _bad("maxTokens", "must be at least 1")
    if value > MAX_TOKENS_WIRE:
        raise _bad("maxTokens", f"must be at most {MAX_TOKENS_WIRE}")
    return value


def _temperature(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad("temperature", "must be a number")
    if not math.isfinite(value) or not 0 <= value <= 2:
        raise _bad("temperature", "must be from 0 to 2")
    return float(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_STOP_SEQUENCES:
        raise _bad("stopSequences", f"must be a list of at most {MAX_STOP_SEQUENCES} strings")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not 0 < len(item) <= MAX_STOP_CHARS:
            raise _bad(f"stopSequences.{i}", f"must be 1 to {MAX_STOP_CHARS} characters")
        _check_text(f"stopSequences.{i}", item)
    return tuple(value)


# --- serving it -----------------------------------------------------------------------


class Sampler:
    """Serves the sampling requests of every MCP connection with the App's provider."""

    def __init__(
        self,
        provider: ModelProvider,
        *,
        model_of: Callable[[Session], str],
        output_cap: Callable[[str], int],
        takes_images: Callable[[str], bool],
        max_image_bytes: int,
        token_limit: int = 0,
    ) -> None:
        self._provider = provider
        self._model_of = model_of
        self._output_cap = output_cap
        self._takes_images = takes_images
        self._max_image_bytes = max_image_bytes
        # The session's token limit (`limits.sessionTokenLimit`); 0: none.
        self._token_limit = token_limit

    async def serve(self, call: CallElicitation, params: Any) -> SamplingAnswer:
        """The model's answer to the server's request made during `call`;
        `Refused` with the MCP error otherwise."""
        if call.sampling:
            raise Refused(INVALID_REQUEST, "a sampling request of this tool call is running")
        session = call.session
        model = self._model_of(session)
        ask = read_request(
            params, images=self._takes_images(model), max_image_bytes=self._max_image_bytes
        )
        ignored = [
            what
            for what, value in (
                ("modelPreferences", getattr(params, "model_preferences", None)),
                ("includeContext", getattr(params, "include_context", None)),
            )
            if value not in (None, "none")
        ]
        if ignored:
            log.info("MCP server %r: sampling's %s ignored", call.server, ", ".join(ignored))
        if session.mode == ASK:
            raise Refused(
                USER_DECLINED,
                "the user declined: the session is in Ask mode (read-only), which runs "
                "nothing that needs the user's permission",
            )
        if self._token_limit and session.tokens_used >= self._token_limit:
            raise Refused(INVALID_REQUEST, "the session has used its token limit")
        max_tokens = min(ask.max_tokens, self._output_cap(model))
        call.sampling = True
        try:
            await self._permit(call, ask, max_tokens)
            request = ModelRequest(
                model=model,
                system=ask.system,
                messages=ask.messages,
                purpose="sampling",
                max_tokens=max_tokens,
                temperature=ask.temperature,
                stop=ask.stop,
            )
            text, stop_reason, usage = await _before_end(call, self._run(request))
        finally:
            call.sampling = False
        session.prompt_usage.add(usage)
        session.tokens_used += usage.total
        log.info(
            "MCP server %r used the model %s: %d input, %d output tokens",
            call.server,
            model,
            usage.input_tokens,
            usage.output_tokens,
        )
        reason: McpStopReason = "maxTokens" if stop_reason == "max_tokens" else "endTurn"
        return SamplingAnswer(clean_text(text), model, reason)

    async def _permit(self, call: CallElicitation, ask: SamplingAsk, max_tokens: int) -> None:
        preview = ask.preview(max_tokens)
        lines = [
            f"The MCP server {call.server!r} asks to use the model for an answer of at most "
            f"{max_tokens} tokens to {len(ask.messages)} message(s); the answer goes to the "
            "server."
        ]
        if "systemPrompt" in preview:
            lines.append(f"System prompt: {preview['systemPrompt']}")
        lines.append(f"Last message: {preview['lastMessage']}")
        request = PermissionRequest(
            tool_call_id=call.tool_call_id,
            tool=call.tool,
            arguments=preview,
            title=f"{call.server} asks to use the model",
            server=call.server,
            server_tool=call.server_tool or None,
            description="\n".join(lines),
            options=ONCE_OPTIONS,
            kind="sampling",
        )
        with call.paused():
            answer = await _before_end(call, ask_within(call.session, request, call.ask_timeout))
        if answer.allowed:
            return
        why = {"reject_once": "rejected", "cancelled": "cancelled the request"}.get(
            answer.choice, f"could not be asked: {answer.detail}"
        )
        raise Refused(USER_DECLINED, f"the user declined: {why}")

    async def _run(self, request: ModelRequest) -> tuple[str, str, Usage]:
        parts: list[str] = []
        end: StreamEnd | None = None
        try:
            async with contextlib.aclosing(self._provider.stream(request)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
                    elif isinstance(event, StreamEnd):
                        end = event
        except ModelError as exc:
            why = f"the model request failed: {short_text(str(exc))}"
            raise Refused(INTERNAL_ERROR, why) from None
        if end is None:
            raise Refused(INTERNAL_ERROR, "the model's answer ended early")
        return "".join(parts), end.stop_reason, end.usage


async def _before_end(call: CallElicitation, work: Coroutine[Any, Any, T]) -> T:
    """`work`'s result, unless the call ends first: then `work` is cancelled
    (a permission request withdrawn, a model stream closed) and awaited."""
    task = asyncio.ensure_future(work)
    either: list[asyncio.Future[Any]] = [task, call.ended]
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise Refused(
            USER_DECLINED, "the tool call ended (the prompt was cancelled or the call timed out)"
        )
    return task.result()
