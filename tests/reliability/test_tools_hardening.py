"""Issue 14, items 1, 3, 7, 8 and 10: the daemon's tools against a hostile
workspace and a sloppy model.

1. A folder swapped back and forth with a symlink to a folder outside while
   tools run: nothing outside is ever listed, found or read.
3. A catastrophic regex: the daemon keeps answering (linear-time engines).
7. A character device in the workspace: never read, memory stays flat.
8. A FIFO read by the tools: nothing blocks, and exit never waits on a worker.
10. Bad tool arguments and failing tools: failed results the model reads;
    every tool call id of every request is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import math
import os
import stat
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentd.agent.tools import DaemonTools, ToolConfig
from agentd.agent.tools.ripgrep import find_rg
from agentd.errors import ToolError
from agentd.testing.daemon import daemon_env, rss_mib
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

ENGINES = ["python", "ripgrep"] if find_rg() is not None else ["python"]


# --- helpers -----------------------------------------------------------------------


def every_tool_call_answered(requests: list[dict[str, Any]]) -> list[str]:
    """Problems with the OpenAI-style histories sent: each assistant `tool_calls`
    id must be answered by a `tool` message before the next assistant turn."""
    problems = []
    for n, req in enumerate(requests):
        messages = req["body"]["messages"]
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            wanted = {c["id"] for c in m["tool_calls"]}
            answered = set()
            for later in messages[i + 1 :]:
                if later["role"] != "tool":
                    break
                answered.add(later["tool_call_id"])
            if wanted - answered:
                problems.append(f"request {n}: unanswered {sorted(wanted - answered)}")
    return problems


async def spawn(model: ModelServer, tmp: Path, engine: str) -> RawDaemon:
    d = await RawDaemon.spawn(daemon_env(model.openai_base_url, tmp, AGENTD_MEMORY="off"))
    await d.initialize({"tools": {"searchEngine": engine}})
    return d


async def new_session(d: RawDaemon, root: Path) -> str:
    d.request("s", "agent/newSession", {"workspaceRoot": str(root)})
    return str((await d.response("s"))["result"]["sessionId"])


async def replies(d: RawDaemon, *ids: str, timeout: float = 20.0) -> dict[str, dict[str, Any]]:
    """The replies to `ids`, in whatever order they come (notifications kept aside)."""
    got: dict[str, dict[str, Any]] = {}
    while set(ids) - set(got):
        msg = await d.read_message(timeout)
        if "method" in msg and "id" not in msg:
            d.notifications.append(msg)
        elif msg.get("id") in ids and ("result" in msg or "error" in msg):
            got[msg["id"]] = msg
    return got


def tool_updates(d: RawDaemon) -> dict[str, dict[str, Any]]:
    """toolCallId -> the last tool_call_update of a finished call."""
    out: dict[str, dict[str, Any]] = {}
    for n in d.notifications:
        u = n.get("params", {}).get("update", {})
        if u.get("kind") == "tool_call_update" and u["status"] != "running":
            out[u["toolCallId"]] = u
    return out


@contextlib.asynccontextmanager
async def rss_watchdog(pid: int, limit_mib: float) -> AsyncIterator[list[float]]:
    """Samples the daemon's RSS while the body runs; kills it past the limit so
    that a runaway read cannot take the machine down with the test."""
    peak = [0.0]
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            rss = rss_mib(pid)
            if math.isnan(rss):
                return
            peak[0] = max(peak[0], rss)
            if peak[0] > limit_mib:
                os.kill(pid, 9)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)

    task = asyncio.create_task(watch())
    try:
        yield peak
    finally:
        stop.set()
        await task


# --- 1. check-then-use ---------------------------------------------------------------


def _exchange() -> Any:
    """renameat2(RENAME_EXCHANGE): swaps two names atomically (Linux)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return None
    at_fdcwd, exchange = -100, 2

    def swap(a: Path, b: Path) -> None:
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), exchange) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return swap


