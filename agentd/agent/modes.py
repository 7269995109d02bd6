"""Session modes: what the model is offered and what runs without asking.

| mode        | tools offered to the model     | asks the user before           |
| ----------- | ------------------------------ | ------------------------------ |
| `ask`       | read-only ones only            | nothing (no edits, no commands) |
| `code`      | all                            | every edit and every command   |
| `auto-edit` | all                            | commands (edits apply at once) |

`ToolSpec.read_only` is the one predicate: the daemon's read tools, an
editor's `read_file` and the plan tool set it, and so does any other tool
source that knows a tool changes nothing (an MCP tool annotated
`readOnlyHint`). The turn engine offers the model `offered(mode, specs)` at
each step and refuses a call of anything else, so a mode switched while a
prompt runs counts from its next tool call. Plain data and functions: both
front ends import this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentd.messages import ToolSpec

ASK = "ask"
CODE = "code"
AUTO_EDIT = "auto-edit"
DEFAULT_MODE = CODE

# Client tools whose effect is an edit of a file the user sees as a diff; the
# auto-edit mode runs them without asking. Anything else that is not
# read-only (a command, an MCP tool with side effects) still asks.
EDIT_TOOLS = frozenset({"edit_file", "write_file"})


@dataclass(frozen=True, slots=True)
class ModeInfo:
    id: str
    name: str
    description: str


MODES: dict[str, ModeInfo] = {
    m.id: m
    for m in (
        ModeInfo(
            ASK,
            "Ask",
            "Read-only: the agent reads and searches the workspace and answers; "
            "it cannot edit files or run commands.",
        ),
        ModeInfo(
            CODE, "Code", "Reads, edits and runs commands; asks before each edit and command."
        ),
        ModeInfo(
            AUTO_EDIT,
            "Auto-edit",
            "Edits files without asking; still asks before each command.",
        ),
    )
}

# Said to the model in the read-only mode, so that it answers instead of
# trying tools it does not have.
ASK_MODE_NOTE = (
    "The session is in Ask mode (read-only): you can read and search the workspace, but "
    "you cannot edit files or run commands. Answer from what you read; show proposed "
    "changes as text for the user to apply."
)


def offers(mode: str, spec: ToolSpec) -> bool:
    """Whether a session in `mode` offers the model this tool."""
    return mode != ASK or spec.read_only


def offered(mode: str, specs: Iterable[ToolSpec]) -> list[ToolSpec]:
    return [s for s in specs if offers(mode, s)]


def asks_before(mode: str, tool_name: str) -> bool:
    """Whether a tool that changes something needs the user's approval first."""
    return not (mode == AUTO_EDIT and tool_name in EDIT_TOOLS)


def refusal(mode: str, tool_name: str) -> str:
    """What the model is told when it calls a tool its session's mode does not offer."""
    name = MODES[mode].name if mode in MODES else mode
    return (
        f"{tool_name} is not available in {name} mode (read-only); the call was not made. "
        "Answer with what you can read, or ask the user to switch modes."
    )
