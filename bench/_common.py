"""Shared helpers of the daemon benchmarks (core_bench.py, prefetch_bench.py).

Everything here drives the real daemon the way an editor does: spawned over
stdio with `agentd.testing.stdio_client.StdioClient`, pointed at the bundled
model server (`agentd.testing.model_server.ModelServer`) running on this
process's event loop, so that the client's and the server's timestamps come
from the same clock (`time.time()`). The daemon's environment and command
line are `agentd.testing.daemon`'s, shared with the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.testing.daemon import daemon_command, daemon_env, memory_folder
from agentd.testing.stdio_client import StdioClient

BENCH_DIR = Path(__file__).resolve().parent
BARE_SERVER = BENCH_DIR / "bare_pygls_server.py"
AGENTD_ARGS = daemon_command()
BARE_ARGS = [sys.executable, str(BARE_SERVER)]


# --- statistics ---------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(values: Iterable[float], digits: int = 3) -> dict[str, Any]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return {"n": 0}
    return {
        "n": len(vals),
        "median": round(pct(vals, 0.5), digits),
        "p90": round(pct(vals, 0.9), digits),
        "p99": round(pct(vals, 0.99), digits),
        "min": round(min(vals), digits),
        "max": round(max(vals), digits),
    }


# --- processes ----------------------------------------------------------------------


def bench_env(base_url: str, home: Path) -> dict[str, str]:
    """The tests' daemon environment (`agentd.testing.daemon_env`), run as these
    benchmarks always have: the daemon's default log level, no bytecode written."""
    return daemon_env(base_url, home, AGENTD_LOG_LEVEL="warning", PYTHONDONTWRITEBYTECODE="1")