@pytest.mark.parametrize("engine", ENGINES)
def test_a_folder_swapped_with_a_symlink_never_leaks(tmp_path: Path, engine: str) -> None:
    swap = _exchange()
    if swap is None:
        pytest.skip("renameat2 is not available")
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "file.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file.txt").write_text("SECRET outside\n")
    (outside / "secret_only_outside.txt").write_text("SECRET outside\n")
    (root / "d_swap").symlink_to(outside)
    stop = threading.Event()
    swaps = [0]

    def swapper() -> None:
        while not stop.is_set():
            swap(root / "d", root / "d_swap")
            swaps[0] += 1

    tools = DaemonTools(root, ToolConfig(search_engine=engine))
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_dir", {"path": "d"}),
        ("list_dir", {"depth": 3}),
        ("search", {"query": "secret", "hidden": True}),
        ("search", {"query": "secret", "path": "d"}),
        ("glob", {"pattern": "**/*", "hidden": True}),
        ("read_file", {"path": "d/file.txt"}),
    ]
    leaks: list[str] = []
    answers = 0
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        for _ in range(150):
            for name, args in calls:
                try:
                    out = tools.call(name, **args)
                except ToolError:
                    continue  # refused: a swap was seen and not followed
                answers += 1
                if "SECRET" in out or "secret_only_outside" in out:
                    leaks.append(f"{name} {args}: {out[:200]}")
    finally:
        stop.set()
        thread.join()
    assert swaps[0] > 100 and answers > 100
    assert leaks == []


# --- 3. a regex that would backtrack forever ---------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_catastrophic_regex_never_freezes_the_daemon(
    model_server: ModelServer, tmp_path: Path, workspace: Path, engine: str
) -> None:
    (workspace / "a.txt").write_text("a" * 40 + "!\n")
    model_server.enqueue(
        {
            "toolCalls": [
                {"id": "re1", "name": "search", "arguments": {"query": "(a+)+$", "regex": True}}
            ]
        }
    )
    d = await spawn(model_server, tmp_path, engine)
    try:
        sid = await new_session(d, workspace)
        d.request("p", "agent/prompt", {"sessionId": sid, "prompt": "find it"})
        # Other requests are answered while the search runs and after it.
        d.request("m", "memory/list", {"workspaceRoot": str(workspace)})
        d.request("l", "agent/listSessions", {"workspaceRoot": str(workspace)})
        got = await replies(d, "p", "m", "l")
        assert "result" in got["m"] and "result" in got["l"]
        assert got["p"]["result"]["stopReason"] == "end_turn"
        assert tool_updates(d)["re1"]["content"].startswith("No matches.")
        d.request("x", "shutdown")
        assert (await d.response("x"))["result"] is None
        d.send({"jsonrpc": "2.0", "method": "exit"})
        assert await d.wait_exit() == 0
    finally:
        await d.close()


