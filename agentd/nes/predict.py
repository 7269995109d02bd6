"""One next-edit prediction: the prompt around the cursor, the model's rewrite, the edits.

The model sees an editable region (the cursor's line, `REGION_BEFORE` lines
above it and `REGION_AFTER` below, at most `MAX_REGION_CHARS`) between
markers, with the cursor marked, a little of the document around it
(`CONTEXT_LINES` each side, at most `MAX_CONTEXT_CHARS`) and the editor's
context (edit history, diagnostics, recent and open files, each bounded
here), and answers with the region rewritten between the same markers.
The answer is diffed against the region (`text.minimal_edits`); an
unchanged region or an answer without both markers gives no edits.

One request, no tools, no memory, nothing written: `purpose="nes"` goes to
the fast model when one is configured (`ProviderConfig.model_for`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from agentd.messages import clean_text, user_text
from agentd.nes import MAX_HISTORY, MAX_RECENT_FILES
from agentd.nes.documents import Outcome
from agentd.nes.text import Edit, minimal_edits
from agentd.providers.base import ModelProvider, ModelRequest, TextDelta

REGION_BEFORE = 5
REGION_AFTER = 5
MAX_REGION_CHARS = 6000
CONTEXT_LINES = 30
MAX_CONTEXT_CHARS = 6000
# The editor's context, each list cut to its last (most recent) entries
# (the counts `initialize` advertises are in `agentd.nes`).
MAX_DIAGNOSTICS = 20
MAX_OPEN_FILES = 20
MAX_ITEM_CHARS = 2000
MAX_OUTPUT_TOKENS = 1024

START = "<|editable_region_start|>"
END = "<|editable_region_end|>"
CURSOR = "<|user_cursor_is_here|>"

SYSTEM = f"""You predict the next edit a programmer will make.
You are shown a file's excerpt with an editable region between {START} and {END};
{CURSOR} marks the cursor. Using the recent edits and the context, rewrite the
editable region as it should read after the programmer's next edit. Answer with the
rewritten region only, starting with {START} and ending with {END}, and put
{CURSOR} where the cursor should be after the edit. If no edit is needed, repeat
the region unchanged. Keep everything outside the edit exactly as it is."""


@dataclass(frozen=True, slots=True)
class Region:
    """The editable region: text[start:end] of the document."""

    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class Prediction:
    edits: list[Edit]
    # Where the cursor goes after the edits (a str index in the edited text), if said.
    cursor: int | None


def region_around(text: str, starts: list[int], cursor: int) -> Region:
    """The editable region around `cursor`; `starts`: `line_starts(text)`."""
    line = max(0, _line_of(starts, cursor))
    first = max(0, line - REGION_BEFORE)
    last = min(len(starts) - 1, line + REGION_AFTER)
    start = starts[first]
    end = starts[last + 1] if last + 1 < len(starts) else len(text)
    # Too long (long lines): keep what lies nearest the cursor.
    if end - start > MAX_REGION_CHARS:
        half = MAX_REGION_CHARS // 2
        start = max(start, cursor - half)
        end = min(end, start + MAX_REGION_CHARS)
    start, end = _whole_chars(text, start), _whole_chars(text, end)
    return Region(start, end, text[start:end])


def _whole_chars(text: str, i: int) -> int:
    # Never split a CRLF: the edit would leave a lone CR behind.
    if 0 < i < len(text) and text[i - 1] == "\r" and text[i] == "\n":
        return i - 1
    return i


def _line_of(starts: list[int], index: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= index:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prompt_text(
    uri: str,
    language_id: str,
    text: str,
    cursor: int,
    region: Region,
    context: dict[str, Any],
    outcomes: list[Outcome],
    focused: tuple[str, str] | None,
) -> str:
    before = _tail_lines(text[: region.start], CONTEXT_LINES)[-MAX_CONTEXT_CHARS:]
    after = _head_lines(text[region.end :], CONTEXT_LINES)[:MAX_CONTEXT_CHARS]
    marked = region.text[: cursor - region.start] + CURSOR + region.text[cursor - region.start :]
    parts = [_context_text(context, outcomes, focused)]
    parts.append(f"File: {uri} ({language_id})\n```\n{before}{START}\n{marked}{END}\n{after}\n```")
    # The editor's context may hold lone surrogates (pydantic lets them
    # through); the request body must be valid UTF-8.
    return clean_text("\n\n".join(p for p in parts if p))


def _context_text(
    context: dict[str, Any], outcomes: list[Outcome], focused: tuple[str, str] | None
) -> str:
    out: list[str] = []
    recent = context.get("recentFiles") or []
    for item in recent[-MAX_RECENT_FILES:]:
        out.append(f"Recent file {item['uri']}:\n```\n{_clip(item['text'])}\n```")
    if focused is not None:
        out.append(f"Focused file {focused[0]} near the cursor:\n```\n{focused[1]}\n```")
    open_files = context.get("openFiles") or []
    if open_files:
        names = [_clip(f["uri"], 300) for f in open_files[-MAX_OPEN_FILES:]]
        out.append("Open files: " + ", ".join(names))
    history = context.get("editHistory") or []
    if history:
        edits = [f"{_clip(h['uri'], 300)}:\n{_clip(h['diff'])}" for h in history[-MAX_HISTORY:]]
        out.append("Recent edits, oldest first:\n" + "\n".join(edits))
    diagnostics = context.get("diagnostics") or []
    if diagnostics:
        lines = [
            f"{_clip(d['uri'], 300)}:{d['range']['start']['line'] + 1}: "
            f"{_clip(d['severity'], 20)}: {_clip(d['message'], 300)}"
            for d in diagnostics[-MAX_DIAGNOSTICS:]
        ]
        out.append("Diagnostics:\n" + "\n".join(lines))
    if outcomes:
        lines = [
            f"{'accepted' if o.accepted else 'rejected'} in {o.uri}: {o.summary}"
            + (f" ({o.reason})" if o.reason else "")
            for o in outcomes
        ]
        out.append("Your last suggestions, oldest first:\n" + "\n".join(lines))
    return "\n\n".join(out)


def parse_reply(reply: str, region: Region) -> Prediction | None:
    """The model's rewrite as edits of the document; None if it cannot be read."""
    first = reply.find(START)
    last = reply.rfind(END)
    if first < 0 or last < first:
        return None
    body = reply[first + len(START) : last]
    # The markers sit on their own lines in the prompt; the model repeats that.
    if body.startswith("\r\n"):
        body = body[2:]
    elif body.startswith("\n"):
        body = body[1:]
    cursor_at = body.find(CURSOR)
    new = body.replace(CURSOR, "")
    edits = minimal_edits(region.text, new, region.start)
    if not edits:
        return Prediction([], None)
    cursor = region.start + cursor_at if cursor_at >= 0 else None
    return Prediction(edits, cursor)


async def predict(provider: ModelProvider, system: str, prompt: str) -> str:
    """The model's whole answer (the stream closed however this ends)."""
    request = ModelRequest(
        model="",
        system=system,
        messages=[user_text(prompt)],
        purpose="nes",
        max_tokens=MAX_OUTPUT_TOKENS,
    )
    parts: list[str] = []
    async with contextlib.aclosing(provider.stream(request)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                parts.append(event.text)
    return "".join(parts)


def focused_excerpt(text: str, line: int) -> str:
    lines = text.splitlines()
    first = max(0, line - 10)
    return _clip("\n".join(lines[first : line + 10]))


def _tail_lines(text: str, n: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[-n:])


def _head_lines(text: str, n: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:n])


def _clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
