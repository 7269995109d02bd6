"""Project memory: markdown topic files on disk, indexed, watched and recalled.

Where memory lives (AGENTD_HOME, project slug, team folder) is
`agentd.layout`'s, shared with the transcripts. Modules, from pure to stateful:

    frontmatter   the small YAML subset of a topic file's header
    store         reading topic files defensively (budgets, binary, symlinks)
    tokenize      text -> index terms (NFKC, words, CJK bigrams, stopwords)
    index         inverted index with BM25F scoring and prefix matching
    index_cache   a memory folder's parsed notes, kept across daemon starts
    index_snapshot  a project's whole index, saved and taken as is when no note changed
    index_delta   the notes edited since a saved index, appended beside it
    cache_sweep   old files of the index cache folder removed, never one in use
    recall        the local recall tier: min-evidence, caps, budgets, ages
    render        recalled memory as the model sees it (data, not orders)
    watcher       the watchfiles loop, with restart and backoff
    project       ProjectMemory: one project's index + watcher
    manager       MemoryManager: the daemon's owner of every ProjectMemory
    instructions  AGENTS.md / AGENTD.md for the system prompt
    describe      what the memory holds and where, for the chat (`/memory`)
    cli           ``agentd memory dir|list|recall|status``

Nothing here imports the wire layer (pygls / lsprotocol) or the turn engine
(`agentd.agent`, which drives memory through its hooks).
"""

from agentd.layout import agentd_home, memory_dir, project_slug, team_memory_dir
from agentd.memory.instructions import InstructionFiles
from agentd.memory.manager import MemoryManager
from agentd.memory.project import ProjectMemory
from agentd.memory.recall import RecalledDoc, RecallResult
from agentd.memory.render import render_recall
from agentd.memory.store import DocInfo

__all__ = [
    "DocInfo",
    "InstructionFiles",
    "MemoryManager",
    "ProjectMemory",
    "RecallResult",
    "RecalledDoc",
    "agentd_home",
    "memory_dir",
    "project_slug",
    "render_recall",
    "team_memory_dir",
]
