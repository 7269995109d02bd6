"""The core's vocabulary: conversation history, tool calls and tool specs.

The leaf of agentd's import graph: it imports nothing of agentd, and every
layer (providers, memory, the turn engine, the front ends) speaks it, so no
two of them need to import each other for their shared words
(`tests/unit/test_architecture.py` checks it).

A session's history is a list of `Message`s. Each message is a role and an
ordered list of parts. Providers translate this shape into their own wire
format (OpenAI chat messages, Anthropic content blocks) and own the ordering
rules their APIs impose: a user message that carries `ToolResultPart`s is sent
with the tool results first and any text or reminders after them. A
`ToolSpec` is what the model is told about a tool it may call.

Plain dataclasses, no pydantic: these are built on every stream chunk path and
must stay cheap to construct and to import.

Text in the vocabulary is valid Unicode: `clean_text` and `clean_json`
replace lone surrogates (half an emoji, as a JSON `\\ud83d` escape decodes
to) with U+FFFD where text enters the core (prompts, tool results, model
output, stored transcripts), so nothing later fails to encode it as UTF-8.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

Role = Literal["user", "assistant"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (a split pair is joined)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # UTF-16 joins a high and a low surrogate that stand side by side into the
    # character they encode; what cannot be joined decodes as U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_json(value: Any) -> Any:
    """A JSON value with every string (keys included) passed through `clean_text`.

    Iterative, not recursive: the value may be nested as deep as the decoder allows.
    """
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, dict | list):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, item = stack.pop()
        if isinstance(item, dict):
            copy: Any = {}
            for k, v in item.items():
                copy[clean_text(k) if isinstance(k, str) else k] = None
                stack.append((copy, clean_text(k) if isinstance(k, str) else k, v))
        elif isinstance(item, list):
            copy = [None] * len(item)
            stack.extend((copy, i, v) for i, v in enumerate(item))
        elif isinstance(item, str):
            copy = clean_text(item)
        else:
            copy = item
        parent[key] = copy
    return root[0]


@dataclass(slots=True)
class TextPart:
    text: str


@dataclass(slots=True)
class ThinkingPart:
    """Model reasoning: shown as thought, kept in the transcript, and sent back
    only where a provider requires it (each provider decides, see
    `agentd/providers/`).

    `signature` is Anthropic's signature over the block: a thinking block goes
    back to Anthropic only with it, unchanged. `redacted` holds the opaque
    `data` of an Anthropic `redacted_thinking` block (its `text` is empty),
    sent back as it came. `source` names the delta field an OpenAI-compatible
    server used (`reasoning_content`, `reasoning`): the field it goes back in
    for the servers that want it.
    """

    text: str
    signature: str = ""
    redacted: str = ""
    source: str = ""


@dataclass(slots=True)
class ReminderPart:
    """A system reminder attached to a user message (memory, instructions).

    Rendered by providers as `<system-reminder>` text so that models read it as
    data supplied by the harness rather than words of the user.
    """

    text: str
    source: str = ""  # e.g. "memory", "instructions"; for logs and tests


@dataclass(slots=True, frozen=True)
class ToolSpec:
    name: str
    description: str
    # JSON Schema of the arguments object.
    parameters: dict[str, Any]
    # True when calling the tool changes nothing outside the conversation
    # (reads, searches, the plan; an MCP tool only when its server annotates
    # it `readOnlyHint`). The one predicate session modes use: the read-only
    # mode offers the model only these (`agentd.agent.modes`). Read-only
    # tools also run without asking the user. Never sent to a model.
    read_only: bool = False


@dataclass(slots=True)
class ImagePart:
    """An image: one the user attached to a prompt, or one an MCP tool returned
    (`ToolResultPart.images`). Base64 `data`, as both model APIs take it. A
    prompt's image lives in a transcript as a file beside it, named by
    `sha256` (`agentd.transcript`), and `data` is empty until it is read; a
    tool result's images stay inline in their line."""

    mime_type: str
    data: str
    sha256: str = ""
    # Its (width, height) in pixels once read from its header ((0, 0): not
    # readable), which each provider's count of its cost starts from
    # (`agentd.agent.image_cost`): not part of the image's value.
    pixels: tuple[int, int] | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class ToolCallPart:
    call: ToolCall


@dataclass(slots=True)
class ToolResultPart:
    tool_call_id: str
    content: str
    is_error: bool = False
    # Images beside the text (an MCP tool's image content): sent by providers
    # whose API takes images in tool results, named in `content` for the others.
    images: tuple[ImagePart, ...] = ()


