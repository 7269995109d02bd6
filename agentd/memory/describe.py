"""What a project's memory holds and where, in words for the chat (`/memory`).

The same facts `memory/list` and `agentd memory list` give, as markdown a
user reads in the chat panel: the folder and its notes, the team folder, the
instruction files always given to the model, and how to change them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentd.memory.project import ProjectMemory
from agentd.memory.store import DocInfo

# A chat message, not a file listing: past this many notes, a count.
MAX_LISTED = 40


def describe_memory(pm: ProjectMemory, instruction_files: Sequence[Path] = ()) -> str:
    docs = pm.list_docs()
    own = [d for d in docs if not d.team]
    team = [d for d in docs if d.team]
    lines = [f"**Memory of this project**: `{pm.directory}` ({_notes(len(own))})"]
    lines += _listed(own, pm.directory)
    if team:
        lines.append("")
        count = _notes(len(team))
        lines.append(f"**Team memory** (in the workspace): `{pm.team_directory}` ({count})")
        lines += _listed(team, pm.team_directory)
    lines.append("")
    if instruction_files:
        shown = ", ".join(f"`{p}`" for p in instruction_files)
        lines.append(f"**Instructions given to the model in every prompt**: {shown}")
    else:
        lines.append("**Instructions**: no `AGENTS.md` (or `AGENTD.md`) here; `/init` writes one.")
    lines.append("")
    lines.append(
        "Notes are plain markdown: edit or delete them in that folder and the next prompt "
        "sees the change. New notes are saved after each reply."
    )
    return "\n".join(lines)


def _notes(n: int) -> str:
    return "1 note" if n == 1 else f"{n} notes"


def _listed(infos: Sequence[DocInfo], folder: Path) -> list[str]:
    out: list[str] = []
    for info in infos[:MAX_LISTED]:
        where = info.path.relative_to(folder) if info.path.is_relative_to(folder) else info.path
        about = f": {info.description}" if info.description else ""
        out.append(f"- **{info.name}** ({info.type}){about} (`{where}`)")
    if len(infos) > MAX_LISTED:
        out.append(f"- ... and {len(infos) - MAX_LISTED} more")
    return out
