"""Worker of `extraction_bench.py --sizes`: one extraction run's time at a transcript size.

    PYTHONPATH=SRC python -P bench/_extraction_worker.py SIZE RUNS

In this process: the bundled model server, the real OpenAI provider over
loopback HTTP, a `MemoryManager` and an `ExtractionService` as the daemon
wires them, and a session transcript of SIZE messages written by
`TranscriptWriter` whose cursor (a version-1 file: message offset only, which
every agentd reads) says all of them are extracted. One untimed run first
(the project starts; a cursor without a byte offset is migrated), then RUNS
times: append a turn (2 messages), `schedule` it, and time until the run has
finished. Prints one JSON object. It imports only `agentd` (from
PYTHONPATH, so the benchmark can point it at another checkout) and the
standard library.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SID = "bench-session"
FILLER = "The build uses make; tests run with make test and the release is tagged. " * 3


async def measure(size: int, runs: int) -> dict[str, Any]:
    from agentd.config import load_settings
    from agentd.layout import memory_dir
    from agentd.memory.extraction import ExtractionService
    from agentd.memory.manager import MemoryManager
    from agentd.messages import Message, TextPart
    from agentd.providers import make_provider
    from agentd.tasks import Supervisor
    from agentd.testing.model_server import ModelServer
    from agentd.transcript import TranscriptWriter, sessions_dir

    with tempfile.TemporaryDirectory(prefix="agentd-extraction-size-") as tmp_s:
        tmp = Path(tmp_s)
        home, root = tmp / "home", tmp / "ws"
        root.mkdir()
        path = sessions_dir(root, home) / f"{SID}.jsonl"
        writer = TranscriptWriter(path, SID, root)
        for i in range(size):
            role = "user" if i % 2 == 0 else "assistant"
            writer.append(Message(role, [TextPart(f"message {i}: {FILLER}")]))  # type: ignore[arg-type]
        folder = memory_dir(root, home)
        folder.mkdir(parents=True)
        cursor = {"sessionId": SID, "processedOffset": size}
        (folder / ".cursors.json").write_text(json.dumps({"version": 1, "sessions": [cursor]}))
        async with ModelServer() as server:
            server.set_default_arguments("save_memories", {"operations": []})
            settings = load_settings(
                {"baseUrl": server.openai_base_url, "apiKey": "sk-bench", "model": "bench"},
                env={},
            )
            provider = make_provider(settings.provider_config())
            manager = MemoryManager(home, watch=False)
            supervisor = Supervisor()
            service = ExtractionService(
                manager,
                provider,
                supervisor,
                fast_model="bench",
                # As the daemon's core: a live session, no prompt running.
                transcripts=lambda sid: (path, writer.offset) if sid == SID else None,
                home=home,
            )

            async def one(k: int) -> float:
                writer.append(Message("user", [TextPart(f"new turn {k}: {FILLER}")]))
                writer.append(Message("assistant", [TextPart(f"answer {k}: {FILLER}")]))
                started = time.perf_counter()
                service.schedule(root, SID)
                task = service._project(root).flight.task  # type: ignore[union-attr]
                assert task is not None
                await asyncio.wait([task])
                return (time.perf_counter() - started) * 1000

            try:
                await one(0)
                times = [await one(k) for k in range(1, runs + 1)]
                status = service.status(root)
                requests = len(server.requests("extract"))
            finally:
                await service.drain(5)
                await supervisor.aclose()
                await manager.aclose()
                await provider.aclose()
                writer.close()
        rows = status["cursors"]
        return {
            "size": size,
            "runs": runs,
            "run_ms": times,
            "transcript_bytes": path.stat().st_size,
            "extract_requests": requests,
            "caught_up": bool(rows) and rows[0]["processedOffset"] == size + 2 * (runs + 1),
            "last_error": status.get("lastError"),
        }


def main() -> int:
    size, runs = int(sys.argv[1]), int(sys.argv[2])
    print(json.dumps(asyncio.run(measure(size, runs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