Part = TextPart | ThinkingPart | ReminderPart | ImagePart | ToolCallPart | ToolResultPart


@dataclass(slots=True)
class Message:
    role: Role
    parts: list[Part] = field(default_factory=list)
    # True when the assistant's output was cut short (cancel, dropped stream).
    interrupted: bool = False
    # A provider's wire encoding of this message, by the provider's settings
    # (`cached_wire`): not part of the message's value.
    wire_cache: dict[Hashable, tuple[list[Part], bool, Any]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # A request's assembly over the history up to this message, while it is
    # the newest one sent (`find_prefix`), with the messages before this one:
    # not part of the message's value.
    wire_prefix: dict[Hashable, tuple[list[Message], Any]] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [p.call for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    @property
    def images(self) -> list[ImagePart]:
        return [p for p in self.parts if isinstance(p, ImagePart)]


_Wire = TypeVar("_Wire")


def cached_wire(msg: Message, key: Hashable, encode: Callable[[Message, Hashable], _Wire]) -> _Wire:
    """`encode(msg, key)`, computed once per state of `msg` and kept on it.

    A step of a turn sends the whole history again; encoding each message once
    makes a step's cost independent of the history's length. The cache holds
    a copy of the parts list it was computed from and is used only while the
    message's parts equal it, so every way the history is changed invalidates
    it without being told: a reminder inserted at a delivery point, a
    cancelled call's result appended, the parts list replaced, a part swapped
    for another (compaction's cleared tool output builds new parts and
    messages). The comparison costs next to nothing when nothing changed:
    list equality tries identity first, part by part, in C. What it cannot
    see is a field of a part changed in place, which nothing does once a
    message is in a history: the turn engine assembles parts before the
    message enters it (`tests/unit/test_wire_cache.py`).

    Each key belongs to one `encode` (a provider's wire, a size count), so
    what is kept under it is of that function's type.
    """
    hit = msg.wire_cache.get(key)
    if hit is not None and hit[1] == msg.interrupted and hit[0] == msg.parts:
        return cast(_Wire, hit[2])
    text = encode(msg, key)
    msg.wire_cache[key] = (list(msg.parts), msg.interrupted, text)
    return text


# How far back from the newest message `find_prefix` looks for the last
# request's assembly: a step adds a few messages (a reply, its tool results).
PREFIX_LOOKBACK = 32


@dataclass(slots=True)
class Prefix:
    """What `find_prefix` found: the assembly a provider kept (`state`) for a
    request over `messages[:k]`, now the caller's to change in place and to
    keep again with `keep_prefix`; `messages`: the kept list of the first
    `k - 1` of them."""

    k: int
    messages: list[Message]
    state: Any


def find_prefix(messages: list[Message], key: Hashable) -> Prefix | None:
    """The assembly a provider kept (`keep_prefix`) for a request over
    `messages[:k]`, taken off the message that held it; None when
    `messages` does not continue the history of that request.

    Reusing it makes a step's cost grow with the messages it adds, not with
    the history's length: checking every message's `cached_wire` costs about
    a microsecond a message in a daemon's heap (1 ms at 1,000 messages, the
    most of a step's encoding). The check here is that the first `k`
    messages are the same objects (pointers compared, no object touched;
    one that is not the same must be equal, `_starts_with`).
    Nothing here copies the history either: the kept lists are handed over
    and changed in place, and `keep_prefix` extends them. The messages
    before the last of them are trusted as they were encoded: a message is
    changed in place only while it is the newest one (a reminder attached
    at a delivery point, `agent/turn.py`), and everything else that changes
    a history builds new messages or a new list (compaction, a reload). The
    caller encodes `messages[k - 1]` again, through `cached_wire`, which
    sees such a change.
    """
    for i in range(len(messages) - 1, max(len(messages) - PREFIX_LOOKBACK, 0) - 1, -1):
        kept = messages[i].wire_prefix
        entry = kept.pop(key, None) if kept else None
        if entry is None:
            continue
        snapshot, state = entry
        if len(snapshot) == i and _starts_with(messages, snapshot):
            return Prefix(i + 1, snapshot, state)
        return None
    return None


def _starts_with(messages: list[Message], snapshot: list[Message]) -> bool:
    """Whether `messages` begins with `snapshot`'s messages. Compared as two
    lists of one length (the rest of `messages` put after the snapshot for
    the comparison): a loop over two pointer arrays in C, about 1 us at
    1,000 messages, where a call per pair (`map(operator.is_, ...)`) took
    about 40 us. Objects that are not the same are compared by value, and
    an equal message has the same encoding."""
    k = len(snapshot)
    snapshot += messages[k:]
    try:
        return messages == snapshot
    finally:
        del snapshot[k:]


def keep_prefix(
    messages: list[Message], key: Hashable, state: Any, found: Prefix | None = None
) -> None:
    """Keep a request's assembly over `messages` on the newest of them, for
    the next request over this history (`find_prefix`); `found`: what this
    request took over, whose list of messages is extended, not copied.

    The newest message is left out of the list it holds: a message holding
    itself would be a reference cycle, and a history dropped (a reset, a
    closed session) would wait for the garbage collector, megabytes of it."""
    if not messages:
        return
    if found is not None:
        snapshot = found.messages
        snapshot += messages[len(snapshot) : len(messages) - 1]
    else:
        snapshot = messages[:-1]
    newest = messages[-1]
    if newest.wire_prefix is None:
        newest.wire_prefix = {}
    newest.wire_prefix[key] = (snapshot, state)


def forget_prefix(messages: list[Message]) -> None:
    """Drop the assembly kept on the newest of `messages` (`keep_prefix`),
    for a history that no longer continues the one it was kept for: it holds
    that history's messages, which would otherwise stay alive until the
    next request's `find_prefix` let them go."""
    if messages:
        messages[-1].wire_prefix = None


def user_text(text: str) -> Message:
    return Message("user", [TextPart(text)])


def render_reminder(text: str) -> str:
    """The one place that decides how a reminder looks to a model."""
    return f"<system-reminder>\n{text}\n</system-reminder>"


# --- JSON round trip, for transcripts on disk -------------------------------


def part_to_json(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ThinkingPart):
        thinking: dict[str, Any] = {"type": "thinking", "text": part.text}
        # Empty fields are left out: most thinking has no signature or source.
        for key in ("signature", "redacted", "source"):
            if value := getattr(part, key):
                thinking[key] = value
        return thinking
    if isinstance(part, ReminderPart):
        return {"type": "reminder", "text": part.text, "source": part.source}
    if isinstance(part, ImagePart):
        out: dict[str, Any] = {"type": "image", "mimeType": part.mime_type}
        if part.sha256:
            out["sha256"] = part.sha256
        if part.data:
            out["data"] = part.data
        return out
    if isinstance(part, ToolCallPart):
        c = part.call
        return {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
    result: dict[str, Any] = {
        "type": "tool_result",
        "toolCallId": part.tool_call_id,
        "content": part.content,
        "isError": part.is_error,
    }
    if part.images:
        # Inline, unlike a prompt's image: a transcript keeps only prompt
        # images in files beside it.
        result["images"] = [{"mimeType": i.mime_type, "data": i.data} for i in part.images]
    return result


def part_from_json(data: dict[str, Any]) -> Part:
    """A part as stored; its text is cleaned (a transcript may have been edited by hand)."""
    kind = data.get("type")
    if kind == "text":
        return TextPart(clean_text(str(data["text"])))
    if kind == "thinking":
        return ThinkingPart(
            clean_text(str(data["text"])),
            str(data.get("signature", "")),
            str(data.get("redacted", "")),
            str(data.get("source", "")),
        )
    if kind == "reminder":
        return ReminderPart(clean_text(str(data["text"])), str(data.get("source", "")))
    if kind == "image":
        return ImagePart(
            str(data["mimeType"]), str(data.get("data", "")), str(data.get("sha256", ""))
        )
    if kind == "tool_call":
        call = ToolCall(
            clean_text(str(data["id"])),
            clean_text(str(data["name"])),
            clean_json(dict(data["arguments"])),
        )
        return ToolCallPart(call)
    if kind == "tool_result":
        images = tuple(
            ImagePart(str(i["mimeType"]), str(i["data"])) for i in data.get("images") or ()
        )
        return ToolResultPart(
            clean_text(str(data["toolCallId"])),
            clean_text(str(data["content"])),
            bool(data.get("isError", False)),
            images,
        )
    raise ValueError(f"unknown part type {kind!r}")


def message_to_json(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": msg.role, "parts": [part_to_json(p) for p in msg.parts]}
    if msg.interrupted:
        out["interrupted"] = True
    return out


def message_from_json(data: dict[str, Any]) -> Message:
    role = data["role"]
    if role not in ("user", "assistant"):
        raise ValueError(f"unknown role {role!r}")
    return Message(
        role,
        [part_from_json(p) for p in data.get("parts", [])],
        interrupted=bool(data.get("interrupted", False)),
    )
