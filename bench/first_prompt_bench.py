"""First prompt the instant a session exists (issue 12, item 2).

    python bench/first_prompt_bench.py [--runs 10] [--notes 0,3,100,1000]
                                       [--modes lsp,acp] [--first-index-wait S]
                                       [--restarted] [--baseline-src DIR]
                                       [--json FILE] [--table]

Each run spawns a fresh daemon over stdio on a fresh `$AGENTD_HOME` whose
project memory holds `--notes` notes (one of them, "Deploy checklist", is what
the prompt asks about; the others are generated filler notes on unrelated
technical topics, about 900 bytes each, a tenth of them in Chinese, Japanese
or Korean), and drives it with the raw client of `agentd.testing` as a
scripted editor does: `initialize`, then the new-session request, and the
prompt written the moment the new-session reply has been read. Measured per
run, against the bundled model server on this process's event loop (one
clock):

- new-session request -> its reply (written right after the `initialize`
  reply: it waits for the warm-up's settings stage; the prompt then waits
  for the rest, which lands in prompt -> first request), and the same for a second
  session, on another root, once the first prompt is answered (the warm-up
  over: what the request itself costs);
- prompt written -> the first main request at the model server;
- whether that first request carries the matching note (its last user
  message holds the note's body inside `<system-reminder>`).

With `--baseline-src DIR` (another commit's `agentd/`, e.g. `git archive main
agentd | tar -x -C DIR`) each run also spawns that code's daemon, modes and
daemons alternating so that machine noise hits them alike.
`--first-index-wait S` sets `memory.firstIndexWait` (default: the daemon's).
`--restarted`: the notes were last changed an hour ago and a daemon of the
same code already ran on that `$AGENTD_HOME` (it indexed the project and
stopped), as after an editor's window reload: the measured daemon's first
index may come from the memory index cache that daemon left.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    fmt,
    last_user_text,
    markdown_table,
    project_memory_dir,
    summary,
)

from agentd.testing.framing import initialize_params
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

REMINDER = "<system-reminder>"
TARGET = (
    "Deploy checklist",
    "How we ship releases to production",
    "Run the smoke tests, tag the release, then deploy with `make ship`.",
)
PROMPT = "how do we ship a release to production?"
# Filler notes: words of unrelated technical topics, none of the prompt's.
_FILLER = """
redis postgres schema migration index query latency throughput timeout retry backoff circuit
breaker queue kafka consumer producer offset partition replica leader election lock mutex thread
logging metrics tracing span grafana dashboard alert oncall pager incident postmortem runbook
vault token credential login cookie oauth scope permission role policy fixture mock fake pytest
vitest coverage flaky snapshot golden benchmark profile leak heap stack garbage collector
allocation buffer socket grpc websocket header payload json yaml toml parser lexer grammar
compiler linker module package dependency pin docker image container kubernetes pod cluster
ingress mesh gateway frontend backend endpoint router handler middleware status exception review
commit branch merge rebase conflict hook lint format naming refactor editor cursor selection
diagnostic completion hover rename folder watcher debounce preference summary explanation owner
"""
FILLER_WORDS = _FILLER.split()
CJK_FILLER = [
    ("接口延迟排查", "API 性能看板", "记录服务响应时间和告警入口。"),
    ("認証設定ガイド", "ユーザーログイン構成", "セッション設定の確認手順。トークンの有効期限。"),
    ("성능 목표", "분기 성능 지표", "콜드 스타트 시간을 줄인다."),
]


def write_notes(folder: Path, n: int, seed: int = 7) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if n == 0:
        return
    rng = random.Random(seed)
    name, desc, body = TARGET
    notes = [(name, desc, body, "project")]
    for i in range(1, n):
        if i % 10 == 9:
            title, d, b = CJK_FILLER[i % len(CJK_FILLER)]
            notes.append((f"{title} {i}", d, b * rng.randint(2, 8), "reference"))
            continue
        title = " ".join(w.capitalize() for w in rng.sample(FILLER_WORDS, 3)) + f" {i}"
        d = " ".join(rng.sample(FILLER_WORDS, 7))
        lines = ["- " + " ".join(rng.choices(FILLER_WORDS, k=14)) + "." for _ in range(8)]
        notes.append((title, d, "\n".join(lines), "project"))
    for i, (title, d, b, kind) in enumerate(notes):
        text = f"---\nname: {title}\ndescription: {d}\ntype: {kind}\n---\n{b}\n"
        (folder / f"note-{i:05d}.md").write_text(text, encoding="utf-8")


async def reply(daemon: RawDaemon, msg_id: Any) -> Any:
    message = await daemon.response(msg_id, timeout=120)
    if "error" in message:
        raise RuntimeError(f"{daemon.framing}: {message['error']}")
    return message["result"]


async def previous_daemon(args: list[str], env: dict[str, str], ws: Path, folder: Path) -> None:
    """`--restarted`: the notes untouched for an hour, and a daemon that
    indexed the project (`memory/status`) and stopped."""
    from agentd.testing.daemon import spawn_process

    an_hour_ago = time.time_ns() - 3600 * 10**9
    for path in folder.iterdir():
        os.utime(path, ns=(an_hour_ago, an_hour_ago))
    daemon = RawDaemon(await spawn_process(args, env), "lsp")
    try:
        daemon.request(0, "initialize", initialize_params({}, os.getpid()))
        await reply(daemon, 0)
        daemon.notify("initialized", {})
        daemon.request(1, "memory/status", {"workspaceRoot": str(ws)})
        await reply(daemon, 1)
        daemon.request(2, "shutdown")
        await reply(daemon, 2)
        daemon.notify("exit")
        await daemon.wait_exit(60)
    finally:
        await daemon.close()


async def one_run(
    mode: str,
    notes: int,
    model: ModelServer,
    tmp: Path,
    baseline: Path | None,
    options: dict[str, Any],
    restarted: bool = False,
) -> dict[str, Any]:
    ws, other = tmp / "ws", tmp / "other"
    ws.mkdir(parents=True)
    other.mkdir()
    (ws / "README.md").write_text("# bench\n")
    write_notes(project_memory_dir(ws, tmp), notes)
    env = bench_env(model.openai_base_url, tmp)
    args = None
    if baseline is not None:
        args, env = baseline_daemon(env, baseline)
        lsp_args = args
        if mode == "acp":
            args = [*args[:-2], "agentd.acp"]
    else:
        lsp_args = [sys.executable, "-m", "agentd", "serve"]
        if mode == "acp":
            args = [sys.executable, "-m", "agentd.acp"]
    proc_args = args or [sys.executable, "-m", "agentd", "serve"]
    from agentd.testing.daemon import spawn_process

    if restarted:
        await previous_daemon(lsp_args, env, ws, project_memory_dir(ws, tmp))

    daemon = RawDaemon(await spawn_process(proc_args, env), "acp" if mode == "acp" else "lsp")
    try:
        if mode == "acp":
            daemon.request(0, "initialize", {"protocolVersion": 1, "_meta": {"agentd": options}})
        else:
            daemon.request(0, "initialize", initialize_params(options, os.getpid()))
        await reply(daemon, 0)
        if mode == "lsp":
            daemon.notify("initialized", {})
        t0 = time.perf_counter()
        if mode == "acp":
            daemon.request(1, "session/new", {"cwd": str(ws), "mcpServers": []})
        else:
            daemon.request(1, "agent/newSession", {"workspaceRoot": str(ws)})
        sid = (await reply(daemon, 1))["sessionId"]
        new_session_ms = (time.perf_counter() - t0) * 1000
        last = max((e["id"] for e in model.requests()), default=-1)
        sent_at = time.time()  # the model server's log uses wall-clock time
        if mode == "acp":
            prompt = [{"type": "text", "text": PROMPT}]
            daemon.request(2, "session/prompt", {"sessionId": sid, "prompt": prompt})
        else:
            daemon.request(2, "agent/prompt", {"sessionId": sid, "prompt": PROMPT})
        request = await model.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "main" and e["id"] > last,
            timeout=120,
        )
        await reply(daemon, 2)
        text = last_user_text(request["body"])
        carried = REMINDER in text and "make ship" in text
        t1 = time.perf_counter()
        if mode == "acp":
            daemon.request(3, "session/new", {"cwd": str(other), "mcpServers": []})
        else:
            daemon.request(3, "agent/newSession", {"workspaceRoot": str(other)})
        await reply(daemon, 3)
        warm_session_ms = (time.perf_counter() - t1) * 1000
        if mode == "lsp":
            daemon.request(4, "shutdown")
            await reply(daemon, 4)
            daemon.notify("exit")
    finally:
        assert daemon.proc.stdin is not None
        daemon.proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            await daemon.wait_exit(30)
        await daemon.close()
    return {
        "new_session_ms": new_session_ms,
        "warm_new_session_ms": warm_session_ms,
        "prompt_to_request_ms": (request["ts"] - sent_at) * 1000,
        "carried": carried,
    }


def key(mode: str, notes: int, baseline: bool) -> str:
    return f"{mode}_{notes}{'_baseline' if baseline else ''}"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    load0 = [round(x, 2) for x in os.getloadavg()]
    daemons: list[Path | None] = [None]
    if args.baseline_src is not None:
        daemons.append(args.baseline_src)
    samples: dict[str, list[dict[str, Any]]] = {}
    options: dict[str, Any] = {}
    if args.first_index_wait is not None:
        options = {"memory": {"firstIndexWait": args.first_index_wait}}
    with tempfile.TemporaryDirectory(prefix="agentd-first-prompt-") as tmp_s:
        tmp = Path(tmp_s)
        async with ModelServer() as model:
            model.set_latency("recall", 5.0)  # the model tier never answers in time
            count = 0
            for i in range(args.runs + 1):  # run 0 warms disk caches: not counted
                for notes in args.notes:
                    for mode in args.modes if i % 2 == 0 else list(reversed(args.modes)):
                        order = daemons if (i + count) % 2 == 0 else list(reversed(daemons))
                        for base in order:
                            count += 1
                            sample = await one_run(
                                mode,
                                notes,
                                model,
                                tmp / f"r{count}",
                                base,
                                options,
                                restarted=args.restarted,
                            )
                            if i:
                                samples.setdefault(key(mode, notes, base is not None), []).append(
                                    sample
                                )
    configs: dict[str, Any] = {}
    for k, rows in samples.items():
        mode, notes_s, *rest = k.split("_")
        carried = sum(r["carried"] for r in rows)
        configs[k] = {
            "mode": mode,
            "notes": int(notes_s),
            "baseline": bool(rest),
            "runs": len(rows),
            "carried": carried,
            "carried_share": carried / len(rows) if int(notes_s) else None,
            "new_session_ms": summary(r["new_session_ms"] for r in rows),
            "warm_new_session_ms": summary(r["warm_new_session_ms"] for r in rows),
            "prompt_to_request_ms": summary(r["prompt_to_request_ms"] for r in rows),
        }
    return {
        "runs": args.runs,
        "notes": args.notes,
        "modes": args.modes,
        "first_index_wait_s": args.first_index_wait,
        "restarted": args.restarted,
        "baseline_src": str(args.baseline_src) if args.baseline_src else None,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": load0,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "configs": configs,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def ms(s: dict[str, Any]) -> str:
    return f"{fmt(s.get('median'))} / {fmt(s.get('p99'))}"


def build_table(r: dict[str, Any]) -> str:
    rows = []
    configs = r["configs"]
    for mode in r["modes"]:
        for notes in r["notes"]:
            c = configs.get(key(mode, notes, False))
            if c is None:
                continue
            b = configs.get(key(mode, notes, True))
            share = "n/a (no note)" if not notes else f"{c['carried']}/{c['runs']}"
            base_share = "" if b is None or not notes else f"{b['carried']}/{b['runs']}"
            rows.append(
                [
                    mode.upper(),
                    str(notes),
                    share,
                    base_share or "-",
                    ms(c["prompt_to_request_ms"]),
                    ms(b["prompt_to_request_ms"]) if b else "-",
                    ms(c["new_session_ms"]),
                    ms(b["new_session_ms"]) if b else "-",
                    ms(c["warm_new_session_ms"]),
                    ms(b["warm_new_session_ms"]) if b else "-",
                ]
            )
    header = [
        "mode",
        "notes",
        "first request carried the note",
        "baseline",
        "prompt -> first request p50 / p99 ms",
        "baseline",
        "new session (right after initialize) p50 / p99 ms",
        "baseline",
        "new session, warm, p50 / p99 ms",
        "baseline",
    ]
    after = " (after another on its home: --restarted)" if r.get("restarted") else ""
    note = (
        f"\n{r['runs']} runs per row, a fresh daemon each{after}; load average "
        f"{r['machine']['loadavg_start']} -> {r['machine']['loadavg_end']}; {r['elapsed_s']} s."
    )
    return markdown_table(header, rows) + note


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10, help="runs per row (default 10)")
    parser.add_argument(
        "--notes",
        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
        default=[0, 3, 100, 1000],
        help="note counts (default 0,3,100,1000)",
    )
    parser.add_argument(
        "--modes",
        type=lambda s: [m for m in s.split(",") if m in ("lsp", "acp")],
        default=["lsp", "acp"],
        help="front ends (default lsp,acp)",
    )
    parser.add_argument(
        "--first-index-wait",
        type=float,
        metavar="S",
        help="memory.firstIndexWait for the daemons (default: theirs)",
    )
    parser.add_argument(
        "--restarted",
        action="store_true",
        help="a daemon of the same code indexed the project and stopped first",
    )
    parser.add_argument("--baseline-src", type=Path, metavar="DIR")
    add_output_args(parser)
    args = parser.parse_args()
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    result = asyncio.run(run(args))
    emit(args, result, build_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
