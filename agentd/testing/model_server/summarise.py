"""The model server's stand-in for a summariser (requests of purpose `compact`).

A real model reads agentd's compaction request (`agentd/agent/summary.py`:
the conversation in `<turn>`, `<user>`, `<assistant>`, `<tool-call>` and
`<tool-result>` tags, and the `record_summary` tool) and writes a summary.
This stand-in answers the same request deterministically, by rules, so
that tests and the compaction benchmark run without a model:

- `constraints`: every sentence of a `<user>` block (split at `.`, `!`, `?`
  and line ends) that holds a word a constraint is made of (always, never,
  must, should, don't, prefer, remember, only, avoid, use, keep, make sure,
  goal, require, deadline, important, constraint), verbatim;
- `files`: the `path` arguments of the tool calls, with the tool's name;
- `errors`: the first line of each tool result marked `error="true"`;
- `progress`: how many turns it read and the last user request's start;
- `decisions`, `openTasks`, `revoked`: empty.

It proves that agentd keeps what its summariser returns across compactions
(carrying constraints forward, rendering them into the request); it does not
prove that a real model returns every constraint: that is what the
summariser's instructions are for.
"""

from __future__ import annotations

import json
import re
from typing import Any

_CUES = re.compile(
    r"\b(always|never|must|should|don'?t|do not|prefer|remember|only|avoid|use|keep|"
    r"make sure|goal|require[sd]?|deadline|important|constraint)\b",
    re.IGNORECASE,
)
_CONVERSATION = re.compile(r"<conversation>(.*)</conversation>", re.DOTALL)
_USER = re.compile(r"<user>(.*?)</user>", re.DOTALL)
_CALL = re.compile(r'<tool-call name="([^"]+)">(.*?)</tool-call>', re.DOTALL)
_ERROR = re.compile(r'<tool-result name="([^"]+)" error="true">(.*?)</tool-result>', re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def _unescape(text: str) -> str:
    return re.sub(r"<\\/", "</", text)


def standin_summary(request_text: str) -> dict[str, Any]:
    """The `record_summary` arguments for one compaction request's text."""
    match = _CONVERSATION.search(request_text)
    conversation = match.group(1) if match else request_text
    users = [_unescape(u) for u in _USER.findall(conversation)]
    constraints: list[str] = []
    for text in users:
        for sentence in _SENTENCE_END.split(text):
            sentence = sentence.strip()
            if sentence and _CUES.search(sentence) and sentence not in constraints:
                constraints.append(sentence)
    files: list[str] = []
    for name, args in _CALL.findall(conversation):
        try:
            path = json.loads(_unescape(args)).get("path")
        except (ValueError, AttributeError):
            path = None
        if isinstance(path, str) and f"{path} ({name})" not in files:
            files.append(f"{path} ({name})")
    errors = [
        f"{name}: {body.strip().splitlines()[0][:200]}"
        for name, body in _ERROR.findall(conversation)
        if body.strip()
    ]
    last = users[-1].strip().splitlines()[0][:100] if users else ""
    turns = conversation.count("<turn>")
    return {
        "constraints": constraints,
        "revoked": [],
        "decisions": [],
        "files": files,
        "openTasks": [],
        "errors": errors,
        "progress": f"{turns} turns summarised; the last request was: {last}",
    }