# --- 7. a character device ------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_character_device_is_never_read(
    model_server: ModelServer, tmp_path: Path, workspace: Path, engine: str
) -> None:
    try:
        os.mknod(workspace / "zero.txt", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    calls = [
        {"id": "t1", "name": "search", "arguments": {"query": "x"}},
        {"id": "t2", "name": "read_file", "arguments": {"path": "zero.txt"}},
        {"id": "t3", "name": "search", "arguments": {"query": "x", "path": "zero.txt"}},
        {"id": "t4", "name": "glob", "arguments": {"pattern": "**"}},
        {"id": "t5", "name": "list_dir", "arguments": {}},
    ]
    model_server.enqueue({"toolCalls": calls})
    d = await spawn(model_server, tmp_path, engine)
    try:
        sid = await new_session(d, workspace)
        async with rss_watchdog(d.proc.pid, 512) as peak:
            d.request("p", "agent/prompt", {"sessionId": sid, "prompt": "look"})
            reply = await d.response("p", timeout=60)
        assert reply["result"]["stopReason"] == "end_turn"
        assert peak[0] < 512
        print(f"peak RSS {peak[0]:.0f} MiB")  # the figure of docs/reliability.md
        done = tool_updates(d)
        assert done["t1"]["content"].startswith("No matches.")
        assert done["t2"]["status"] == "failed" and "character device" in done["t2"]["content"]
        assert done["t3"]["status"] == "failed" and "character device" in done["t3"]["content"]
        assert "zero.txt" not in done["t4"]["content"]
        assert "zero.txt  [character device]" in done["t5"]["content"]
        d.request("x", "shutdown")
        await d.response("x")
        d.send({"jsonrpc": "2.0", "method": "exit"})
        assert await d.wait_exit() == 0
    finally:
        await d.close()


# --- 8. a FIFO ----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_fifo_never_blocks_a_tool_nor_the_exit(
    model_server: ModelServer, tmp_path: Path, workspace: Path, engine: str
) -> None:
    os.mkfifo(workspace / "pipe.txt")
    calls = [
        {"id": "f1", "name": "read_file", "arguments": {"path": "pipe.txt"}},
        {"id": "f2", "name": "search", "arguments": {"query": "x", "path": "pipe.txt"}},
        {"id": "f3", "name": "search", "arguments": {"query": "answer"}},
        {"id": "f4", "name": "glob", "arguments": {"pattern": "*.txt"}},
    ]
    model_server.enqueue({"toolCalls": calls})
    d = await spawn(model_server, tmp_path, engine)
    try:
        sid = await new_session(d, workspace)
        d.request("p", "agent/prompt", {"sessionId": sid, "prompt": "look"})
        reply = await d.response("p")
        assert reply["result"]["stopReason"] == "end_turn"
        done = tool_updates(d)
        assert "FIFO" in done["f1"]["content"] and "FIFO" in done["f2"]["content"]
        assert done["f3"]["content"].startswith("README.md\n2:")
        assert done["f4"]["content"].startswith("No files match")
        # The same read again, cancelled while it would have been stuck, then exit.
        model_server.enqueue({"toolCalls": [calls[0]]})
        d.request("q", "agent/prompt", {"sessionId": sid, "prompt": "again"})
        d.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "q"}})
        again = await d.response("q")
        assert again.get("error", {}).get("code") == -32800 or "result" in again
        d.request("x", "shutdown")
        await d.response("x")
        d.send({"jsonrpc": "2.0", "method": "exit"})
        assert await d.wait_exit() == 0
    finally:
        await d.close()


