"""Where a stored prompt ended, and how a prompt a crash cut short is closed.

A prompt that ends, whatever its outcome, leaves a `prompt_end` note after
its messages. One whose daemon was killed, or whose machine went down, while
a tool ran or the model streamed has none, and its history can end with an
assistant message whose tool calls have no results: both model APIs refuse
that history (a 400 "tool_use ids were found without tool_result blocks"),
on every later request, so the session could never be prompted again. Or it
ends with a prompt that got no answer, which the next prompt would follow
as if it had.

`closing` is how such a prompt is closed when its session is loaded: each
unanswered call gets an error result saying it was interrupted, and a
reminder tells the model that the request was cut short; a `prompt_end` note
(`error`, kind `interrupted`) makes a replay show it. Nothing is trimmed: the
user saw the prompt and the call, and the model has to know what it started
(an edit may be half-made, a command may have run) rather than find its
traces unexplained. It is what users of other agents see after a crash too.
The core keeps both in the session and writes them to the transcript
(appended, as any line) just before the session's next line, never on a load
alone (`TranscriptWriter.close_cut_turn`): a session live in another daemon
looks cut from here, and a line written into its transcript would cut it.

`answer_missing` is for transcripts written before prompts were closed so: a
cut session prompted again holds a call that a later message does not
answer. The missing results are added to that message, not as a message of
their own, so the history loads valid and keeps the indexes the live session
had (a later compaction's split counts them). A prompt's message that holds
results so is no place for a compaction's verbatim tail to start
(`agent.history_index.starts_prompt`).
"""

from __future__ import annotations

from typing import Any

from agentd.events import Note, PromptEnded
from agentd.messages import ImagePart, Message, ReminderPart, TextPart, ToolCall, ToolResultPart

# The `ReminderPart.source` of the message that holds a compaction's summary.
SUMMARY_SOURCE = "compaction"
# The `ReminderPart.source` of the reminder that closes a cut prompt.
INTERRUPTED_SOURCE = "interrupted"

INTERRUPTED_RESULT = (
    "This tool call was interrupted: agentd stopped (it was killed, or the machine went "
    "down) before the call returned, and its result was lost. It may have run in part, or "
    "not at all: check before relying on what it was to do."
)
INTERRUPTED_TURN = (
    "agentd stopped (it was killed, or the machine went down) before it finished the "
    "previous request, so the work on it ended where the conversation shows. Do not assume "
    "that what was not shown done was done."
)
# A call of a reply the turn does not go on from (a refusal): it never ran.
NOT_RUN_RESULT = "This tool call was not run: the reply that made it was a refusal."
INTERRUPTED_ERROR: dict[str, Any] = {
    "kind": "interrupted",
    "message": (
        "This prompt did not finish: agentd stopped (it was killed, or the machine went "
        "down) before its end."
    ),
}


def is_summary(message: Message) -> bool:
    return any(isinstance(p, ReminderPart) and p.source == SUMMARY_SOURCE for p in message.parts)


def is_prompt(message: Message) -> bool:
    """A user's prompt: a user message that is neither tool results, nor a
    compaction's summary, nor what closes a cut prompt."""
    return (
        message.role == "user"
        and not any(isinstance(p, ToolResultPart) for p in message.parts)
        and not any(
            isinstance(p, ReminderPart) and p.source in (SUMMARY_SOURCE, INTERRUPTED_SOURCE)
            for p in message.parts
        )
    )


def holds_prompt(message: Message) -> bool:
    """A message that starts a prompt's turn: a prompt (`is_prompt`), or, in
    an older transcript continued after a crash, a prompt's message that
    also holds the results `answer_missing` folded in (the calls the crash
    left unanswered, of the turn before): its words or images make it one."""
    if is_prompt(message):
        return True
    return (
        message.role == "user"
        and bool(message.tool_results)
        and any(isinstance(p, TextPart | ImagePart) for p in message.parts)
    )


def results_of(message: Message) -> Message:
    """`message` with its tool results only: of a prompt's message that holds
    the turn before's results (`holds_prompt`), what closes that turn."""
    return Message(message.role, list(message.tool_results))


def _ended(history: list[Message], notes: list[tuple[int, Note]]) -> bool:
    """A `prompt_end` note after the history's last message."""
    n = len(history)
    return any(isinstance(note, PromptEnded) and i >= n for i, note in notes)


def finished_length(history: list[Message], notes: list[tuple[int, Note]]) -> int:
    """How many of `history`'s messages end with a finished prompt. A prompt
    that ended, whatever its outcome, left a `prompt_end` note after its
    messages; one without it (older transcripts) is finished when the model
    answered without calling a tool. Otherwise the last prompt had not ended:
    its messages, from its user message on, are not finished. In an older
    transcript that message may also hold the results of the turn before
    (`holds_prompt`): that turn is finished by them, and a caller that keeps
    the finished turns keeps them too (`results_of`)."""
    n = len(history)
    if n == 0 or _ended(history, notes):
        return n
    last = history[-1]
    if last.role == "assistant" and not last.tool_calls:
        return n
    for i in range(n - 1, -1, -1):
        if holds_prompt(history[i]):
            return i
        if is_summary(history[i]):
            return i + 1  # the summary stands for finished turns
    return n


def unanswered(calls: list[ToolCall], text: str) -> list[ToolResultPart]:
    """Error results saying `text` for calls that got none."""
    return [ToolResultPart(c.id, text, True) for c in calls]


def closing(history: list[Message], notes: list[tuple[int, Note]]) -> tuple[Message, Note] | None:
    """What closes the history's last prompt when a crash cut it short: the
    message to append (results for the calls left unanswered, the reminder)
    and the `prompt_end` note after it. None when the prompt ended."""
    if not history or _ended(history, notes):
        return None
    last = history[-1]
    calls = last.tool_calls if last.role == "assistant" else []
    if not calls and finished_length(history, notes) == len(history):
        return None
    reminder = ReminderPart(INTERRUPTED_TURN, source=INTERRUPTED_SOURCE)
    message = Message("user", [*unanswered(calls, INTERRUPTED_RESULT), reminder])
    return message, PromptEnded("error", dict(INTERRUPTED_ERROR))


def answer_missing(previous: Message, incoming: Message) -> Message:
    """`incoming`, the message read after `previous`, with an interrupted
    result for each call of `previous` it does not answer; `incoming` itself
    when none is missing (or it is not a user message, which a transcript
    never holds after calls)."""
    if previous.role != "assistant" or incoming.role != "user":
        return incoming
    calls = previous.tool_calls
    if not calls:
        return incoming
    answered = {r.tool_call_id for r in incoming.tool_results}
    missing = [c for c in calls if c.id not in answered]
    if not missing:
        return incoming
    # Results first, as providers send them.
    parts = [*unanswered(missing, INTERRUPTED_RESULT), *incoming.parts]
    return Message("user", parts, interrupted=incoming.interrupted)
