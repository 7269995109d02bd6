"""`agentd demo`: one whole agent session, end to end, through the real protocol.

With no API key configured it starts the bundled local model server and
scripts the model's side (a tool call, then an answer). With `AGENTD_API_KEY`
set it talks to the real model instead. Either way the daemon is spawned as
an editor spawns it (`agentd serve` over stdio) and driven over JSON-RPC, and
everything that crosses the wire is printed readably.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentd.errors import REQUEST_CANCELLED
from agentd.testing.model_server import ModelServer
from agentd.testing.stdio_client import RpcError, StdioClient

NOTES = """# Release notes

- Version 2.3 ships on Friday.
- Before tagging, run `make check` and update CHANGELOG.md.
- The deploy needs the on-call engineer's approval.
"""

MEMORY_TOPIC = """---
name: Release process
description: How this project ships a release
type: project
---

Releases are tagged from main after `make check` passes; the on-call engineer approves deploys.
"""

QUESTION = "What do the release notes in notes.md say we must do before tagging the release?"
SCRIPTED_ANSWER = (
    "Before tagging, the notes say to run `make check` and update CHANGELOG.md. "
    "The deploy itself then needs the on-call engineer's approval, which matches "
    "what I remember about this project's release process."
)


def _out(text: str = "") -> None:
    print(text, flush=True)


class Printer:
    """Prints `agent/update` notifications as a chat panel would show them."""

    def __init__(self) -> None:
        self.in_text = False

    def __call__(self, method: str, params: Any) -> None:
        if method != "agent/update":
            if method == "memory/changed":
                self._line(f"  [memory/changed] {len(params['paths'])} file(s)")
            return
        u = params["update"]
        kind = u["kind"]
        if kind == "message_chunk":
            if not self.in_text:
                sys.stdout.write("agentd: ")
                self.in_text = True
            sys.stdout.write(u["text"])
            sys.stdout.flush()
        elif kind == "thought_chunk":
            self._line(f"  (thinking) {u['text']}")
        elif kind == "tool_call":
            args = json.dumps(u["arguments"], ensure_ascii=False)
            self._line(f"  [tool] {u['name']} {args}  (run by the {u['executor']})")
        elif kind == "tool_call_update":
            content = (u.get("content") or "").strip().splitlines()
            first = f": {content[0][:70]}" if content else ""
            more = f" (+{len(content) - 1} lines)" if len(content) > 1 else ""
            self._line(f"  [tool] {u['status']}{first}{more}")
        elif kind == "memory":
            names = ", ".join(Path(d).name for d in u["docs"])
            self._line(
                f"  [memory] {len(u['docs'])} recalled at {u['point']} ({u['tier']} tier): {names}"
            )
        elif kind == "usage":
            self._line(f"  [usage] {u['inputTokens']} in / {u['outputTokens']} out")

    def _line(self, text: str) -> None:
        if self.in_text:
            sys.stdout.write("\n")
            self.in_text = False
        _out(text)

    def end(self) -> None:
        if self.in_text:
            sys.stdout.write("\n")
            self.in_text = False


async def _demo(workspace: Path | None) -> int:
    real = bool(os.environ.get("AGENTD_API_KEY"))
    tmp = Path(tempfile.mkdtemp(prefix="agentd-demo-"))
    try:
        ws = workspace or tmp / "workspace"
        ws.mkdir(parents=True, exist_ok=True)
        if workspace is None:
            (ws / "notes.md").write_text(NOTES)
        env = dict(os.environ)
        server: ModelServer | None = None
        if not real:
            server = ModelServer()
            await server.start()
            env.update(
                AGENTD_PROVIDER="openai",
                AGENTD_BASE_URL=server.openai_base_url,
                AGENTD_API_KEY="local-demo-key",
                AGENTD_MODEL="agentd-local",
                AGENTD_HOME=str(tmp / "home"),
            )
            # The model's side of the conversation, scripted.
            server.enqueue(
                {
                    "toolCalls": [{"name": "read_file", "arguments": {"path": "notes.md"}}],
                    "chunkDelay": 0.02,
                }
            )
            server.enqueue({"text": SCRIPTED_ANSWER, "chunkDelay": 0.03})
            server.enqueue({"chunks": [f"word{i} " for i in range(400)], "chunkDelay": 0.02})
            _out(
                "agentd demo: no AGENTD_API_KEY, using the bundled local model server at "
                + server.base_url
            )
        else:
            _out(
                "agentd demo: using "
                + (env.get("AGENTD_BASE_URL") or "the provider's default endpoint")
            )
        env.setdefault("AGENTD_HOME", str(tmp / "home"))
        memory_dir = await _memory_dir(env, ws)
        memory_dir.mkdir(parents=True, exist_ok=True)
        (memory_dir / "release-process.md").write_text(MEMORY_TOPIC)
        _out(f"workspace: {ws}")
        _out(f"memory:    {memory_dir}")
        printer = Printer()
        t0 = time.perf_counter()
        client = await StdioClient.spawn(env, printer)
        init = await client.initialize({"clientTools": []})
        caps = init["capabilities"]["experimental"]["agentd"]
        _out(
            f"-> initialize: agentd {caps['version']}, protocol {caps['protocolVersion']}"
            f" ({(time.perf_counter() - t0) * 1000:.0f} ms from spawn)"
        )
        sid = (await client.request("agent/newSession", {"workspaceRoot": str(ws)}))["sessionId"]
        _out(f"-> agent/newSession: {sid}")
        await client.request("memory/status", {"workspaceRoot": str(ws)})
        _out("")
        _out(f"you: {QUESTION}")
        result = await client.request("agent/prompt", {"sessionId": sid, "prompt": QUESTION})
        printer.end()
        _out(f"-> stopReason: {result['stopReason']}")
        if result["stopReason"] == "error":
            _out(f"   error: {result['error']['message']}")
        ok = result["stopReason"] == "end_turn"
        if server is not None:
            _out("")
            _out("you: Now write me a very long essay about it.   (Stop is pressed after a moment)")
            msg_id, fut = client.send_request(
                "agent/prompt", {"sessionId": sid, "prompt": "Write a long essay."}
            )
            await server.wait_for(lambda e: e["type"] == "first_chunk" and e["id"] >= 3)
            await asyncio.sleep(0.3)  # a person's reaction time, for the show
            t1 = time.perf_counter()
            client.notify("$/cancelRequest", {"id": msg_id})
            try:
                await fut
                _out("-> not cancelled?")
                ok = False
            except RpcError as exc:
                printer.end()
                _out(
                    f"-> cancelled: error {exc.code} "
                    f"after {(time.perf_counter() - t1) * 1000:.1f} ms"
                )
                ok = ok and exc.code == REQUEST_CANCELLED
            await server.wait_for(lambda e: e["type"] == "disconnect")
            _out("   the model server saw the stream closed")
        status = await client.request("memory/status", {"workspaceRoot": str(ws)})
        _out("")
        _out(
            f"memory/status: {status['docCount']} doc(s), watcher {status['watcher']}, "
            f"deliveries {status['deliveries']}"
        )
        code = await client.shutdown()
        _out(f"-> shutdown, exit: daemon exit code {code}")
        if server is not None:
            await server.stop()
        ok = ok and code == 0
        _out("demo finished: OK" if ok else "demo finished: FAILED")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _memory_dir(env: dict[str, str], ws: Path) -> Path:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentd",
        "memory",
        "dir",
        str(ws),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    return Path(out.decode().strip())


def run_demo(workspace: str | None) -> int:
    return asyncio.run(_demo(Path(workspace).resolve() if workspace else None))