def test_exit_never_waits_on_a_stuck_worker(tmp_path: Path) -> None:
    """A worker blocked for good (here: a blocking open of a FIFO nobody writes)
    is abandoned by a cancel, and the interpreter still exits at once."""
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    script = f"""
import asyncio
from agentd.agent.tools.worker import run_in_worker

def stuck(token):
    with open({str(fifo)!r}, "rb") as f:  # blocks: no writer ever comes
        return f.read()

async def main():
    task = asyncio.ensure_future(
        run_in_worker(stuck, name="stuck", soft_timeout=None, hard_timeout=3600))
    await asyncio.sleep(0.1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("cancelled", flush=True)

asyncio.run(main())
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.stdout.strip() == "cancelled"
    assert out.returncode == 0


# --- 10. bad arguments, failing tools ------------------------------------------------


@pytest.mark.e2e
async def test_bad_tool_arguments_are_failed_results_and_every_call_is_answered(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    calls = [
        {"id": "b1", "name": "read_file", "arguments": {"path": "README.md", "offset": "abc"}},
        {"id": "b2", "name": "list_dir", "arguments": {"depth": "deep"}},
        {"id": "b3", "name": "search", "arguments": {"regex": True}},
        {"id": "b4", "name": "glob", "arguments": {"pattern": ["*.py"]}},
        {"id": "b5", "name": "rm_rf", "arguments": {"path": "/"}},
        {"id": "b6", "name": "search", "arguments": {"query": "(", "regex": True}},
        {"id": "b7", "name": "read_file", "arguments": {"path": "README.md", "limit": 1}},
    ]
    model_server.enqueue({"toolCalls": calls})
    d = await spawn(model_server, tmp_path, "auto")
    try:
        sid = await new_session(d, workspace)
        d.request("p", "agent/prompt", {"sessionId": sid, "prompt": "go"})
        reply = await d.response("p")
        assert reply["result"]["stopReason"] == "end_turn"
        done = tool_updates(d)
        assert set(done) == {c["id"] for c in calls}
        assert "'offset' must be an integer, got 'abc'" in done["b1"]["content"]
        assert "'depth' must be an integer" in done["b2"]["content"]
        assert "'query' is required" in done["b3"]["content"]
        assert "'pattern' must be a string" in done["b4"]["content"]
        assert "Unknown tool 'rm_rf'" in done["b5"]["content"]
        assert "invalid regex" in done["b6"]["content"]
        assert all(done[f"b{i}"]["status"] == "failed" for i in range(1, 7))
        assert done["b7"] == {
            "kind": "tool_call_update",
            "toolCallId": "b7",
            "status": "completed",
            "content": "1  # Demo",
            "locations": [{"path": str(workspace / "README.md"), "line": 1}],
        }
        # The session goes on, and every request's history is valid for the API.
        d.request("p2", "agent/prompt", {"sessionId": sid, "prompt": "and now?"})
        assert (await d.response("p2"))["result"]["stopReason"] == "end_turn"
        requests = model_server.requests("main")
        assert len(requests) == 3
        assert every_tool_call_answered(requests) == []
        tool_ids = [
            m["tool_call_id"] for m in requests[-1]["body"]["messages"] if m["role"] == "tool"
        ]
        assert tool_ids == [c["id"] for c in calls]
    finally:
        await d.close()


async def test_a_failing_tool_becomes_a_failed_result_not_a_broken_history(
    tmp_path: Path,
) -> None:
    """Any unexpected exception, in a daemon tool or a client tool runner: the
    call is answered with a failed result and the prompt goes on."""
    from agentd.agent import tools as tools_pkg
    from agentd.agent.hooks import NoMemory
    from agentd.agent.session import Session
    from agentd.agent.turn import TurnContext, TurnLimits, run_prompt
    from agentd.messages import ToolCall, ToolCallPart, ToolResultPart, ToolSpec
    from agentd.providers.base import StreamEnd, TextDelta, ToolCallReady, Usage

    class Provider:
        def __init__(self) -> None:
            self.requests: list[Any] = []

        async def stream(self, request: Any) -> AsyncIterator[Any]:
            self.requests.append([list(m.parts) for m in request.messages])
            if len(self.requests) == 1:
                for call in (
                    ToolCall("d1", "read_file", {"path": "a.txt"}),
                    ToolCall("c1", "edit_file", {"path": "a.txt"}),
                ):
                    yield ToolCallReady(call)
                yield StreamEnd("tool_use", Usage(1, 1))
            else:
                yield TextDelta("done")
                yield StreamEnd("end_turn", Usage(1, 1))

    class BrokenClientTools:
        specs = [ToolSpec("edit_file", "", {})]

        async def run(self, session: Session, call: ToolCall) -> ToolResultPart:
            raise RuntimeError("the editor connection broke")

    def broken_tool(*args: Any) -> Any:
        raise KeyError("a bug")

    (tmp_path / "a.txt").write_text("x\n")
    original = tools_pkg._RUN["read_file"]
    tools_pkg._RUN["read_file"] = broken_tool
    try:
        provider = Provider()
        ctx = TurnContext(
            provider=provider,  # type: ignore[arg-type]
            model="m",
            limits=TurnLimits(10, 10, 0, 10_000),
            memory=NoMemory(),
        )
        session = Session("s", tmp_path, BrokenClientTools())
        outcome = await run_prompt(ctx, session, "go", lambda u: None)
    finally:
        tools_pkg._RUN["read_file"] = original
    assert outcome.stop_reason == "end_turn"
    results = {
        p.tool_call_id: p for m in session.history for p in m.parts if isinstance(p, ToolResultPart)
    }
    calls = [p.call.id for m in session.history for p in m.parts if isinstance(p, ToolCallPart)]
    assert sorted(results) == sorted(calls) == ["c1", "d1"]
    assert results["d1"].is_error and "failed unexpectedly (KeyError)" in results["d1"].content
    assert results["c1"].is_error and "RuntimeError" in results["c1"].content
    assert json.dumps([str(p) for p in provider.requests[1][-1]]).count("ToolResultPart") == 2
