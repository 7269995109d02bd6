"""What compaction's checks read of a session's history, kept per message.

Before every model request the compactor asks where a summary could split
the history (`compaction.choose_split`) and which old tool output it could
clear (`compaction.plan_clearing`); after every reply it asks again. Read
afresh, each question walks the whole history and measures every message,
so a step's cost grew with the session (issue 20): about 5 ms at 1,000
messages for a restored session over its window's threshold. A
`HistoryIndex` keeps each message's size, the prompt starts, the tool
steps and the steps whose output is worth clearing, and `sync` brings it up
to date by measuring only the messages it has not seen.

`sync` trusts the messages it has indexed, but for the last one, while
they are the same objects in the same places (a C-speed comparison of two
pointer lists; different objects are compared by value). That holds
because a message is changed in place only while it is the newest one: a
reminder is attached to `history[-1]` (`turn._attach_reminder`), and the
last indexed message is always measured again. Everything else that
changes a history builds new messages (compaction's cleared output and
summary, a reload) or a new list, and a history that is not a continuation
of the indexed one is indexed anew.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from agentd.agent.context import message_bytes
from agentd.agent.image_cost import message_image_tokens
from agentd.image_billing import Formula
from agentd.messages import Message

# Tool output shorter than this is left alone by clearing: a stub would save nothing.
STUB_MIN_BYTES = 400


def starts_prompt(message: Message) -> bool:
    """Whether a verbatim tail may begin at `message`: a user's words that
    answer no tool call. A tail that began at a message holding results
    would keep them after their calls were summarised away, and both APIs
    refuse a result without its call on every later request. Such a message
    holds a prompt's words only in an older transcript continued after a
    crash (`turn_ends.answer_missing` folds the missing results into it);
    the split then falls at an earlier prompt, with the calls."""
    return message.role == "user" and not message.tool_results and bool(message.text)


def worth_clearing(message: Message) -> bool:
    """A tool step holding output that a stub would shorten: long text, or
    an image (an MCP tool's), which the stub drops however short the text."""
    return any(len(p.content) >= STUB_MIN_BYTES or p.images for p in message.tool_results)


class HistoryIndex:
    """Per-message facts of one history, for compaction's checks."""

    __slots__ = ("_messages", "clearable", "cum", "formula", "images", "starts", "steps")

    def __init__(self, formula: Formula = "anthropic") -> None:
        # Whose count the images are estimated by (`image_cost.formula_for`).
        self.formula: Formula = formula
        # The messages indexed: the history's own objects.
        self._messages: list[Message] = []
        # cum[i]: the size of history[:i] in bytes (`context.message_bytes`).
        self.cum: list[int] = [0]
        # images[i]: the estimated tokens of the images in history[:i]
        # (`image_cost`), which the bytes leave out.
        self.images: list[int] = [0]
        # Indices of the messages that start a prompt turn (`starts_prompt`).
        self.starts: list[int] = []
        # Indices of the messages that hold tool results.
        self.steps: list[int] = []
        # Of `steps`, those whose output is worth clearing (`worth_clearing`).
        self.clearable: list[int] = []

    @classmethod
    def of(cls, history: list[Message], formula: Formula = "anthropic") -> HistoryIndex:
        index = cls(formula)
        index.sync(history)
        return index

    def size(self, i: int) -> int:
        return self.cum[i + 1] - self.cum[i]

    def image_size(self, i: int) -> int:
        return self.images[i + 1] - self.images[i]

    def sync(self, history: list[Message]) -> None:
        """Index `history`, measuring only what changed since the last call."""
        known = len(self._messages)
        # The last indexed message is measured again: a reminder may have
        # been attached to it since.
        keep = max(known - 1, 0)
        if not self._continues(history, known):
            keep = 0
        if keep < known:
            self._truncate(keep)
        for i in range(keep, len(history)):
            self._add(i, history[i])

    def _continues(self, history: list[Message], known: int) -> bool:
        """Whether `history` starts with the `known` messages indexed (the
        last of them may be gone). Two lists of one length are compared
        without a slice of either: the new messages are put after the indexed
        ones for the comparison, which then reads two pointer arrays in C
        (about 1 us at 1,000 messages; slicing the two prefixes to compare
        them touched every message's reference count, about 35 us in a
        daemon's heap, and compaction's checks ran it twice before each
        request)."""
        messages = self._messages
        if len(history) < known:
            return len(history) == known - 1 and history == messages[:-1]
        messages += history[known:]
        try:
            return history == messages
        finally:
            del messages[known:]

    def _truncate(self, n: int) -> None:
        del self._messages[n:]
        del self.cum[n + 1 :]
        del self.images[n + 1 :]
        for positions in (self.starts, self.steps, self.clearable):
            while positions and positions[-1] >= n:
                positions.pop()

    def _add(self, i: int, message: Message) -> None:
        self._messages.append(message)
        self.cum.append(self.cum[-1] + message_bytes(message))
        self.images.append(self.images[-1] + message_image_tokens(message, self.formula))
        results = message.tool_results
        if results:
            self.steps.append(i)
            if worth_clearing(message):
                self.clearable.append(i)
        elif message.role == "user" and message.text:
            self.starts.append(i)  # `starts_prompt`, with the results read once

    def latest_start_with_tail(self, enough: Callable[[int, int], bool]) -> int | None:
        """The latest prompt start whose tail (it and everything after it:
        `enough(bytes, image tokens)`) is enough, else the earliest start;
        None without one. `enough` must hold for every tail at least as long
        as one it holds for."""
        starts = self.starts
        if not starts:
            return None
        total, images = self.cum[-1], self.images[-1]
        # Tails shrink as starts move later: the first start whose tail is
        # not enough bounds the answer.
        first_short = bisect.bisect_left(
            starts, True, key=lambda s: not enough(total - self.cum[s], images - self.images[s])
        )
        return starts[max(first_short - 1, 0)]