class Updates:
    """`on_notification` of a StdioClient: every agent/update with its arrival time."""

    def __init__(self) -> None:
        self.by_session: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
        self.waiters: list[tuple[Callable[[str, dict[str, Any]], bool], Any]] = []

    def __call__(self, method: str, params: Any) -> None:
        now = time.time()
        if method != "agent/update" or not isinstance(params, dict):
            return
        sid, update = str(params.get("sessionId")), params.get("update") or {}
        self.by_session[sid].append((now, update))
        for waiter in list(self.waiters):
            pred, fut = waiter
            if not fut.done() and pred(sid, update):
                fut.set_result(now)
                self.waiters.remove(waiter)

    def wait(self, pred: Callable[[str, dict[str, Any]], bool]) -> Any:
        """A future set to the arrival time of the next update matching pred."""
        import asyncio

        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((pred, fut))
        return fut

    def of(self, sid: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [u for _, u in self.by_session.get(sid, []) if kind is None or u.get("kind") == kind]


def checkout_launch(
    command: list[str], env: dict[str, str], src: Path | None
) -> tuple[list[str], dict[str, str]]:
    """`command` (`python -m ...`) run from checkout `src` (None: this tree),
    launched the same way for every checkout: `-P` keeps the current directory
    off sys.path, so PYTHONPATH decides which agentd is imported. This tree's
    daemons are launched so too, not as `python -m` from the current
    directory, so that a side-by-side run compares code, not launches (run
    both ways, the same code's warm row read 0.08-0.24 ms apart in four of
    four runs)."""
    return [command[0], "-P", *command[1:]], checkout_env(env, src)


def checkout_env(env: dict[str, str], src: Path | None) -> dict[str, str]:
    """`env` with PYTHONPATH naming checkout `src` (None: this tree)."""
    root = src if src is not None else BENCH_DIR.parent
    return {**env, "PYTHONPATH": str(root.resolve())}


def baseline_daemon(env: dict[str, str], src: Path | None) -> tuple[list[str], dict[str, str]]:
    """Command and environment of a daemon running the agentd package of `src`
    (a checkout of another commit, for side-by-side runs; None: this tree),
    launched as `checkout_launch` says."""
    return checkout_launch([sys.executable, "-m", "agentd", "serve"], env, src)


async def start_agentd(
    env: dict[str, str],
    options: dict[str, Any] | None = None,
    updates: Updates | None = None,
    args: list[str] | None = None,
) -> StdioClient:
    client = await StdioClient.spawn(env, updates, args=args)
    await client.initialize(options or {})
    return client


# --- model requests -----------------------------------------------------------------


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of an OpenAI Chat Completions body."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return ""
    return ""


# --- memory topics ------------------------------------------------------------------

TOPICS = [
    (
        "Deploy checklist",
        "How we ship releases to production",
        "Run smoke tests, tag, then make ship.",
    ),
    (
        "Database pooling",
        "Postgres connection pool sizes",
        "Pool size is 20; pgbouncer in transaction mode.",
    ),
    ("Redis cache keys", "Naming of redis cache keys", "Keys are svc:entity:id, TTL 300 s."),
    (
        "Kafka consumers",
        "Consumer group offsets and retries",
        "Commit offsets after processing; retry 3 times.",
    ),
    ("Auth tokens", "OAuth token refresh flow", "Refresh tokens live 30 days; rotate on use."),
    (
        "Grafana dashboards",
        "Where the latency dashboards live",
        "Dashboards under Ops/Latency; alerts page oncall.",
    ),
    (
        "Pytest fixtures",
        "Shared fixtures and fakes",
        "Use the fake clock fixture; never sleep in tests.",
    ),
    ("Docker images", "Base images and tags", "Use python:3.11-slim; pin digests in CI."),
    ("Kubernetes ingress", "Ingress controller settings", "nginx ingress; 60 s proxy timeout."),
    (
        "Schema migrations",
        "How to write a migration",
        "Alembic; one migration per PR; never edit old ones.",
    ),
    ("Logging format", "Structured logging fields", "JSON logs with request_id and user_id."),
    ("Feature flags", "Flag naming and cleanup", "Flags are removed two weeks after full rollout."),
    (
        "Release branches",
        "Branching and merge policy",
        "Rebase on main; squash merge; no merge commits.",
    ),
    (
        "Error budgets",
        "SLO and error budget policy",
        "99.9% availability; freeze deploys when burned.",
    ),
    ("Websocket gateway", "Realtime gateway notes", "Sticky sessions; heartbeats every 25 s."),
    (
        "Frontend routing",
        "Router conventions in the web app",
        "Routes live in app/routes; lazy load pages.",
    ),
    ("Secrets vault", "Where secrets are stored", "Vault path secret/apps/<name>; no env files."),
    ("Code review", "Review expectations", "Small PRs; tests required; one approval."),
    ("Benchmark setup", "How to run benchmarks", "Pin CPU governor; run 20 times; report medians."),
    (
        "Answer style",
        "The user likes terse answers",
        "Keep replies short; no summaries at the end.",
    ),
]

# Prompts that share words with one topic each (the local tier matches them).
PROMPT_WORDS = [
    "how do we ship a release to production",
    "what postgres connection pool size do we use",
    "how are redis cache keys named",
    "how do kafka consumer offsets and retries work",
    "explain the oauth token refresh flow",
    "where are the latency dashboards in grafana",
    "which pytest fixtures and fakes should I use",
    "which docker base images and tags do we use",
    "what are the kubernetes ingress controller settings",
    "how do I write a schema migration",
    "what structured logging fields do we use",
    "how do we name and clean up feature flags",
    "what is the branching and merge policy for release branches",
    "what is our slo and error budget policy",
    "how does the websocket gateway handle sessions",
    "what are the frontend router conventions",
    "where are secrets stored in vault",
    "what are the code review expectations",
    "how do I run the benchmarks",
]


def write_topics(folder: Path, n: int = len(TOPICS)) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        name, desc, body = TOPICS[i % len(TOPICS)]
        if i >= len(TOPICS):
            name = f"{name} {i}"
        path = folder / f"topic-{i:03d}.md"
        path.write_text(f"---\nname: {name}\ndescription: {desc}\ntype: project\n---\n{body}\n")
        paths.append(path)
    return paths


def project_memory_dir(workspace: Path, home: Path) -> Path:
    """`agentd memory dir <workspace>` for a daemon started with bench_env(.., home)."""
    return memory_folder(workspace, home)


# --- output -------------------------------------------------------------------------


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def add_output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="write the JSON here, not to stdout"
    )
    parser.add_argument(
        "--table", action="store_true", help="print the table to stdout (default: stderr)"
    )


def emit(args: argparse.Namespace, result: dict[str, Any], table: str) -> None:
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    else:
        print(text, flush=True)
    stream = sys.stdout if args.table else sys.stderr
    print(table, file=stream, flush=True)
