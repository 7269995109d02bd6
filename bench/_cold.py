"""Cold and warm prompt -> first request bytes, agentd beside bare baselines
(issue 20), shared by `core_bench.py` (LSP) and `acp_bench.py` (ACP).

One run spawns a fresh process, answers its handshake (LSP `initialize` +
`initialized`; ACP `initialize`), waits for agentd's warm-up to end (a session
listing, which needs it; a prompt sent before that waits for the rest of the
warm-up, measured by `acp_bench.py`), asks for a session and writes the
prompt the moment the session's reply has been read (the cold prompt), then asks
for a second session and prompts again once the daemon is idle (the warm
prompt: `WARM_SETTLE` after that session's reply, so the first prompt's
after-reply work, such as memory extraction starting, is over), `WARM_PROMPTS`
times, each in a session of its own; then prompts the last of those sessions
again, `STEADY_PROMPTS` times (the steady state: a session's second and later
prompts), each once the previous turn's after-reply work has settled, as the
daemon reports it (`memory/status`: extraction idle with the session's cursor at
its transcript's end, no recall handle left open; the session listed), asked
for rather than slept on, and then `STEADY_PAUSE` (the user's pause, equal for
all targets). The bare baselines have no such work: they get one round trip
(an unknown method's error reply) and the same pause. The figure is prompt written ->
`arrivedTs` of that prompt's main request at the bundled model server: when
the request's first bytes reached the server's socket (before the body was
read or parsed), on the same clock (`time.time()`). The prompt's bytes are
encoded before the clock is read, so the figure starts at their write; the
benchmark's loop then only waits (nothing else reads or parses) until the
model server's read wakes up.

Targets, alternated within a run so load drift hits all alike:
- `agentd`: this tree's daemon (`python -P -m agentd serve` / `python -P -m
  agentd.acp`, `PYTHONPATH` naming the tree), default settings (memory on, an
  empty project memory);
- `baseline`: another checkout's daemon (`--baseline-src DIR`), launched the
  same way (`PYTHONPATH=DIR`);
- `bare`: `bare_pygls_server.py --model` (LSP) or `bare_acp_agent.py` (ACP), which
  send agentd's own first request (`_bare_model.py`; the body is recorded from an
  unmeasured agentd run first) with httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, checkout_env, summary

from agentd.testing.daemon import daemon_command, daemon_env
from agentd.testing.framing import frame, initialize_params, line
from agentd.testing.framing import request as rpc_request
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

WARM_SETTLE = 0.5
# Warm prompts per process: the steady state, so several samples per spawn.
WARM_PROMPTS = 3
# Steady prompts per process: the same session prompted again after its
# previous turn's background work has settled.
STEADY_PROMPTS = 5
STEADY_POLLS = 1000
# The user's pause before the next prompt, the same for every target once its
# previous turn has settled: not a synchronisation (that is asked for), but
# equal idle time, since a request after an idle spell costs more (cold caches:
# httpx's send alone goes from ~0.5 to ~0.8 ms after 30 ms idle here) and the
# targets' settling takes different times.
STEADY_PAUSE = 0.1


def command(target: str, mode: str, body: Path | None, base_url: str) -> list[str]:
    if target == "bare":
        script = "bare_acp_agent.py" if mode == "acp" else "bare_pygls_server.py"
        assert body is not None
        return [sys.executable, str(BENCH_DIR / script), "--model", base_url, "--body", str(body)]
    cmd = daemon_command(acp=mode == "acp")
    # Both checkouts launched alike (`_common.checkout_launch`); PYTHONPATH
    # names the checkout (`cold_run`).
    return [sys.executable, "-P", *cmd[1:]]


async def _reply(daemon: RawDaemon, msg_id: int) -> dict[str, Any]:
    message = await daemon.response(msg_id, timeout=60)
    if "error" in message:
        raise RuntimeError(f"{daemon.framing}: {message['error']}")
    return dict(message["result"])


async def _prompt(
    daemon: RawDaemon, model: ModelServer, mode: str, msg_id: int, ws: Path, settle: float = 0.0
) -> dict[str, Any]:
    """A new session, then a prompt written at once (or `settle` s later); its main
    request's log entry and the time the prompt was written."""
    if mode == "acp":
        daemon.request(msg_id, "session/new", {"cwd": str(ws), "mcpServers": []})
    else:
        daemon.request(msg_id, "agent/newSession", {"workspaceRoot": str(ws)})
    sid = (await _reply(daemon, msg_id))["sessionId"]
    if settle:
        await asyncio.sleep(settle)
    return {**await _send_prompt(daemon, model, mode, msg_id + 1, sid), "sid": sid}


