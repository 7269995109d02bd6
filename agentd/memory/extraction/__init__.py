"""Memory extraction after each turn.

Modules, from pure to stateful:

    secrets     redaction of API keys, tokens, private keys, `.env` secrets
    writer      the confined, atomic, conflict-checked write path (+ crash seams)
    index_file  MEMORY.md rendered within its budget
    cursor      per-session `processedOffset`s in `<memory dir>/.cursors.json`
    lock        `<memory dir>/.extract.lock`: one extraction per folder across daemons
    extractor   slice -> text -> `save_memories` side query -> validated operations
    apply       operations -> files (hash-checked), index kept consistent
    scheduler   single flight per project with one coalesced trailing run
    service     ExtractionService, the seam `agentd.app` uses
"""

from agentd.memory.extraction.service import ExtractionService, TranscriptLookup

__all__ = ["ExtractionService", "TranscriptLookup"]
