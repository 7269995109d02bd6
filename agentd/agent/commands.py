"""Slash commands: a prompt that starts with `/name` runs the command instead.

Both front ends hand every prompt to `AgentCore.prompt`, which looks here
first, so `/compact` typed in Zed and sent over LSP by the VS Code panel run
the same code. ACP clients learn the commands from `available_commands_update`,
LSP clients from `agent/listCommands`; both are built from `COMMANDS`.

| command    | what it does                                                        |
| ---------- | ------------------------------------------------------------------- |
| `/compact` | compacts the conversation (the core's compaction, as `agent/compact`) |
| `/init`    | a prompt: the model reads the project and writes `AGENTS.md`        |
| `/memory`  | shows what the project's memory holds and where (no model request)  |
| `/reset`   | clears the conversation, as `agent/resetSession` does               |

A prompt whose first word is `/` and not a command name (a path, say) is an
ordinary prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentd.messages import ImagePart, TextPart

COMPACT = "compact"
INIT = "init"
MEMORY = "memory"
RESET = "reset"


@dataclass(frozen=True, slots=True)
class CommandInfo:
    name: str
    description: str
    # What to type after the name, for clients that show a hint; None: no input.
    hint: str | None = None


COMMANDS: dict[str, CommandInfo] = {
    c.name: c
    for c in (
        CommandInfo(
            COMPACT,
            "Summarise the conversation so far to free the model's context",
            "what to keep (optional)",
        ),
        CommandInfo(
            INIT,
            "Write an AGENTS.md for this project from what the agent reads in it",
            "what to stress (optional)",
        ),
        CommandInfo(MEMORY, "Show what the project's memory holds and where"),
        CommandInfo(RESET, "Clear the conversation and start over"),
    )
}

INIT_PROMPT = """\
Write an AGENTS.md file at the root of this workspace: the instructions a \
coding agent (you, in later sessions) should follow when working on this \
project. Find out before you write: read the README, the build and package \
files (pyproject.toml, package.json, Makefile, Cargo.toml, ...), the CI \
configuration and a few representative source and test files.

Cover, briefly and only with what you found in the files: what the project \
is; how to install, build, run the tests and the linters (exact commands); \
how the code is laid out; the conventions the code follows (style, naming, \
error handling, tests). Keep it under about 60 lines of markdown; no \
generic advice. If an AGENTS.md already exists, improve it instead of \
starting over, keeping what is still true. Create the file with the \
write_file tool; if you cannot write files, answer with its full content."""


_COMMAND = re.compile(r"\s*/(\S+)(.*)", re.S)


@dataclass(frozen=True, slots=True)
class CommandCall:
    name: str
    # What followed the name, stripped ("" when nothing did).
    args: str


def parse_command(prompt: str | list[TextPart | ImagePart]) -> CommandCall | None:
    """The command a prompt starts with, or None for an ordinary prompt."""
    if isinstance(prompt, str):
        text = prompt
    else:
        first = prompt[0] if prompt else None
        text = first.text if isinstance(first, TextPart) else ""
    # Most prompts start with neither a slash nor a space: no regex for them.
    if not text.startswith("/") and not text[:1].isspace():
        return None
    match = _COMMAND.match(text)
    if match is None or match[1] not in COMMANDS:
        return None
    return CommandCall(match[1], match[2].strip())


def init_prompt(args: str) -> str:
    return f"{INIT_PROMPT}\n\nThe user adds: {args}" if args else INIT_PROMPT