async def _send_prompt(
    daemon: RawDaemon, model: ModelServer, mode: str, msg_id: int, sid: str
) -> dict[str, Any]:
    """Prompt session `sid`; its main request's log entry and when it was written."""
    last = max((e["id"] for e in model.requests()), default=-1)
    if mode == "acp":
        prompt = [{"type": "text", "text": "hello"}]
        data = line(rpc_request(msg_id, "session/prompt", {"sessionId": sid, "prompt": prompt}))
    else:
        data = frame(rpc_request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": "hello"}))
    sent_at = time.time()  # the model server's log uses wall-clock time
    daemon.write_raw(data)
    request = await model.wait_for(
        lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > last, timeout=60
    )
    await _reply(daemon, msg_id)
    return {"sent_at": sent_at, "request": request}


def _settled(status: dict[str, Any], sid: str) -> bool:
    """`memory/status` says the session's last turn left nothing running: its
    extraction has read the transcript to the end and no recall handle is open."""
    extraction = status["extraction"]
    if extraction["state"] != "idle" or extraction["trailingPending"]:
        return False
    rows = [c for c in extraction["cursors"] if c["sessionId"] == sid]
    if not rows or rows[0]["transcriptEnd"] is None:
        return False
    if rows[0]["processedOffset"] < rows[0]["transcriptEnd"]:
        return False
    return not any(h["sessionId"] == sid and not h["settled"] for h in status["prefetch"])


async def _settle(daemon: RawDaemon, target: str, mode: str, ws: Path, sid: str) -> None:
    """Until the previous turn's after-reply work is over (agentd: memory
    extraction, recall handles, the session listed with its meta file), by
    asking the daemon; the bare baselines have none, so they get one round trip
    (an unknown method) to keep the prompt's position after a reply alike."""
    if target == "bare":
        daemon.request(80, "bench/idle", {})
        await daemon.response(80, timeout=60)
        await asyncio.sleep(STEADY_PAUSE)
        return
    status_method = "_agentd/memory/status" if mode == "acp" else "memory/status"
    root = {"cwd": str(ws)} if mode == "acp" else {"workspaceRoot": str(ws)}
    list_method = "session/list" if mode == "acp" else "agent/listSessions"
    for _ in range(STEADY_POLLS):
        daemon.request(81, list_method, root)
        listed = await _reply(daemon, 81)
        daemon.request(82, status_method, root)
        status = await _reply(daemon, 82)
        if _settled(status, sid) and any(s["sessionId"] == sid for s in listed["sessions"]):
            await asyncio.sleep(STEADY_PAUSE)
            return
        # A pause between polls, not a synchronisation: the condition is asked for.
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{target} {mode}: session {sid} never settled: {status}")


async def cold_run(
    target: str,
    mode: str,
    model: ModelServer,
    home: Path,
    ws: Path,
    body: Path | None = None,
    baseline: Path | None = None,
) -> dict[str, Any]:
    """One fresh process: its cold and its warm prompt -> first request bytes (ms)."""
    env = daemon_env(model.openai_base_url, home, AGENTD_LOG_LEVEL="warning")
    if target == "baseline":
        assert baseline is not None
    if target != "bare":
        env = checkout_env(env, baseline if target == "baseline" else None)
    proc = await asyncio.create_subprocess_exec(
        *command(target, mode, body, model.openai_base_url),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    daemon = RawDaemon(proc, "acp" if mode == "acp" else "lsp")
    try:
        if mode == "acp":
            daemon.request(0, "initialize", {"protocolVersion": 1})
        else:
            daemon.request(0, "initialize", initialize_params())
        await _reply(daemon, 0)
        if mode == "lsp":
            daemon.notify("initialized", {})
        if target != "bare":
            # The warm-up over first: a new session no longer waits for it, and a
            # prompt written before its end waits for the rest (acp_bench's "prompt
            # right after the session" row); the bare baselines have no warm-up.
            # Listing sessions needs the App and changes nothing.
            if mode == "acp":
                daemon.request(90, "session/list", {"cwd": str(ws)})
            else:
                daemon.request(90, "agent/listSessions", {"workspaceRoot": str(ws)})
            await _reply(daemon, 90)
        cold = await _prompt(daemon, model, mode, 1, ws)
        warm = [
            await _prompt(daemon, model, mode, 3 + 2 * k, ws, WARM_SETTLE)
            for k in range(WARM_PROMPTS)
        ]
        steady = []
        sid = warm[-1]["sid"]
        for k in range(STEADY_PROMPTS):
            await _settle(daemon, target, mode, ws, sid)
            steady.append(await _send_prompt(daemon, model, mode, 100 + k, sid))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            await daemon.wait_exit(10)
        if proc.returncode is None:
            proc.kill()
        await daemon.close()
    return {
        "cold_ms": (cold["request"]["arrivedTs"] - cold["sent_at"]) * 1000,
        "warm_ms": [(w["request"]["arrivedTs"] - w["sent_at"]) * 1000 for w in warm],
        "steady_ms": [(w["request"]["arrivedTs"] - w["sent_at"]) * 1000 for w in steady],
        "body": cold["request"]["body"],
    }


async def bench_cold(
    mode: str, model: ModelServer, tmp: Path, runs: int, baseline: Path | None
) -> dict[str, Any]:
    """`runs` fresh processes of each target, alternating; medians, p90, min."""
    ws = tmp / f"cold-{mode}-ws"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "README.md").write_text("# bench\n")
    targets = ["agentd", "bare"] + (["baseline"] if baseline is not None else [])
    # Unmeasured: cold disk caches; agentd's first request becomes the bare body.
    first = await cold_run("agentd", mode, model, tmp / f"cold-{mode}-calibrate", ws)
    body = tmp / f"cold-{mode}-body.json"
    body.write_text(json.dumps(first["body"], ensure_ascii=False), encoding="utf-8")
    for target in targets[1:]:
        await cold_run(target, mode, model, tmp / f"cold-{mode}-warm-{target}", ws, body, baseline)
    samples: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
    for i in range(runs):
        for target in targets if i % 2 == 0 else targets[::-1]:
            home = tmp / f"cold-{mode}-{target}-{i}"
            samples[target].append(await cold_run(target, mode, model, home, ws, body, baseline))
    out: dict[str, Any] = {}
    for target, rows in samples.items():
        out[target] = {
            "cold_ms": summary((r["cold_ms"] for r in rows), 2),
            "warm_ms": summary((v for r in rows for v in r["warm_ms"]), 2),
            "steady_ms": summary((v for r in rows for v in r["steady_ms"]), 2),
        }
    bare = out["bare"]["cold_ms"]["median"]
    out["cold_ratio_to_bare"] = round(out["agentd"]["cold_ms"]["median"] / bare, 2)
    if baseline is not None:
        out["baseline_cold_ratio_to_bare"] = round(out["baseline"]["cold_ms"]["median"] / bare, 2)
    return out


def cold_rows(res: dict[str, Any], front: str) -> list[list[str]]:
    """Table rows: metric, agentd, baseline checkout, bare, verdict."""

    def cell(target: str, metric: str) -> str:
        s = res.get(target, {}).get(metric)
        if not s:
            return "-"
        return f"{s['median']:.2f} ms (p90 {s['p90']:.2f}, min {s['min']:.2f})"

    cold, warm = res["agentd"]["cold_ms"]["median"], res["agentd"]["warm_ms"]["median"]
    steady = res["agentd"]["steady_ms"]["median"]
    ratio = cold / res["bare"]["cold_ms"]["median"]
    return [
        [
            f"cold first prompt -> first request bytes ({front})",
            cell("agentd", "cold_ms"),
            cell("baseline", "cold_ms"),
            cell("bare", "cold_ms"),
            f"{ratio:.2f}x bare {'PASS' if ratio <= 2 else 'FAIL'} (goal <= 2x)",
        ],
        [
            f"warm prompt -> first request bytes ({front})",
            cell("agentd", "warm_ms"),
            cell("baseline", "warm_ms"),
            cell("bare", "warm_ms"),
            f"{'PASS' if warm <= 2 else 'FAIL'} (goal <= 2 ms)",
        ],
        [
            f"steady prompt (same session, again) -> first request bytes ({front})",
            cell("agentd", "steady_ms"),
            cell("baseline", "steady_ms"),
            cell("bare", "steady_ms"),
            f"{'PASS' if steady <= 2 else 'FAIL'} (goal <= 2 ms)",
        ],
    ]
